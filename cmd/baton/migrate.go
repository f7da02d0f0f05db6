package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/httpapi"
	"github.com/baton-kafka/baton/migration"
)

// Exit codes of `baton topic migrate --wait`; main exits 1 for any other
// error (the cutover refused, a bad flag, the API out of reach).
const (
	// exitRolledBack: the cutover rolled back; the topic is in PROXY.
	exitRolledBack = 2
	// exitUndecided: the wait stopped (--timeout, the event stream lost,
	// interrupted) before the CLI learnt the cutover's outcome.
	exitUndecided = 3
)

// exitError is an error main exits with its code for.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode is what main exits with for err (not nil).
func exitCode(err error) int {
	if ee, ok := errors.AsType[*exitError](err); ok {
		return ee.code
	}
	return 1
}

// errDecided ends the event stream once the cutover's outcome is in.
var errDecided = errors.New("the cutover is decided")

const migrateLong = `Start a cutover of TOPIC (PROXY -> MIGRATING -> COMPLETE, docs/controlplane.md):
refused while a cutover gate refuses, naming each gate, why, and the --force that
would start anyway. Without --wait it returns at once with the topic MIGRATING;
follow the cutover with baton events --topic TOPIC --follow.

With --wait it follows the control plane's event log for this cutover attempt,
one line a step as it happens, with the time since the attempt started (the
control plane's clock), until the cutover is decided. Exit codes:

  0  COMPLETE
  1  the migrate was refused or failed (a gate or the state machine refused
     it, a bad flag, the API out of reach)
  2  rolled back to PROXY (timed out, failed, aborted, or the control plane
     restarted mid-cutover); the error says why
  3  the wait stopped first: --timeout passed, the event stream was lost (the
     control plane stopped or lost its leadership), or it was interrupted; the
     cutover goes on without the CLI. After a timeout or a lost stream the CLI
     reads the event log and the topic's status once more: a cutover decided
     meanwhile exits 0 or 2 after all; one still running is said to be, with
     its step and deadline; one it cannot learn about is said to be possibly
     still going on.`

// newMigrateCmd is `baton topic migrate`.
func newMigrateCmd(ta topicAPI) *cobra.Command {
	var force []string
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use: "migrate TOPIC", Short: "Start a cutover (PROXY -> MIGRATING -> COMPLETE); with --wait, follow it to its outcome",
		Long: migrateLong, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case timeout < 0:
				return fmt.Errorf("--timeout %v is negative", timeout)
			case timeout > 0 && !wait:
				return errors.New("--timeout needs --wait")
			}
			cl, err := ta.client()
			if err != nil {
				return err
			}
			t, err := cl.Migrate(cmd.Context(), args[0], *ta.actor, force)
			if err != nil {
				return err
			}
			if !wait {
				return ta.print(cmd, []controlplane.Topic{t})
			}
			if t.Cutover == nil { // not from this control plane: Migrate answers the topic MIGRATING with its cutover
				return fmt.Errorf("%s: the control plane answered the migrate with no cutover (state %s): nothing to wait for", t.Name, t.State)
			}
			w := cutoverWait{cl: cl, out: cmd.OutOrStdout(), json: *ta.output == "json", topic: t.Name, co: *t.Cutover}
			if !w.json {
				fmt.Fprintf(w.out, "%s: MIGRATING at version %d (attempt %d, deadline %s); its steps:\n",
					t.Name, t.Version, w.co.Attempt, fmtTime(w.co.Deadline))
			}
			return w.follow(cmd.Context(), timeout)
		},
	}
	cmd.Flags().StringSliceVar(&force, "force", nil, "start even though these cutover gates refuse (comma-separated: "+
		gateNames()+"; or "+controlplane.ForceAll+"); the event log records each gate forced past and why")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the cutover's events until it is COMPLETE or rolled back; the exit code says which (above)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --wait, stop waiting after this long (exit 3); 0: until the outcome")
	return cmd
}

// cutoverWait follows one cutover attempt of topic in the event log.
type cutoverWait struct {
	cl    *httpapi.Client
	out   io.Writer
	json  bool
	topic string
	co    controlplane.Cutover
	// prefix starts each step's line (a wave follows several topics).
	prefix string
}

// ours reports whether e is of this attempt: its number and its start (a
// topic removed and added again counts attempts from 1 again).
func (w cutoverWait) ours(e controlplane.Event) bool {
	return e.Attempt == w.co.Attempt && e.StartedAt.Equal(w.co.StartedAt)
}

func decides(e controlplane.Event) bool {
	return e.Kind == controlplane.EventCompleted || e.Kind == controlplane.EventRolledBack
}

