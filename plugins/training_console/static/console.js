// The training-jobs page: plain JS, no build step, no CDN. Data from the plugin's API (/training-jobs/api), logs and
// actions through Airflow's REST API (/api/v2), both authenticated by the Airflow UI's session cookie.
"use strict";
const BASE = location.pathname.replace(/\/ui\/.*$/, "");           // /training-jobs
const ROOT = BASE.replace(/\/training-jobs$/, "");                  // where Airflow is served
const main = document.getElementById("main");
const STAGE_LABELS = {validate_spec: "validate", stage_code: "stage code", prefetch_data: "prefetch data",
  write_configs: "write configs", restore: "restore", launch_training: "training", upload_artifacts: "upload",
  publish_model: "publish"};
let poller = null;
let routeSeq = 0;  // counts routes: a page whose data arrives after a newer route began draws nothing
let refreshLog = null;  // the open job's log, re-read while it trains

const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const fmtNum = (v) => typeof v === "number" ? (Math.abs(v) >= 1000 || Number.isInteger(v) ? String(v) : v.toPrecision(4)) : "";
function fmtDur(s) {
  if (s == null) return "";
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return Math.floor(s / 60) + " m " + Math.round(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " m";
}
const fmtTime = (iso) => iso ? new Date(iso).toLocaleString() : "";
const jobHref = (k, section) => `#/job/${encodeURIComponent(k.dag_id)}/${encodeURIComponent(k.run_id)}/${k.map_index}` + (section ? "/" + section : "");
const apiJob = (k) => `${BASE}/api/jobs/${encodeURIComponent(k.dag_id)}/${encodeURIComponent(k.run_id)}/${k.map_index}`;
const badge = (status) => `<span class="badge s-${esc(status)}" data-status="${esc(status)}">${esc(status)}</span>`;

// A page's data. The user may have gone elsewhere while it was read (or a finished job's redraw raced their click):
// then the older page stops here instead of drawing over the page they went to.
class Superseded extends Error {}
async function pageData(path) {
  const seq = routeSeq;
  const data = await api(path);
  if (seq !== routeSeq) throw new Superseded("superseded by a newer page");
  return data;
}

async function api(path, options = {}) {
  const response = await fetch(path, {credentials: "same-origin", headers: {"Content-Type": "application/json", Accept: "application/json"}, ...options});
  const text = await response.text();
  let body; try { body = text ? JSON.parse(text) : {}; } catch (e) { body = {detail: text}; }
  const refused = typeof body.detail === "string" && body.detail.startsWith("refused: ");  // web_boundary.py's guard
  if (response.status === 401 || (response.status === 403 && !refused)) throw new Error("Not logged in to Airflow (or no access): log in at " + ROOT + "/ and come back.");
  if (!response.ok) throw new Error(`${response.status}: ${typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail ?? body)}`);
  return body;
}

// Links into the Airflow UI: inside the UI's iframe (sandboxed: no top navigation) the parent's router is driven
// through its history, which same-origin frames may use; opened on its own, a plain link.
function airflowLink(path, label) {
  return `<a href="${esc(ROOT + path)}" data-airflow="${esc(path)}">${esc(label)}</a>`;
}
document.addEventListener("click", (event) => {
  const a = event.target.closest("a[data-airflow]");
  if (!a || window.top === window) return;
  try {
    window.top.history.pushState({}, "", ROOT + a.dataset.airflow);
    window.top.dispatchEvent(new PopStateEvent("popstate"));
    event.preventDefault();
  } catch (e) { /* cross-origin parent: follow the link in the frame */ }
});

function parseHash() {
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return {parts, params: new URLSearchParams(query || "")};
}

async function route(timed = false) {  // timed: the list's timed refresh, not the user's navigation
  routeSeq += 1;
  if (poller) { clearTimeout(poller); poller = null; }
  const {parts, params} = parseHash();
  try {
    if (parts[0] === "job" && parts.length >= 4) await jobPage({dag_id: parts[1], run_id: parts[2], map_index: Number(parts[3])}, parts[4]);
    else if (parts[0] === "run" && parts.length >= 3) await runPage(parts[1], parts[2]);
    else await listPage(params, {}, timed);
  } catch (err) {
    if (err instanceof Superseded) return;  // the newer route draws
    main.innerHTML = `<p class="error" id="error">${esc(err.message)}</p>`;
  }
}
window.addEventListener("hashchange", () => route());

// ---------------------------------------------------------------------------------------------------------------
// the list
const COLUMNS = [
  [null, ""], ["job_name", "Job"], ["dag_id", "DAG"], ["status", "Status"], [null, "Tags"], ["created", "Created"],
  ["duration:staging", "Staging"], ["duration:training", "Training"], ["duration:upload", "Upload"],
  ["backend", "Backend"], ["layout", "Layout"], [null, "Hosts × resources"], ["image_uri", "Image"],
];

function resourcesText(row) {
  const r = row.resources || {};
  const parts = [r.cpu != null ? r.cpu + " CPU" : null, r.memory ? r.memory : null, r.gpu ? r.gpu + " GPU" : null].filter(Boolean);
  return `${row.instance_count ?? 1} × ${parts.length ? parts.join(", ") : "default"}`;
}

// a Kubernetes job waiting in a Kueue queue: which one, and on the job page its place (the trigger's latest line)
const queuedIn = (row) => row.status === "queued" && row.queue ? ` <span class="muted queue" title="${esc(row.queue_line || "")}">in ${esc(row.queue)}</span>` : "";

// tags are what the triggering user typed: shown escaped, as "name" or "name: value"
const tagText = (name, value) => value ? `${name}: ${value}` : name;
const tagChips = (tags) => Object.entries(tags || {}).map(([k, v]) => `<span class="tag" data-tag="${esc(k)}">${esc(tagText(k, v))}</span>`).join(" ");
const jobKeyOf = (row) => [row.dag_id, row.run_id, row.map_index].map((p) => encodeURIComponent(p)).join("/");
const hpText = (v) => v == null ? "" : typeof v === "number" ? fmtNum(v) : String(v);

function jobCells(row, metricNames, hpNames = []) {
  const star = row.best ? `<span class="best" title="best trial">★</span> ` : "";
  const failed = row.status === "failed" && row.failed_stage ? ` <span class="muted">at ${esc(STAGE_LABELS[row.failed_stage] || row.failed_stage)}${row.failure_class ? " (" + esc(row.failure_class) + ")" : ""}</span>` : "";
  const cells = [
    `<input type="checkbox" class="select-job" value="${esc(jobKeyOf(row))}" data-job="${esc(row.job_name)}" data-status="${esc(row.status)}" aria-label="select ${esc(row.job_name)}">`,
    `${star}<a href="${jobHref(row)}" class="job-link">${esc(row.job_name || row.run_id)}</a>`,
    esc(row.dag_id), badge(row.status) + failed + queuedIn(row), tagChips(row.tags), esc(fmtTime(row.created)),
    fmtDur(row.durations?.staging), fmtDur(row.durations?.training), fmtDur(row.durations?.upload),
    esc(row.backend), esc(row.layout), esc(resourcesText(row)), esc(row.image_uri || (row.backend === "local" ? "—" : "default")),
    ...hpNames.map((h) => esc(hpText(row.hyperparameters?.[h]))),
    ...metricNames.map((m) => fmtNum(row.metrics?.[m])),
  ];
  return cells.map((c, i) => `<td${i >= COLUMNS.length ? ' class="num"' : ""}>${c}</td>`).join("");
}

// the hyperparameter columns a user chose: in the page's URL (shareable), remembered in this browser for the next visit
const HP_STORE = "training-jobs.hyperparameter-columns";
function chosenHyperparameters(state, available) {
  let names = state.hp != null ? state.hp.split(",") : null;
  if (names == null) { try { names = JSON.parse(localStorage.getItem(HP_STORE) || "[]"); } catch (e) { names = []; } }
  return names.filter((n) => available.includes(n));
}
const splitList = (text) => String(text || "").split(",").map((t) => t.trim()).filter(Boolean);

async function listPage(params, fixed = {}, timed = false) {
  document.getElementById("where").textContent = "";
  const state = {status: "", dag_id: "", q: "", tag: "", from: "", to: "", metric: "", sort: "created", order: "desc",
    offset: "0", limit: "50", ...Object.fromEntries(params), ...fixed};
  // tag and metric boxes take several, comma-separated: each is one filter of the API (all must hold)
  const query = new URLSearchParams(Object.entries(state).filter(([k, v]) => v !== "" && !["tag", "metric", "hp"].includes(k)));
  splitList(state.tag).forEach((t) => query.append("tag", t));
  splitList(state.metric).forEach((m) => query.append("metric", m));
  let data;
  try { data = await pageData(`${BASE}/api/jobs?${query}`); } catch (err) {
    if (!err.message.startsWith("400")) throw err;
    data = {items: [], total: 0, metric_names: [], dag_ids: [], hyperparameter_names: [], tag_names: [], problem: err.message.replace(/^400: /, "")};
  }
  // a timed refresh never redraws under the user: not while rows are selected or a filter box holds an edit not
  // applied yet (its value is not the one it was drawn with)
  if (timed && (main.querySelector(".select-job:checked, .select-search:checked") ||
      [...main.querySelectorAll(".filters input[id]")].some((el) => el.value !== el.defaultValue))) {
    poller = setTimeout(refresh, 5000);
    return;
  }
  const metricNames = data.metric_names;
  const hpNames = chosenHyperparameters(state, data.hyperparameter_names || []);
  const head = [...COLUMNS, ...hpNames.map((h) => [null, h]), ...metricNames.map((m) => ["metric:" + m, m])].map(([key, label]) =>
    `<th${key ? ` class="sortable${state.sort === key ? " sorted" + (state.order === "asc" ? " asc" : "") : ""}" data-sort="${esc(key)}"` : ""}>${esc(label)}</th>`).join("");
  const rows = data.items.map((item) => {
    if (item.kind !== "search") return `<tr class="job" data-job="${esc(item.job_name)}">${jobCells(item, metricNames, hpNames)}</tr>`;
    const best = item.best_job_name ? ` · best <span class="best">★</span> ${esc(item.best_job_name)} (${esc(item.objective)} ${fmtNum(item.metrics?.[item.objective])})` : "";
    const runKey = [item.dag_id, item.run_id].map((p) => encodeURIComponent(p)).join("/");
    return `<tr class="group" data-search="${esc(item.job_name)}"><td><input type="checkbox" class="select-search" value="${esc(runKey)}" aria-label="select every trial of ${esc(item.job_name)}"></td><td colspan="${COLUMNS.length - 1 + hpNames.length + metricNames.length}">` +
      `Search ${esc(item.job_name)} · ${esc(item.dag_id)} · ${item.trials.length} trials · ${badge(item.status)}${best}</td></tr>` +
      item.trials.map((t) => `<tr class="trial job" data-job="${esc(t.job_name)}">${jobCells(t, metricNames, hpNames)}</tr>`).join("");
  }).join("");
  const statusOptions = ["", "running", "queued", "succeeded", "failed", "stopped"].map((s) =>
    `<option value="${s}"${s === state.status ? " selected" : ""}>${s || "any status"}</option>`).join("");
  const dagOptions = ["", ...data.dag_ids].map((d) => `<option value="${esc(d)}"${d === state.dag_id ? " selected" : ""}>${esc(d || "any DAG")}</option>`).join("");
  const offset = Number(state.offset), limit = Number(state.limit);
  const hpChoices = (data.hyperparameter_names || []).map((h) =>
    `<label><input type="checkbox" class="hp-column" value="${esc(h)}"${hpNames.includes(h) ? " checked" : ""}> ${esc(h)}</label>`).join("");
  const tagOptions = (data.tag_names || []).map((t) => `<option value="${esc(t)}">`).join("");
  const anyFilter = ["status", "q", "tag", "from", "to", "metric"].some((k) => state[k]);
  main.innerHTML = `
    <div class="filters">
      <input id="q" placeholder="job or base job name" value="${esc(state.q)}" size="24">
      <select id="status">${statusOptions}</select>
      <select id="dag">${dagOptions}</select>
      <input id="tag" list="tag-names" placeholder="tag, or tag:value" value="${esc(state.tag)}" size="16" title="tags, comma-separated: every one must match">
      <datalist id="tag-names">${tagOptions}</datalist>
      <label class="muted">from <input id="from" type="date" value="${esc(state.from)}"></label>
      <label class="muted">to <input id="to" type="date" value="${esc(state.to)}"></label>
      <input id="metric" placeholder="metric range, e.g. accuracy>=0.9" value="${esc(state.metric)}" size="26" title="ranges, comma-separated: every one must hold">
      <details class="columns"><summary>Hyperparameter columns</summary><div id="hp-columns">${hpChoices || '<span class="muted">no hyperparameters yet</span>'}</div></details>
      <span class="muted" id="count">${data.total} ${data.total === 1 ? "job" : "jobs"}</span>
      <a id="compare-link" href="compare.html">Compare jobs</a>
    </div>
    ${data.problem ? `<p class="error" id="filter-error">${esc(data.problem)}</p>` : ""}
    <div class="filters selection"><span class="muted" id="selected">0 selected</span>
      <button id="compare-selected" disabled>Compare selected</button>
      <button id="stop-selected" class="danger" disabled>Stop selected</button></div>
    <div id="stop-confirm" class="confirm" hidden></div>
    <div class="scroll-x"><table id="jobs"><thead><tr>${head}</tr></thead><tbody>${rows ||
      `<tr><td colspan="${COLUMNS.length}" class="muted">${anyFilter ? "No training job matches these filters." : "No training jobs yet: trigger the training_job DAG."}</td></tr>`}</tbody></table></div>
    <div class="pager"><button id="prev"${offset <= 0 ? " disabled" : ""}>‹ Previous</button>
      <span class="muted">${data.total ? offset + 1 : 0}–${Math.min(offset + limit, data.total)} of ${data.total}</span>
      <button id="next"${offset + limit >= data.total ? " disabled" : ""}>Next ›</button></div>`;
  if (fixed.run_id) return;
  const go = (changes) => { location.hash = "#/?" + new URLSearchParams(Object.entries({...state, ...changes}).filter(([, v]) => v !== "" && v != null)); };
  let typing;
  document.getElementById("q").addEventListener("input", (e) => { clearTimeout(typing); typing = setTimeout(() => go({q: e.target.value, offset: 0}), 350); });
  document.getElementById("status").addEventListener("change", (e) => go({status: e.target.value, offset: 0}));
  document.getElementById("dag").addEventListener("change", (e) => go({dag_id: e.target.value, offset: 0}));
  for (const id of ["tag", "metric", "from", "to"]) {
    document.getElementById(id).addEventListener("change", (e) => go({[id]: e.target.value.trim(), offset: 0}));
  }
  document.getElementById("hp-columns").addEventListener("change", () => {
    const names = [...main.querySelectorAll(".hp-column:checked")].map((c) => c.value);
    try { localStorage.setItem(HP_STORE, JSON.stringify(names)); } catch (e) { /* storage off: the URL keeps them */ }
    go({hp: names.join(",")});
  });
  wireSelection(data);
  document.getElementById("prev").addEventListener("click", () => go({offset: Math.max(0, offset - limit)}));
  document.getElementById("next").addEventListener("click", () => go({offset: offset + limit}));
  main.querySelectorAll("th[data-sort]").forEach((th) => th.addEventListener("click", () =>
    go({sort: th.dataset.sort, order: state.sort === th.dataset.sort && state.order === "desc" ? "asc" : "desc", offset: 0})));
  if (state.q) { const q = document.getElementById("q"); q.focus(); q.setSelectionRange(q.value.length, q.value.length); }
  if (data.items.some((i) => i.status === "running" || i.status === "queued")) poller = setTimeout(refresh, 5000);
}
// the list re-read while jobs run (see listPage: a refresh skips the redraw while the user is selecting or typing)
function refresh() { route(true); }

// Selected rows: compare them (the compare page, a search's checkbox brings all its trials) or stop them (each
// through the job's own stop endpoint, after an in-page confirmation: confirm() is ignored in Airflow's iframe).
function wireSelection() {
  const selected = () => ({jobs: [...main.querySelectorAll(".select-job:checked")], runs: [...main.querySelectorAll(".select-search:checked")]});
  const compareButton = document.getElementById("compare-selected"), stopButton = document.getElementById("stop-selected");
  const stoppable = (box) => ["running", "queued"].includes(box.dataset.status);
  const update = () => {
    const {jobs, runs} = selected();
    document.getElementById("selected").textContent = `${jobs.length + runs.length} selected`;
    compareButton.disabled = !(jobs.length >= 2 || runs.length >= 1);
    stopButton.disabled = !jobs.some(stoppable);
  };
  main.querySelector("#jobs").addEventListener("change", (e) => { if (e.target.matches(".select-job, .select-search")) update(); });
  compareButton.onclick = () => {
    const {jobs, runs} = selected();
    const params = new URLSearchParams();
    runs.forEach((r) => params.append("run", r.value));
    jobs.forEach((j) => params.append("job", j.value));
    location.href = `compare.html?${params}`;
  };
  stopButton.onclick = () => {
    const targets = selected().jobs.filter(stoppable);
    const panel = document.getElementById("stop-confirm");
    panel.innerHTML = `<p>Stop ${targets.length} training ${targets.length === 1 ? "job" : "jobs"}: <b>${targets.map((t) => esc(t.dataset.job)).join(", ")}</b>?
      Their training ends now; what they wrote so far is still uploaded.</p><div class="actions flush">
      <button class="danger" id="stop-many-yes">Stop ${targets.length === 1 ? "it" : "them"}</button><button id="stop-many-no">Keep them running</button></div>
      <ul id="stop-results"></ul>`;
    panel.hidden = false;
    document.getElementById("stop-many-no").onclick = () => { panel.hidden = true; panel.innerHTML = ""; };
    document.getElementById("stop-many-yes").onclick = async () => {
      document.getElementById("stop-many-yes").disabled = true;
      const results = document.getElementById("stop-results");
      for (const box of targets) {
        const [dag_id, run_id, map_index] = box.value.split("/").map(decodeURIComponent);
        let line;
        try { await api(apiJob({dag_id, run_id, map_index}) + "/stop", {method: "POST", body: "{}"}); line = `${box.dataset.job}: stop requested`; }
        catch (err) { line = `${box.dataset.job}: not stopped (${err.message})`; }
        results.insertAdjacentHTML("beforeend", `<li class="stop-result">${esc(line)}</li>`);
      }
      setTimeout(route, 2500);
    };
  };
}

// the tab on a DAG run: its job (or the trials of its search)
async function runPage(dagId, runId) {
  const data = await pageData(`${BASE}/api/jobs?dag_id=${encodeURIComponent(dagId)}&run_id=${encodeURIComponent(runId)}`);
  const items = data.items;
  if (items.length === 1 && items[0].kind === "job") return jobPage(items[0]);
  if (!items.length) { main.innerHTML = `<p class="muted">This DAG run has no training job (yet).</p>`; return; }
  return listPage(new URLSearchParams({dag_id: dagId}), {run_id: runId});
}

// ---------------------------------------------------------------------------------------------------------------
// one job
function kvTable(rows) {
  return `<table class="kv"><tbody>${rows.map(([k, v]) => `<tr><td>${esc(k)}</td><td class="wrap">${v}</td></tr>`).join("")}</tbody></table>`;
}

// An options object without its unset (null) keys: a local job's spec has two dozen null Kubernetes options.
function setOnly(v) {
  if (!v || typeof v !== "object" || Array.isArray(v)) return v;
  const kept = Object.entries(v).filter(([, x]) => x != null && !(typeof x === "object" && !Array.isArray(x) && !Object.keys(x).length));
  return kept.length ? Object.fromEntries(kept) : null;
}

function specRows(job) {
  const spec = job.spec || {};
  const rows = [];
  const value = (v) => v == null || v === "" ? '<span class="muted">—</span>' : typeof v === "object" ? `<code>${esc(JSON.stringify(v))}</code>` : esc(v);
  for (const key of ["job_name", "base_job_name", "entry_point", "command"]) rows.push([key, value(spec[key])]);
  rows.push(["tags", `<span id="job-tags">${tagChips(spec.tags) || '<span class="muted">—</span>'}</span>`]);
  // the SDK's upload is a content-addressed archive in the workspace: say what it is, keep the path in the tooltip
  const upload = /\/staging\/code\/([^/]+)\/([0-9a-f]{64})\.tar\.gz$/.exec(spec.source_dir || "");
  rows.splice(2, 0, ["source_dir", upload ? `<span id="sdk-upload" title="${esc(spec.source_dir)}">code uploaded by ${esc(upload[1])} with the SDK (sha256 ${upload[2].slice(0, 12)}…)</span>` : value(spec.source_dir)]);
  for (const [k, v] of Object.entries(spec.hyperparameters || {})) rows.push([`hyperparameter ${k}`, value(v)]);
  for (const [k, v] of Object.entries(spec.inputs || {})) rows.push([`channel ${k}`, value(v)]);
  rows.push(["output_path", value(spec.output_path)], ["checkpoint_path", value(spec.checkpoint_path)]);
  const parent = job.resume_parent;
  rows.push(["resume_from", parent ? (parent.dag_id ? `<a href="${jobHref(parent)}" id="parent-link">${esc(parent.job_name)}</a> <span class="muted">${esc(parent.uri)}</span>` : value(parent.uri)) : value(null)]);
  for (const key of ["backend", "layout", "instance_count", "processes_per_host", "distribution", "resources", "image_uri",
    "max_run_seconds", "metric_definitions", "environment", "connections", "kubernetes", "docker"]) {
    if ((key === "kubernetes" || key === "docker") && spec.backend !== key) continue;  // ignored on other backends
    rows.push([key, value(setOnly(spec[key]))]);
  }
  return rows;
}

async function drawMetrics(key) {
  const data = await pageData(apiJob(key) + "/metrics");
  const el = document.getElementById("charts");
  if (!el) return;
  await TrainingCharts.draw(el, [{label: key.job_name || "", series: data.series || {}}]);  // static/charts.js
  if (document.getElementById("job-status")?.dataset.status !== data.status) { route(); return; }  // started or finished: redraw (it polls on)
  const queueLine = document.getElementById("queue-line");
  if (queueLine && data.queue_line) queueLine.textContent = data.queue_line;  // its place moves while it waits
  else if (data.status === "running" || data.status === "queued") {
    poller = setTimeout(() => { drawMetrics(key).catch(() => {}); if (refreshLog) refreshLog(); }, 2000);
  }
}

function cloneConf(job, resume) {
  const conf = {...(job.spec && Object.keys(job.spec).length ? job.spec : job.conf)};
  delete conf.job_name;  // a clone is a new job: a new name is derived from its run
  if (resume) conf.resume_from = job.model_uri;
  return conf;
}

// Airflow's 400 for a conf its Params refuse names the param and, for an object, the key inside it under
// "On instance[...]" (jsonschema's text): one line "resources.gpu: -1 is less than the minimum of 0".
function paramProblem(message) {
  const m = /Invalid input for param ([\w.]+): ([^\n]*)/.exec(message);
  if (!m) return message;
  const inside = /On instance((?:\[[^\]]+\])+)/.exec(message);
  const path = inside ? inside[1].match(/\[([^\]]+)\]/g).map((k) => k.slice(1, -1).replace(/^'|'$/g, "")) : [];
  return `${[m[1], ...path].join(".")}: ${m[2]}`;
}

