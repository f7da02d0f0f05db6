package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/controlplane/rollout"
	"github.com/baton-kafka/baton/plan"
)

const rolloutLong = `Roll a migration out namespace by namespace (docs/kubernetes.md, section Roll out).

The control plane learns which namespaces write each topic from the agents'
heartbeats (an agent reports the topics it wrote to the source; it counts as a
writer while it holds its lease and for an hour after its last write). A wave names namespaces and moves every PROXY
topic whose writers all run in them or in an earlier wave's: a topic written
from a and b moves with the later of the two waves. A topic no agent reported
writing moves with no wave (migrate it by name).`

// newRolloutCmd is `baton rollout`: status, wave and run.
func newRolloutCmd() *cobra.Command {
	var output, actor string
	cmd := &cobra.Command{Use: "rollout", Short: "Per-namespace rollout: status, one wave, or a plan's waves in order", Long: rolloutLong}
	api := apiFlags(cmd, &output)
	cmd.PersistentFlags().StringVar(&actor, "actor", "cli", "who is acting, for the event log (ignored by a control plane that requires credentials)")
	ra := rolloutAPI{api: api, output: &output, actor: &actor}
	cmd.AddCommand(newRolloutStatusCmd(ra), newRolloutWaveCmd(ra), newRolloutRunCmd(ra))
	return cmd
}

// rolloutAPI is what the rollout subcommands share: the API client's
// flags, -o and --actor.
type rolloutAPI struct {
	api    func() (*httpapi.Client, error)
	output *string
	actor  *string
}

// client checks -o and makes the API client.
func (ra rolloutAPI) client() (*httpapi.Client, error) {
	if err := checkOutput(*ra.output); err != nil {
		return nil, err
	}
	return ra.api()
}

// newRolloutStatusCmd is `baton rollout status`: GET /v1/rollout.
func newRolloutStatusCmd(ra rolloutAPI) *cobra.Command {
	return &cobra.Command{
		Use: "status", Short: "Per namespace: agents, acked versions, leases, topics written; per topic: writers, state, bypassing producers",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := ra.client()
			if err != nil {
				return err
			}
			ro, err := cl.Rollout(cmd.Context())
			if err != nil {
				return err
			}
			if *ra.output == "json" {
				return printJSON(cmd.OutOrStdout(), ro)
			}
			return printRollout(cmd.OutOrStdout(), ro)
		},
	}
}

// newRolloutWaveCmd is `baton rollout wave`: one wave.
func newRolloutWaveCmd(ra rolloutAPI) *cobra.Command {
	var wf waveFlags
	wave := &cobra.Command{
		Use:   "wave --namespaces NS[,NS...]",
		Short: "Run one wave: migrate the PROXY topics written only from these namespaces (and earlier waves')",
		Long: `Run one wave: every PROXY topic whose writer namespaces are all in --namespaces or in an
earlier wave's moves (baton topic migrate), and the rest stay, each with why. The
control plane refuses a wave while the conditions of the wave before it (its
--complete, --no-forgotten-producers, --soak) do not hold, naming each one unmet.
Asking for the last wave again by its --name, with the same --namespaces and
conditions, retries it (a migrate refused by a gate, a cutover rolled back). The control plane keeps its waves in memory: after it
restarted, name the namespaces of the waves before with --after.

` + waveExitCodes,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := wf.check(); err != nil {
				return err
			}
			cl, err := ra.client()
			if err != nil {
				return err
			}
			req := rollout.WaveRequest{Wave: rollout.Wave{Name: wf.name, Namespaces: wf.namespaces,
				Until: rollout.WaveUntil{Complete: wf.complete, NoForgottenProducers: wf.noForgotten, Soak: wf.soak}},
				After: wf.after, Force: wf.force}
			rw := rolloutWaves{cl: cl, out: cmd.OutOrStdout(), json: *ra.output == "json", actor: *ra.actor, timeout: wf.timeout}
			return rw.run(cmd.Context(), req, wf.wait)
		},
	}
	wf.register(wave)
	return wave
}

