// Baton's web console: reads the control plane's HTTP API with the token the
// operator typed (kept in sessionStorage, so it ends with the tab) and
// follows its event log. Everything it shows is text set with textContent:
// topic names, reasons and actors come from outside and are never parsed as
// HTML. Whatever the page enables, the API checks every call's role.
"use strict";

const tokenKey = "baton.token";
const pollMs = 3000;
const maxEvents = 2000;

const S = {
  token: sessionStorage.getItem(tokenKey) || "",
  caller: null, // {name, role, credentials} from GET /v1/whoami
  topics: [],
  agents: [],
  overview: null,
  fetchedAt: 0, // Date.now() when overview arrived
  samples: {}, // topic -> {copied, at} of the last read, for the copy rate
  rates: {}, // topic -> offsets/s
  lastEvent: {}, // topic -> its newest event
  events: [],
  lastSeq: 0,
  stream: null, // AbortController of the event stream
  poller: 0,
  refreshSoon: 0,
};

const $ = (id) => document.getElementById(id);

// el builds an element: attrs sets attributes (class, data-*, title,
// disabled), children are nodes or strings (as text).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v === null || v === undefined) continue;
    e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers() {
  const h = { "Content-Type": "application/json" };
  // A control plane without tokens refuses any bearer token: send one
  // only when the operator gave one.
  if (S.token) h.Authorization = "Bearer " + S.token;
  return h;
}

async function failure(resp) {
  let msg = resp.status + " " + resp.statusText;
  try {
    const body = await resp.json();
    if (body && body.error) msg = body.error;
  } catch (_) {
    // not the API's JSON: keep the status line
  }
  return new APIError(resp.status, msg);
}