function clonePanel(job, resume) {
  const target = job.task_prefix || !job.conf || !Object.keys(job.conf).length ? "training_job" : job.dag_id;
  const panel = document.getElementById("clone");
  panel.innerHTML = `<h2>${resume ? "Train again from this model" : "Clone"}: trigger <code>${esc(target)}</code> with this spec</h2>
    <p class="muted">Edit the job spec (the DAG's trigger-form fields as JSON) and trigger; the new job gets its own name.</p>
    <textarea id="clone-conf">${esc(JSON.stringify(cloneConf(job, resume), null, 2))}</textarea>
    <div class="actions below"><button class="primary" id="clone-trigger">Trigger ${esc(target)}</button>
    <button id="clone-cancel">Cancel</button><span id="clone-error" class="error"></span></div>`;
  panel.scrollIntoView();
  document.getElementById("clone-cancel").onclick = () => { panel.innerHTML = ""; };
  document.getElementById("clone-trigger").onclick = async () => {
    try {
      const conf = JSON.parse(document.getElementById("clone-conf").value);
      const run = await api(`${ROOT}/api/v2/dags/${encodeURIComponent(target)}/dagRuns`, {method: "POST", body: JSON.stringify({logical_date: null, conf})});
      location.hash = `#/run/${encodeURIComponent(target)}/${encodeURIComponent(run.dag_run_id)}`;
    } catch (err) {
      const problem = err instanceof SyntaxError ? "the spec is not valid JSON: " + err.message : paramProblem(err.message.replace(/^400: /, ""));
      document.getElementById("clone-error").textContent = "Not triggered: " + problem;
    }
  };
}

