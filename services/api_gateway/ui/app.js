// The NRT dashboard: plain JavaScript, no framework, no CDN.
// It reads /v1/cluster (polled), /v1/events/stream (server-sent events, read with fetch so the
// API key can go in the Authorization header) and /metrics when the gateway serves it.
"use strict";

const KEY_STORE = "nrt.apiKey";
const POLL_MS = 1000;
const FEED_MAX = 300;
const ROUTED_MAX = 20;

const $ = (id) => document.getElementById(id);
let feedAbort = null;
let pollTimer = null;
const feedTypes = new Set();
const feedEvents = []; // newest first

function apiKey() { return localStorage.getItem(KEY_STORE) || ""; }
function authHeaders(key) { return key ? { Authorization: `Bearer ${key}` } : {}; }

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function row(cells, attrs) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c);
  for (const [k, v] of Object.entries(attrs || {})) tr.setAttribute(k, v);
  return tr;
}

function size(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n) || 0, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  return s < 90 ? `${s.toFixed(0)}s` : s < 5400 ? `${(s / 60).toFixed(0)}m` : `${(s / 3600).toFixed(1)}h`;
}

function problem(text) {
  $("problem").hidden = !text;
  $("problem").textContent = text || "";
}

async function errorText(resp) {
  try { return `${resp.status}: ${(await resp.json()).error.message}`; } catch { return `${resp.status} ${resp.statusText}`; }
}

// -- the cluster state ------------------------------------------------------------------------

function budgets(text) {
  // the manifest's resources (YAML): the two budget lines, as written
  const out = {};
  for (const key of ["gpu_budget", "ram_budget"]) {
    const m = (text || "").match(new RegExp(`^\\s*${key}:\\s*["']?([^"'#\\n]+)`, "m"));
    if (m) out[key] = m[1].trim();
  }
  return out;
}

function renderState(state, source) {
  $("cluster-name").textContent = state.cluster || "(no manifest yet)";
  $("manifest-version").textContent = `v${state.manifest_version}`;
  $("manifest-version-2").textContent = `v${state.manifest_version}`;
  $("manifest-digest").textContent = state.manifest_digest ? `sha256 ${state.manifest_digest.slice(0, 12)}` : "";
  if ($("manifest-text").textContent !== (state.manifest_text || "")) $("manifest-text").textContent = state.manifest_text || "";
  $("state-source").textContent = source || "?";
  const inFlight = Object.keys(state.in_flight || {}).length;
  $("drain").hidden = !state.draining;
  $("drain").textContent = state.draining ? `DRAINING to v${state.drain_to_version}: ${inFlight} in flight` : "";
  $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;

  const byWorker = {};
  const held = { resident: 0, standby: 0 };
  for (const model of Object.values(state.models || {})) {
    for (const [wid, p] of Object.entries(model.placements || {})) {
      (byWorker[wid] = byWorker[wid] || []).push({ model: model.model_id, tier: p.tier, bytes: p.bytes_held });
      if (p.tier in held) held[p.tier] += p.bytes_held;
    }
  }
  const rows = [];
  const workers = Object.values(state.workers || {}).sort((a, b) => a.worker_id.localeCompare(b.worker_id));
  for (const w of workers) {
    const models = (byWorker[w.worker_id] || []).sort((a, b) => a.model.localeCompare(b.model));
    const wstate = w.alive ? "up" : "lost";
    if (!models.length) rows.push(row([cell(w.worker_id), cell(w.role), cell(wstate, w.alive ? "" : "lost"), cell("-"), cell("-"), cell("")], { "data-worker": w.worker_id }));
    for (const m of models) {
      rows.push(row(
        [cell(w.worker_id), cell(w.role), cell(wstate, w.alive ? "" : "lost"), cell(m.model), cell(m.tier, `tier-${m.tier}`), cell(size(m.bytes), "num")],
        { "data-worker": w.worker_id, "data-model": m.model, "data-tier": m.tier },
      ));
    }
  }
  $("workers").replaceChildren(...rows);
  const b = budgets(state.manifest_text);
  $("budgets").textContent =
    `resident ${size(held.resident)} of gpu_budget ${b.gpu_budget || "(none)"}; ` +
    `standby ${size(held.standby)} of ram_budget ${b.ram_budget || "(none)"}`;

  const sessions = Object.values(state.sessions || {}).sort((a, b) => b.last_used_at.localeCompare(a.last_used_at));
  $("sessions").replaceChildren(...sessions.map((s) => row(
    [cell(s.session_id), cell(s.model_id), cell(s.worker_id), cell(age(s.opened_at), "num"), cell(String(s.turns), "num"),
     cell(s.kv_evicted ? "evicted" : size(s.kv_bytes), "num")],
    { "data-session": s.session_id },
  )));
}

