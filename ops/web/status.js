// raftlock's status page: polls /status.json every two seconds and fills the tables. Every
// value goes in as text (textContent), never as markup: key names are the clients'.
"use strict";

const every = 2000;

function $(id) { return document.getElementById(id); }

function text(id, v) { $(id).textContent = String(v); }

function fmt(n, digits) {
  if (typeof n !== "number") return String(n);
  return digits === undefined ? n.toLocaleString("en-US") : n.toFixed(digits);
}

// row appends a row of cells to tbody; a cell is a value or {v, cls}.
function row(tbody, cells, attrs) {
  const tr = document.createElement("tr");
  for (const [k, v] of Object.entries(attrs || {})) tr.setAttribute(k, v);
  for (const c of cells) {
    const td = document.createElement("td");
    const cell = (c !== null && typeof c === "object") ? c : { v: c };
    td.textContent = cell.v === undefined ? "" : String(cell.v);
    if (cell.cls) td.className = cell.cls;
    tr.appendChild(td);
  }
  tbody.appendChild(tr);
  return tr;
}

function fill(tableId, rows) {
  const tbody = $(tableId).tBodies[0];
  tbody.replaceChildren();
  rows(tbody);
}

function render(s) {
  const n = s.node;
  text("node-id", n.id);
  const badge = $("node-state");
  badge.textContent = n.state + (n.state === "Leader" && !n.ready ? " (catching up)" : "");
  badge.className = "badge " + n.state;
  text("node-term", n.term);
  text("node-leader", n.leader_id || "none");
  text("node-commit", n.commit_index);
  text("node-applied", n.applied_index);
  text("node-lag", n.apply_lag);
  text("node-clients", n.clients);
  text("updated", new Date(s.time).toLocaleTimeString());

  $("error").hidden = !s.members_error;
  if (s.members_error) text("error", "members: " + s.members_error);
  fill("members", (tb) => {
    for (const m of s.members) {
      const role = m.error ? "?" : m.state + (m.leader ? " ★" : "");
      row(tb, [m.id, role, m.voter ? "voter" : "non-voter",
        m.error ? "" : m.term, m.error ? "" : { v: m.commit_index, cls: "num" },
        m.error ? "" : { v: m.applied_index, cls: "num" },
        m.error ? "" : { v: m.lag, cls: "num" + (m.lag > 1024 ? " lagging" : "") },
        m.client_addr, { v: m.error || "", cls: m.error ? "unreachable" : "" }],
      { "data-member": m.id });
    }
  });

  const groups = s.groups || [];
  $("groups-section").hidden = groups.length === 0;
  fill("groups", (tb) => {
    for (const g of groups) {
      const role = g.state + (g.state === "Leader" && !g.ready ? " (catching up)" : "");
      row(tb, [g.group, g.slots, role, g.leader_id || "none", g.term, { v: g.commit_index, cls: "num" },
        { v: g.applied_index, cls: "num" }, { v: g.apply_lag, cls: "num" + (g.apply_lag > 1024 ? " lagging" : "") },
        { v: g.keys, cls: "num" }], { "data-group": g.group });
    }
  });

  text("rate-window", fmt(s.rates.seconds, 0));
  for (const k of ["commands", "errors", "grants", "refusals", "commits"]) {
    text("rate-" + k, s.rates.seconds > 0 ? fmt(s.rates[k], 1) : "…");
  }

  fill("databases", (tb) => {
    for (const d of s.databases) {
      row(tb, [d.db, { v: d.keys, cls: "keys num" }, { v: d.leases, cls: "leases num" }, { v: d.waiters, cls: "waiters num" }],
        { "data-db": d.db });
    }
  });
  text("total-keys", s.totals.keys);
  text("total-leases", s.totals.leases);
  text("total-waiters", s.totals.waiters);

  text("leader-changes", s.leader_changes);
  fill("leaders", (tb) => {
    for (const c of (s.recent_leaders || []).slice().reverse()) {
      row(tb, [new Date(c.at).toLocaleTimeString(), c.leader_id || "(none)", c.term]);
    }
  });

  fill("latency", (tb) => {
    for (const l of s.latency.concat(s.raft)) {
      const q = (ms) => (l.window_count > 0 ? fmt(ms, 3) : "–");
      row(tb, [l.name, { v: fmt(l.count), cls: "num" }, { v: fmt(l.rate, 1), cls: "num" },
        { v: q(l.p50_ms), cls: "num" }, { v: q(l.p99_ms), cls: "num" }], { "data-family": l.name });
    }
  });

  text("contended-window", fmt(s.contended_window_seconds, 0));
  fill("contended", (tb) => {
    if (s.contended.length === 0) row(tb, ["", "no refusals", ""]);
    for (const k of s.contended) {
      row(tb, [k.db, { v: k.key, cls: "key" }, { v: k.err ? k.count + " ±" + k.err : k.count, cls: "num" }],
        { "data-key": k.key });
    }
  });

  fill("refused", (tb) => {
    for (const r of s.refused || []) row(tb, [r.reason, { v: r.count, cls: "num" }], { "data-reason": r.reason });
  });
  text("auth-failures", s.auth_failures);
  chart(s.lock_rates);
  document.body.dataset.loaded = "true";
}