// Stop asks in the page itself: the view runs in Airflow's sandboxed iframe, where confirm() and alert() are
// ignored. The plugin records who stopped the job and marks its stages under way failed (training_console/stop.py).
function stopPanel(job) {
  const panel = document.getElementById("stop-confirm");
  panel.innerHTML = `<p>Stop training job <b>${esc(job.job_name)}</b>? Its training ends now; what it wrote so far is
    still uploaded.</p><div class="actions"><button class="danger" id="stop-yes">Stop the job</button>
    <button id="stop-no">Keep it running</button><span id="stop-error" class="error"></span></div>`;
  panel.hidden = false;
  document.getElementById("stop-no").onclick = () => { panel.hidden = true; panel.innerHTML = ""; };
  document.getElementById("stop-yes").onclick = async () => {
    const button = document.getElementById("stop-yes");
    button.disabled = true;
    button.textContent = "Stopping…";
    try {
      await api(apiJob(job) + "/stop", {method: "POST", body: "{}"});
      panel.innerHTML = `<p class="muted" id="stop-requested">Stop requested: the job ends in a few seconds.</p>`;
      setTimeout(route, 1500);
    } catch (err) {
      button.disabled = false;
      button.textContent = "Stop the job";
      document.getElementById("stop-error").textContent = "Could not stop it: " + err.message;
    }
  };
}

