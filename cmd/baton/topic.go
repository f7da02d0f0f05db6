package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("15:04:05.000")
}

func newTopicCmd() *cobra.Command {
	var output, actor string
	cmd := &cobra.Command{Use: "topic", Short: "Manage topics on a running control plane (add, list, status, shadow, migrate, abort, proxy, reject, remove)"}
	api := apiFlags(cmd, &output)
	cmd.PersistentFlags().StringVar(&actor, "actor", "cli", "who is acting, for the event log (ignored by a control plane that requires credentials: it records the caller's name)")
	ta := topicAPI{api: api, output: &output, actor: &actor, print: topicPrinter(&output)}
	cmd.AddCommand(newTopicAddCmd(ta), newTopicListCmd(ta), newTopicStatusCmd(ta), newTopicShadowCmd(ta), newMigrateCmd(ta),
		newTopicAbortCmd(ta), newStateVerbCmd(ta, migration.Proxy), newStateVerbCmd(ta, migration.Reject), newRemoveCmd(ta))
	return cmd
}

// topicPrinter prints topics as -o (output) says: a table, or JSON.
func topicPrinter(output *string) func(*cobra.Command, []controlplane.Topic) error {
	return func(cmd *cobra.Command, ts []controlplane.Topic) error {
		if *output == "json" {
			return printJSON(cmd.OutOrStdout(), ts)
		}
		w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "TOPIC\tSTATE\tVERSION\tMODE\tATTEMPTS\tSOURCE\tDESTINATION")
		for _, t := range ts {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%s\t%s\n", t.Name, t.State, t.Version, t.Mode, t.Attempts, t.Source, t.Destination)
		}
		return w.Flush()
	}
}

// newTopicAddCmd is `baton topic add`: POST /v1/topics.
func newTopicAddCmd(ta topicAPI) *cobra.Command {
	var state, mode, namespaces string
	var holdMax time.Duration
	var latencyEmulation, authCheck, authEnforce, headroomOn bool
	add := &cobra.Command{
		Use: "add TOPIC", Short: "Start managing a topic (REJECT or PROXY)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(*ta.output); err != nil {
				return err
			}
			st, err := migration.ParseState(state)
			if err != nil {
				return fmt.Errorf("--state: %w", err)
			}
			cl, err := ta.api()
			if err != nil {
				return err
			}
			t, err := cl.Add(cmd.Context(), controlplane.TopicSpec{Name: args[0], State: st, Mode: mode, HoldMax: holdMax,
				Target: xds.Target{Namespaces: splitList(namespaces)}, Shadow: controlplane.Shadow{LatencyEmulation: latencyEmulation,
					AuthCheck: authCheck || authEnforce, AuthEnforce: authEnforce, Headroom: headroomOn}}, *ta.actor)
			if err != nil {
				return err
			}
			return ta.print(cmd, []controlplane.Topic{t})
		},
	}
	add.Flags().StringVar(&state, "state", "PROXY", "REJECT or PROXY")
	add.Flags().StringVar(&mode, "mode", "hold", "MIGRATING mode: hold or retriable")
	add.Flags().DurationVar(&holdMax, "hold-max", migration.DefaultHoldMax, "longest hold of a produce request")
	add.Flags().StringVar(&namespaces, "namespaces", "", "namespaces that get shadow features (empty: all)")
	add.Flags().BoolVar(&latencyEmulation, "latency-emulation", false,
		"in PROXY, hold produce responses until the destination's measured latency has passed (for the namespaces above)")
	add.Flags().BoolVar(&authCheck, "auth-check", false,
		"in PROXY, report producers whose principal the destination's ACLs would refuse WRITE after the cutover")
	add.Flags().BoolVar(&authEnforce, "auth-enforce", false, "and refuse their produce (TOPIC_AUTHORIZATION_FAILED); implies --auth-check")
	add.Flags().BoolVar(&headroomOn, "headroom", false,
		"in PROXY, warn of producers that will not sustain their rate at the destination's measured latency (best with --latency-emulation)")
	return add
}

