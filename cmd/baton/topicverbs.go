package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/migration"
)

// topicAPI is what the topic subcommands share: the API client's flags,
// -o, --actor and the topic table.
type topicAPI struct {
	api    func() (*httpapi.Client, error)
	output *string
	actor  *string
	print  func(*cobra.Command, []controlplane.Topic) error
}

// client checks -o and makes the API client.
func (ta topicAPI) client() (*httpapi.Client, error) {
	if err := checkOutput(*ta.output); err != nil {
		return nil, err
	}
	return ta.api()
}

// eachTopic calls do for every topic named, in order, all of them even
// after a refusal; it prints the topics answered with print and returns
// the refusals (several: each named by its topic).
func (ta topicAPI) eachTopic(cmd *cobra.Command, names []string,
	do func(context.Context, *httpapi.Client, string) (controlplane.Topic, error),
	print func(*cobra.Command, []controlplane.Topic) error) error {
	cl, err := ta.client()
	if err != nil {
		return err
	}
	var done []controlplane.Topic
	var errs []error
	for _, name := range names {
		t, err := do(cmd.Context(), cl, name)
		switch {
		case err != nil && len(names) > 1:
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		case err != nil:
			errs = append(errs, err)
		default:
			done = append(done, t)
		}
	}
	if len(done) > 0 {
		if err := print(cmd, done); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// newStateVerbCmd is `baton topic proxy` or `baton topic reject`: the
// state endpoint, for each topic named.
func newStateVerbCmd(ta topicAPI, to migration.State) *cobra.Command {
	short, long := "Move REJECT topics to PROXY", `Move each topic named from REJECT to PROXY (POST /v1/topics/{name}/state).
Agents forward a topic to the source, under their lease, in both states; in PROXY
a cutover may start (baton topic migrate), the shadow features switched on run
(latency emulation, auth check, headroom), and writes around the agents are
reported (forgotten_producer).`
	if to == migration.Reject {
		short, long = "Move PROXY topics to REJECT", `Move each topic named from PROXY to REJECT (POST /v1/topics/{name}/state).
Agents keep forwarding it to the source, under their lease, as in PROXY, and it is
still copied to the destination; in REJECT a cutover is refused
(migrate-from-proxy-only), the shadow features do not run, and writes around the
agents are not looked for. baton topic proxy moves it back.`
	}
	long += `

Refused, naming the rule and what the topic's state allows: a topic in that state
already, a COMPLETE one (COMPLETE is one-way), and one mid-cutover (MIGRATING ends
in COMPLETE or back in PROXY: baton topic abort). Every topic named is tried;
the command fails if one was refused.`
	return &cobra.Command{
		Use: map[migration.State]string{migration.Proxy: "proxy", migration.Reject: "reject"}[to] + " TOPIC...", Short: short, Long: long,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return ta.eachTopic(cmd, args, func(ctx context.Context, cl *httpapi.Client, name string) (controlplane.Topic, error) {
				return cl.SetState(ctx, name, to, *ta.actor)
			}, ta.print)
		},
	}
}

// newRemoveCmd is `baton topic remove`: DELETE /v1/topics/{name}.
func newRemoveCmd(ta topicAPI) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use: "remove TOPIC...", Short: "Stop managing topics (a COMPLETE one only with --force)", Args: cobra.MinimumNArgs(1),
		Long: `Stop managing each topic named (DELETE /v1/topics/{name}): its route is
withdrawn from every agent, and an agent routes a topic no route names to the
source, under its lease. The control plane forgets the topic's state and its
cutover attempts (added again, it counts them from 1); the event log keeps its
history and records the removal (a removed event).

REJECT or PROXY: producers through the agents go on writing the source as before.
Removal does not stop the copy to the destination this control plane runs, nor
lift the destination write guard's ACLs: the copy ends at the control plane's next
start (only managed topics are copied), the ACLs stay on the destination.

COMPLETE: producers still writing the topic through an agent would go back to the
source: refused there by the source fence if one was kept at the cutover
(TOPIC_AUTHORIZATION_FAILED), else written where nothing copies them any more.
So a COMPLETE topic is removed only with --force, once its producers write to the
destination's brokers directly.

MIGRATING: refused; abort the cutover first (baton topic abort). A topic whose
rolled-back cutover's source fence is still being lifted is refused too, until it
is lifted.

Every topic named is tried; the command fails if one was refused.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return ta.eachTopic(cmd, args, func(ctx context.Context, cl *httpapi.Client, name string) (controlplane.Topic, error) {
				return cl.Remove(ctx, name, *ta.actor, force)
			}, func(cmd *cobra.Command, ts []controlplane.Topic) error {
				if *ta.output == "json" {
					return printJSON(cmd.OutOrStdout(), ts)
				}
				return printRemoved(cmd.OutOrStdout(), ts)
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false,
		"remove a COMPLETE topic too: agents then route it to the source again (see above)")
	return cmd
}

func printRemoved(w io.Writer, ts []controlplane.Topic) error {
	for _, t := range ts {
		if _, err := fmt.Fprintf(w, "removed %s: agents now route it as a topic no route names, to the source\n", t.Name); err != nil {
			return err
		}
	}
	return nil
}
