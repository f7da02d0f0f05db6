// Package promqlnames owns finding the metric names a PromQL expression
// reads, so that a dashboard's or an alert rule's expressions can be
// checked against the metrics the code exports. It tokenizes rather than
// parses: Prometheus's own parser would pull its whole module (and
// upgrades of shared dependencies) into go.mod for one test. What it
// knows of the language: strings, numbers and durations, label matchers in
// braces, ranges and subqueries in brackets, functions and aggregations
// (a name followed by a parenthesis), keywords and binary operators, the
// label lists of by, without, on, ignoring, group_left and group_right,
// and Grafana's variables ($name, ${name}, [[name]]), which are not
// PromQL but appear in dashboards.
package promqlnames

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrSyntax is returned for an expression the tokenizer cannot read, with
// the offset and what it found there.
var ErrSyntax = errors.New("promqlnames: cannot read the expression")

// keywords are the words of PromQL that are never metric names: binary
// and set operators, modifiers, and the number literals Inf and NaN.
// Compared case-insensitively, as Prometheus does.
var keywords = []string{"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan",
	"by", "without", "on", "ignoring", "group_left", "group_right"}

// labelListKeywords take a parenthesized list of label names.
var labelListKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

// aggregations are the aggregation operators, which may be followed by a
// by or without clause before their parenthesis (sum by (x) (...)).
var aggregations = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
	"bottomk", "topk", "quantile", "limitk", "limit_ratio"}

// Names returns the metric names expr reads, sorted, each once.
func Names(expr string) ([]string, error) {
	l := &lexer{in: expr}
	var names []string
	for {
		tok, err := l.next()
		if err != nil {
			return nil, err
		}
		switch tok.kind {
		case tokEOF:
			slices.Sort(names)
			return slices.Compact(names), nil
		case tokIdent:
			lower := strings.ToLower(tok.text)
			switch {
			case slices.Contains(labelListKeywords, lower):
				if l.peekByte() == '(' {
					if err := l.skipGroup('(', ')'); err != nil {
						return nil, err
					}
				}
			case slices.Contains(keywords, lower):
			case l.peekByte() == '(':
				// A function or an aggregation: its name is not a metric.
			case slices.Contains(aggregations, lower) && l.peekWordIsLabelClause():
			default:
				names = append(names, tok.text)
			}
		case tokName:
			names = append(names, tok.text)
		}
	}
}

type tokKind int

const (
	tokEOF tokKind = iota
	tokIdent
	// tokName is a metric name given as {__name__="..."}.
	tokName
	tokOther
)

type token struct {
	kind tokKind
	text string
}

type lexer struct {
	in  string
	pos int
}

func (l *lexer) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: at offset %d: %s", ErrSyntax, l.pos, fmt.Sprintf(format, args...))
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentChar(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace skips white space and comments.
func (l *lexer) skipSpace() {
	for l.pos < len(l.in) {
		switch c := l.in[l.pos]; {
		case isSpace(c):
			l.pos++
		case c == '#':
			for l.pos < len(l.in) && l.in[l.pos] != '\n' {
				l.pos++
			}
		default:
			return
		}
	}
}

// peekByte is the next byte after white space, 0 at the end.
func (l *lexer) peekByte() byte {
	l.skipSpace()
	if l.pos < len(l.in) {
		return l.in[l.pos]
	}
	return 0
}

// peekWordIsLabelClause says whether the next word is by or without.
func (l *lexer) peekWordIsLabelClause() bool {
	l.skipSpace()
	end := l.pos
	for end < len(l.in) && isIdentChar(l.in[end]) {
		end++
	}
	w := strings.ToLower(l.in[l.pos:end])
	return w == "by" || w == "without"
}

func (l *lexer) ident() string {
	start := l.pos
	for l.pos < len(l.in) && isIdentChar(l.in[l.pos]) {
		l.pos++
	}
	return l.in[start:l.pos]
}

// str reads a quoted string starting at l.pos and returns its contents
// (escapes kept as written: metric names have none).
func (l *lexer) str() (string, error) {
	q := l.in[l.pos]
	start := l.pos
	l.pos++
	for l.pos < len(l.in) {
		c := l.in[l.pos]
		switch {
		case c == '\\' && q != '`':
			l.pos += 2
			continue
		case c == q:
			l.pos++
			return l.in[start+1 : l.pos-1], nil
		}
		l.pos++
	}
	l.pos = start
	return "", l.errorf("unterminated string")
}

// variable skips a Grafana variable: $name, ${name...} or [[name]].
func (l *lexer) variable() error {
	start := l.pos
	if strings.HasPrefix(l.in[l.pos:], "[[") {
		end := strings.Index(l.in[l.pos:], "]]")
		if end < 0 {
			return l.errorf("unterminated [[variable]]")
		}
		l.pos += end + 2
		return nil
	}
	l.pos++ // $
	if l.pos < len(l.in) && l.in[l.pos] == '{' {
		end := strings.IndexByte(l.in[l.pos:], '}')
		if end < 0 {
			l.pos = start
			return l.errorf("unterminated ${variable}")
		}
		l.pos += end + 1
		return nil
	}
	if l.ident() == "" {
		l.pos = start
		return l.errorf("a $ not starting a variable")
	}
	return nil
}

// skipGroup skips from an open byte at l.pos to its matching close,
// stepping over strings and nested groups of the same kind.
func (l *lexer) skipGroup(open, close byte) error {
	start := l.pos
	depth := 0
	for l.pos < len(l.in) {
		switch c := l.in[l.pos]; c {
		case '"', '\'', '`':
			if _, err := l.str(); err != nil {
				return err
			}
			continue
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				l.pos++
				return nil
			}
		}
		l.pos++
	}
	l.pos = start
	return l.errorf("unclosed %q", open)
}