async function api(method, path, body) {
  const resp = await fetch(path, {
    method,
    headers: headers(),
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  if (!resp.ok) throw await failure(resp);
  return resp.json();
}

// say shows a message under the tabs: kind "error" or "ok".
function say(kind, text) {
  const m = $("message");
  m.className = "message " + kind;
  m.textContent = text;
  m.hidden = !text;
}

// ---- formatting

function duration(ns) {
  if (ns === undefined || ns === null) return "";
  const ms = ns / 1e6;
  if (ms < 1) return "0ms";
  if (ms < 1000) return Math.round(ms) + "ms";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(1) + "s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + "m" + Math.round(s % 60) + "s";
  return Math.floor(m / 60) + "h" + (m % 60) + "m";
}

// serverNow is the control plane's clock now, from its last overview:
// leases and deadlines are on its clock, not the browser's.
function serverNow() {
  if (!S.overview) return Date.now();
  return Date.parse(S.overview.at) + (Date.now() - S.fetchedAt);
}

function ago(iso) {
  const t = Date.parse(iso);
  if (!t || t < 0) return "";
  const d = serverNow() - t;
  return d >= 0 ? duration(d * 1e6) + " ago" : "in " + duration(-d * 1e6);
}

function clock(iso) {
  const d = new Date(iso);
  return isNaN(d) ? "" : d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

// ---- sign-in

function operator() {
  return S.caller && S.caller.role === "operator";
}

function showCaller() {
  const c = $("caller");
  c.className = "caller";
  if (!S.caller) {
    c.textContent = "not signed in";
    return;
  }
  if (!S.caller.credentials) {
    c.textContent = "this API takes no credentials: anyone who reaches it may migrate and abort";
    c.classList.add("warn");
  } else if (operator()) {
    c.textContent = S.caller.name + " (operator)";
  } else {
    c.textContent = S.caller.name + " (" + S.caller.role + "): migrate and abort need the operator role";
    c.classList.add("readonly");
  }
}

async function signIn() {
  stop();
  S.caller = null;
  showCaller();
  try {
    S.caller = await api("GET", "/v1/whoami");
  } catch (e) {
    say("error", e.status === 401 ? "sign-in refused: " + e.message : "the API is out of reach: " + e.message);
    renderAll();
    return;
  }
  say("", "");
  showCaller();
  await refresh();
  S.poller = setInterval(refresh, pollMs);
  follow();
}

function stop() {
  clearInterval(S.poller);
  S.poller = 0;
  if (S.stream) S.stream.abort();
  S.stream = null;
  S.events = [];
  S.lastSeq = 0;
  S.lastEvent = {};
  setStream("off");
}

// ---- reading

async function refresh() {
  try {
    const [topics, overview, agents] = await Promise.all([
      api("GET", "/v1/topics"),
      api("GET", "/v1/overview"),
      api("GET", "/v1/agents"),
    ]);
    S.topics = topics || [];
    S.agents = agents || [];
    takeOverview(overview);
  } catch (e) {
    say("error", "reading the API: " + e.message);
  }
  renderAll();
}

// takeOverview keeps the copy rate: offsets copied between two reads at
// least a second apart, over the control plane's time between them.
function takeOverview(o) {
  S.overview = o;
  S.fetchedAt = Date.now();
  const at = Date.parse(o.at);
  for (const t of o.topics || []) {
    if (t.copied === undefined) {
      delete S.samples[t.topic];
      delete S.rates[t.topic];
      continue;
    }
    const prev = S.samples[t.topic];
    if (!prev) {
      S.samples[t.topic] = { copied: t.copied, at };
    } else if (at - prev.at >= 1000) {
      S.rates[t.topic] = Math.max(0, (t.copied - prev.copied) / ((at - prev.at) / 1000));
      S.samples[t.topic] = { copied: t.copied, at };
    }
  }
}

function setStream(what) {
  const s = $("stream");
  s.textContent = "stream: " + what;
  s.className = "stream " + what.split(" ")[0];
}

// follow reads GET /v1/events?follow=1 (one JSON event a line) with the
// token, from the last event seen; it reconnects after a lost stream.
async function follow() {
  const ctl = new AbortController();
  S.stream = ctl;
  setStream("connecting");
  try {
    const resp = await fetch("/v1/events?follow=1&after=" + S.lastSeq, { headers: headers(), signal: ctl.signal, cache: "no-store" });
    if (!resp.ok) throw await failure(resp);
    setStream("live");
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (line) onEvent(JSON.parse(line));
      }
    }
  } catch (e) {
    if (ctl.signal.aborted) return;
    if (e.status === 401 || e.status === 403) {
      setStream("refused");
      say("error", "the event stream was refused: " + e.message);
      return;
    }
  }
  if (ctl.signal.aborted || S.stream !== ctl) return;
  setStream("lost, reconnecting");
  setTimeout(() => {
    if (S.stream === ctl) follow();
  }, 2000);
}

function onEvent(e) {
  if (e.seq <= S.lastSeq) return;
  S.lastSeq = e.seq;
  S.events.push(e);
  if (S.events.length > maxEvents) S.events.splice(0, S.events.length - maxEvents);
  if (e.topic) S.lastEvent[e.topic] = e;
  // A transition is shown at once; the next read brings the rest.
  if (e.to) {
    const t = S.topics.find((x) => x.name === e.topic);
    if (t) {
      t.state = e.to;
      if (e.to !== "MIGRATING") delete t.cutover;
    }
  }
  renderAll();
  clearTimeout(S.refreshSoon);
  S.refreshSoon = setTimeout(refresh, 250);
}

// ---- actions

let pending = null; // {op, topic}

function ask(op, topic) {
  pending = { op, topic };
  const migrate = op === "migrate";
  $("confirm-title").textContent = (migrate ? "Migrate " : "Abort the cutover of ") + topic + "?";
  $("confirm-text").textContent = migrate
    ? "Starts the cutover: the agents hold " + topic + "'s producers while they drain, the replication catches up, " +
      "and then the destination takes the writes. Once COMPLETE it cannot be undone."
    : "Rolls " + topic + " back to PROXY: producers go on writing the source through the agents, and the next " +
      "migrate starts a new attempt.";
  $("confirm-reason-label").hidden = migrate;
  $("confirm-reason").value = "";
  $("confirm-ok").textContent = migrate ? "Migrate " + topic : "Abort " + topic;
  $("confirm").showModal();
}

async function act(op, topic, reason) {
  const body = { actor: "console" };
  if (reason) body.reason = reason;
  say("ok", op + " " + topic + ": sent");
  try {
    const t = await api("POST", "/v1/topics/" + encodeURIComponent(topic) + "/" + op, body);
    say("ok", op + " " + topic + ": " + t.state + (t.attempts ? " (attempt " + t.attempts + ")" : ""));
  } catch (e) {
    say("error", op + " " + topic + " refused (" + e.status + "): " + e.message);
  }
  refresh();
}

// ---- rendering

// fill replaces tbody's rows with build(item) for each item, unless the
// rows' text would be the same: a button under the pointer is not
// swapped for an equal one every few seconds.
function fill(tbody, items, sig, build) {
  const key = JSON.stringify(items.map(sig)) + (operator() ? "1" : "0");
  if (tbody.dataset.sig === key) return;
  tbody.dataset.sig = key;
  tbody.replaceChildren(...items.map(build));
}

// fillRows is fill for a table whose rows are items with a data-topic: a
// row whose text changed (lag and rate change at every poll) is updated in
// place, cell by cell, and its buttons are kept, only their disabled state
// and title updated, so that a click landing while the row updates still
// reaches its button. Rows are added, removed and reordered as items are.
function fillRows(tbody, items, sig, build) {
  const key = (operator() ? "1" : "0");
  const old = new Map();
  for (const tr of tbody.rows) if (tr.dataset.topic !== undefined) old.set(tr.dataset.topic, tr);
  const rows = items.map((item) => {
    const next = build(item);
    const s = JSON.stringify(sig(item)) + key;
    const tr = old.get(next.dataset.topic);
    if (!tr) {
      next.dataset.sig = s;
      return next;
    }
    old.delete(next.dataset.topic);
    if (tr.dataset.sig === s) return tr;
    tr.dataset.sig = s;
    [...next.cells].forEach((td, i) => {
      const cur = tr.cells[i];
      if (cur.querySelector("button")) {
        const bs = cur.querySelectorAll("button");
        next.querySelectorAll("td")[i].querySelectorAll("button").forEach((b, j) => {
          bs[j].disabled = b.disabled;
          bs[j].title = b.title;
        });
      } else if (cur.innerHTML !== td.innerHTML) {
        cur.replaceChildren(...td.childNodes);
      }
    });
    return tr;
  });
  for (const tr of old.values()) tr.remove();
  const same = rows.length === tbody.rows.length && rows.every((tr, i) => tbody.rows[i] === tr);
  if (!same) tbody.replaceChildren(...rows);
}

function progressOf(name) {
  return ((S.overview && S.overview.topics) || []).find((p) => p.topic === name) || {};
}

function renderTopics() {
  const canOp = operator();
  const why = S.caller ? "needs the operator role" : "sign in first";
  fillRows(
    $("topics-table").tBodies[0],
    S.topics,
    (t) => {
      const p = progressOf(t.name);
      const ev = S.lastEvent[t.name];
      return [t.name, t.state, t.cutover, t.attempts, t.version, p.lag, p.lagError, S.rates[t.name], ev && ev.seq];
    },
    (t) => {
      const p = progressOf(t.name);
      const ev = S.lastEvent[t.name];
      const co = t.cutover;
      let lag = "";
      if (t.state === "COMPLETE") lag = "—";
      else if (p.lagError) lag = el("span", { class: "muted", title: p.lagError }, "not known yet");
      else if (p.lag !== undefined) lag = duration(p.lag);
      else lag = duration(0);
      const rate = S.rates[t.name];
      const migrate = el("button", {
        class: "migrate",
        "data-op": "migrate",
        disabled: !canOp || t.state !== "PROXY",
        title: !canOp ? why : t.state !== "PROXY" ? "a cutover starts from PROXY" : "start the cutover",
      }, "Migrate");
      const abort = el("button", {
        class: "abort danger",
        "data-op": "abort",
        disabled: !canOp || t.state !== "MIGRATING",
        title: !canOp ? why : t.state !== "MIGRATING" ? "only a running cutover can be aborted" : "roll back to PROXY",
      }, "Abort");
      return el("tr", { "data-topic": t.name },
        el("td", { class: "name" }, t.name),
        el("td", { class: "state" }, el("span", { class: "badge " + t.state }, t.state)),
        el("td", { class: "cutover" }, co ? "attempt " + co.attempt + ", step " + co.step + ", deadline " + clock(co.deadline) :
          t.attempts ? t.attempts + " attempt" + (t.attempts > 1 ? "s" : "") : ""),
        el("td", { class: "lag" }, lag),
        el("td", { class: "rate" }, t.state === "COMPLETE" || rate === undefined ? "—" : rate.toFixed(1) + " offsets/s"),
        el("td", { class: "version" }, t.version),
        el("td", { class: "last-event" }, ev ? el("span", { title: ev.reason || "" }, ev.kind + (ev.reason ? ": " + ev.reason : "")) : ""),
        el("td", { class: "actions" }, migrate, " ", abort),
      );
    },
  );
  if (!S.topics.length) $("topics-table").tBodies[0].replaceChildren(el("tr", {}, el("td", { colspan: 8, class: "muted" }, S.caller ? "no managed topics" : "sign in to see the topics")));
}

function inFlight(a) {
  return Object.values(a.topics || {}).reduce((n, d) => n + (d.inFlight || 0), 0);
}

function renderAgents() {
  const current = S.overview ? S.overview.version : 0;
  fill(
    $("agents-table").tBodies[0],
    S.agents,
    (a) => [a.node, a.namespace, a.workload, a.leaseValid, a.expiresAt, a.ackedVersion, current, a.xds && a.xds.connected, a.lastHeartbeat, inFlight(a), a.refused],
    (a) => {
      const behind = a.ackedVersion < current;
      return el("tr", { "data-node": a.node },
        el("td", {}, a.node),
        el("td", {}, a.namespace || el("span", { class: "muted" }, "(none)")),
        el("td", {}, a.workload),
        el("td", { class: a.leaseValid ? "ok" : "bad", title: a.refused || "" },
          a.leaseValid ? "valid, ends " + ago(a.expiresAt) : a.refused ? "refused: " + a.refused : "expired " + ago(a.expiresAt)),
        el("td", { class: behind ? "bad" : "ok" }, a.ackedVersion + " of " + current + (behind ? " (behind)" : "")),
        el("td", {}, a.xds && a.xds.connected ? "connected" : "not connected", a.xds && a.xds.nacks ? ", " + a.xds.nacks + " NACKs" : ""),
        el("td", {}, ago(a.lastHeartbeat)),
        el("td", {}, inFlight(a)),
      );
    },
  );
  if (!S.agents.length) $("agents-table").tBodies[0].replaceChildren(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "no agents have reported")));
}

