#include "server/dashboard.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include "sqlq/text.h"

namespace sqlq::server {

namespace {

// Plain HTML and JavaScript, no build step. Everything the API returns is
// put into the page with textContent, never as HTML, so a queue name or a
// payload cannot inject markup.
constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sqlq dashboard</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.3em; margin: 0 0 .6em; }
  h2 { font-size: 1.1em; margin: 1.2em 0 .4em; }
  table { border-collapse: collapse; }
  th, td { padding: .25em .7em; border-bottom: 1px solid #ddd; text-align: right; }
  th:first-child, td:first-child { text-align: left; }
  td.payload, td.error { text-align: left; font-family: monospace; max-width: 30em;
                         overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  #status.error, .message.error { color: #b00020; }
  .message { margin: .4em 0; }
  .bar { display: flex; gap: .6em; align-items: center; flex-wrap: wrap; }
  .server { margin: .6em 0; color: #555; }
  button { cursor: pointer; }
</style>
</head>
<body>
<h1>sqlq dashboard</h1>
<form id="token-form" class="bar">
  <label for="token">Token</label>
  <input id="token" type="password" autocomplete="off" size="32"
         placeholder="bearer token (none without --tokens)">
  <button id="token-save" type="submit">Use token</button>
  <button id="token-clear" type="button">Forget</button>
  <span id="status">loading…</span>
</form>
<div class="server">
  Waiting consumers: <b id="waiting">–</b> ·
  Connections: <b id="connections">–</b> ·
  Updated: <span id="updated">never</span>
</div>
<table id="queues">
  <thead><tr>
    <th>Queue</th><th>Ready</th><th>Delayed</th><th>Leased</th><th>Dead</th>
    <th>Archived</th><th>Oldest ready</th><th>Sends/s</th><th>Claims/s</th>
    <th>Acks/s</th><th></th>
  </tr></thead>
  <tbody></tbody>
</table>
<p id="empty" hidden>No queues.</p>
<section id="dead" hidden>
  <h2>Dead letters of <span id="dead-queue"></span></h2>
  <div class="bar">
    <button id="dead-refresh" type="button">Refresh</button>
    <button id="redrive-selected" type="button">Redrive selected</button>
    <button id="redrive-all" type="button">Redrive all</button>
    <button id="dead-close" type="button">Close</button>
  </div>
  <p id="dead-message" class="message"></p>
  <table id="dead-letters">
    <thead><tr>
      <th><input id="dead-select-all" type="checkbox" title="select all"></th>
      <th>Id</th><th>Attempts</th><th>Last error</th><th>Payload</th><th>Died at</th>
    </tr></thead>
    <tbody></tbody>
  </table>
</section>
<script>
"use strict";
const REFRESH_MS = 1000;
const FIELDS = ["ready", "delayed", "leased", "dead", "archived"];
const RATES = [["sends", "sends_per_s"], ["claims", "claims_per_s"],
               ["acks", "acks_per_s"]];
const $ = (id) => document.getElementById(id);
let previous = new Map();  // queue -> {at, stats}: for the rates
let deadQueue = null;
let refreshing = false;  // one refresh at a time

function token() { return sessionStorage.getItem("sqlq_token") || ""; }

async function api(method, path, body) {
  const headers = {};
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {method, headers,
      body: body === undefined ? undefined : JSON.stringify(body)});
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* /metrics is text */ }
  if (!res.ok) {
    const msg = json && json.error ? json.error.code + ": " + json.error.message
                                   : "HTTP " + res.status;
    throw new Error(msg);
  }
  return json === null ? text : json;
}

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

function cell(tr, text, cls, field) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  if (field) td.dataset.field = field;
  tr.appendChild(td);
  return td;
}

function age(ms) {
  if (!ms) return "–";
  if (ms < 1000) return ms + " ms";
  if (ms < 120000) return (ms / 1000).toFixed(1) + " s";
  return Math.round(ms / 60000) + " min";
}

function gauge(metrics, name) {
  const m = metrics.match(new RegExp("^" + name + " (\\S+)$", "m"));
  return m ? m[1] : "–";
}

async function refresh() {
  if (refreshing) return;
  refreshing = true;
  try {
    const list = await api("GET", "/v1/queues");
    const now = performance.now();
    const rows = await Promise.all(list.queues.map(async (q) => {
      try {
        return {name: q.name,
                stats: (await api("GET", "/v1/queues/" +
                                  encodeURIComponent(q.name))).stats};
      } catch (e) {
        return null;  // dropped since the listing
      }
    }));
    const body = $("queues").tBodies[0];
    body.replaceChildren();
    const seen = new Map();
    for (const r of rows) {
      if (r === null) continue;
      const tr = document.createElement("tr");
      tr.dataset.queue = r.name;
      cell(tr, r.name, "", "name");
      for (const f of FIELDS) cell(tr, String(r.stats[f]), "", f);
      cell(tr, age(r.stats.oldest_ready_age_ms), "", "oldest_ready_age");
      const prev = previous.get(r.name);
      for (const [counter, field] of RATES) {
        let text = "–";
        if (prev) {
          const secs = (now - prev.at) / 1000;
          const rate = Math.max(0, r.stats[counter] - prev.stats[counter]) / secs;
          text = rate >= 10 ? String(Math.round(rate)) : rate.toFixed(1);
        }
        cell(tr, text, "", field);
      }
      const td = document.createElement("td");
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = "Dead letters";
      b.className = "show-dead";
      b.addEventListener("click", () => openDead(r.name));
      td.appendChild(b);
      tr.appendChild(td);
      body.appendChild(tr);
      seen.set(r.name, {at: now, stats: r.stats});
    }
    previous = seen;
    $("empty").hidden = seen.size > 0;
    // The server's gauges need a token with a metrics or admin grant; a
    // worker's token still shows its queues.
    let metrics = null;
    try { metrics = await api("GET", "/metrics"); } catch (e) { /* 403 */ }
    for (const [id, name] of [["waiting", "sqlq_server_waiting_consumers"],
                              ["connections", "sqlq_server_connections"]]) {
      $(id).textContent = metrics === null ? "–" : gauge(metrics, name);
      $(id).title = metrics === null ? "needs a metrics or admin token" : "";
    }
    $("updated").textContent = new Date().toLocaleTimeString();
    setStatus("live", false);
  } catch (e) {
    setStatus(e.message, true);
  } finally {
    refreshing = false;
  }
}

async function openDead(name) {
  deadQueue = name;
  $("dead-queue").textContent = name;
  $("dead").hidden = false;
  $("dead-message").textContent = "";
  await loadDead();
}

function deadMessage(text, isError) {
  $("dead-message").textContent = text;
  $("dead-message").className = "message" + (isError ? " error" : "");
}

async function loadDead() {
  const body = $("dead-letters").tBodies[0];
  body.replaceChildren();
  $("dead-select-all").checked = false;
  try {
    const r = await api("GET", "/v1/queues/" + encodeURIComponent(deadQueue) +
                               "/dead?limit=100");
    for (const d of r.dead) {
      const tr = document.createElement("tr");
      tr.dataset.id = d.id;
      const td = document.createElement("td");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.className = "dead-select";
      box.value = d.id;
      td.appendChild(box);
      tr.appendChild(td);
      cell(tr, String(d.id), "", "id");
      cell(tr, String(d.attempts), "", "attempts");
      cell(tr, d.last_error || "", "error", "last_error");
      cell(tr, d.payload !== undefined ? d.payload
                                       : "base64:" + d.payload_base64,
           "payload", "payload");
      cell(tr, d.died_at, "", "died_at");
      body.appendChild(tr);
    }
    if (r.dead.length === 0) deadMessage("No dead letters.", false);
  } catch (e) {
    deadMessage(e.message, true);
  }
}

async function redrive(request) {
  try {
    const r = await api("POST", "/v1/queues/" + encodeURIComponent(deadQueue) +
                                "/dead/redrive", request);
    deadMessage("Redriven: " + r.redriven, false);
    await loadDead();
    if (r.redriven > 0) deadMessage("Redriven: " + r.redriven, false);
    await refresh();
  } catch (e) {
    deadMessage(e.message, true);
  }
}

$("token").value = token();
$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem("sqlq_token", $("token").value.trim());
  previous = new Map();
  refresh();
  if (deadQueue !== null) loadDead();
});
$("token-clear").addEventListener("click", () => {
  sessionStorage.removeItem("sqlq_token");
  $("token").value = "";
  refresh();
});
$("dead-refresh").addEventListener("click", loadDead);
$("dead-close").addEventListener("click", () => {
  $("dead").hidden = true;
  deadQueue = null;
});
$("dead-select-all").addEventListener("change", (ev) => {
  for (const b of document.querySelectorAll(".dead-select")) {
    b.checked = ev.target.checked;
  }
});
$("redrive-selected").addEventListener("click", () => {
  const ids = [...document.querySelectorAll(".dead-select:checked")]
                  .map((b) => Number(b.value));
  if (ids.length === 0) return deadMessage("Select dead letters first.", true);
  redrive({ids});
});
$("redrive-all").addEventListener("click", () => redrive({all: true}));

