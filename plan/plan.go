// Package plan owns Baton's declarative migration plan: the YAML format
// `baton apply -f plan.yaml` reads (apiVersion baton.io/v1, kind
// MigrationPlan), its strict decoding, where every refusal names the file,
// the line and the field's path, and the diff of a plan against the topics
// a running control plane manages (diff.go). The format is documented in
// docs/kubernetes.md, section Plan.
package plan

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/migration"
)

// The plan's apiVersion and kind.
const (
	APIVersion = "baton.io/v1"
	Kind       = "MigrationPlan"
)

// Errors of this package; a *FieldError is an ErrBadPlan.
var (
	// ErrBadPlan: the plan is refused; the error names the file, line and
	// field.
	ErrBadPlan = errors.New("plan: bad plan")
	// ErrConflict: the plan asks for what the control plane cannot do
	// from the topics' current state (diff.go); nothing was applied.
	ErrConflict = errors.New("plan: conflicts with the control plane's state")
)

// FieldError is one refusal, at a line of the plan's file and a field's
// path in it ("topics[2].mode").
type FieldError struct {
	File string
	Line int
	Path string
	Msg  string
	// Kind is ErrBadPlan or ErrConflict.
	Kind error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Path, e.Msg)
}

// Unwrap makes the error its Kind.
func (e *FieldError) Unwrap() error { return e.Kind }

// Pos is where a field was set in the plan.
type Pos struct {
	Line int
	Path string
}

// Desired is the state a plan wants a topic in.
type Desired int

// The desired states: a topic ends REJECT, PROXY or COMPLETE (through
// MIGRATING: a cutover).
const (
	Reject Desired = iota + 1
	Proxy
	Complete
)

func (d Desired) String() string {
	return map[Desired]string{Reject: "REJECT", Proxy: "PROXY", Complete: "COMPLETE"}[d]
}

// State is the migration state a desired state ends in.
func (d Desired) State() migration.State {
	return map[Desired]migration.State{Reject: migration.Reject, Proxy: migration.Proxy, Complete: migration.Complete}[d]
}

// Settings are a topic's settings as a plan sets them: a nil pointer or
// slice is a setting the plan leaves out, left as the control plane has
// it (at an add, the control plane's default).
type Settings struct {
	// Mode is "hold" or "retriable"; "" unset.
	Mode            string
	HoldMax         *time.Duration
	ForwardDeadline *time.Duration
	// Namespaces and Workloads are the shadow features' target
	// (xds.Target).
	Namespaces []string
	Workloads  []string
	// The shadow features (controlplane.Shadow).
	LatencyEmulation *bool
	AuthCheck        *bool
	AuthEnforce      *bool
	Headroom         *bool
	// Force lists the cutover gates a migrate is forced past (gate
	// names, or "all"); nil: none.
	Force []string
	// At is where each setting was set, by its field name ("mode",
	// "holdMax", "target.namespaces", "shadow.headroom", ...).
	At map[string]Pos
}

// Entry is one item of topics: a topic by name, or every topic a regex
// matches.
type Entry struct {
	Name  string
	Regex *regexp.Regexp
	State Desired
	// Settings are the entry's own; Resolved merges the plan's defaults.
	Settings
	Pos Pos
}

// Wave is one item of waves: `baton rollout run` runs them in order;
// `baton apply` decodes and checks them only.
type Wave struct {
	Name       string
	Namespaces []string
	Until      Until
	Pos        Pos
}

// Until is what must hold before the wave after this one may start.
type Until struct {
	// Complete: every topic the wave moves is COMPLETE.
	Complete bool
	// NoForgottenProducers: no forgotten-producer finding for them.
	NoForgottenProducers bool
	// Soak: how long after the wave's last cutover.
	Soak time.Duration
}

// Plan is a decoded, checked plan.
type Plan struct {
	File        string
	Source      []string
	Destination []string
	ClustersPos Pos
	SourcePos   Pos
	DestPos     Pos
	Defaults    Settings
	Topics      []Entry
	Waves       []Wave
}