function shadowFeatures(t, ns) {
  const target = (t.target && t.target.namespaces) || [];
  if (target.length && !target.includes(ns)) return "";
  const s = t.shadow || {};
  const on = [];
  if (s.latencyEmulation) on.push("latency emulation");
  if (s.authCheck) on.push(s.authEnforce ? "auth enforced" : "auth check");
  return on.join(", ");
}

function renderNamespaces() {
  const current = S.overview ? S.overview.version : 0;
  const byNS = new Map();
  for (const a of S.agents) {
    const ns = a.namespace || "";
    if (!byNS.has(ns)) byNS.set(ns, []);
    byNS.get(ns).push(a);
  }
  const names = [...byNS.keys()].sort();
  const sig = JSON.stringify([current, names.map((ns) => byNS.get(ns).map((a) => [a.node, a.leaseValid, a.ackedVersion, a.topics])), S.topics.map((t) => [t.name, t.state, t.shadow, t.target])]);
  const box = $("namespaces");
  if (box.dataset.sig === sig) return;
  box.dataset.sig = sig;
  if (!names.length) {
    box.replaceChildren(el("p", { class: "muted" }, "no agents have reported"));
    return;
  }
  box.replaceChildren(...names.map((ns) => {
    const agents = byNS.get(ns);
    const leased = agents.filter((a) => a.leaseValid).length;
    const minAcked = Math.min(...agents.map((a) => a.ackedVersion));
    const flight = {};
    for (const a of agents) for (const [topic, d] of Object.entries(a.topics || {})) flight[topic] = (flight[topic] || 0) + (d.inFlight || 0);
    const routed = Object.keys(flight).sort();
    const topics = S.topics.filter((t) => routed.includes(t.name));
    return el("section", { class: "namespace", "data-namespace": ns },
      el("h2", {}, ns || "(no namespace)"),
      el("p", { class: "summary" },
        agents.length + " agent" + (agents.length > 1 ? "s" : "") + ", " + leased + " with a valid lease; ",
        el("span", { class: minAcked < current ? "bad" : "ok" }, "acked version " + minAcked + (minAcked < current ? " (behind " + current + ")" : " (current)"))),
      el("p", { class: "agents" }, "agents: " + agents.map((a) => a.node + (a.workload ? " (" + a.workload + ")" : "")).join(", ")),
      topics.length
        ? el("table", {},
          el("thead", {}, el("tr", {}, el("th", {}, "topic"), el("th", {}, "state"), el("th", {}, "in flight"), el("th", {}, "shadow features"))),
          el("tbody", {}, ...topics.map((t) => el("tr", { "data-topic": t.name },
            el("td", {}, t.name),
            el("td", {}, el("span", { class: "badge " + t.state }, t.state)),
            el("td", {}, flight[t.name]),
            el("td", {}, shadowFeatures(t, ns))))))
        : el("p", { class: "muted" }, "its agents hold no managed topic's route"),
    );
  }));
}

