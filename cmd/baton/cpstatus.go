package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/replicas"
)

// newControlPlaneStatusCmd is `baton controlplane status`: what the
// replicas on one etcd look like, read from etcd itself, so that it
// answers whichever replica leads or none does.
func newControlPlaneStatusCmd() *cobra.Command {
	var endpoints string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the control-plane replicas, the leader, etcd's health and each replica's agents",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if endpoints == "" {
				return fmt.Errorf("--etcd-endpoints is required: status reads the replicas' etcd")
			}
			store, err := controlplane.OpenEtcd(cmd.Context(), splitList(endpoints))
			if err != nil {
				return err
			}
			defer store.Close()
			st, err := replicas.Status(cmd.Context(), store)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			leader := st.Leader
			if leader == "" {
				leader = "none (no replica holds the election)"
			}
			fmt.Fprintf(out, "leader: %s\n\n", leader)
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "REPLICA\tROLE\tGRPC\tHTTP\tUP\tAGENTS")
			for _, r := range st.Replicas {
				role := "follower"
				if r.ID == st.Leader {
					role = "leader"
				}
				api := r.HTTP
				if api == "" {
					api = "-" // a follower serves no HTTP API
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\n", r.ID, role, r.GRPC, api, time.Since(r.Started).Round(time.Second), st.Agents[r.ID])
			}
			if n := st.Agents[""]; n > 0 {
				fmt.Fprintf(w, "(no replica id)\t\t\t\t\t%d\n", n)
			}
			fmt.Fprintln(w)
			fmt.Fprintln(w, "ETCD\tHEALTH\tETCD LEADER\tVERSION")
			for _, m := range st.Etcd {
				health := "healthy"
				if !m.Healthy {
					health = "unhealthy: " + m.Error
				}
				fmt.Fprintf(w, "%s\t%s\t%v\t%s\n", m.Endpoint, health, m.Leader, m.Version)
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&endpoints, "etcd-endpoints", "", "the replicas' etcd endpoints, comma-separated (required)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	markAddrs(f, addrEtcd, "etcd-endpoints")
	return cmd
}