// newTopicShadowCmd is `baton topic shadow`: POST /v1/topics/{name}/shadow.
func newTopicShadowCmd(ta topicAPI) *cobra.Command {
	var emulation, authCheckSw, authEnforceSw, headroomSw, shadowNamespaces, shadowWorkloads string
	shadow := &cobra.Command{
		Use: "shadow TOPIC", Short: "Switch a REJECT or PROXY topic's shadow features (latency emulation, auth check, headroom)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(*ta.output); err != nil {
				return err
			}
			ch, err := shadowChange(map[string]string{"--latency-emulation": emulation, "--auth-check": authCheckSw,
				"--auth-enforce": authEnforceSw, "--headroom": headroomSw})
			if err != nil {
				return err
			}
			if f := cmd.Flags(); f.Changed("namespaces") || f.Changed("workloads") {
				ch.Target = &xds.Target{Namespaces: splitList(shadowNamespaces), Workloads: splitList(shadowWorkloads)}
			}
			if ch == (controlplane.ShadowChange{}) {
				return fmt.Errorf("--latency-emulation, --auth-check, --auth-enforce or --headroom: say on or off (or set --namespaces, --workloads)")
			}
			cl, err := ta.api()
			if err != nil {
				return err
			}
			t, err := cl.Shadow(cmd.Context(), args[0], ch, *ta.actor)
			if err != nil {
				return err
			}
			return ta.print(cmd, []controlplane.Topic{t})
		},
	}
	shadow.Flags().StringVar(&emulation, "latency-emulation", "", "on or off")
	shadow.Flags().StringVar(&authCheckSw, "auth-check", "", "on or off (off silences a topic's false reports)")
	shadow.Flags().StringVar(&authEnforceSw, "auth-enforce", "", "on or off")
	shadow.Flags().StringVar(&headroomSw, "headroom", "", "on or off")
	shadow.Flags().StringVar(&shadowNamespaces, "namespaces", "", "replace the namespaces that get the shadow features (comma-separated; \"\": all); a rollout widens it wave by wave")
	shadow.Flags().StringVar(&shadowWorkloads, "workloads", "", "replace the workloads that get the shadow features (comma-separated; \"\": all)")
	return shadow
}

// shadowChange is the switches of `baton topic shadow`, each flag's value
// ("on", "off" or "" for unchanged) by flag, checked in a fixed order so
// that the first bad one is named.
func shadowChange(switches map[string]string) (controlplane.ShadowChange, error) {
	var ch controlplane.ShadowChange
	for _, sw := range []struct {
		flag string
		to   **bool
	}{{"--latency-emulation", &ch.LatencyEmulation}, {"--auth-check", &ch.AuthCheck},
		{"--auth-enforce", &ch.AuthEnforce}, {"--headroom", &ch.Headroom}} {
		switch v := switches[sw.flag]; v {
		case "on", "off":
			on := v == "on"
			*sw.to = &on
		case "":
		default:
			return controlplane.ShadowChange{}, fmt.Errorf("%s: %q is not on or off", sw.flag, v)
		}
	}
	return ch, nil
}

// newTopicListCmd is `baton topic list`: GET /v1/topics.
func newTopicListCmd(ta topicAPI) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "List managed topics", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := ta.client()
			if err != nil {
				return err
			}
			ts, err := cl.Topics(cmd.Context())
			if err != nil {
				return err
			}
			return ta.print(cmd, ts)
		},
	}
}

// newTopicStatusCmd is `baton topic status`: GET /v1/topics/{name}.
func newTopicStatusCmd(ta topicAPI) *cobra.Command {
	return &cobra.Command{
		Use: "status TOPIC", Short: "Show a topic, its time lag and any running cutover", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := ta.client()
			if err != nil {
				return err
			}
			st, err := cl.Status(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if *ta.output == "json" {
				return printJSON(cmd.OutOrStdout(), st)
			}
			printTopicStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
}

// printTopicStatus prints a topic's status as text.
func printTopicStatus(out io.Writer, st controlplane.TopicStatus) {
	fmt.Fprintf(out, "topic:     %s\nstate:     %s (version %d, %d cutover attempts)\nroute:     %s -> %s, mode %s\n",
		st.Name, st.State, st.Version, st.Attempts, st.Source, st.Destination, st.Mode)
	if st.LagError != "" {
		fmt.Fprintf(out, "time lag:  unknown (%s)\n", st.LagError)
	} else {
		fmt.Fprintf(out, "time lag:  %v\n", st.Lag)
	}
	if st.Shadow.LatencyEmulation {
		if l := st.DestinationLatency; l != nil {
			fmt.Fprintf(out, "latency:   emulating the destination's p50 %v, p99 %v (%d acks, measured %s)\n",
				l.P50, l.P99, l.Samples, fmtTime(l.MeasuredAt))
		} else {
			fmt.Fprintf(out, "latency:   emulation on; no destination latency measured yet (or not in PROXY)\n")
		}
	}
	for _, p := range slices.Sorted(maps.Keys(st.Diverged)) {
		fmt.Fprintf(out, "DIVERGED:  partition %d: %s (a cutover is refused)\n", p, st.Diverged[p])
	}
	for _, f := range st.Findings {
		who := f.Principal
		if f.ClientID != "" {
			who += fmt.Sprintf(" (client id %q)", f.ClientID)
		}
		fmt.Fprintf(out, "FINDING:   %s %s, last seen %s by %d agents: %s\n", f.Kind, who, fmtTime(f.LastSeen), len(f.Agents), f.Detail)
	}
	if g := st.GuardRestore; g != nil {
		fmt.Fprintf(out, "guard:     being restored since %s, %d failed attempts, last: %s\n", fmtTime(g.Since), g.Failures, g.LastErr)
	}
	if c := st.Cutover; c != nil {
		fmt.Fprintf(out, "cutover:   attempt %d by %s, step %s, started %s, deadline %s\n",
			c.Attempt, c.Actor, c.Step, fmtTime(c.StartedAt), fmtTime(c.Deadline))
	}
}

// newTopicAbortCmd is `baton topic abort`: POST /v1/topics/{name}/abort.
func newTopicAbortCmd(ta topicAPI) *cobra.Command {
	var reason string
	abort := &cobra.Command{
		Use: "abort TOPIC", Short: "Abort a running cutover: back to PROXY", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := ta.client()
			if err != nil {
				return err
			}
			t, err := cl.Op(cmd.Context(), args[0], "abort", *ta.actor, reason, "")
			if err != nil {
				return err
			}
			return ta.print(cmd, []controlplane.Topic{t})
		},
	}
	abort.Flags().StringVar(&reason, "reason", "", "why, for the event log")
	return abort
}

func newEventsCmd() *cobra.Command {
	var output, topic string
	var api func() (*httpapi.Client, error)
	var follow bool
	cmd := &cobra.Command{
		Use: "events", Short: "Print the audit event log of a running control plane", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			cl, err := api()
			if err != nil {
				return err
			}
			return cl.Events(cmd.Context(), topic, follow, func(e controlplane.Event) error {
				if output == "json" {
					return enc.Encode(e)
				}
				var b strings.Builder
				fmt.Fprintf(&b, "%s #%d %-10s %-22s", fmtTime(e.Time), e.Seq, e.Topic, e.Kind)
				if e.From != "" || e.To != "" {
					fmt.Fprintf(&b, " %s->%s", e.From, e.To)
				}
				if e.Attempt > 0 {
					fmt.Fprintf(&b, " attempt=%d", e.Attempt)
				}
				if e.Agent != "" {
					fmt.Fprintf(&b, " agent=%s", e.Agent)
				}
				if e.Took > 0 {
					fmt.Fprintf(&b, " took=%v", tookText(e.Took))
				}
				fmt.Fprintf(&b, " actor=%s", e.Actor)
				if e.Reason != "" {
					fmt.Fprintf(&b, ": %s", e.Reason)
				}
				_, err := fmt.Fprintln(out, b.String())
				return err
			})
		},
	}
	api = apiFlags(cmd, &output)
	cmd.Flags().StringVar(&topic, "topic", "", "only this topic's events")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events")
	return cmd
}

