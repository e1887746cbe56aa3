#include "timeline/html_view.hpp"

#include <nlohmann/json.hpp>

namespace ddprun::launcher::timeline {
namespace {

using nlohmann::json;

constexpr const char* kPage = R"PAGE(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ddprun timeline</title>
<style>
body{font:13px system-ui,sans-serif;margin:12px;color:#222;background:#fff}
h1{font-size:16px;margin:0 0 4px}#summary{color:#555;margin-bottom:6px}
#legend span{display:inline-block;margin-right:12px}#legend i{display:inline-block;width:12px;
height:10px;margin-right:4px;vertical-align:middle}
#chart{border:1px solid #ccc;user-select:none;cursor:grab}
#details{background:#f6f6f6;border:1px solid #ddd;padding:6px;white-space:pre-wrap;
max-height:240px;overflow:auto;font:12px monospace}
</style></head><body>
<h1>ddprun timeline</h1><div id="summary"></div><div id="legend"></div>
<svg id="chart" xmlns="http://www.w3.org/2000/svg"></svg>
<div>Hover for a summary, click for the details; the wheel zooms, a drag pans, a double click
shows the whole job.</div><pre id="details">(click a bar or a mark)</pre>
<script id="data" type="application/json">/*DATA*/</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const COLORS = {succeeded: "#2e7d32", failed: "#c62828", hung: "#ef6c00", stopped: "#9e9e9e",
  unfinished: "#1565c0", stopping: "#f8bbd0", rendezvous: "#ffe0b2", starting: "#c5cae9"};
const MARKS = {worker_exited: "#c62828", hang: "#ef6c00", timer_expired: "#ef6c00",
  health_check_failed: "#c62828", signal: "#6a1b9a", node_left: "#6a1b9a", job_end: "#000",
  checkpoint_persisted: "#1565c0", checkpoint_restore: "#1565c0"};
const NS = "http://www.w3.org/2000/svg", LEFT = 230, TOP = 34, ROW = 28;
const svg = document.getElementById("chart"), details = document.getElementById("details");
const items = [];
let v0 = 0, v1 = Math.max(D.duration_ms, 1);

function el(name, attrs, parent, title) {
  const e = document.createElementNS(NS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (title !== undefined) {
    const t = document.createElementNS(NS, "title");
    t.textContent = title;
    e.appendChild(t);
  }
  parent.appendChild(e);
  return e;
}
function secs(ms) { return (ms / 1000).toFixed(ms < 10000 ? 3 : 1) + " s"; }
function item(info) { items.push(info); return items.length - 1; }
function correction(n) {
  return n.offset_ms === null ? "not measured" :
    (n.offset_ms >= 0 ? "+" : "") + n.offset_ms.toFixed(3) + " ms";
}

function summary() {
  let attempts = 0, restarts = 0;
  for (const n of D.nodes) {
    restarts = Math.max(restarts, n.spans.filter(s => s.kind === "stopping").length);
    attempts += n.spans.filter(s => s.track === -2 && s.kind !== "round").length;
  }
  const measured = D.nodes.filter(n => n.offset_ms !== null).map(n => n.offset_ms);
  const fixes = D.nodes.length <= 8 ? D.nodes.map(n => n.label + ": " + correction(n)).join("; ")
    : (measured.length ? "from " + Math.min(...measured).toFixed(3) + " to " +
       Math.max(...measured).toFixed(3) + " ms" : "none measured") + " (hover a node's name)";
  document.getElementById("summary").textContent = "job " + D.run_id + ": " + D.nodes.length +
    " node(s), " + attempts + " attempt(s) of nodes, " + restarts + " restart(s), " +
    secs(D.duration_ms) + ". Clock corrections (to the store's clock): " + fixes;
  const legend = document.getElementById("legend");
  for (const k of ["succeeded", "failed", "hung", "stopped", "unfinished", "stopping",
                   "rendezvous", "starting"]) {
    const s = document.createElement("span");
    s.innerHTML = "<i style=\"background:" + COLORS[k] + "\"></i>" +
      (["stopping", "rendezvous", "starting"].includes(k) ? "restart: " + k : "attempt " + k);
    legend.appendChild(s);
  }
}

function draw() {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  items.length = 0;
  const width = Math.max(document.body.clientWidth - 4, 600);
  const height = TOP + ROW * D.nodes.length + 8;
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  const span = v1 - v0, x = t => LEFT + (t - v0) / span * (width - LEFT - 12);
  const clip = el("clipPath", {id: "plot"}, el("defs", {}, svg));
  el("rect", {x: LEFT, y: 0, width: width - LEFT, height: height}, clip);
  // The time axis: about ten ticks at a round number of seconds.
  const step = [0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600, 7200]
    .map(s => s * 1000).find(s => span / s <= 12) || 14400000;
  const rows = el("g", {}, svg), plot = el("g", {"clip-path": "url(#plot)"}, svg);
  D.nodes.forEach((n, row) => {
    const y = TOP + row * ROW;
    el("rect", {x: 0, y: y, width: width, height: ROW, fill: row % 2 ? "#f3f3f3" : "#fff"}, rows,
       n.label + ": clock corrected by " + correction(n));
    el("text", {x: 4, y: y + 18, fill: "#222"}, rows).textContent = n.label;
    for (const s of n.spans) {
      if (s.e < v0 || s.s > v1) continue;
      const w = Math.max(x(s.e) - x(s.s), 1.5), tip = s.name + ": " + s.kind + ", " +
        secs(s.e - s.s) + " from " + secs(s.s);
      let r = null;
      if (s.track === -1) {
        r = el("rect", {x: x(s.s), y: y + 1, width: w, height: ROW - 2, fill: COLORS[s.kind],
                        opacity: 0.8}, plot, tip);
      } else if (s.track === -2 && s.kind === "round") {
        r = el("rect", {x: x(s.s), y: y + 1, width: 2, height: ROW - 2, fill: "#37474f"}, plot,
               tip);
      } else if (s.track === -2) {
        r = el("rect", {x: x(s.s), y: y + 8, width: w, height: 14, rx: 2, fill: COLORS[s.kind]},
               plot, tip);
      }
      if (r) r.setAttribute("data-item", item({what: s.name, kind: s.kind, node: n.label,
        from_s: s.s / 1000, to_s: s.e / 1000, details: s.d}));
    }
    for (const m of n.marks) {
      if (m.t < v0 || m.t > v1 || !(m.name in MARKS)) continue;
      const cx = x(m.t);
      const p = el("path", {d: "M" + (cx - 4) + " " + (y + 1) + "h8l-4 7z", fill: MARKS[m.name]},
                   plot, m.name + " at " + secs(m.t) + (m.track >= 0 ? ", local rank " + m.track : ""));
      p.setAttribute("data-item", item({what: m.name, node: n.label, at_s: m.t / 1000,
                                        details: m.d}));
    }
  });
  for (let t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
    el("line", {x1: x(t), x2: x(t), y1: TOP - 6, y2: height, stroke: "#ccc", "stroke-width": 0.5},
       rows);
    el("text", {x: x(t) + 2, y: TOP - 10, fill: "#555"}, svg).textContent = secs(t);
  }
  document.body.setAttribute("data-drawn-rows", String(D.nodes.length));
}

svg.addEventListener("click", e => {
  const i = e.target.getAttribute && e.target.getAttribute("data-item");
  if (i !== null && i !== undefined) details.textContent = JSON.stringify(items[+i], null, 2);
});
svg.addEventListener("wheel", e => {
  e.preventDefault();
  const box = svg.getBoundingClientRect(), width = box.width - LEFT - 12;
  const at = v0 + Math.min(Math.max(e.clientX - box.left - LEFT, 0), width) / width * (v1 - v0);
  const k = e.deltaY < 0 ? 0.8 : 1.25;
  v0 = at - (at - v0) * k;
  v1 = at + (v1 - at) * k;
  draw();
}, {passive: false});
let drag = null;
svg.addEventListener("mousedown", e => { drag = {x: e.clientX, v0: v0, v1: v1}; });
window.addEventListener("mouseup", () => { drag = null; });
window.addEventListener("mousemove", e => {
  if (!drag) return;
  const width = svg.getBoundingClientRect().width - LEFT - 12;
  const d = (e.clientX - drag.x) / width * (drag.v1 - drag.v0);
  v0 = drag.v0 - d;
  v1 = drag.v1 - d;
  draw();
});
svg.addEventListener("dblclick", () => { v0 = 0; v1 = Math.max(D.duration_ms, 1); draw(); });
window.addEventListener("resize", draw);
summary();
draw();
</script></body></html>
)PAGE";

double ms(int64_t us, int64_t origin) { return static_cast<double>(us - origin) / 1000.0; }

}  // namespace

