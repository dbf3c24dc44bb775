// The compare page (ui/compare.html, "Compare jobs" in the Training jobs list): pick jobs (or every trial of a search),
// then each metric's curves overlaid (static/charts.js), final metrics side by side, hyperparameters and spec fields
// with the differences marked, for a search its objective against each hyperparameter, and the lineage of each job (code
// digest, each channel's data version, image digest, parent model, hyperparameters: its kept lineage record), the parts
// that differ between the runs marked. The selection is in the
// query string (?job=<dag_id>/<run_id>/<map_index>&run=<dag_id>/<run_id>), so the page's URL can be shared.
import {BASE, esc, fmtTime, jobHref, jobKey, runKey} from "./console-util.js";
import {api} from "./console-api.js";
import * as TrainingCharts from "./charts.js";

const main = document.getElementById("main");
let poller = null;
const fmt = (v) => v == null ? "—" : typeof v === "number" ? String(Number(v.toPrecision(6))) : typeof v === "object" ? JSON.stringify(v) : String(v);
const jobPage = (j) => "./" + jobHref(j);  // the job on the training-jobs page (index.html)

function selection() {
  const params = new URLSearchParams(location.search);
  return {jobs: params.getAll("job"), runs: params.getAll("run")};
}

function go(jobs, runs) {
  const params = new URLSearchParams();
  runs.forEach((r) => params.append("run", r));
  jobs.forEach((j) => params.append("job", j));
  location.search = params.toString();
}

// -- picking jobs ------------------------------------------------------------------------------------------------
async function picker(message) {
  const data = await api(`${BASE}/api/jobs?limit=100`);
  const row = (j, trial) => `<tr class="${trial ? "trial " : ""}job"><td><input type="checkbox" class="pick" value="${esc(jobKey(j))}" data-job="${esc(j.job_name)}"></td>
    <td>${esc(j.job_name || j.run_id)}</td><td>${esc(j.dag_id)}</td><td>${esc(j.status)}</td><td class="muted">${esc(fmtTime(j.created))}</td></tr>`;
  const rows = data.items.map((item) => item.kind !== "search" ? row(item, false) :
    `<tr class="group"><td><input type="checkbox" class="pick-run" value="${esc(runKey(item))}" data-search="${esc(item.job_name)}"></td>
      <td colspan="4">Search ${esc(item.job_name)} · ${esc(item.dag_id)} · all ${item.trials.length} trials</td></tr>` +
    item.trials.map((t) => row(t, true)).join("")).join("");
  main.innerHTML = `${message ? `<p class="error">${esc(message)}</p>` : ""}
    <div class="filters"><b>Pick two or more jobs, or a search's trials</b>
      <button class="primary" id="compare" disabled>Compare</button><span class="muted" id="picked">0 selected</span></div>
    <table id="pick-table"><thead><tr><th></th><th>Job</th><th>DAG</th><th>Status</th><th>Created</th></tr></thead>
    <tbody>${rows || '<tr><td colspan="5" class="muted">No training jobs yet.</td></tr>'}</tbody></table>`;
  const button = document.getElementById("compare");
  const picked = () => ({jobs: [...main.querySelectorAll(".pick:checked")].map((c) => c.value), runs: [...main.querySelectorAll(".pick-run:checked")].map((c) => c.value)});
  main.addEventListener("change", () => {
    const p = picked();
    const n = p.jobs.length + p.runs.length;
    document.getElementById("picked").textContent = `${n} selected`;
    button.disabled = !(p.jobs.length >= 2 || p.runs.length >= 1 || (p.jobs.length && p.runs.length));
  });
  button.addEventListener("click", () => { const p = picked(); go(p.jobs, p.runs); });
}

// -- the comparison ------------------------------------------------------------------------------------------------
function headerCells(jobs) {
  return jobs.map((j) => `<th><a href="${jobPage(j)}" class="compared-job" data-job="${esc(j.job_name)}">${esc(j.label)}</a><br><span class="muted">${esc(j.status)}</span></th>`).join("");
}

function table(id, title, rows, jobs, options = {}) {
  if (!rows.length) return "";
  const body = rows.map((r) => `<tr data-row="${esc(r.name)}"${r.differs ? ' class="differs-row"' : ""}><td>${esc(r.name)}${r.differs ? ' <span class="muted" title="differs between the jobs">≠</span>' : ""}</td>` +
    r.values.map((v, i) => `<td class="${[r.differs ? "differs" : "", r.best === i ? "best" : "", options.numeric ? "num" : ""].filter(Boolean).join(" ")}">${esc(fmt(v))}${r.best === i ? " ★" : ""}</td>`).join("") + "</tr>").join("");
  const toggle = options.toggle ? ` <label class="muted plain"><input type="checkbox" id="${id}-only-diff"> only differences</label>` : "";
  return `<section><h2>${esc(title)}${toggle}</h2><div class="scroll-x"><table class="compare-table" id="${id}"><thead><tr><th></th>${headerCells(jobs)}</tr></thead><tbody>${body}</tbody></table></div></section>`;
}

