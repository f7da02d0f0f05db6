package main

import (
	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "baton",
		Short: "Baton migrates Kafka producers between clusters with zero downtime",
		Long: `Baton migrates Kafka producers from a source cluster to a destination
cluster with zero downtime, one topic at a time. See README.md and docs/.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
		// Every address flag of every command, checked before it runs.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return checkAddrFlags(cmd) },
	}
	root.AddCommand(newAgentCmd(), newDevCmd(), newDemoCmd(), newReplicatorCmd(), newVerifyCmd(),
		newControlPlaneCmd(), newTopicCmd(), newEventsCmd(), newAgentsCmd(), newWorkersCmd(),
		newInjectorCmd())
	root.AddCommand(newApplyCmd())   // apply.go
	root.AddCommand(newRolloutCmd()) // rollout.go
	return root
}