// newRolloutRunCmd is `baton rollout run`: a plan's waves in order.
func newRolloutRunCmd(ra rolloutAPI) *cobra.Command {
	var file string
	var timeout time.Duration
	run := &cobra.Command{
		Use:   "run -f PLAN",
		Short: "Run a plan's waves in order, each to its outcome and its conditions before the next",
		Long: `Run the waves of a plan (its waves: field; docs/kubernetes.md, section Plan) in order:
each wave as baton rollout wave --wait does, then, before the next, wait until the
conditions in its until hold (every topic COMPLETE, no forgotten producer, the
soak), printing what is still unmet whenever it changes. It stops at the first
wave whose migrate is refused or whose cutover rolls back; running it again
retries that wave (the waves before it move nothing more). A plan for other
clusters than the control plane's is refused. It moves only what the waves
select: the plan's topics are baton apply's.

` + waveExitCodes,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case file == "":
				return errors.New("-f: the plan file is required")
			case timeout < 0:
				return fmt.Errorf("--timeout %v is negative", timeout)
			}
			p, err := plan.Load(file)
			if err != nil {
				return err
			}
			if len(p.Waves) == 0 {
				return fmt.Errorf("%s: the plan has no waves: (nothing to roll out)", file)
			}
			cl, err := ra.client()
			if err != nil {
				return err
			}
			cv, err := cl.Clusters(cmd.Context())
			if err != nil {
				return fmt.Errorf("reading the control plane's clusters: %w", err)
			}
			if err := p.CheckClusters(cv); err != nil {
				return err
			}
			rw := rolloutWaves{cl: cl, out: cmd.OutOrStdout(), json: *ra.output == "json", actor: *ra.actor, timeout: timeout}
			return rw.runPlan(cmd.Context(), p)
		},
	}
	run.Flags().StringVarP(&file, "file", "f", "", "the plan (YAML) whose waves run")
	run.Flags().DurationVar(&timeout, "timeout", 0, "stop waiting for a cutover, or for a wave's conditions, after this long (exit 3); 0: until the outcome")
	return run
}

const waveExitCodes = `Exit codes:

  0  the wave ran (with --wait, and for run: every topic it moved COMPLETE)
  1  refused or failed: a bad flag, the conditions of the wave before it unmet,
     a migrate of the wave refused (a gate; the others still start), the API out
     of reach
  2  a cutover of the wave rolled back to PROXY
  3  the wait stopped first (--timeout, the event stream lost, interrupted)`

// waveFlags are `baton rollout wave`'s flags.
type waveFlags struct {
	name                  string
	namespaces, after     []string
	force                 []string
	complete, noForgotten bool
	soak, timeout         time.Duration
	wait                  bool
}

func (f *waveFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringSliceVar(&f.namespaces, "namespaces", nil, "the wave's namespaces (comma-separated; required)")
	fs.StringVar(&f.name, "name", "", "the wave's name (default wave-N); the last wave's name again retries it")
	fs.StringSliceVar(&f.after, "after", nil, "namespaces of earlier waves the control plane did not run (it forgets its waves at a restart)")
	fs.BoolVar(&f.complete, "complete", false, "the next wave waits until every topic this one moved is COMPLETE")
	fs.BoolVar(&f.noForgotten, "no-forgotten-producers", false, "the next wave waits while a producer wrote the source of a topic this one moved around the agents")
	fs.DurationVar(&f.soak, "soak", 0, "the next wave waits until every topic this one moved has been COMPLETE this long")
	fs.StringSliceVar(&f.force, "force", nil, "start each migrate even though these cutover gates refuse (as baton topic migrate --force)")
	fs.BoolVar(&f.wait, "wait", false, "follow each cutover the wave started to its outcome; the exit code says it (above)")
	fs.DurationVar(&f.timeout, "timeout", 0, "with --wait, stop waiting for a cutover after this long (exit 3); 0: until the outcome")
}

func (f *waveFlags) check() error {
	switch {
	case len(f.namespaces) == 0:
		return errors.New("--namespaces: a wave names at least one namespace")
	case f.soak < 0:
		return fmt.Errorf("--soak %v is negative", f.soak)
	case f.timeout < 0:
		return fmt.Errorf("--timeout %v is negative", f.timeout)
	case f.timeout > 0 && !f.wait:
		return errors.New("--timeout needs --wait")
	}
	return nil
}

// rolloutWaves runs waves against a control plane and prints them.
type rolloutWaves struct {
	cl      *httpapi.Client
	out     io.Writer
	json    bool
	actor   string
	timeout time.Duration // per cutover waited for, and per wave's conditions; 0: none
}

