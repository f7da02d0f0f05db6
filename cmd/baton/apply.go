package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/plan"
)

const applyLong = `Apply a migration plan (apiVersion baton.io/v1, kind MigrationPlan; the
format: docs/kubernetes.md, section Plan) to a running control plane.

It reads the control plane's clusters and topics over the HTTP API (and, for
regex entries, the source's topics, which the control plane lists), refuses a
plan for other clusters, and prints the diff, one line a topic:

  + topic orders: PROXY                       added
  ~ topic invoices: REJECT -> PROXY           moved
  ~ topic payments: PROXY -> COMPLETE (migrate: mode hold, holdMax 5s)
  ? regex "logs-.*" (line 20, topics[3]) matches no topic
  = 3 unchanged

With --dry-run it stops there and writes nothing. Otherwise it makes the
changes in that order, each topic's adds, shadow switches and REJECT/PROXY
moves first, then the cutovers, one at a time, through the migrate path of
baton topic migrate. A plan asking for what the control plane cannot do (a
COMPLETE topic back to PROXY, a managed topic's mode changed) is refused
before anything is written, naming the plan's line. Applying the same plan
again writes nothing. Topics the plan does not name are left as they are.

Without --wait a cutover is started and left running (applying again says
so, and starts nothing); with --wait apply first waits for the topic's time
lag to be measured (the time-lag gate needs it), then follows each cutover
as baton topic migrate --wait does, a cutover already running too, before
the next. Exit codes:

  0  applied (with --wait: every cutover COMPLETE)
  1  refused or failed: a bad plan (file:line: field: why), a conflict, a
     plan for other clusters, a cutover gate, the API out of reach; the
     changes printed as applied before it stay applied
  2  with --wait, a cutover rolled back to PROXY; the later ones not started
  3  with --wait, the wait stopped first (--timeout, the event stream lost,
     interrupted); the cutover goes on without the CLI`

// newApplyCmd is `baton apply`.
func newApplyCmd() *cobra.Command {
	var output, actor, file string
	var dryRun, wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use: "apply -f PLAN", Short: "Apply a declarative migration plan (--dry-run: print the diff only)",
		Long: applyLong, Args: cobra.NoArgs,
	}
	api := apiFlags(cmd, &output)
	cmd.PersistentFlags().Lookup("output").Usage = "text (apply prints text only)"
	cmd.Flags().StringVarP(&file, "file", "f", "", "the plan (YAML)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the diff against the control plane and change nothing")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow each cutover to its outcome before the next; the exit code says it (above)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --wait, stop waiting for a cutover (or its time lag) after this long (exit 3); 0: until the outcome")
	cmd.Flags().StringVar(&actor, "actor", "apply", "who is acting, for the event log (ignored by a control plane that requires credentials)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		switch {
		case file == "":
			return errors.New("-f: the plan file is required")
		case output != "text":
			return fmt.Errorf("-o %s: apply prints text only", output)
		case timeout < 0:
			return fmt.Errorf("--timeout %v is negative", timeout)
		case timeout > 0 && !wait:
			return errors.New("--timeout needs --wait")
		case dryRun && wait:
			return errors.New("--dry-run and --wait: a dry run starts no cutover to wait for")
		}
		p, err := plan.Load(file)
		if err != nil {
			return err
		}
		cl, err := api()
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		cv, err := cl.Clusters(ctx)
		if err != nil {
			return fmt.Errorf("reading the control plane's clusters: %w", err)
		}
		if err := p.CheckClusters(cv); err != nil {
			return err
		}
		topics, err := cl.Topics(ctx)
		if err != nil {
			return fmt.Errorf("reading the control plane's topics: %w", err)
		}
		var source []string
		if p.HasRegex() {
			if source, err = cl.SourceTopics(ctx); err != nil {
				return fmt.Errorf("listing the source's topics for the plan's regex entries: %w", err)
			}
		}
		d, err := p.Compute(topics, source)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		for _, l := range d.Lines() {
			fmt.Fprintln(out, l)
		}
		if dryRun {
			return nil
		}
		a := applier{cl: cl, out: out, actor: actor, wait: wait, timeout: timeout}
		return a.apply(ctx, d)
	}
	return cmd
}

