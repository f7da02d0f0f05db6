package main

import (
	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/examples/demo"
)

func newDemoCmd() *cobra.Command {
	cfg := demo.Config{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run two embedded clusters, a live producer and a migration, with progress on screen",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Out = cmd.OutOrStdout()
			return demo.Run(cmd.Context(), cfg)
		},
	}
	def := demo.DefaultConfig(nil)
	cmd.Flags().StringVar(&cfg.Topic, "topic", def.Topic, "topic the demo producer writes")
	cmd.Flags().Int32Var(&cfg.Partitions, "partitions", def.Partitions, "partitions of the topic")
	cmd.Flags().IntVar(&cfg.Rate, "rate", def.Rate, "records per second")
	cmd.Flags().DurationVar(&cfg.Phase, "phase", def.Phase, "how long each of PROXY and COMPLETE lasts")
	return cmd
}
