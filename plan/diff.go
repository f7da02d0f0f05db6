package plan

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// Change is what applying the plan does to one topic it names, in this
// order: Add, Shadow, SetState, Migrate. A Change with none of them (and
// not Running) is unchanged.
type Change struct {
	Topic string
	// Entry is the plan's entry naming the topic, or matching it.
	Entry Entry
	// Settings are the entry's, with the plan's defaults.
	Settings Settings
	// Current is the topic as the control plane has it; nil: unmanaged.
	Current *controlplane.Topic
	Want    Desired

	// Add adds the topic (in REJECT or PROXY).
	Add *controlplane.TopicSpec
	// Shadow switches shadow features of a REJECT or PROXY topic;
	// shadowText says which, for the diff.
	Shadow     *controlplane.ShadowChange
	shadowText []string
	// SetState moves a topic between REJECT and PROXY (Unmanaged: no
	// move).
	SetState migration.State
	// Migrate starts a cutover, forced past the gates in Force.
	Migrate bool
	Force   []string
	// Running: a cutover toward COMPLETE runs already; nothing to start.
	Running bool
}

// Writes reports whether applying the change writes to the control plane.
func (c Change) Writes() bool {
	return c.Add != nil || c.Shadow != nil || c.SetState != migration.Unmanaged || c.Migrate
}

// Unchanged reports whether the topic is as the plan wants it.
func (c Change) Unchanged() bool { return !c.Writes() && !c.Running }

// Diff is a plan against a control plane's topics.
type Diff struct {
	// Changes is every topic the plan names or matches, sorted by name.
	Changes []Change
	// NoMatch are the regex entries that matched no topic.
	NoMatch []Entry
	// Unlisted are the managed topics the plan does not name: left as
	// they are.
	Unlisted []string
}

// Writes reports whether applying the diff writes to the control plane.
func (d Diff) Writes() bool { return slices.ContainsFunc(d.Changes, Change.Writes) }

