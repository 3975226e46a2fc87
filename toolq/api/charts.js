"use strict";
// Small SVG line charts for the dashboard: no library, no inline style (the CSP allows none);
// colours come from classes in dashboard.css. Labels reach the DOM as text nodes only.
const SVG_NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = Math.pow(10, Math.floor(Math.log10(value)));
  for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * power) return step * power;
  return 10 * power;
}

// chart = {start (epoch s), step (s), unit, format(value), series: [{name, cls, values, dashed}]}
// values[i] belongs to the bucket starting at start + i * step; null leaves a gap.
function lineChart(chart) {
  const W = 560, H = 170, L = 46, R = 8, T = 8, B = 22;
  const n = chart.buckets || Math.max(1, ...chart.series.map(s => s.values.length));
  const top = niceMax(Math.max(0, ...chart.series.flatMap(s => s.values.filter(v => v !== null))));
  const x = i => L + (n === 1 ? 0 : (i / (n - 1)) * (W - L - R));
  const y = v => T + (1 - v / top) * (H - T - B);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img",
    "aria-label": chart.label || "" });
  for (const f of [0, 0.5, 1]) {
    root.append(svg("line", { x1: L, x2: W - R, y1: y(top * f), y2: y(top * f), class: "grid" }));
    root.append(svg("text", { x: L - 4, y: y(top * f) + 4, class: "axis", "text-anchor": "end" },
      chart.format(top * f)));
  }
  for (let i = 0; i < n - 7; i += 15) {
    const when = new Date((chart.start + i * chart.step) * 1000);
    root.append(svg("text", { x: x(i), y: H - 6, class: "axis", "text-anchor": i ? "middle" : "start" },
      when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hour12: false })));
  }
  root.append(svg("text", { x: W - R, y: H - 6, class: "axis", "text-anchor": "end" }, "now"));
  for (const s of chart.series) {
    let d = "";
    let pen = false;
    s.values.forEach((v, i) => {
      if (v === null || v === undefined) { pen = false; return; }
      d += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    });
    const path = svg("path", { d: d || "M0,0", class: "line " + s.cls + (s.dashed ? " dashed" : ""),
      "data-series": s.name });
    path.append(svg("title", {}, s.name));
    root.append(path);
    // Lone points (a single busy minute) have no segment to draw: mark them.
    s.values.forEach((v, i) => {
      const alone = v !== null && v !== undefined && (s.values[i - 1] ?? null) === null
        && (s.values[i + 1] ?? null) === null;
      if (alone) root.append(svg("circle", { cx: x(i), cy: y(v), r: 2.5, class: "dot " + s.cls }));
    });
  }
  return root;
}

window.toolqCharts = { lineChart };
