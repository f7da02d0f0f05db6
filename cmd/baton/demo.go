package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/internal/demo"
)

func newDemoCmd() *cobra.Command {
	cfg := demo.Config{}
	var topics []string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run two embedded clusters, live producers, migrations and a rollback, with a live view on screen",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := demoFlags(&cfg, topics); err != nil {
				return err
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

// demoFlags sets cfg.Topics from --topics and refuses a flag out of range,
// naming it (demo.Run would name the Config field instead).
func demoFlags(cfg *demo.Config, topics []string) error {
	cfg.Topics = cfg.Topics[:0]
	names := map[string]bool{}
	for _, s := range topics {
		t, err := demo.ParseTopic(s)
		if err != nil {
			return fmt.Errorf("--topics %q: want NAME:PARTITIONS, PARTITIONS >= 1 (orders:6)", s)
		}
		if names[t.Name] {
			return fmt.Errorf("--topics %q: %s twice", s, t.Name)
		}
		names[t.Name] = true
		cfg.Topics = append(cfg.Topics, t)
	}
	switch {
	case len(cfg.Topics) == 0:
		return errors.New("--topics: none")
	case cfg.RollBack != "" && !names[cfg.RollBack]:
		return fmt.Errorf("--rollback %q: not one of --topics", cfg.RollBack)
	case cfg.Rate < 1:
		return fmt.Errorf("--rate %d: want >= 1", cfg.Rate)
	case cfg.Phase <= 0:
		return fmt.Errorf("--phase %v: want > 0", cfg.Phase)
	case cfg.CutoverTimeout <= 0:
		return fmt.Errorf("--cutover-timeout %v: want > 0", cfg.CutoverTimeout)
	}
	return nil
}