// CheckClusters refuses a plan written for clusters other than the
// control plane's: the bootstrap lists must hold the same brokers (in any
// order).
func (p *Plan) CheckClusters(cv controlplane.ClustersView) error {
	var errs []error
	for _, c := range []struct {
		plan []string
		cp   controlplane.ClusterInfo
		pos  Pos
	}{{p.Source, cv.Source, p.SourcePos}, {p.Destination, cv.Destination, p.DestPos}} {
		if !sameSet(c.plan, c.cp.Bootstrap) {
			errs = append(errs, &FieldError{File: p.File, Line: c.pos.Line, Path: c.pos.Path, Kind: ErrConflict,
				Msg: fmt.Sprintf("%s is not the control plane's %s cluster (%s): this plan is for another migration",
					strings.Join(c.plan, ","), c.cp.Name, strings.Join(c.cp.Bootstrap, ","))})
		}
	}
	return errors.Join(errs...)
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// Compute diffs p against the topics the control plane manages; source is
// the source cluster's topics, which regex entries are matched against
// (with the managed ones). What the control plane cannot do from a
// topic's state (a COMPLETE topic back to PROXY, a managed topic's mode
// changed) is refused as ErrConflict, naming the plan's line: nothing of
// such a plan is applied.
func (p *Plan) Compute(managed []controlplane.Topic, source []string) (Diff, error) {
	byName := map[string]*controlplane.Topic{}
	for i := range managed {
		byName[managed[i].Name] = &managed[i]
	}
	candidates := slices.Clone(source)
	for n := range byName {
		candidates = append(candidates, n)
	}
	slices.Sort(candidates)
	candidates = slices.Compact(candidates)

	var errs []error
	entryOf := map[string]Entry{}
	for _, e := range p.Topics {
		if e.Regex == nil {
			entryOf[e.Name] = e
		}
	}
	var d Diff
	for _, e := range p.Topics {
		if e.Regex == nil {
			continue
		}
		matched := false
		for _, n := range candidates {
			if !e.Regex.MatchString(n) {
				continue
			}
			matched = true
			prev, ok := entryOf[n]
			switch {
			case ok && prev.Regex == nil: // a name wins over a regex
			case ok:
				errs = append(errs, &FieldError{File: p.File, Line: e.Pos.Line, Path: e.Pos.Path + ".regex", Kind: ErrConflict,
					Msg: fmt.Sprintf("matches topic %s, which %s.regex (line %d) matches too: a topic takes one entry "+
						"(name it in an entry of its own, which wins over regexes)", n, prev.Pos.Path, prev.Pos.Line)})
			default:
				entryOf[n] = e
			}
		}
		if !matched {
			d.NoMatch = append(d.NoMatch, e)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(entryOf)) {
		c, err := p.change(n, entryOf[n], byName[n])
		if err != nil {
			errs = append(errs, err...)
			continue
		}
		d.Changes = append(d.Changes, c)
	}
	for _, t := range managed {
		if _, ok := entryOf[t.Name]; !ok {
			d.Unlisted = append(d.Unlisted, t.Name)
		}
	}
	slices.Sort(d.Unlisted)
	if len(errs) > 0 {
		return Diff{}, errors.Join(errs...)
	}
	return d, nil
}

// change is what the plan's entry e wants of topic name, now cur (nil:
// unmanaged).
func (p *Plan) change(name string, e Entry, cur *controlplane.Topic) (Change, []error) {
	s := p.Resolved(e)
	c := Change{Topic: name, Entry: e, Settings: s, Current: cur, Want: e.State, Force: s.Force}
	conflict := func(field, format string, args ...any) error {
		pos, ok := s.At[field]
		if !ok {
			pos = Pos{Line: e.Pos.Line, Path: e.Pos.Path + "." + field}
		}
		msg := fmt.Sprintf(format, args...)
		if e.Regex != nil {
			msg = "topic " + name + " (matched by the regex): " + msg
		}
		return &FieldError{File: p.File, Line: pos.Line, Path: pos.Path, Kind: ErrConflict, Msg: msg}
	}
	if cur == nil {
		st := migration.Proxy
		if e.State == Reject {
			st = migration.Reject
		}
		spec := controlplane.TopicSpec{Name: name, State: st, Mode: s.Mode,
			Target: xds.Target{Namespaces: s.Namespaces, Workloads: s.Workloads}}
		if s.HoldMax != nil {
			spec.HoldMax = *s.HoldMax
		}
		if s.ForwardDeadline != nil {
			spec.ForwardDeadline = *s.ForwardDeadline
		}
		spec.Shadow = controlplane.Shadow{LatencyEmulation: isOn(s.LatencyEmulation), AuthCheck: isOn(s.AuthCheck),
			AuthEnforce: isOn(s.AuthEnforce), Headroom: isOn(s.Headroom)}
		c.Add = &spec
		c.Migrate = e.State == Complete
		return c, nil
	}
	switch cur.State {
	case migration.Complete:
		if e.State != Complete {
			return c, []error{conflict("state", "%s is COMPLETE, and COMPLETE is one-way: it cannot go back to %s", name, e.State)}
		}
		return c, nil // settings matter in REJECT, PROXY and the cutover only
	case migration.Migrating:
		if e.State != Complete {
			attempt := ""
			if co := cur.Cutover; co != nil {
				attempt = fmt.Sprintf(" (attempt %d, step %s)", co.Attempt, co.Step)
			}
			return c, []error{conflict("state", "%s is MIGRATING%s: the cutover ends COMPLETE, or rolled back in PROXY; "+
				"to end it now: baton topic abort %s, then apply again", name, attempt, name)}
		}
		c.Running = true
		return c, nil
	}
	var errs []error
	immutable := func(field string, differs bool, have, want string) {
		if differs {
			errs = append(errs, conflict(field, "%s has %s %s on the control plane, the plan %s: the API cannot change a "+
				"managed topic's %s (to: baton topic remove %s, then apply again; it is added anew)", name, field, have, want, field, name))
		}
	}
	if s.Mode != "" {
		mode, _ := migration.ParseHoldMode(cur.Mode)
		immutable("mode", mode.String() != s.Mode, mode.String(), s.Mode)
	}
	if s.HoldMax != nil {
		have, want := orDefault(cur.HoldMax, migration.DefaultHoldMax), orDefault(*s.HoldMax, migration.DefaultHoldMax)
		immutable("holdMax", have != want, have.String(), want.String())
	}
	if s.ForwardDeadline != nil {
		immutable("forwardDeadline", cur.ForwardDeadline != *s.ForwardDeadline, deadlineText(cur.ForwardDeadline), deadlineText(*s.ForwardDeadline))
	}
	if len(errs) > 0 {
		return c, errs
	}
	var ch controlplane.ShadowChange
	// The target is switched with the shadow features (a rollout widens
	// it namespace by namespace).
	target := xds.Target{Namespaces: cur.Target.Namespaces, Workloads: cur.Target.Workloads}
	for _, f := range []struct {
		name      string
		want      []string
		have, set *[]string
	}{{"target.namespaces", s.Namespaces, &cur.Target.Namespaces, &target.Namespaces},
		{"target.workloads", s.Workloads, &cur.Target.Workloads, &target.Workloads}} {
		if f.want != nil && !sameSet(*f.have, f.want) {
			*f.set = f.want
			ch.Target = &target
			c.shadowText = append(c.shadowText, fmt.Sprintf("%s %s -> %s", f.name, listText(*f.have), listText(f.want)))
		}
	}
	for _, sw := range []struct {
		name string
		want *bool
		have bool
		to   **bool
	}{{"latencyEmulation", s.LatencyEmulation, cur.Shadow.LatencyEmulation, &ch.LatencyEmulation},
		{"authCheck", s.AuthCheck, cur.Shadow.AuthCheck, &ch.AuthCheck},
		{"authEnforce", s.AuthEnforce, cur.Shadow.AuthEnforce, &ch.AuthEnforce},
		{"headroom", s.Headroom, cur.Shadow.Headroom, &ch.Headroom}} {
		if sw.want != nil && *sw.want != sw.have {
			*sw.to = sw.want
			c.shadowText = append(c.shadowText, fmt.Sprintf("%s %s -> %s", sw.name, onOff(sw.have), onOff(*sw.want)))
		}
	}
	if ch != (controlplane.ShadowChange{}) {
		c.Shadow = &ch
	}
	switch {
	case e.State == Reject && cur.State == migration.Proxy:
		c.SetState = migration.Reject
	case e.State != Reject && cur.State == migration.Reject:
		c.SetState = migration.Proxy
	}
	c.Migrate = e.State == Complete
	return c, nil
}

func isOn(b *bool) bool { return b != nil && *b }

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func deadlineText(d time.Duration) string {
	if d == 0 {
		return "0 (the control plane's)"
	}
	return d.String()
}

func listText(l []string) string {
	if len(l) == 0 {
		return "[] (all)"
	}
	return "[" + strings.Join(l, ",") + "]"
}

// Lines is the diff as text, in a stable order: a line per topic that
// changes ("+ topic orders: PROXY" for an add, "~ topic payments: PROXY ->
// COMPLETE (migrate: mode hold, holdMax 5s)" for a change), a "?" line per
// regex that matched nothing, then "= 3 unchanged".
func (d Diff) Lines() []string {
	var out []string
	unchanged := 0
	for _, c := range d.Changes {
		if c.Unchanged() {
			unchanged++
			continue
		}
		out = append(out, c.line())
	}
	for _, e := range d.NoMatch {
		out = append(out, fmt.Sprintf("? regex %q (line %d, %s) matches no topic", strings.TrimSuffix(strings.TrimPrefix(e.Regex.String(), "^(?:"), ")$"),
			e.Pos.Line, e.Pos.Path))
	}
	out = append(out, fmt.Sprintf("= %d unchanged", unchanged))
	if len(d.Unlisted) > 0 {
		what := "topic"
		if len(d.Unlisted) > 1 {
			what = "topics"
		}
		out = append(out, fmt.Sprintf("  %d managed %s the plan does not name, left as they are: %s", len(d.Unlisted), what,
			strings.Join(d.Unlisted, ", ")))
	}
	return out
}

func (c Change) line() string {
	var b strings.Builder
	var details []string
	if c.Add != nil {
		fmt.Fprintf(&b, "+ topic %s: %s", c.Topic, c.Add.State)
		details = append(details, c.addText()...)
	} else {
		fmt.Fprintf(&b, "~ topic %s: %s", c.Topic, c.Current.State)
		if c.SetState != migration.Unmanaged {
			fmt.Fprintf(&b, " -> %s", c.SetState)
		}
		details = append(details, c.shadowText...)
	}
	switch {
	case c.Running:
		fmt.Fprintf(&b, " -> COMPLETE")
		if co := c.Current.Cutover; co != nil {
			details = append(details, fmt.Sprintf("cutover running: attempt %d, step %s; nothing to start", co.Attempt, co.Step))
		} else {
			details = append(details, "cutover running; nothing to start")
		}
	case c.Migrate:
		fmt.Fprintf(&b, " -> COMPLETE")
		details = append(details, c.migrateText())
	}
	if c.Entry.Regex != nil {
		details = append(details, fmt.Sprintf("by the regex of line %d", c.Entry.Pos.Line))
	}
	if len(details) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(details, "; "))
	}
	return b.String()
}

