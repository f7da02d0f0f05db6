package demo

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"
)

// row is one topic's line of the view.
type row struct {
	Topic string
	// State is the topic's migration state as the control plane has it.
	State string
	// Lag is the replication time lag; negative when not measured (a
	// COMPLETE topic is not replicated, a new one not measured yet).
	Lag time.Duration
	// Rate is acked records per second since the previous frame.
	Rate float64
	// Stall is the longest gap between two acks the topic's producer saw
	// so far, counting the one it is in.
	Stall time.Duration
	// Acked is how many records the producer has had acked.
	Acked int64
}

// summary is one topic's line of the final table.
type summary struct {
	Topic      string
	Partitions int32
	Acked      int64
	// Lost is acked records the destination does not hold.
	Lost       int64
	Attempts   int
	RolledBack int
	Stall      time.Duration
}

// ANSI control sequences of the live view.
const (
	ansiUp        = "\x1b[%dA" // cursor up n lines
	ansiClearDown = "\r\x1b[J" // to the line's start, erase to the screen's end
)

// screen writes the demo's narration and its per-topic view to one writer.
// Live (a terminal), the view is a table redrawn in place under the
// narration: each narration line is written over the table, which is drawn
// again below it. Plain (a pipe, a file, a buffer), there is no cursor to
// move: narration lines as they come, and each frame as one summary line
// per topic.
type screen struct {
	w    io.Writer
	live bool
	// rows is the last frame, drawn again under each narration line (live).
	rows []row
	// drawn is how many lines of the table are on the screen (live).
	drawn int
}

// isTerminal reports whether w is a terminal, where the view can redraw
// itself in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newScreen(w io.Writer, live bool) *screen { return &screen{w: w, live: live} }

// say writes one narration line.
func (s *screen) say(format string, args ...any) {
	var b strings.Builder
	s.erase(&b)
	fmt.Fprintf(&b, format+"\n", args...)
	s.draw(&b)
	io.WriteString(s.w, b.String())
}

// frame shows rows: live, in place of the last frame; plain, as one line
// per topic.
func (s *screen) frame(rows []row) {
	var b strings.Builder
	if s.live {
		s.rows = rows
		s.erase(&b)
		s.draw(&b)
	} else {
		w := topicWidth(rows, 0)
		for _, r := range rows {
			fmt.Fprintf(&b, "  [%-*s] %-9s time lag %s, %.0f acked/s, longest stall %s, %d acked\n",
				w, r.Topic, r.State+",", lagText(r.Lag), r.Rate, r.Stall.Round(time.Millisecond), r.Acked)
		}
	}
	io.WriteString(s.w, b.String())
}

// leave ends the live view: the last frame stays on the screen, and what
// is written next goes under it.
func (s *screen) leave() { s.rows, s.drawn = nil, 0 }

// table writes the final table, one line per topic.
func (s *screen) table(sums []summary) {
	var b strings.Builder
	s.erase(&b)
	w := len("topic")
	for _, m := range sums {
		w = max(w, len(m.Topic))
	}
	fmt.Fprintf(&b, "  %-*s %10s %7s %5s %9s %12s %14s\n",
		w, "topic", "partitions", "acked", "lost", "cutovers", "rolled back", "longest stall")
	for _, m := range sums {
		fmt.Fprintf(&b, "  %-*s %10d %7d %5d %9d %12d %14s\n",
			w, m.Topic, m.Partitions, m.Acked, m.Lost, m.Attempts, m.RolledBack, m.Stall.Round(time.Millisecond))
	}
	s.draw(&b)
	io.WriteString(s.w, b.String())
}

// erase takes the table off the screen (live; plain draws none).
func (s *screen) erase(b *strings.Builder) {
	if s.drawn > 0 {
		fmt.Fprintf(b, ansiUp+ansiClearDown, s.drawn)
		s.drawn = 0
	}
}

// draw writes the last frame's table at the cursor (live, once a frame
// came).
func (s *screen) draw(b *strings.Builder) {
	if !s.live || len(s.rows) == 0 {
		return
	}
	w := topicWidth(s.rows, len("topic"))
	fmt.Fprintf(b, "  %-*s %-9s %9s %8s %14s %7s\n", w, "topic", "state", "time lag", "acked/s", "longest stall", "acked")
	for _, r := range s.rows {
		fmt.Fprintf(b, "  %-*s %-9s %9s %8.0f %14s %7d\n",
			w, r.Topic, r.State, lagText(r.Lag), r.Rate, r.Stall.Round(time.Millisecond), r.Acked)
	}
	s.drawn = 1 + len(s.rows)
}

// topicWidth is the widest topic name of rows, at least least.
func topicWidth(rows []row, least int) int {
	w := least
	for _, r := range rows {
		w = max(w, len(r.Topic))
	}
	return w
}

func lagText(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}