// follow prints the attempt's events until it is decided, timeout passes
// (0: never) or the stream ends, and returns its outcome as an error
// for main (nil: COMPLETE).
func (w cutoverWait) follow(ctx context.Context, timeout time.Duration) error {
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	var end controlplane.Event
	err := w.cl.Events(wctx, w.topic, true, func(e controlplane.Event) error {
		if !w.ours(e) {
			return nil
		}
		if err := w.step(e); err != nil {
			return err
		}
		if decides(e) {
			end = e
			return errDecided
		}
		return nil
	})
	switch {
	case errors.Is(err, errDecided):
		return w.outcome(end, "")
	case ctx.Err() != nil:
		return &exitError{exitUndecided, fmt.Errorf("%s: interrupted before the cutover (attempt %d) was decided: it goes on "+
			"without the CLI (baton topic status %s)", w.topic, w.co.Attempt, w.topic)}
	case wctx.Err() != nil:
		return w.settle(ctx, fmt.Sprintf("--timeout %v passed", timeout))
	case err != nil:
		return w.settle(ctx, "lost the event stream: "+err.Error())
	default:
		return w.settle(ctx, "the control plane ended the event stream (it stopped, or lost its leadership)")
	}
}

// step prints one event: a line of text with the time since the attempt
// started, or its JSON.
func (w cutoverWait) step(e controlplane.Event) error {
	if w.json {
		return json.NewEncoder(w.out).Encode(e)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s%10s  %-22s", w.prefix, fmt.Sprintf("+%.3fs", e.Time.Sub(w.co.StartedAt).Seconds()), e.Kind)
	if e.Took > 0 {
		fmt.Fprintf(&b, " took=%v", tookText(e.Took))
	}
	if e.Agent != "" {
		fmt.Fprintf(&b, " agent=%s", e.Agent)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, " %s", e.Reason)
	}
	_, err := fmt.Fprintln(w.out, strings.TrimRight(b.String(), " "))
	return err
}

// tookText is a step's duration as printed: to the millisecond from a
// second up, to 10 µs below.
func tookText(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Microsecond)
}

// outcome is what main is told of the deciding event end; seen, when not
// "", says how it was learnt.
func (w cutoverWait) outcome(end controlplane.Event, seen string) error {
	took := end.Time.Sub(w.co.StartedAt).Round(time.Millisecond)
	if end.Kind == controlplane.EventCompleted {
		if !w.json {
			fmt.Fprintf(w.out, "%s: COMPLETE after %v (attempt %d)%s\n", w.topic, took, w.co.Attempt, seen)
		}
		return nil
	}
	return &exitError{exitRolledBack, fmt.Errorf("%s: the cutover (attempt %d) rolled back to PROXY after %v%s: %s",
		w.topic, w.co.Attempt, took, seen, end.Reason)}
}

// settle is the outcome once the wait stopped, for why, before the
// attempt's deciding event was seen: read from the event log and the
// topic's status once more.
func (w cutoverWait) settle(ctx context.Context, why string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var end *controlplane.Event
	err := w.cl.Events(rctx, w.topic, false, func(e controlplane.Event) error {
		if w.ours(e) && decides(e) {
			end = &e
		}
		return nil
	})
	if err == nil && end != nil {
		return w.outcome(*end, " (read from the event log after the wait stopped: "+why+")")
	}
	var st controlplane.TopicStatus
	if err == nil {
		st, err = w.cl.Status(rctx, w.topic)
	}
	switch {
	case err != nil:
		err = fmt.Errorf("%s: stopped waiting (%s), and the control plane cannot be read (%v): the cutover (attempt %d) may "+
			"still be going on, or be decided; see baton topic status %s", w.topic, why, err, w.co.Attempt, w.topic)
	case st.State == migration.Migrating && st.Cutover != nil && st.Cutover.StartedAt.Equal(w.co.StartedAt):
		err = fmt.Errorf("%s: stopped waiting (%s): the cutover (attempt %d) is still going on, at step %s; it ends by its "+
			"deadline %s, COMPLETE or rolled back; follow it with baton events --topic %s --follow, or end it with baton "+
			"topic abort %s", w.topic, why, w.co.Attempt, st.Cutover.Step, fmtTime(st.Cutover.Deadline), w.topic, w.topic)
	default:
		err = fmt.Errorf("%s: stopped waiting (%s); the topic is %s at attempt %d, and the event log holds no outcome of "+
			"attempt %d: see baton events --topic %s", w.topic, why, st.State, st.Attempts, w.co.Attempt, w.topic)
	}
	return &exitError{exitUndecided, err}
}