// addText lists the settings an add sets besides the defaults.
func (c Change) addText() []string {
	a := c.Add
	var out []string
	if a.Mode != "" {
		out = append(out, "mode "+a.Mode)
	}
	if c.Settings.HoldMax != nil {
		out = append(out, "holdMax "+a.HoldMax.String())
	}
	if c.Settings.ForwardDeadline != nil {
		out = append(out, "forwardDeadline "+deadlineText(a.ForwardDeadline))
	}
	if len(a.Target.Namespaces) > 0 {
		out = append(out, "namespaces "+listText(a.Target.Namespaces))
	}
	if len(a.Target.Workloads) > 0 {
		out = append(out, "workloads "+listText(a.Target.Workloads))
	}
	for _, sw := range []struct {
		name string
		on   bool
	}{{"latencyEmulation", a.Shadow.LatencyEmulation}, {"authCheck", a.Shadow.AuthCheck},
		{"authEnforce", a.Shadow.AuthEnforce}, {"headroom", a.Shadow.Headroom}} {
		if sw.on {
			out = append(out, sw.name+" on")
		}
	}
	return out
}

// migrateText says how the cutover will run: the topic's mode and hold.
func (c Change) migrateText() string {
	mode, hold := "", time.Duration(0)
	if c.Add != nil {
		mode, hold = c.Add.Mode, c.Add.HoldMax
	} else {
		mode, hold = c.Current.Mode, c.Current.HoldMax
	}
	m, _ := migration.ParseHoldMode(mode)
	s := fmt.Sprintf("migrate: mode %s, holdMax %v", m, orDefault(hold, migration.DefaultHoldMax))
	if len(c.Force) > 0 {
		s += ", force " + strings.Join(c.Force, ",")
	}
	return s
}
