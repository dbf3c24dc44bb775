// Metric charts of the training-jobs pages, drawn by Plotly (plotly.js as shipped in the `plotly` PyPI package,
// served by the plugin from the installed package at ui/vendor/plotly.min.js: nothing copied into the repository).
// Hover values, box zoom (double-click resets), log scale, smoothing, step / wall-clock / relative-time axis, and live
// updates that keep the user's zoom. One chart per metric; several runs (the compare page) are overlaid in it.
// System metrics (system/<host>/<what>, sampled by the runtime) get one chart per <what>, a curve per host.
// An ES module (console-job.js and compare.js import it); plotly.js itself stays a classic script, added on first use
// (it sets window.Plotly).
import {esc} from "./console-util.js";

const PLOTLY_SRC = "vendor/plotly.min.js";
const COLORS = ["#3182ce", "#e53e3e", "#38a169", "#d69e2e", "#805ad5", "#dd6b20", "#319795", "#d53f8c", "#718096", "#2b6cb0"];
const MARKER_LIMIT = 200;  // curves with more points than this are drawn without markers
let plotlyLoading = null;

function loadPlotly() {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!plotlyLoading) {
    plotlyLoading = new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = PLOTLY_SRC;
      script.onload = () => resolve(window.Plotly);
      script.onerror = () => { plotlyLoading = null; reject(new Error("could not load the chart library (" + PLOTLY_SRC + ")")); };
      document.head.appendChild(script);
    });
  }
  return plotlyLoading;
}

// Debiased exponential moving average (TensorBoard's smoothing): weight 0 = raw values.
function smooth(values, weight) {
  if (!weight) return values;
  let last = 0, n = 0;
  return values.map((v) => { last = last * weight + (1 - weight) * v; n += 1; return last / (1 - Math.pow(weight, n)); });
}

// metric name -> {chart, host}: system/<host>/<what> charts as system/<what>, one curve per host.
function chartOf(name) {
  const parts = name.split("/");
  if (parts[0] === "system" && parts.length >= 3) return {chart: "system/" + parts.slice(2).join("/"), host: parts[1]};
  return {chart: name, host: ""};
}

function group(runs) {
  const charts = new Map();  // chart -> [{label, points, color}]
  runs.forEach((run, r) => {
    for (const [name, points] of Object.entries(run.series || {})) {
      if (!points || !points.length) continue;
      const {chart, host} = chartOf(name);
      if (!charts.has(chart)) charts.set(chart, []);
      const curves = charts.get(chart);
      const label = [runs.length > 1 ? run.label : "", host].filter(Boolean).join(" · ") || chart;
      curves.push({label, points, color: COLORS[(runs.length > 1 ? r : curves.length) % COLORS.length]});
    }
  });
  const names = [...charts.keys()];
  const training = names.filter((n) => !n.startsWith("system/")), system = names.filter((n) => n.startsWith("system/"));
  return {charts, training, system};
}

function xValues(points, axis) {
  if (axis === "step") return points.map((p) => p.step);
  if (axis === "wall") return points.map((p) => new Date((p.timestamp || 0) * 1000));
  const t0 = points[0].timestamp || 0;
  return points.map((p) => ((p.timestamp || 0) - t0));
}

function traces(curves, options) {
  const out = [];
  for (const c of curves) {
    const x = xValues(c.points, options.axis), y = c.points.map((p) => p.value);
    const markers = c.points.length <= MARKER_LIMIT && !options.smoothing;
    if (options.smoothing) {  // the raw curve stays, faint, under the smoothed one
      out.push({x, y, type: "scatter", mode: "lines", name: c.label + " (raw)", line: {color: c.color, width: 1}, opacity: 0.25,
        hoverinfo: "skip", showlegend: false});
    }
    out.push({x, y: smooth(y, options.smoothing), type: "scatter", mode: markers ? "lines+markers" : "lines", name: c.label,
      line: {color: c.color, width: 2}, marker: {size: 5}, hovertemplate: "%{y:.6~g}<extra>" + esc(c.label) + "</extra>"});
  }
  return out;
}

function layout(options, showLegend, name) {
  const bytes = /_bytes$/.test(name);  // memory: 3.63 GB, not 3632939008
  const axisTitle = {step: "step", wall: "time", relative: "seconds since the first point"}[options.axis];
  return {
    height: 240, margin: {l: 56, r: 12, t: 16, b: 40},
    xaxis: {title: {text: axisTitle, font: {size: 11}}, type: options.axis === "wall" ? "date" : "linear", zeroline: false},
    yaxis: {type: options.log ? "log" : "linear", zeroline: false, exponentformat: "SI",
      ...(bytes ? {tickformat: ".3~s", ticksuffix: "B", hoverformat: ".4~s"} : {})},
    hovermode: "x unified", showlegend: showLegend, legend: {orientation: "h", y: -0.25, font: {size: 11}},
    // Unchanged while the page re-reads the series: a live update keeps the user's zoom.
    uirevision: [options.axis, options.log].join(":"),
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", font: {size: 11},
  };
}