func newWorkersCmd() *cobra.Command {
	var output string
	var api func() (*httpapi.Client, error)
	cmd := &cobra.Command{
		Use: "workers", Short: "List replicator workers (--replication=workers): partitions held, lease, lag, errors", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			cl, err := api()
			if err != nil {
				return err
			}
			ws, err := cl.Workers(cmd.Context())
			if err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), ws)
			}
			if ws.Replication != "workers" {
				fmt.Fprintf(cmd.OutOrStdout(), "replication: %s (the control plane copies itself; no workers)\n", ws.Replication)
				return nil
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "WORKER\tPARTITIONS\tLEASE UNTIL\tLAG\tERRORS")
			for _, v := range ws.Workers {
				errs := "-"
				if len(v.Errors) > 0 {
					errs = strings.Join(v.Errors, "; ")
				}
				fmt.Fprintf(w, "%s\t%d: %s\t%s\t%v\t%s\n", v.ID, len(v.Partitions), strings.Join(v.Partitions, ","),
					fmtTime(v.LeaseUntil), v.Lag.Round(time.Millisecond), errs)
			}
			return w.Flush()
		},
	}
	api = apiFlags(cmd, &output)
	return cmd
}

func newAgentsCmd() *cobra.Command {
	var output string
	var api func() (*httpapi.Client, error)
	cmd := &cobra.Command{
		Use: "agents", Short: "List agents: node, namespace, acked version, lease, last heartbeat, xDS", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			cl, err := api()
			if err != nil {
				return err
			}
			as, err := cl.Agents(cmd.Context())
			if err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), as)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NODE\tNAMESPACE\tWORKLOAD\tACKED\tLEASE\tEXPIRES\tLAST HEARTBEAT\tXDS\tLAST NACK")
			for _, a := range as {
				lease := "expired"
				if a.LeaseValid {
					lease = "valid"
				}
				if a.Refused != "" {
					lease = "refused"
				}
				xs := "disconnected"
				if a.XDS.Connected {
					xs = fmt.Sprintf("connected (acked %d)", a.XDS.AckedVersion)
				}
				nack := "-"
				if n := a.XDS.LastNack; n != nil {
					nack = fmt.Sprintf("v%s: %s", n.Version, n.Error)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", a.Node, a.Namespace, a.Workload, a.AckedVersion,
					lease, fmtTime(a.ExpiresAt), fmtTime(a.LastHeartbeat), xs, nack)
			}
			return w.Flush()
		},
	}
	api = apiFlags(cmd, &output)
	return cmd
}

func gateNames() string {
	s := make([]string, len(controlplane.Gates))
	for i, g := range controlplane.Gates {
		s[i] = string(g)
	}
	return strings.Join(s, ", ")
}