std::string html_view(const JobTimeline& job) {
  json nodes = json::array();
  for (const NodeTimeline& n : job.nodes) {
    json spans = json::array(), marks = json::array();
    for (const Span& s : n.spans) {
      spans.push_back({{"track", s.track},
                       {"kind", s.kind},
                       {"name", s.name},
                       {"s", ms(s.start_us, job.start_us)},
                       {"e", ms(s.end_us, job.start_us)},
                       {"d", s.details}});
    }
    for (const Mark& m : n.marks) {
      marks.push_back({{"track", m.track},
                       {"name", m.name},
                       {"t", ms(m.time_us, job.start_us)},
                       {"d", m.details}});
    }
    nodes.push_back({{"label", n.label},
                     {"offset_ms", n.clock_offset_ms ? json(*n.clock_offset_ms) : json(nullptr)},
                     {"spans", std::move(spans)},
                     {"marks", std::move(marks)}});
  }
  const json data = {{"run_id", job.run_id},
                     {"duration_ms", ms(job.end_us, job.start_us)},
                     {"nodes", std::move(nodes)}};
  // In a <script> element "</script" or "<!--" from a log would change how the page is read: every
  // '<' (only ever inside a JSON string) is written as JSON's "\u003c".
  std::string text;
  for (const char c : data.dump(-1, ' ', false, json::error_handler_t::replace)) {
    if (c == '<') {
      text += "\\u003c";
    } else {
      text += c;
    }
  }
  std::string page = kPage;
  const std::string slot = "/*DATA*/";
  page.replace(page.find(slot), slot.size(), text);
  return page;
}

}  // namespace ddprun::launcher::timeline