function toolbar(options) {
  return `<div class="chart-tools">
    <label>x axis <select data-option="axis">
      ${[["step", "step"], ["wall", "wall clock"], ["relative", "relative time"]].map(([v, l]) => `<option value="${v}"${options.axis === v ? " selected" : ""}>${l}</option>`).join("")}
    </select></label>
    <label><input type="checkbox" data-option="log"${options.log ? " checked" : ""}> log scale</label>
    <label>smoothing <input type="range" min="0" max="0.95" step="0.05" value="${options.smoothing}" data-option="smoothing">
      <span class="smoothing-value">${options.smoothing.toFixed(2)}</span></label>
  </div>`;
}

const state = new WeakMap();  // container -> {options, runs}

// Draw (or update) the charts of `runs` ([{label, series}]) in `container`. Returns a promise.
async function draw(container, runs, initial = {}) {
  let s = state.get(container);
  if (!s) {
    s = {options: {axis: "step", log: false, smoothing: 0, ...initial}, runs};
    state.set(container, s);
  }
  s.runs = runs;
  const Plotly = await loadPlotly();
  const {charts, training, system} = group(runs);
  if (!training.length && !system.length) {
    container.innerHTML = '<p class="muted">No metric points (yet).</p>';
    container.dataset.drawn = "";
    return;
  }
  const wanted = [...training, ...system];
  if (container.dataset.drawn !== wanted.join("\n")) {  // new metrics appeared: lay the charts out again
    container.innerHTML = toolbar(s.options) +
      (training.length ? `<div class="chart-group" data-group="training">${training.map(slot).join("")}</div>` : "") +
      (system.length ? `<h3 class="chart-heading">System</h3><div class="chart-group" data-group="system">${system.map(slot).join("")}</div>` : "");
    container.dataset.drawn = wanted.join("\n");
    container.querySelectorAll("[data-option]").forEach((input) => input.addEventListener("input", () => {
      const o = s.options;
      if (input.dataset.option === "axis") o.axis = input.value;
      if (input.dataset.option === "log") o.log = input.checked;
      if (input.dataset.option === "smoothing") {
        o.smoothing = Number(input.value);
        container.querySelector(".smoothing-value").textContent = o.smoothing.toFixed(2);
      }
      draw(container, s.runs).catch((err) => console.error(err));
    }));
  }
  for (const name of wanted) {
    const box = container.querySelector(`.chart[data-metric="${CSS.escape(name)}"]`);
    const curves = charts.get(name);
    const plot = box.querySelector(".plot");
    box.dataset.points = String(Math.max(...curves.map((c) => c.points.length)));
    box.querySelector(".chart-last").textContent = curves.map((c) => (curves.length > 1 ? c.label + " " : "") + "last " + fmt(c.points[c.points.length - 1].value)).join(" · ");
    await Plotly.react(plot, traces(curves, s.options), layout(s.options, curves.length > 1, name),
      {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"]});
    if (!plot.dataset.listening) {
      plot.dataset.listening = "1";
      plot.on("plotly_relayout", (e) => { box.dataset.zoomed = e && ("xaxis.range[0]" in e || "yaxis.range[0]" in e) ? "true" : "false"; });
    }
  }
}

function slot(name) {
  return `<div class="chart" data-metric="${esc(name)}"><div class="chart-head"><b>${esc(name)}</b> <span class="muted chart-last"></span></div><div class="plot"></div></div>`;
}

function fmt(v) {
  return typeof v === "number" ? (Math.abs(v) >= 1000 || Number.isInteger(v) ? String(Math.round(v * 1000) / 1000) : v.toPrecision(4)) : "";
}

// A scatter of points [{x, y, label}] (the compare page's objective against one hyperparameter).
async function scatter(el, points, xName, yName) {
  const Plotly = await loadPlotly();
  const numeric = points.every((p) => typeof p.x === "number");
  await Plotly.react(el, [{x: points.map((p) => p.x), y: points.map((p) => p.y), text: points.map((p) => p.label), type: "scatter",
    mode: "markers", marker: {size: 9, color: COLORS[0]}, hovertemplate: "%{text}<br>" + esc(xName) + " %{x}<br>" + esc(yName) + " %{y:.6~g}<extra></extra>"}],
  {height: 240, margin: {l: 56, r: 12, t: 32, b: 44}, title: {text: `${yName} vs ${xName}`, font: {size: 13}, x: 0.02, xanchor: "left"},
    xaxis: {title: {text: xName}, type: numeric ? "linear" : "category"}, yaxis: {title: {text: yName}},
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", font: {size: 11}},
  {displaylogo: false, responsive: true});
}

export {draw, scatter, smooth, chartOf};