// HasRegex reports whether an entry is a regex (which needs the source's
// topics).
func (p *Plan) HasRegex() bool {
	return slices.ContainsFunc(p.Topics, func(e Entry) bool { return e.Regex != nil })
}

// Resolved is e's settings with the plan's defaults for those e leaves
// out.
func (p *Plan) Resolved(e Entry) Settings {
	s := e.Settings
	d := p.Defaults
	s.At = map[string]Pos{}
	for k, v := range d.At {
		s.At[k] = v
	}
	for k, v := range e.At {
		s.At[k] = v
	}
	if s.Mode == "" {
		s.Mode = d.Mode
	}
	s.HoldMax = orPtr(s.HoldMax, d.HoldMax)
	s.ForwardDeadline = orPtr(s.ForwardDeadline, d.ForwardDeadline)
	s.LatencyEmulation = orPtr(s.LatencyEmulation, d.LatencyEmulation)
	s.AuthCheck = orPtr(s.AuthCheck, d.AuthCheck)
	s.AuthEnforce = orPtr(s.AuthEnforce, d.AuthEnforce)
	s.Headroom = orPtr(s.Headroom, d.Headroom)
	if s.Namespaces == nil {
		s.Namespaces = d.Namespaces
	}
	if s.Workloads == nil {
		s.Workloads = d.Workloads
	}
	if s.Force == nil {
		s.Force = d.Force
	}
	// Enforcing the auth check implies it, as `baton topic add
	// --auth-enforce` does.
	if s.AuthEnforce != nil && *s.AuthEnforce && s.AuthCheck == nil {
		on := true
		s.AuthCheck = &on
		s.At["shadow.authCheck"] = s.At["shadow.authEnforce"]
	}
	return s
}

func orPtr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// Load reads and decodes the plan in file.
func Load(file string) (*Plan, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPlan, err)
	}
	return Decode(file, b)
}

// Decode decodes and checks a plan; file names it in errors. Every
// refusal is a *FieldError; several are joined.
func Decode(file string, b []byte) (*Plan, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		// yaml.v3's syntax errors read "yaml: line 3: ..."; said as
		// "plan.yaml:3: ..." like every other refusal.
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if m := syntaxLine.FindStringSubmatch(msg); m != nil {
			return nil, fmt.Errorf("%w: %s:%s: %s", ErrBadPlan, file, m[1], m[2])
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrBadPlan, file, msg)
	}
	d := &decoder{file: file}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, &FieldError{File: file, Line: 1, Path: "(plan)", Msg: "the file is empty", Kind: ErrBadPlan}
	}
	p := &Plan{File: file}
	d.plan(doc.Content[0], p)
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return p, nil
}

var syntaxLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// decoder walks a plan's YAML nodes, keeping every refusal.
type decoder struct {
	file string
	errs []error
}

// maxErrors bounds the refusals reported at once.
const maxErrors = 20

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	if path == "" {
		path = "(plan)"
	}
	if len(d.errs) < maxErrors {
		d.errs = append(d.errs, &FieldError{File: d.file, Line: n.Line, Path: path, Msg: fmt.Sprintf(format, args...), Kind: ErrBadPlan})
	}
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// fields decodes mapping n at path: each key known to fields is handed its
// value; an unknown key, a repeated key or a required one missing is
// refused. It returns false if n is not a mapping.
func (d *decoder) fields(n *yaml.Node, path string, required []string, fields map[string]func(v *yaml.Node, path string)) bool {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping of fields (%s), not %s", strings.Join(sortedKeys(fields), ", "), kindName(n))
		return false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		kp := join(path, k.Value)
		f, ok := fields[k.Value]
		switch {
		case k.Kind != yaml.ScalarNode:
			d.fail(k, path, "a field name must be a string")
		case seen[k.Value]:
			d.fail(k, kp, "set twice")
		case !ok:
			d.fail(k, kp, "unknown field (%s has: %s)", orPlan(path), strings.Join(sortedKeys(fields), ", "))
		default:
			seen[k.Value] = true
			f(v, kp)
		}
	}
	for _, r := range required {
		if !seen[r] {
			d.fail(n, join(path, r), "required")
		}
	}
	return true
}

