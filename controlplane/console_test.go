package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// updateScreenshots writes the console's pages to docs/console-*.png
// (docs/kubernetes.md, "Watch"); without it the screenshots are taken and
// checked, and no file is written.
var updateScreenshots = flag.Bool("update-screenshots", os.Getenv("BATON_UPDATE_SCREENSHOTS") != "",
	"write the console test's screenshots to docs/console-*.png (also: BATON_UPDATE_SCREENSHOTS=1)")

// chromium finds Debian's chromium (make test-deps installs it).
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestConsole drives the console in headless Chromium against a running
// control plane (on a MemStore and a replication double, agent stand-ins in two
// namespaces): an operator migrates a PROXY topic and the page shows it
// COMPLETE from the event stream, without a reload; a second cutover,
// held by an agent that never drains, is aborted from the page and the
// page shows the rollback; a read-only token gets the buttons disabled,
// and a write it forces anyway is refused by the API with a 403 that the
// page shows.
func TestConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("starts headless Chromium")
	}
	browser := chromium()
	if browser == "" {
		t.Fatal("no chromium binary on PATH (chromium, chromium-browser, google-chrome, chrome, headless-shell): `make test-deps` installs Debian's chromium")
	}
	t.Parallel()
	// Liveness bounds only, far above what each step takes: on a 2-core
	// machine at load 20 and more the whole test was seen to pass 2 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	r := newMemRepl()
	// A long cutover timeout: the held cutover must still be running when
	// the page aborts it, however slow the browser is.
	p := startMemPlane(t, ctx, NewMemStore(), "", r, CutoverTimeout(5*time.Minute))
	srv := httptest.NewServer(newTestAPI(t, p.cp, `
- {name: console-op, role: operator, sha256: `+tokenSum("op-secret")+`}
- {name: console-view, role: read-only, sha256: `+tokenSum("view-secret")+`}
`))
	t.Cleanup(srv.Close)
	a := startAgentIn(t, ctx, p.addr, "checkout-7f9c", "team-a", "checkout")
	holder := startAgentIn(t, ctx, p.addr, "billing-5d2b", "team-b", "billing")
	for _, topic := range []string{"orders", "payments", "audit"} {
		r.produce(topic, 20)
		spec := TopicSpec{Name: topic}
		if topic == "audit" {
			spec.State = migration.Reject
		}
		if _, err := p.cp.AddTopic(ctx, spec, "test"); err != nil {
			t.Fatal(err)
		}
	}
	waitLeases(t, ctx, p, a, holder)
	// A producer writing audit straight to the source (REJECT: no
	// forgotten-producer check runs), for a copy rate the page can show:
	// 25 records a second, at most 3000, until the test ends.
	pctx, pcancel := context.WithCancel(ctx)
	produced := make(chan struct{})
	t.Cleanup(func() { pcancel(); <-produced })
	go func() {
		defer close(produced)
		tick := time.NewTicker(40 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 3000; i++ {
			select {
			case <-pctx.Done():
				return
			case <-tick.C:
			}
			r.produce("audit", 1)
		}
	}()

	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.WindowSize(1280, 800))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	// The first run starts the browser, which lives as long as bctx: no
	// timeout of its own (each wait below has one).
	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/console/")); err != nil {
		t.Fatalf("opening the console in %s: %v", browser, err)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(bctx, 2*time.Minute)
		defer scancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v; page message %q", what, err, pageText(bctx, "#message"))
		}
	}
	// until waits for a JavaScript condition on the page.
	until := func(what, cond string) {
		t.Helper()
		do(what, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](cond, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(90*time.Second))(ctx, tg)
			return err
		}))
	}
	signIn := func(token, who string) {
		t.Helper()
		do("signing in as "+who,
			chromedp.Click(chromedp.ID("token-forget")),
			chromedp.SendKeys(chromedp.ID("token"), token),
			chromedp.Click(chromedp.ID("token-use")))
		until(who+" is signed in", `document.getElementById("caller").textContent.startsWith(`+js(who)+`)`)
	}
	cell := func(topic, class string) string {
		return `(document.querySelector('#topics-table tr[data-topic=` + js(topic) + `] td.` + class + `') || {}).textContent`
	}
	hasEvent := func(topic, kind string) string {
		return `!!document.querySelector('#events-table tr[data-topic=` + js(topic) + `][data-kind=` + js(kind) + `]')`
	}
	confirm := func(op, topic, reason string) {
		t.Helper()
		button := `#topics-table tr[data-topic="` + topic + `"] button.` + op
		do("clicking "+op+" on "+topic, chromedp.WaitEnabled(chromedp.CSS(button)), chromedp.Click(chromedp.CSS(button)),
			chromedp.WaitVisible(chromedp.CSS("#confirm[open]")))
		if reason != "" {
			do("typing the reason", chromedp.SendKeys(chromedp.ID("confirm-reason"), reason))
		}
		if *updateScreenshots && op == "abort" {
			screenshot(t, bctx, "confirm")
		}
		do("confirming "+op, chromedp.Click(chromedp.ID("confirm-ok")), chromedp.WaitNotVisible(chromedp.CSS("#confirm")))
	}

	// Not signed in: the page says so and shows no data.
	until("the page asks for a token", `document.getElementById("message").textContent.includes("a bearer token is required")`)

	signIn("op-secret", "console-op (operator)")
	until("the topics are listed", cell("orders", "state")+` === "PROXY" && `+cell("audit", "state")+` === "REJECT"`)
	until("audit shows a copy rate", `parseFloat(`+cell("audit", "rate")+`) > 0 && /^\d+(\.\d+)?(ms|s)$/.test(`+cell("audit", "lag")+`)`)
	until("the event stream is live", `document.getElementById("stream").textContent === "stream: live"`)
	// Marks this document: a reload would start a new one without it.
	do("marking the document", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](`window.consoleTestMark = true`)(ctx, tg)
		return err
	}))

	// Migrate orders: the page shows COMPLETE from the stream.
	waitGatesOpen(t, ctx, p.cp, "orders")
	confirm("migrate", "orders", "")
	until("orders shows COMPLETE", cell("orders", "state")+` === "COMPLETE" && `+hasEvent("orders", "completed")+
		` && `+cell("orders", "last-event")+`.startsWith("completed")`)
	if got := waitState(t, ctx, p, "orders", migration.Complete); got.Attempts != 1 {
		t.Fatalf("orders: %d attempts, want 1", got.Attempts)
	}

	// Migrate payments with billing's agent never draining: the cutover
	// waits on it until the page aborts it.
	holder.mu.Lock()
	holder.stuck = true
	holder.mu.Unlock()
	waitGatesOpen(t, ctx, p.cp, "payments")
	confirm("migrate", "payments", "")
	until("payments shows its cutover waiting on billing's agent", cell("payments", "state")+` === "MIGRATING" && `+
		hasEvent("payments", "waiting_on_agent"))
	if *updateScreenshots {
		screenshot(t, bctx, "topics-migrating")
	}
	confirm("abort", "payments", "billing still drains")
	until("payments shows the rollback", cell("payments", "state")+` === "PROXY" && `+hasEvent("payments", "aborted")+
		` && `+hasEvent("payments", "rolled_back")+
		` && document.querySelector('#events-table tr[data-topic="payments"][data-kind="aborted"]').textContent.includes("billing still drains")`)
	if got := waitState(t, ctx, p, "payments", migration.Proxy); got.Attempts != 1 {
		t.Fatalf("payments: %d attempts, want 1", got.Attempts)
	}
	evs, err := p.cp.Events(ctx, "payments", 0)
	if err != nil {
		t.Fatal(err)
	}
	var aborted *Event
	for i := range evs {
		if evs[i].Kind == EventAborted {
			aborted = &evs[i]
		}
	}
	if aborted == nil || aborted.Actor != "console-op" || aborted.Reason != "billing still drains" {
		t.Fatalf("payments' aborted event %+v, want actor console-op (the token's name) and the typed reason", aborted)
	}
	do("checking the page was not reloaded", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		mark, err := chromedp.Evaluate[bool](`window.consoleTestMark === true`)(ctx, tg)
		if err == nil && !mark {
			err = fmt.Errorf("the document was replaced: the page reloaded")
		}
		return err
	}))

	// Every page, signed in as the operator.
	waitLeases(t, ctx, p, a, holder) // at the rollback's version
	until("the agents page shows both agents at the current version", `document.querySelectorAll('#agents-table tr[data-node]').length === 2`+
		` && !document.querySelector('#agents-table').textContent.includes("(behind)")`)
	for _, page := range []string{"topics", "agents", "namespaces", "events"} {
		do("opening "+page, chromedp.Click(chromedp.CSS(`#tabs a[data-tab="`+page+`"]`)), chromedp.WaitVisible(chromedp.ID("page-"+page)))
		switch page {
		case "agents":
			until("agents show their namespaces and versions", `[...document.querySelectorAll('#agents-table tr[data-node]')].every(r => r.textContent.includes(" of "))`+
				` && document.querySelector('#agents-table tr[data-node="billing-5d2b"]').textContent.includes("team-b")`)
		case "namespaces":
			until("namespaces group the agents", `document.querySelectorAll('#namespaces section.namespace').length === 2`+
				` && document.querySelector('section[data-namespace="team-b"]').textContent.includes("billing-5d2b")`+
				` && !!document.querySelector('section[data-namespace="team-a"] tr[data-topic="orders"]')`)
		case "events":
			until("the events page lists the log", hasEvent("orders", "initiated")+` && `+hasEvent("payments", "rolled_back"))
		}
		screenshot(t, bctx, page)
	}
	do("back to topics", chromedp.Click(chromedp.CSS(`#tabs a[data-tab="topics"]`)))

	// A read-only token: the buttons are disabled, and a write forced
	// past them is refused by the API, which the page shows.
	signIn("view-secret", "console-view (read-only)")
	until("the topics are listed for the viewer", cell("payments", "state")+` === "PROXY"`)
	until("the viewer's buttons are disabled", `[...document.querySelectorAll('#topics-table button[data-op]')].every(b => b.disabled)`+
		` && document.querySelectorAll('#topics-table button[data-op]').length === 6`)
	do("forcing a migrate past the disabled button", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](`(() => { const b = document.querySelector('#topics-table tr[data-topic="payments"] button.migrate');`+
			` b.removeAttribute("disabled"); b.click(); return true })()`)(ctx, tg)
		return err
	}), chromedp.WaitVisible(chromedp.CSS("#confirm[open]")), chromedp.Click(chromedp.ID("confirm-ok")))
	until("the page shows the API's 403", `document.getElementById("message").textContent.includes("refused (403): console-view is read-only")`)
	if got, _ := p.cp.Topic("payments"); got.State != migration.Proxy || got.Attempts != 1 {
		t.Fatalf("payments is %s after %d attempts: the read-only migrate happened", got.State, got.Attempts)
	}
}