// The training's log of one host: Airflow's log of the launch task (its REST API), the lines of that host.
async function hostLines(job, host) {
  const launch = job.stages.find((s) => s.stage === "launch_training");
  if (!launch || !launch.try_number) return null;
  const mapped = job.map_index >= 0 ? `&map_index=${job.map_index}` : "";
  const body = await api(`${ROOT}/api/v2/dags/${encodeURIComponent(job.dag_id)}/dagRuns/${encodeURIComponent(job.run_id)}/taskInstances/` +
    `${encodeURIComponent(launch.task_id)}/logs/${launch.try_number}?full_content=true${mapped}`);
  // the training's own lines (the launch stage logs each with its own logger), not Airflow's records about the
  // task (deprecation warnings, "DAG bundles loaded", ...); a plain-text log is shown whole
  const entries = body.content || [];
  const training = entries.filter((m) => typeof m === "object" && String(m.logger || "").endsWith("LaunchTrainingOperator"));
  const lines = (training.length ? training : entries).map((m) => typeof m === "string" ? m : m.event || "")
    .filter((l) => l && !l.startsWith("::group::") && !l.startsWith("::endgroup::"));
  const multi = job.hosts.length > 1, prefix = `[${host}] `;
  return multi ? lines.filter((l) => l.startsWith(prefix)).map((l) => l.slice(prefix.length)) : lines;
}