refresh();
setInterval(refresh, REFRESH_MS);
</script>
</body>
</html>
)HTML";

}  // namespace

std::string_view DashboardHtml() { return kPage; }

namespace {

// The CSP source for the inline element <tag>...</tag> of the page: the
// base64 SHA-256 of its text, so that only this exact script or style runs.
std::string InlineHash(std::string_view tag) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  const auto begin = kPage.find(open) + open.size();
  const std::string_view text = kPage.substr(begin, kPage.find(close) - begin);
  unsigned char digest[32];
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), digest, &n, EVP_sha256(), nullptr);
  return "'sha256-" +
         Base64Encode(std::string_view(reinterpret_cast<char*>(digest), n)) +
         "'";
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& DashboardHeaders() {
  static const auto* headers =
      new std::vector<std::pair<std::string, std::string>>{
          // Nothing but the page's own script and style, requests to this
          // server only, and no framing: an injected string could run
          // nothing, and no other site can overlay the page's buttons.
          {"Content-Security-Policy",
           fmt::format("default-src 'none'; script-src {}; style-src {}; "
                       "connect-src 'self'; img-src 'self'; base-uri 'none'; "
                       "form-action 'none'; frame-ancestors 'none'",
                       InlineHash("script"), InlineHash("style"))},
          {"X-Frame-Options", "DENY"},
          {"Referrer-Policy", "no-referrer"},
          {"Cache-Control", "no-store"}};
  return *headers;
}

}  // namespace sqlq::server
