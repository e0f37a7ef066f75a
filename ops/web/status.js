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
  document.body.dataset.loaded = "true";
}

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