func orPlan(path string) string {
	if path == "" {
		return "the plan"
	}
	return path
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "this"
}

// str decodes a non-empty scalar.
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || n.Value == "" {
		d.fail(n, path, "want a non-empty string, not %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

// oneOf decodes a scalar that must be one of choices (any case); it
// returns the choice.
func (d *decoder) oneOf(n *yaml.Node, path string, choices ...string) (string, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		for _, c := range choices {
			if strings.EqualFold(n.Value, c) {
				return c, true
			}
		}
	}
	d.fail(n, path, "%s is not one of %s", kindName(n), strings.Join(choices, ", "))
	return "", false
}

func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		d.fail(n, path, "%s is not true or false", kindName(n))
		return false, false
	}
	return b, true
}

// duration decodes a Go duration ("5s", "1m30s"), not negative.
func (d *decoder) duration(n *yaml.Node, path string) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.fail(n, path, "want a duration such as 5s, not %s", kindName(n))
		return 0, false
	}
	v, err := time.ParseDuration(n.Value)
	switch {
	case n.Value == "0":
		return 0, true
	case err != nil:
		d.fail(n, path, "%q is not a duration such as 5s or 1m30s", n.Value)
		return 0, false
	case v < 0:
		d.fail(n, path, "%v is negative", v)
		return 0, false
	}
	return v, true
}

// strings decodes a list of non-empty, distinct strings; a scalar is a
// comma-separated list.
func (d *decoder) strList(n *yaml.Node, path string) ([]string, bool) {
	var out []string
	ok := true
	add := func(v, at *yaml.Node, p string) {
		s, good := d.str(v, p)
		switch {
		case !good:
			ok = false
		case slices.Contains(out, s):
			d.fail(at, p, "%q is listed twice", s)
			ok = false
		default:
			out = append(out, s)
		}
	}
	switch n.Kind {
	case yaml.SequenceNode:
		for i, c := range n.Content {
			add(deref(c), c, fmt.Sprintf("%s[%d]", path, i))
		}
	case yaml.ScalarNode:
		for s := range strings.SplitSeq(n.Value, ",") {
			add(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: strings.TrimSpace(s), Line: n.Line}, n, path)
		}
	default:
		d.fail(n, path, "want a list of strings, not %s", kindName(n))
		return nil, false
	}
	if out == nil {
		out = []string{} // set, and empty
	}
	return out, ok
}

// list calls each for every item of sequence n.
func (d *decoder) list(n *yaml.Node, path string, each func(i int, v *yaml.Node, path string)) {
	n = deref(n)
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "want a list, not %s", kindName(n))
		return
	}
	for i, c := range n.Content {
		each(i, deref(c), fmt.Sprintf("%s[%d]", path, i))
	}
}

func (d *decoder) plan(root *yaml.Node, p *Plan) {
	d.fields(root, "", []string{"apiVersion", "kind", "clusters", "topics"}, map[string]func(*yaml.Node, string){
		"apiVersion": func(v *yaml.Node, path string) { d.oneOf(v, path, APIVersion) },
		"kind":       func(v *yaml.Node, path string) { d.oneOf(v, path, Kind) },
		"clusters":   func(v *yaml.Node, path string) { d.clusters(v, path, p) },
		"defaults": func(v *yaml.Node, path string) {
			p.Defaults = d.settings(v, path, nil, nil)
		},
		"topics": func(v *yaml.Node, path string) { d.topics(v, path, p) },
		"waves":  func(v *yaml.Node, path string) { d.waves(v, path, p) },
	})
}