// waitGatesOpen waits until a migrate of topic would pass every cutover
// gate (a new topic's time lag is not measurable at once): the page's
// click must start the cutover, not meet a refusal.
func waitGatesOpen(t *testing.T, ctx context.Context, cp *ControlPlane, topic string) {
	t.Helper()
	wait.For(t, 30*time.Second, topic+"'s cutover gates open", func() string {
		refusals := cp.checkGates(ctx, topic)
		cp.mu.Lock()
		lag, _ := cp.checkLagLocked(topic)
		cp.mu.Unlock()
		if refusals = append(lag, refusals...); len(refusals) > 0 {
			return joinRefusals(refusals)
		}
		return ""
	})
}

// js quotes s as a JavaScript string.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func pageText(ctx context.Context, sel string) string {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, _ := chromedp.Run(sctx, chromedp.Evaluate[string](`(document.querySelector(`+js(sel)+`) || {}).textContent || ""`))
	return s
}

// screenshot takes the whole page as a PNG, checks it decodes, and with
// -update-screenshots writes it to docs/console-<name>.png.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	b, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot of %s: %v", name, err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot of %s is not a PNG: %v", name, err)
	}
	if r := img.Bounds(); r.Dx() < 800 || r.Dy() < 400 {
		t.Fatalf("screenshot of %s is %v", name, r)
	}
	if !*updateScreenshots {
		return
	}
	path := filepath.Join("..", "docs", "console-"+name+".png")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}