async function scatters(data) {
  const el = document.getElementById("objective-plots");
  if (!el) return;
  const objective = data.objective;
  const varying = data.hyperparameters.filter((r) => r.differs);
  el.innerHTML = varying.map((r, i) => `<div class="chart" data-hyperparameter="${esc(r.name)}"><div class="plot" id="scatter-${i}"></div></div>`).join("") ||
    '<p class="muted">No hyperparameter differs between these trials.</p>';
  for (const [i, r] of varying.entries()) {
    const points = data.jobs.map((j, k) => ({x: r.values[k], y: j.final[objective.name], label: j.label})).filter((p) => typeof p.y === "number" && p.x != null);
    await TrainingCharts.scatter(document.getElementById(`scatter-${i}`), points, r.name, objective.name);
  }
}

async function comparison(sel) {
  const query = new URLSearchParams();
  sel.runs.forEach((r) => query.append("run", r));
  sel.jobs.forEach((j) => query.append("job", j));
  const data = await api(`${BASE}/api/compare?${query}`);
  const jobs = data.jobs;
  const shareable = location.href;
  main.innerHTML = `
    <div class="head"><h1 id="compare-title">Comparing ${jobs.length} jobs</h1>
      <span class="muted">${jobs.map((j) => esc(j.label)).join(" · ")}</span>
      <div class="actions"><a id="share-link" href="${esc(shareable)}" target="_blank" rel="noopener">Link to this comparison</a>
        <button id="change">Change selection</button></div></div>
    ${jobs.some((j) => j.error) ? `<p class="error">${jobs.filter((j) => j.error).map((j) => esc(j.label + ": " + j.error)).join("<br>")}</p>` : ""}
    <section id="metrics"><h2>Metrics</h2><div class="charts" id="charts"><p class="muted">Loading…</p></div></section>
    ${table("final-metrics", "Final metrics", data.final, jobs, {numeric: true})}
    ${data.objective ? `<section id="objective"><h2>${esc(data.objective.name)} (${esc(data.objective.direction)}) against each hyperparameter</h2><div class="charts" id="objective-plots"></div></section>` : ""}
    ${table("hyperparameters", "Hyperparameters", data.hyperparameters, jobs, {toggle: true})}
    ${table("spec-fields", "Spec", data.fields, jobs, {toggle: true})}
    ${table("lineage", "Lineage", data.lineage || [], jobs, {toggle: true})}
    ${(data.lineage_missing || []).length ? `<p class="muted" id="lineage-missing">No lineage record for ${esc(data.lineage_missing.join(", "))}: ended before its upload stage kept one, or ran before the platform recorded lineage.</p>` : ""}`;
  document.getElementById("change").onclick = () => { location.search = ""; };
  for (const id of ["hyperparameters", "spec-fields", "lineage"]) {
    const box = document.getElementById(`${id}-only-diff`);
    if (box) box.onchange = () => document.querySelectorAll(`#${id} tbody tr:not(.differs-row)`).forEach((tr) => { tr.hidden = box.checked; });
  }
  const charts = document.getElementById("charts");
  const runs = (d) => d.jobs.map((j) => ({label: j.label, series: j.series}));
  await TrainingCharts.draw(charts, runs(data));
  if (data.objective) await scatters(data);
  // Live: while any of them trains, the curves are re-read (the user's zoom and options stay).
  const refresh = async () => {
    const fresh = await api(`${BASE}/api/compare?${query}`);
    await TrainingCharts.draw(charts, runs(fresh));
    if (fresh.jobs.some((j) => j.status === "running" || j.status === "queued")) poller = setTimeout(() => refresh().catch(() => {}), 3000);
  };
  if (jobs.some((j) => j.status === "running" || j.status === "queued")) poller = setTimeout(() => refresh().catch(() => {}), 3000);
}

async function start() {
  if (poller) clearTimeout(poller);
  const sel = selection();
  try {
    if (sel.jobs.length + sel.runs.length === 0) await picker();
    else await comparison(sel);
  } catch (err) {
    await picker(err.message).catch(() => { main.innerHTML = `<p class="error" id="error">${esc(err.message)}</p>`; });
  }
}
start();