// applier makes a diff's changes.
type applier struct {
	cl      *httpapi.Client
	out     io.Writer
	actor   string
	wait    bool
	timeout time.Duration
}

func (a applier) apply(ctx context.Context, d plan.Diff) error {
	for _, c := range d.Changes {
		if c.Add != nil {
			t, err := a.cl.Add(ctx, *c.Add, a.actor)
			if err != nil {
				return fmt.Errorf("add %s: %w", c.Topic, err)
			}
			fmt.Fprintf(a.out, "added %s: %s at version %d\n", t.Name, t.State, t.Version)
		}
		if c.Shadow != nil {
			t, err := a.cl.Shadow(ctx, c.Topic, *c.Shadow, a.actor)
			if err != nil {
				return fmt.Errorf("switch the shadow features of %s: %w", c.Topic, err)
			}
			fmt.Fprintf(a.out, "switched %s: latencyEmulation %s, authCheck %s, authEnforce %s, headroom %s at version %d\n", t.Name,
				onOff(t.Shadow.LatencyEmulation), onOff(t.Shadow.AuthCheck), onOff(t.Shadow.AuthEnforce), onOff(t.Shadow.Headroom), t.Version)
		}
		if c.SetState != migration.Unmanaged {
			t, err := a.cl.SetState(ctx, c.Topic, c.SetState, a.actor)
			if err != nil {
				return fmt.Errorf("move %s to %s: %w", c.Topic, c.SetState, err)
			}
			fmt.Fprintf(a.out, "moved %s: %s at version %d\n", t.Name, t.State, t.Version)
		}
	}
	for _, c := range d.Changes {
		switch {
		case c.Migrate:
			if err := a.migrate(ctx, c); err != nil {
				return err
			}
		case c.Running && a.wait && c.Current.Cutover != nil:
			fmt.Fprintf(a.out, "%s: following its running cutover (attempt %d):\n", c.Topic, c.Current.Cutover.Attempt)
			w := cutoverWait{cl: a.cl, out: a.out, topic: c.Topic, co: *c.Current.Cutover}
			if err := w.follow(ctx, a.timeout); err != nil {
				return err
			}
		}
	}
	return nil
}

// migrate starts c's cutover; with --wait it first waits for the topic's
// time lag to be measured, then follows the cutover to its outcome.
func (a applier) migrate(ctx context.Context, c plan.Change) error {
	if a.wait {
		if err := a.lagKnown(ctx, c.Topic); err != nil {
			return err
		}
	}
	t, err := a.cl.Migrate(ctx, c.Topic, a.actor, c.Force)
	if err != nil {
		hint := ""
		if !a.wait {
			hint = " (a topic just added has no time lag yet: apply again, or with --wait)"
		}
		return fmt.Errorf("migrate %s: %w%s", c.Topic, err, hint)
	}
	if t.Cutover == nil {
		return fmt.Errorf("%s: the control plane answered the migrate with no cutover (state %s)", t.Name, t.State)
	}
	fmt.Fprintf(a.out, "migrating %s: MIGRATING at version %d (attempt %d, deadline %s)\n",
		t.Name, t.Version, t.Cutover.Attempt, fmtTime(t.Cutover.Deadline))
	if !a.wait {
		return nil
	}
	w := cutoverWait{cl: a.cl, out: a.out, topic: t.Name, co: *t.Cutover}
	return w.follow(ctx, a.timeout)
}

// lagKnown polls the topic's status until its time lag is measured, or
// --timeout passes (exit 3).
func (a applier) lagKnown(ctx context.Context, topic string) error {
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if a.timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, a.timeout)
	}
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	said := false
	for {
		st, err := a.cl.Status(wctx, topic)
		switch {
		case err == nil && st.LagError == "":
			return nil
		case wctx.Err() != nil:
			return &exitError{exitUndecided, fmt.Errorf("%s: its time lag was not measured before the wait stopped (%v): no cutover started",
				topic, context.Cause(wctx))}
		case err != nil:
			return fmt.Errorf("%s: reading its status: %w", topic, err)
		case !said:
			fmt.Fprintf(a.out, "%s: waiting for its time lag to be measured (%s)\n", topic, st.LagError)
			said = true
		}
		select {
		case <-wctx.Done():
		case <-tick.C:
		}
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
