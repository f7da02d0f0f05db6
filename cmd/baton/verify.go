package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/replicator"
)

func newVerifyCmd() *cobra.Command {
	v := &cobra.Command{
		Use:   "verify",
		Short: "Check what the replicator copied",
	}
	v.AddCommand(newVerifyParityCmd())
	return v
}

func newVerifyParityCmd() *cobra.Command {
	var (
		source, destination, topic, mapTopic string
		srcSASL, dstSASL                     securityFlags
	)
	cmd := &cobra.Command{
		Use:   "parity",
		Short: "Compare a topic on the source and destination record by record",
		Long: `Compare --topic on the source and the destination record by record: every
committed source record must be on the destination at its offset (exactly, or
through the offset map where the source has gaps) with the same key, value,
headers and timestamp, and the destination must hold nothing else. Prints
every mismatch and fails if there is any. Run it when the replicator has
caught up or is stopped.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			srcOpts, err := srcSASL.opts()
			if err != nil {
				return err
			}
			dstOpts, err := dstSASL.opts()
			if err != nil {
				return err
			}
			rep, err := replicator.VerifyWithOpts(cmd.Context(), splitList(source), splitList(destination), topic, mapTopic, srcOpts, dstOpts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			total := 0
			for _, p := range rep.Partitions {
				total += p.Records
				fmt.Fprintf(out, "partition %d: %d records, %s parity\n", p.Partition, p.Records, p.Parity)
			}
			for _, m := range rep.Mismatches {
				fmt.Fprintln(out, "MISMATCH", m)
			}
			if rep.Count > len(rep.Mismatches) {
				fmt.Fprintf(out, "... and %d more\n", rep.Count-len(rep.Mismatches))
			}
			if rep.Count > 0 {
				return fmt.Errorf("verify parity %s: %d mismatches over %d source records", topic, rep.Count, total)
			}
			fmt.Fprintf(out, "%s: %d records in %d partitions, no mismatch\n", topic, total, len(rep.Partitions))
			return nil
		},
	}
	srcSASL.add(cmd.Flags(), "source")
	dstSASL.add(cmd.Flags(), "destination")
	f := cmd.Flags()
	f.StringVar(&source, "source", "", "source cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&destination, "destination", "", "destination cluster bootstrap brokers, comma-separated (required)")
	f.StringVar(&topic, "topic", "", "topic to compare (required)")
	f.StringVar(&mapTopic, "offset-map-topic", replicator.DefaultOffsetMapTopic, "compacted topic on the destination holding offset maps")
	markAddrs(f, addrDial, "source", "destination")
	_ = cmd.MarkFlagRequired("source")
	_ = cmd.MarkFlagRequired("destination")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}