func (d *decoder) clusters(n *yaml.Node, path string, p *Plan) {
	p.ClustersPos = Pos{Line: n.Line, Path: path}
	bootstrap := func(to *[]string, at *Pos) func(*yaml.Node, string) {
		return func(v *yaml.Node, path string) {
			*at = Pos{Line: v.Line, Path: path}
			l, ok := d.strList(v, path)
			if !ok {
				return
			}
			if len(l) == 0 {
				d.fail(v, path, "want at least one host:port")
				return
			}
			for _, a := range l {
				if err := checkHostPort(a); err != nil {
					d.fail(v, path, "%q: %v", a, err)
					return
				}
			}
			*to = l
		}
	}
	d.fields(n, path, []string{"source", "destination"}, map[string]func(*yaml.Node, string){
		"source":      bootstrap(&p.Source, &p.SourcePos),
		"destination": bootstrap(&p.Destination, &p.DestPos),
	})
}

func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return errors.New("want host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
		return errors.New("want host:port, a host and a port from 1 to 65535")
	}
	return nil
}

// settings decodes the settings fields of n (defaults, or a topic entry
// with its own fields in extra); required names fields extra requires.
func (d *decoder) settings(n *yaml.Node, path string, required []string, extra map[string]func(*yaml.Node, string)) Settings {
	s := Settings{At: map[string]Pos{}}
	at := func(name string, v *yaml.Node, path string) { s.At[name] = Pos{Line: v.Line, Path: path} }
	fields := map[string]func(*yaml.Node, string){
		"mode": func(v *yaml.Node, path string) {
			if m, ok := d.oneOf(v, path, migration.Hold.String(), migration.Retriable.String()); ok {
				s.Mode = m
				at("mode", v, path)
			}
		},
		"holdMax": func(v *yaml.Node, path string) {
			if x, ok := d.duration(v, path); ok {
				s.HoldMax = &x
				at("holdMax", v, path)
			}
		},
		"forwardDeadline": func(v *yaml.Node, path string) {
			if x, ok := d.duration(v, path); ok {
				s.ForwardDeadline = &x
				at("forwardDeadline", v, path)
			}
		},
		"force": func(v *yaml.Node, path string) {
			l, ok := d.strList(v, path)
			if !ok {
				return
			}
			if _, err := controlplane.ParseForce(l); err != nil {
				d.fail(v, path, "%s", strings.TrimPrefix(err.Error(), controlplane.ErrBadConfig.Error()+": force: "))
				return
			}
			s.Force = l
			at("force", v, path)
		},
		"target": func(v *yaml.Node, path string) {
			d.fields(v, path, nil, map[string]func(*yaml.Node, string){
				"namespaces": func(v *yaml.Node, path string) {
					if l, ok := d.strList(v, path); ok {
						s.Namespaces = l
						at("target.namespaces", v, path)
					}
				},
				"workloads": func(v *yaml.Node, path string) {
					if l, ok := d.strList(v, path); ok {
						s.Workloads = l
						at("target.workloads", v, path)
					}
				},
			})
		},
		"shadow": func(v *yaml.Node, path string) {
			sw := func(name string, to **bool) func(*yaml.Node, string) {
				return func(v *yaml.Node, path string) {
					if b, ok := d.boolean(v, path); ok {
						*to = &b
						at("shadow."+name, v, path)
					}
				}
			}
			d.fields(v, path, nil, map[string]func(*yaml.Node, string){
				"latencyEmulation": sw("latencyEmulation", &s.LatencyEmulation),
				"authCheck":        sw("authCheck", &s.AuthCheck),
				"authEnforce":      sw("authEnforce", &s.AuthEnforce),
				"headroom":         sw("headroom", &s.Headroom),
			})
			if s.AuthEnforce != nil && *s.AuthEnforce && s.AuthCheck != nil && !*s.AuthCheck {
				at := s.At["shadow.authEnforce"]
				d.fail(&yaml.Node{Line: at.Line}, at.Path, "true needs the auth check: authCheck is false")
			}
		},
	}
	for k, f := range extra {
		fields[k] = f
	}
	d.fields(n, path, required, fields)
	return s
}

