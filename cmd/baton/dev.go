package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/internal/embedded"
)

func newDevCmd() *cobra.Command {
	dev := &cobra.Command{
		Use:   "dev",
		Short: "Tools for trying Baton without a Kafka installation",
	}
	dev.AddCommand(newDevClusterCmd())
	return dev
}

func newDevClusterCmd() *cobra.Command {
	var brokers, port, partitions int
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Run an embedded Kafka cluster (franz-go kfake) until interrupted",
		Long: `Run an embedded, in-memory Kafka cluster on loopback until interrupted.
Broker i listens on 127.0.0.1:(port+i). Topics are auto-created with
--partitions partitions. The cluster has no SASL and keeps nothing on disk.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if port < 1 {
				return fmt.Errorf("--port must be a port number, got %d", port)
			}
			c, err := embedded.Start(embedded.Brokers(brokers), embedded.FirstPort(port), embedded.Partitions(partitions))
			if err != nil {
				return err
			}
			defer c.Close()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "embedded Kafka cluster: %d brokers, auto-created topics get %d partitions\n", brokers, partitions)
			fmt.Fprintf(out, "bootstrap: %s\n", c.Bootstrap())
			fmt.Fprintf(out, "try:       kcat -b %s -L\n", c.Addrs()[0])
			fmt.Fprintln(out, "Ctrl-C stops it.")
			<-cmd.Context().Done()
			fmt.Fprintln(out, "stopping")
			return nil
		},
	}
	cmd.Flags().IntVar(&brokers, "brokers", embedded.DefaultBrokers, "number of brokers")
	cmd.Flags().IntVar(&port, "port", 19092, "port of the first broker; broker i listens on port+i")
	cmd.Flags().IntVar(&partitions, "partitions", embedded.DefaultPartitions, "partition count of auto-created topics")
	return cmd
}