// The log viewer: a tab per host, a search that keeps the matching lines (highlighted), follow (stay at the end
// while the job writes) and download of the host's whole log. Lines are the training's output: escaped.
function logViewer(job, running) {
  const view = {host: job.hosts[0], lines: null};
  const pre = document.getElementById("host-log"), search = document.getElementById("log-search");
  const follow = document.getElementById("log-follow"), count = document.getElementById("log-count");
  const render = () => {
    if (view.lines == null) { pre.textContent = "Training has not started."; count.textContent = ""; return; }
    const q = search.value.trim().toLowerCase();
    const shown = q ? view.lines.filter((l) => l.toLowerCase().includes(q)) : view.lines;
    const mark = (line) => {
      if (!q) return esc(line);
      let out = "", at = 0, lower = line.toLowerCase(), i;
      while ((i = lower.indexOf(q, at)) >= 0) { out += esc(line.slice(at, i)) + `<mark>${esc(line.slice(i, i + q.length))}</mark>`; at = i + q.length; }
      return out + esc(line.slice(at));
    };
    pre.innerHTML = shown.length ? shown.map((l) => `<span class="log-line">${mark(l)}</span>`).join("\n")
      : `<span class="muted">${view.lines.length ? "no line matches" : "(no output from this host yet)"}</span>`;
    count.textContent = q ? `${shown.length} of ${view.lines.length} lines` : `${view.lines.length} lines`;
    if (follow.checked) pre.scrollTop = pre.scrollHeight;
  };
  const load = async () => {
    try { view.lines = await hostLines(job, view.host); } catch (e) { pre.textContent = e.message; return; }
    render();
  };
  document.querySelectorAll(".host-tab").forEach((tab) => tab.addEventListener("click", () => {
    document.querySelectorAll(".host-tab").forEach((t) => t.setAttribute("aria-selected", String(t === tab)));
    view.host = tab.dataset.host;
    view.lines = null;
    pre.textContent = "Loading…";
    load();
  }));
  search.addEventListener("input", render);
  follow.addEventListener("change", render);
  follow.checked = running;
  document.getElementById("log-download").addEventListener("click", () => {
    const blob = new Blob([(view.lines || []).join("\n") + "\n"], {type: "text/plain"});
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = `${job.job_name || job.run_id}-${view.host}.log`;
    document.body.appendChild(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  });
  return load;
}

// The job's output prefix, every file: a download link (streamed or presigned, as the artifacts) and, for text
// and JSON, an inline preview. File names are the job's: escaped, and sent back URL-encoded segment by segment.
const TEXT_FILE = /(\.(txt|log|json|jsonl|csv|tsv|ya?ml|md|out|err|ini|cfg|toml|py|sh)|(^|\/)failure)$/i;
const fmtSize = (n) => n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1048576).toFixed(1)} MiB`;
async function showFiles(job) {
  const list = document.getElementById("file-list"), previewBox = document.getElementById("file-preview");
  if (!job.validated) { list.innerHTML = '<p class="muted">The spec was not validated: no output.</p>'; return; }
  let data;
  try { data = await api(apiJob(job) + "/files"); } catch (err) { list.innerHTML = `<p class="error">${esc(err.message)}</p>`; return; }
  const fileUrl = (path) => `${apiJob(job)}/files/${path.split("/").map(encodeURIComponent).join("/")}`;
  const rows = data.files.map((f) => `<tr class="output-file" data-path="${esc(f.path)}"><td class="wrap">
      <a href="${esc(fileUrl(f.path))}" class="file-download" download>${esc(f.path)}</a></td><td class="num">${fmtSize(f.size)}</td>
      <td>${TEXT_FILE.test(f.path) ? `<button class="file-preview" data-path="${esc(f.path)}">Preview</button>` : ""}</td></tr>`).join("");
  list.innerHTML = `<p class="muted">${esc(data.prefix)}</p>` + (rows ? `<table id="output-files"><tbody>${rows}</tbody></table>` :
    `<p class="muted">No files under the output prefix ${job.status === "running" || job.status === "queued" ? "yet (they are uploaded when training ends)" : ""}</p>`) +
    (data.truncated ? `<p class="muted">Only the first ${data.files.length} files are listed.</p>` : "");
  list.querySelectorAll("button.file-preview").forEach((button) => button.addEventListener("click", async () => {
    const path = button.dataset.path;
    previewBox.innerHTML = `<p class="muted">Loading ${esc(path)}…</p>`;
    try {
      const file = await api(fileUrl(path) + "?preview=true");
      let text = file.text;
      if (file.kind === "json" && !file.truncated) { try { text = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* shown as it is */ } }
      previewBox.innerHTML = `<h3 class="muted">${esc(path)} · ${fmtSize(file.size)}${file.truncated ? ` · first ${fmtSize(file.text.length)} shown` : ""}</h3><pre id="file-preview-text">${esc(text)}</pre>`;
    } catch (err) { previewBox.innerHTML = `<p class="error">${esc(err.message)}</p>`; }
  }));
}

async function jobPage(key, section) {
  const job = await pageData(apiJob(key));
  document.getElementById("where").innerHTML = `<span class="muted">/</span> <a href="#/?dag_id=${encodeURIComponent(job.dag_id)}">${esc(job.dag_id)}</a> <span class="muted">/</span> ${esc(job.job_name || job.run_id)}`;
  const ended = job.status === "failed" || job.status === "stopped";
  const running = job.status === "running" || job.status === "queued";
  const failure = ended ? `<section id="failure"><h2>${job.status === "stopped" ? "Stopped" : "Failure"}</h2>
      ${kvTable([["stage", esc(STAGE_LABELS[job.failed_stage] || job.failed_stage || "")], ...(job.failure_class ? [["class", esc(job.failure_class)]] : [])])}
      <pre id="failure-reason">${esc(job.failure || "No reason recorded: see the failed task's log.")}</pre></section>` : "";
  const stageRows = job.stages.filter((s) => s.state).map((s) => {
    const secs = s.start ? ((s.end ? new Date(s.end) : new Date()) - new Date(s.start)) / 1000 : null;
    return `<tr><td>${esc(STAGE_LABELS[s.stage])}</td><td>${esc(s.state)}</td><td class="num">${fmtDur(secs)}</td><td>${airflowLink(`/dags/${encodeURIComponent(job.dag_id)}/runs/${encodeURIComponent(job.run_id)}/tasks/${encodeURIComponent(s.task_id)}${job.map_index >= 0 ? "/mapped/" + job.map_index : ""}`, "task")}</td></tr>`;
  }).join("");
  const artifactRows = job.artifacts.map((a) => {
    const downloadable = ["model.tar.gz", "metrics.json", "failure", "output.tar.gz"].includes(a.name) && a.available;
    const link = downloadable ? `<a href="${apiJob(job)}/artifacts/${a.name}" class="artifact" data-artifact="${esc(a.name)}" ${a.name.endsWith(".gz") ? "download" : 'target="_self"'}>${esc(a.name)}</a>` : esc(a.name);
    return `<tr><td>${link}</td><td class="wrap">${esc(a.uri)}${a.available === false ? ` <span class="muted">(${running ? "not uploaded yet" : "not uploaded"})</span>` : ""}</td></tr>`;
  }).join("");
  main.innerHTML = `
    <div class="head"><h1 id="job-name">${esc(job.job_name || "(spec not validated)")}</h1>
      <span id="job-status" data-status="${esc(job.status)}">${badge(job.status)}</span>
      <span class="muted">${esc(job.dag_id)} · ${airflowLink(`/dags/${encodeURIComponent(job.dag_id)}/runs/${encodeURIComponent(job.run_id)}`, job.run_id)}${job.map_index >= 0 ? " · trial " + (job.map_index + 1) : ""}</span>
      <div class="actions">
        ${running ? '<button class="danger" id="stop">Stop</button>' : ""}
        <button id="clone-btn">Clone</button>
        ${job.model_uri ? '<button id="resume-btn">Train again from this model</button>' : ""}
      </div></div>
    ${job.status === "queued" && job.queue ? `<p id="queue-line" class="muted">${esc(job.queue_line || "queued in " + job.queue)}</p>` : ""}
    <div id="stop-confirm" class="confirm" hidden></div>
    <div id="clone"></div>
    ${failure}
    ${job.files_note ? `<p id="files-note" class="warning">${esc(job.files_note)}</p>` : ""}
    <section id="metrics"><h2>Metrics</h2><div class="charts" id="charts"><p class="muted">Loading…</p></div></section>
    <div class="grid2">
      <section><h2>Spec</h2>${kvTable(specRows(job))}</section>
      <div>
        <section><h2>Stages</h2><table><tbody>${stageRows}</tbody></table>
          <p class="muted">created ${esc(fmtTime(job.created))} · staging ${fmtDur(job.durations.staging) || "—"} · training ${fmtDur(job.durations.training) || "—"} · upload ${fmtDur(job.durations.upload) || "—"}</p></section>
        <section><h2>Artifacts</h2><p class="muted">${esc(job.output_uri || "")}</p><table id="artifacts"><tbody>${artifactRows}</tbody></table></section>
      </div>
    </div>
    <section id="files"><h2>Output files</h2><div id="file-list"><p class="muted">Loading…</p></div><div id="file-preview"></div></section>
    <section id="logs"><h2>Logs</h2>
      <div class="filters"><span role="tablist">${job.hosts.map((h, i) => `<button class="host-tab" role="tab" data-host="${esc(h)}" aria-selected="${i === 0}">${esc(h)}</button>`).join("")}</span>
        <input id="log-search" type="search" placeholder="search this host's log" size="28">
        <label class="muted"><input type="checkbox" id="log-follow"> follow</label>
        <button id="log-download">Download log</button><span class="muted" id="log-count"></span></div>
      <pre id="host-log">Loading…</pre></section>`;
  document.getElementById("clone-btn").onclick = () => clonePanel(job, false);
  if (job.model_uri) document.getElementById("resume-btn").onclick = () => clonePanel(job, true);
  if (running) document.getElementById("stop").onclick = () => stopPanel(job);
  refreshLog = logViewer(job, running);
  refreshLog();
  showFiles(job);
  if (section) document.getElementById(section)?.scrollIntoView();
  await drawMetrics(job);
}

route();