async function poll() {
  const key = apiKey();
  try {
    const resp = await fetch("/v1/cluster", { headers: authHeaders(key) });
    if (!resp.ok) { problem(`GET /v1/cluster: ${await errorText(resp)}`); return; }
    problem("");
    renderState(await resp.json(), resp.headers.get("X-NRT-State-Source"));
  } catch (err) {
    problem(`GET /v1/cluster: ${err}`);
  } finally {
    pollTimer = setTimeout(poll, POLL_MS);
  }
}

// -- the event feed ---------------------------------------------------------------------------

function feedLine(ev) {
  const li = document.createElement("li");
  li.dataset.type = ev.type;
  const t = document.createElement("span");
  t.className = "type";
  t.textContent = ev.type;
  const rest = Object.entries(ev).filter(([k]) => !["type", "event_id", "text"].includes(k));
  li.append(t, document.createTextNode(rest.map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(" ")));
  li.title = JSON.stringify(ev, null, 1);
  return li;
}

function renderFeed() {
  const only = $("feed-filter").value;
  const shown = feedEvents.filter((ev) => !only || ev.type === only).slice(0, FEED_MAX);
  $("feed").replaceChildren(...shown.map(feedLine));
  const routed = feedEvents.filter((ev) => ev.type === "RequestRouted").slice(0, ROUTED_MAX);
  $("routing").replaceChildren(...routed.map((ev) => row(
    [cell(new Date(ev.occurred_at).toLocaleTimeString()), cell(ev.request_id.slice(0, 12)), cell(ev.intent ?? "(none)"),
     cell(ev.confidence.toFixed(3), "num"), cell(ev.target), cell(`${ev.latency_ms.toFixed(1)} ms`, "num")],
    { "data-request": ev.request_id, "data-target": ev.target },
  )));
}

function addEvent(ev) {
  feedEvents.unshift(ev);
  if (feedEvents.length > FEED_MAX * 2) feedEvents.length = FEED_MAX;
  if (!feedTypes.has(ev.type)) {
    feedTypes.add(ev.type);
    const opt = document.createElement("option");
    opt.value = opt.textContent = ev.type;
    $("feed-filter").appendChild(opt);
  }
}

async function follow() {
  if (feedAbort) feedAbort.abort();
  feedAbort = new AbortController();
  const signal = feedAbort.signal;
  while (!signal.aborted) {
    try {
      const resp = await fetch("/v1/events/stream?last=200", { headers: authHeaders(apiKey()), signal });
      if (!resp.ok) { $("feed-state").textContent = `not following: ${await errorText(resp)}`; }
      else {
        $("feed-state").textContent = "following";
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        let pending = null; // frames arriving together are rendered once
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const frame = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
            if (data) { addEvent(JSON.parse(data)); pending = true; }
          }
          if (pending) { renderFeed(); pending = null; }
        }
      }
    } catch (err) {
      if (signal.aborted) return;
      $("feed-state").textContent = `reconnecting (${err})`;
    }
    await new Promise((r) => setTimeout(r, 2000));
  }
}

// -- metrics (only when the gateway serves /metrics) -------------------------------------------

async function metrics() {
  try {
    const resp = await fetch("/metrics", { headers: authHeaders(apiKey()) });
    if (resp.ok) {
      const lines = (await resp.text()).split("\n").filter((l) => l.startsWith("nrt_"));
      $("metrics").classList.remove("muted");
      $("metrics").textContent = lines.slice(0, 40).join("\n") || "(no nrt_ samples yet)";
    }
  } catch { /* not served: keep the note */ }
  setTimeout(metrics, 5000);
}

// -- the key and the admin action --------------------------------------------------------------

function connect() {
  clearTimeout(pollTimer);
  feedEvents.length = 0;
  renderFeed();
  poll();
  follow();
}

$("key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const key = $("api-key").value.trim();
  if (key) localStorage.setItem(KEY_STORE, key);
  $("api-key").value = "";
  connect();
});
$("forget-key").addEventListener("click", () => { localStorage.removeItem(KEY_STORE); if (feedAbort) feedAbort.abort(); problem("key forgotten"); });
$("feed-filter").addEventListener("change", renderFeed);
$("swap").addEventListener("toggle", () => { if (!$("swap-text").value) $("swap-text").value = $("manifest-text").textContent; });
$("swap-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  $("swap-result").textContent = "applying...";
  const resp = await fetch("/v1/manifest", {
    method: "PUT", body: $("swap-text").value,
    headers: { ...authHeaders($("admin-key").value.trim()), "Content-Type": "application/yaml" },
  });
  $("swap-result").textContent = resp.ok ? JSON.stringify(await resp.json(), null, 2) : await errorText(resp);
});

if (apiKey()) connect(); else problem("enter an API key to connect (`nrt up` prints its keys)");
metrics();