// matchers reads a {label matchers} group at l.pos and returns the metric
// name it selects by __name__, if any.
func (l *lexer) matchers() (string, error) {
	start := l.pos
	l.pos++ // {
	name := ""
	for {
		switch c := l.peekByte(); {
		case c == 0:
			l.pos = start
			return "", l.errorf("unclosed {")
		case c == '}':
			l.pos++
			return name, nil
		case c == ',':
			l.pos++
		case isIdentStart(c) || c == '"':
			var label string
			if c == '"' { // a quoted label name, or a quoted metric name alone
				s, err := l.str()
				if err != nil {
					return "", err
				}
				label = s
			} else {
				label = l.ident()
			}
			opStart := l.peekByte()
			if opStart == ',' || opStart == '}' {
				if c != '"' {
					return "", l.errorf("matcher of %q: no operator", label)
				}
				name = label // {"metric.name"}: a quoted name alone
				continue
			}
			op := l.op()
			if op != "=" && op != "!=" && op != "=~" && op != "!~" {
				return "", l.errorf("matcher of %q: operator %q", label, op)
			}
			if l.peekByte() == '$' {
				if err := l.variable(); err != nil {
					return "", err
				}
				continue
			}
			if q := l.peekByte(); q != '"' && q != '\'' && q != '`' {
				return "", l.errorf("matcher of %q: want a string", label)
			}
			v, err := l.str()
			if err != nil {
				return "", err
			}
			if label == "__name__" {
				if op != "=" {
					return "", l.errorf("__name__%s%q: only __name__= names a metric that can be checked", op, v)
				}
				name = v
			}
		default:
			return "", l.errorf("unexpected %q in label matchers", c)
		}
	}
}

// op reads a matcher operator.
func (l *lexer) op() string {
	l.skipSpace()
	start := l.pos
	for l.pos < len(l.in) && strings.IndexByte("=!~", l.in[l.pos]) >= 0 {
		l.pos++
	}
	return l.in[start:l.pos]
}

func (l *lexer) next() (token, error) {
	l.skipSpace()
	if l.pos >= len(l.in) {
		return token{kind: tokEOF}, nil
	}
	c := l.in[l.pos]
	switch {
	case isIdentStart(c):
		return token{kind: tokIdent, text: l.ident()}, nil
	case c >= '0' && c <= '9' || c == '.' && l.pos+1 < len(l.in) && l.in[l.pos+1] >= '0' && l.in[l.pos+1] <= '9':
		// A number (1, 0.5, 1e3, 0x1f) or a duration (5m, 1h30m).
		for l.pos < len(l.in) && (isIdentChar(l.in[l.pos]) || l.in[l.pos] == '.' ||
			(l.in[l.pos] == '+' || l.in[l.pos] == '-') && (l.in[l.pos-1] == 'e' || l.in[l.pos-1] == 'E')) {
			l.pos++
		}
		return token{kind: tokOther}, nil
	case c == '"' || c == '\'' || c == '`':
		_, err := l.str()
		return token{kind: tokOther}, err
	case c == '$' || strings.HasPrefix(l.in[l.pos:], "[["):
		return token{kind: tokOther}, l.variable()
	case c == '{':
		name, err := l.matchers()
		if err != nil || name == "" {
			return token{kind: tokOther}, err
		}
		return token{kind: tokName, text: name}, nil
	case c == '[':
		return token{kind: tokOther}, l.skipGroup('[', ']')
	case strings.IndexByte("()+-*/%^=!<>,@", c) >= 0:
		l.pos++
		return token{kind: tokOther}, nil
	}
	return token{}, l.errorf("unexpected %q", c)
}