func (d *decoder) topics(n *yaml.Node, path string, p *Plan) {
	names := map[string]Pos{}
	regexes := map[string]Pos{}
	d.list(n, path, func(i int, v *yaml.Node, path string) {
		e := Entry{Pos: Pos{Line: v.Line, Path: path}}
		var statePos *Pos
		e.Settings = d.settings(v, path, []string{"state"}, map[string]func(*yaml.Node, string){
			"name": func(v *yaml.Node, path string) {
				if s, ok := d.str(v, path); ok {
					if prev, dup := names[s]; dup {
						d.fail(v, path, "topic %q is already listed at line %d (%s)", s, prev.Line, prev.Path)
					}
					names[s] = Pos{Line: v.Line, Path: path}
					e.Name = s
				}
			},
			"regex": func(v *yaml.Node, path string) {
				s, ok := d.str(v, path)
				if !ok {
					return
				}
				if prev, dup := regexes[s]; dup {
					d.fail(v, path, "regex %q is already listed at line %d (%s)", s, prev.Line, prev.Path)
				}
				regexes[s] = Pos{Line: v.Line, Path: path}
				// Anchored: a regex matches whole topic names.
				re, err := regexp.Compile("^(?:" + s + ")$")
				if err != nil {
					d.fail(v, path, "%q is not a regular expression: %v", s, err)
					return
				}
				e.Regex = re
			},
			"state": func(v *yaml.Node, path string) {
				statePos = &Pos{Line: v.Line, Path: path}
				switch s, _ := d.oneOf(v, path, "reject", "proxy", "complete"); s {
				case "reject":
					e.State = Reject
				case "proxy":
					e.State = Proxy
				case "complete":
					e.State = Complete
				}
			},
		})
		if deref(v).Kind != yaml.MappingNode {
			return
		}
		if statePos != nil {
			e.At["state"] = *statePos
		}
		switch named, matched := hasKey(v, "name"), hasKey(v, "regex"); {
		case named && matched:
			d.fail(v, path, "both name and regex: set one of them")
		case !named && !matched:
			d.fail(v, join(path, "name"), "required (or regex)")
		}
		p.Topics = append(p.Topics, e)
	})
	if n.Kind == yaml.SequenceNode && len(n.Content) == 0 {
		d.fail(n, path, "lists no topic")
	}
}

func hasKey(n *yaml.Node, key string) bool {
	n = deref(n)
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

func (d *decoder) waves(n *yaml.Node, path string, p *Plan) {
	names := map[string]Pos{}
	namespaces := map[string]Pos{}
	d.list(n, path, func(i int, v *yaml.Node, path string) {
		w := Wave{Pos: Pos{Line: v.Line, Path: path}}
		d.fields(v, path, []string{"name", "namespaces"}, map[string]func(*yaml.Node, string){
			"name": func(v *yaml.Node, path string) {
				if s, ok := d.str(v, path); ok {
					if prev, dup := names[s]; dup {
						d.fail(v, path, "wave %q is already named at line %d (%s)", s, prev.Line, prev.Path)
					}
					names[s] = Pos{Line: v.Line, Path: path}
					w.Name = s
				}
			},
			"namespaces": func(v *yaml.Node, path string) {
				l, ok := d.strList(v, path)
				if !ok {
					return
				}
				if len(l) == 0 {
					d.fail(v, path, "want at least one namespace")
				}
				for _, ns := range l {
					if prev, dup := namespaces[ns]; dup {
						d.fail(v, path, "namespace %q is already in the wave at line %d (%s)", ns, prev.Line, prev.Path)
					}
					namespaces[ns] = Pos{Line: v.Line, Path: path}
				}
				w.Namespaces = l
			},
			"until": func(v *yaml.Node, path string) {
				d.fields(v, path, nil, map[string]func(*yaml.Node, string){
					"complete":             func(v *yaml.Node, path string) { w.Until.Complete, _ = d.boolean(v, path) },
					"noForgottenProducers": func(v *yaml.Node, path string) { w.Until.NoForgottenProducers, _ = d.boolean(v, path) },
					"soak":                 func(v *yaml.Node, path string) { w.Until.Soak, _ = d.duration(v, path) },
				})
			},
		})
		p.Waves = append(p.Waves, w)
	})
}