// The lock chart's plot area in the SVG's viewBox (index.html draws its axes there).
const plot = { left: 44, right: 630, top: 10, bottom: 160 };

// niceCeil is the least of 1, 2 or 5 times a power of ten at or above v (1 for nothing).
function niceCeil(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const f of [1, 2, 5, 10]) if (f * p >= v) return f * p;
  return 10 * p;
}

// chart draws each series as steps: a point's rate holds from the point before it to its own
// end (the oldest from seconds_per_point before), placed by how long ago it ended.
function chart(r) {
  const names = ["grants", "refusals", "expiries", "handoffs"];
  const win = r.window_seconds;
  let top = 0;
  for (const k of names) for (const v of r[k]) top = Math.max(top, v);
  top = niceCeil(top);
  const x = (ago) => plot.right - (Math.min(ago, win) / win) * (plot.right - plot.left);
  const y = (v) => plot.bottom - (v / top) * (plot.bottom - plot.top);
  const ago = r.ago_seconds;
  for (const k of names) {
    const vs = r[k];
    let d = "";
    for (let i = 0; i < vs.length; i++) {
      const from = i === 0 ? ago[0] + r.seconds_per_point : ago[i - 1];
      d += (i === 0 ? "M" + x(from).toFixed(1) + "," : "V") + y(vs[i]).toFixed(1) + "H" + x(ago[i]).toFixed(1);
    }
    $("series-" + k).setAttribute("d", d);
    text("last-" + k, vs.length ? fmt(vs[vs.length - 1], 1) + "/s" : "…");
  }
  text("chart-ymax", fmt(top));
  text("chart-ymid", fmt(top / 2));
  text("chart-window", fmt(win / 60) + " min");
  const ticks = document.querySelectorAll("#lock-chart .xtick");
  ticks.forEach((t, i) => {
    const before = (win * (ticks.length - 1 - i)) / (ticks.length - 1);
    t.textContent = before === 0 ? "now" : "−" + fmt(before / 60) + " min";
  });
}

// The locks view: the query of the page shown (the next page keeps it whatever the inputs
// say since) and its cursor.
const locksView = { query: null, next: "0", page: 0 };

async function listLocks(query, cursor) {
  const args = new URLSearchParams({ db: query.db });
  if (query.match) args.set("match", query.match);
  if (cursor) args.set("cursor", cursor);
  $("locks-next").disabled = true;
  try {
    const res = await fetch("/locks.json?" + args.toString(), { cache: "no-store" });
    if (!res.ok) throw new Error(res.status + " " + (await res.text()).trim());
    const p = await res.json();
    locksView.query = query;
    locksView.next = p.next;
    locksView.page = cursor ? locksView.page + 1 : 1;
    renderLocks(p);
    $("locks-error").hidden = true;
  } catch (e) {
    $("locks-error").hidden = false;
    text("locks-error", "could not load /locks.json: " + e.message);
    $("locks-next").disabled = locksView.next === "0";
  }
}

// heldSince shows a grant time (Unix ms) as UTC date and time, "-" when not recorded.
function heldSince(ms) {
  if (!ms) return "-";
  return new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

function renderLocks(p) {
  fill("locks-holders", (tb) => {
    if (p.holders.length === 0) row(tb, ["", "none on this page", "", "", "", "", ""]);
    for (const h of p.holders) {
      row(tb, [{ v: h.key, cls: "key" }, h.kind, { v: h.owner, cls: "key" }, { v: h.token, cls: "num" },
        { v: h.pttl_ms < 0 ? "none" : fmt(h.pttl_ms), cls: "num" }, heldSince(h.since_ms), h.node || "-"],
        { "data-key": h.key });
    }
  });
  fill("locks-queues", (tb) => {
    if (p.queues.length === 0) row(tb, ["", "", "nobody waits on this page's keys", "", "", ""]);
    for (const q of p.queues) {
      q.waiters.forEach((w, i) => {
        row(tb, [{ v: i === 0 ? q.key : "", cls: "key" }, { v: i + 1, cls: "num" }, { v: w.owner, cls: "key" }, w.kind,
          { v: fmt(w.waiting_ms), cls: "num" }, w.node || "-"], { "data-key": q.key });
      });
    }
  });
  const more = p.next !== "0";
  text("locks-where", "db " + p.db + (p.match ? ", keys matching " + p.match : "") + ", page " + locksView.page +
    (more ? ", more to come" : ", the last"));
  $("locks-next").disabled = !more;
}

$("locks-form").addEventListener("submit", (e) => {
  e.preventDefault();
  listLocks({ db: $("locks-db").value.trim() || "0", match: $("locks-match").value }, "");
});
$("locks-next").addEventListener("click", () => {
  if (locksView.query && locksView.next !== "0") listLocks(locksView.query, locksView.next);
});

async function poll() {
  try {
    const res = await fetch("/status.json", { cache: "no-store" });
    if (!res.ok) throw new Error(res.status + " " + res.statusText);
    render(await res.json());
  } catch (e) {
    $("error").hidden = false;
    text("error", "could not load /status.json: " + e.message);
  }
  setTimeout(poll, every);
}

poll();