// run runs one wave, printing what it moves and what stays; with wait it
// follows each cutover it started to its outcome, and retries the wave
// (by its name) while a migrate of it is refused because a topic's time
// lag is not measured yet (a topic just added, or replication restarting
// after another cutover), once the time lag is.
func (rw rolloutWaves) run(ctx context.Context, req rollout.WaveRequest, wait bool) error {
	for {
		run, err := rw.cl.RunWave(ctx, req, rw.actor)
		if err != nil {
			return err
		}
		if rw.json {
			if err := printJSON(rw.out, run); err != nil {
				return err
			}
		} else {
			printWave(rw.out, run)
		}
		var errs []error
		if wait {
			errs = append(errs, rw.follow(ctx, run))
		}
		if len(run.Refused) == 0 {
			return worstExit(errs)
		}
		unmeasured, err := rw.unmeasured(ctx, run.Refused)
		if !wait || err != nil || len(unmeasured) < len(run.Refused) || worstExit(errs) != nil {
			errs = append(errs, err, fmt.Errorf("wave %s: %d migrate(s) refused (above); retry the wave with --name %s once the gate opens",
				run.Name, len(run.Refused), run.Name))
			return worstExit(errs)
		}
		la := applier{cl: rw.cl, out: rw.out, timeout: rw.timeout}
		if rw.json {
			la.out = io.Discard
		}
		for _, topic := range unmeasured {
			if err := la.lagKnown(ctx, topic); err != nil {
				return err
			}
		}
		req.Name = run.Name // a retry
		if !rw.json {
			fmt.Fprintf(rw.out, "wave %s: retried, the time lag of %s measured now\n", run.Name, strings.Join(unmeasured, ", "))
		}
	}
}

// unmeasured is the refused topics whose time lag was not measured: when
// refused (its reason says so), or now. Read after the wave's cutovers
// were followed, the status alone may already show the lag measured.
func (rw rolloutWaves) unmeasured(ctx context.Context, refused []rollout.WaveStay) ([]string, error) {
	var out []string
	for _, r := range refused {
		if controlplane.RefusedForUnknownLag(r.Reason) {
			out = append(out, r.Topic)
			continue
		}
		st, err := rw.cl.Status(ctx, r.Topic)
		if err != nil {
			return nil, fmt.Errorf("%s: reading its status: %w", r.Topic, err)
		}
		if st.LagError != "" {
			out = append(out, r.Topic)
		}
	}
	return out, nil
}

// follow follows each cutover run started, one after the other (they run
// at once on the control plane; the event log has the earlier steps).
func (rw rolloutWaves) follow(ctx context.Context, run rollout.WaveRun) error {
	var errs []error
	for _, t := range run.Moved {
		if t.Cutover == nil || !slices.Contains(run.Started, t.Name) {
			continue
		}
		w := cutoverWait{cl: rw.cl, out: rw.out, json: rw.json, topic: t.Name, co: *t.Cutover, prefix: t.Name + " "}
		errs = append(errs, w.follow(ctx, rw.timeout))
	}
	return worstExit(errs)
}