function renderEvents() {
  const f = $("events-filter").value.trim();
  const shown = S.events.filter((e) => !f || e.topic === f).slice(-500).reverse();
  fill(
    $("events-table").tBodies[0],
    shown,
    (e) => e.seq,
    (e) => el("tr", { "data-seq": e.seq, "data-kind": e.kind, "data-topic": e.topic || "", class: "kind-" + e.kind },
      el("td", {}, e.seq),
      el("td", {}, clock(e.time)),
      el("td", {}, e.topic),
      el("td", { class: "kind" }, e.kind),
      el("td", {}, e.to ? (e.from ? e.from + " → " : "") + e.to : ""),
      el("td", {}, e.actor),
      el("td", { class: "reason" }, [e.agent, e.reason].filter(Boolean).join(": "))),
  );
}

function renderAll() {
  $("version").textContent = S.overview ? "config version " + S.overview.version : "";
  renderTopics();
  renderAgents();
  renderNamespaces();
  renderEvents();
}

// ---- tabs

function showTab() {
  const tab = (location.hash || "#topics").slice(1);
  for (const p of document.querySelectorAll(".page")) p.hidden = p.id !== "page-" + tab;
  for (const a of document.querySelectorAll("#tabs a")) a.classList.toggle("active", a.dataset.tab === tab);
}

// ---- wiring

document.addEventListener("DOMContentLoaded", () => {
  window.addEventListener("hashchange", showTab);
  showTab();
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    S.token = $("token").value.trim();
    $("token").value = "";
    if (S.token) sessionStorage.setItem(tokenKey, S.token);
    else sessionStorage.removeItem(tokenKey);
    signIn();
  });
  $("token-forget").addEventListener("click", () => {
    S.token = "";
    sessionStorage.removeItem(tokenKey);
    signIn();
  });
  $("topics-table").addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-op]");
    if (!b || b.disabled) return;
    ask(b.dataset.op, b.closest("tr").dataset.topic);
  });
  $("confirm-cancel").addEventListener("click", () => {
    pending = null;
    $("confirm").close();
  });
  $("confirm-ok").addEventListener("click", () => {
    const p = pending;
    pending = null;
    $("confirm").close();
    if (p) act(p.op, p.topic, $("confirm-reason").value.trim());
  });
  $("events-filter").addEventListener("input", renderEvents);
  signIn();
});
