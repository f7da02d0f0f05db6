package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/examples/demo"
)

func newDemoCmd() *cobra.Command {
	cfg := demo.Config{}
	var topics []string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run two embedded clusters, live producers, migrations and a rollback, with a live view on screen",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Topics = cfg.Topics[:0]
			for _, s := range topics {
				t, err := demo.ParseTopic(s)
				if err != nil {
					return fmt.Errorf("--topics: %w", err)
				}
				cfg.Topics = append(cfg.Topics, t)
			}
			cfg.Out = cmd.OutOrStdout()
			return demo.Run(cmd.Context(), cfg)
		},
	}
	def := demo.DefaultConfig(nil)
	var defTopics []string
	for _, t := range def.Topics {
		defTopics = append(defTopics, fmt.Sprintf("%s:%d", t.Name, t.Partitions))
	}
	cmd.Flags().StringSliceVar(&topics, "topics", defTopics, "topics as NAME:PARTITIONS, each written by a producer of its own")
	cmd.Flags().StringVar(&cfg.RollBack, "rollback", def.RollBack,
		"topic whose first cutover is made to time out and roll back (its replication paused), then migrated again; \"\" for none")
	cmd.Flags().IntVar(&cfg.Rate, "rate", def.Rate, "records per second, per producer")
	cmd.Flags().DurationVar(&cfg.Phase, "phase", def.Phase, "how long each of PROXY and COMPLETE lasts")
	cmd.Flags().DurationVar(&cfg.CutoverTimeout, "cutover-timeout", def.CutoverTimeout,
		"the control plane's cutover timeout (the time-lag gate wants a quarter of it)")
	return cmd
}