// runPlan runs p's waves in order, each followed to its outcome and its
// conditions met before the next.
func (rw rolloutWaves) runPlan(ctx context.Context, p *plan.Plan) error {
	names := make([]string, len(p.Waves))
	for i, w := range p.Waves {
		names[i] = w.Name
		if names[i] == "" {
			names[i] = fmt.Sprintf("wave-%d", i+1)
		}
	}
	// Run again, it starts at the control plane's last wave, if the plan
	// has it: a retry of it (the waves before it are done).
	ro, err := rw.cl.Rollout(ctx)
	if err != nil {
		return err
	}
	from := 0
	if n := len(ro.Waves); n > 0 {
		if i := slices.Index(names, ro.Waves[n-1].Name); i >= 0 {
			from = i
		}
	}
	for i, w := range p.Waves {
		name := names[i]
		if i < from {
			if !rw.json {
				fmt.Fprintf(rw.out, "== wave %s: run already (the control plane's last wave is %s)\n", name, names[from])
			}
			continue
		}
		if !rw.json {
			fmt.Fprintf(rw.out, "== wave %s (namespaces %s), %s:%d\n", name, strings.Join(w.Namespaces, ","), p.File, w.Pos.Line)
		}
		req := rollout.WaveRequest{Wave: rollout.Wave{Name: name, Namespaces: w.Namespaces,
			Until: rollout.WaveUntil{Complete: w.Until.Complete, NoForgottenProducers: w.Until.NoForgottenProducers, Soak: w.Until.Soak}}}
		if err := rw.run(ctx, req, true); err != nil {
			return err
		}
		if i < len(p.Waves)-1 {
			if err := rw.untilMet(ctx, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// untilMet waits until the last wave's conditions hold, printing what is
// unmet each time it changes.
func (rw rolloutWaves) untilMet(ctx context.Context, name string) error {
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if rw.timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, rw.timeout)
	}
	defer cancel()
	var last string
	for {
		ro, err := rw.cl.Rollout(wctx)
		if err == nil && len(ro.Unmet) == 0 {
			return nil
		}
		if err == nil {
			// Left durations change every poll: print a change of what is
			// unmet, not of how long is left.
			if now := strings.Join(unmetKinds(ro.Unmet), "; "); now != last {
				last = now
				if !rw.json {
					fmt.Fprintf(rw.out, "wave %s: waiting before the next wave: %s\n", name, strings.Join(ro.Unmet, "; "))
				}
			}
		}
		select {
		case <-wctx.Done():
			why := "interrupted"
			if ctx.Err() == nil {
				why = fmt.Sprintf("--timeout %v passed", rw.timeout)
			}
			if err == nil {
				err = errors.New(strings.Join(ro.Unmet, "; "))
			}
			return &exitError{exitUndecided, fmt.Errorf("wave %s: %s before its conditions held: %w", name, why, err)}
		case <-time.After(time.Second):
		}
	}
}

// unmetKinds is unmet with a soak's time left cut.
func unmetKinds(unmet []string) []string {
	out := slices.Clone(unmet)
	for i, u := range out {
		if strings.HasPrefix(u, "soaking") {
			out[i] = "soaking"
		}
	}
	return out
}

// worstExit joins errs, keeping the exit code that says most: a rollback
// (2) over a wait stopped (3) over a refusal (1).
func worstExit(errs []error) error {
	err := errors.Join(errs...)
	if err == nil {
		return nil
	}
	codes := []int{}
	for _, e := range errs {
		if e != nil {
			codes = append(codes, exitCode(e))
		}
	}
	switch {
	case slices.Contains(codes, exitRolledBack):
		return &exitError{exitRolledBack, err}
	case slices.Contains(codes, exitUndecided):
		return &exitError{exitUndecided, err}
	}
	return err
}

func printWave(w io.Writer, run rollout.WaveRun) {
	fmt.Fprintf(w, "wave %s (namespaces %s", run.Name, strings.Join(run.Namespaces, ","))
	if len(run.Earlier) > 0 {
		fmt.Fprintf(w, "; after %s", strings.Join(run.Earlier, ","))
	}
	fmt.Fprintln(w, ")")
	for _, t := range run.Moved {
		if slices.Contains(run.Started, t.Name) {
			fmt.Fprintf(w, "  moves   %s: %s\n", t.Name, t.State)
		}
	}
	for _, s := range run.Refused {
		fmt.Fprintf(w, "  refused %s: %s\n", s.Topic, s.Reason)
	}
	for _, s := range run.Stayed {
		fmt.Fprintf(w, "  stays   %s: %s\n", s.Topic, s.Reason)
	}
}

// printRollout prints `baton rollout status`.
func printRollout(out io.Writer, ro rollout.Status) error {
	fmt.Fprintf(out, "config version %d\n\n", ro.Version)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tAGENT\tWORKLOAD\tACKED\tLEASE\tWRITES")
	for _, ns := range ro.Namespaces {
		for _, a := range ns.Agents {
			acked := fmt.Sprintf("%d", a.AckedVersion)
			if a.AckedVersion < ro.Version {
				acked += " (behind)"
			}
			lease := "valid to " + fmtTime(a.ExpiresAt)
			switch {
			case a.Refused != "":
				lease = "refused: " + a.Refused
			case !a.LeaseValid:
				lease = "expired " + fmtTime(a.ExpiresAt)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", nsShown(ns.Namespace), a.Node, a.Workload, acked, lease, listOrDash(a.Topics))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TOPIC\tSTATE\tWRITTEN FROM\tWORKLOADS\tBYPASSING PRODUCER")
	for _, t := range ro.Topics {
		bypass := "-"
		if t.Bypass != nil {
			bypass = fmtTime(t.Bypass.At) + " " + t.Bypass.What
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.State, listOrDash(t.Writers), listOrDash(t.Workloads), bypass)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(ro.Waves) == 0 {
		_, err := fmt.Fprintln(out, "\nno wave run yet (baton rollout wave)")
		return err
	}
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "WAVE\tNAMESPACES\tSTARTED\tMOVED\tREFUSED\tUNTIL")
	for _, r := range ro.Waves {
		var moved, refused []string
		for _, t := range r.Moved {
			moved = append(moved, t.Name)
		}
		for _, s := range r.Refused {
			refused = append(refused, s.Topic)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, strings.Join(r.Namespaces, ","), fmtTime(r.StartedAt),
			listOrDash(moved), listOrDash(refused), untilShown(r.Until))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(ro.Unmet) == 0 {
		_, err := fmt.Fprintln(out, "\nthe next wave may start")
		return err
	}
	_, err := fmt.Fprintf(out, "\nthe next wave waits: %s\n", strings.Join(ro.Unmet, "; "))
	return err
}

func nsShown(ns string) string {
	if ns == "" {
		return "(none)"
	}
	return ns
}

func listOrDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

func untilShown(u rollout.WaveUntil) string {
	var s []string
	if u.Complete {
		s = append(s, "complete")
	}
	if u.NoForgottenProducers {
		s = append(s, "noForgottenProducers")
	}
	if u.Soak > 0 {
		s = append(s, "soak "+u.Soak.String())
	}
	return listOrDash(s)
}
