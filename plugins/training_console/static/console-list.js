// The list of training jobs (#/?<filters>): filters, sortable columns, the hyperparameter columns a user picks, a
// search's trials under it, paging, and the selected rows compared or stopped. Re-read while jobs run.
import {BASE, badge, esc, fmtDur, fmtNum, fmtTime, jobHref, jobKey, runKey, tagChips} from "./console-util.js";
import {later, main, pageData, route} from "./console-router.js";
import {stopManyPanel} from "./console-clone-stop.js";

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

const hpText = (v) => v == null ? "" : typeof v === "number" ? fmtNum(v) : String(v);

function jobCells(row, metricNames, hpNames = []) {
  const star = row.best ? `<span class="best" title="best trial">★</span> ` : "";
  const failed = row.status === "failed" && row.failed_stage ? ` <span class="muted">at ${esc(row.failed_stage_label || row.failed_stage)}${row.failure_class ? " (" + esc(row.failure_class) + ")" : ""}</span>` : "";
  const cells = [
    `<input type="checkbox" class="select-job" value="${esc(jobKey(row))}" data-job="${esc(row.job_name)}" data-status="${esc(row.status)}" aria-label="select ${esc(row.job_name)}">`,
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

export async function listPage(params, fixed = {}, timed = false) {
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
    later(refresh, 5000);
    return;
  }
  const metricNames = data.metric_names;
  const hpNames = chosenHyperparameters(state, data.hyperparameter_names || []);
  const head = [...COLUMNS, ...hpNames.map((h) => [null, h]), ...metricNames.map((m) => ["metric:" + m, m])].map(([key, label]) =>
    `<th${key ? ` class="sortable${state.sort === key ? " sorted" + (state.order === "asc" ? " asc" : "") : ""}" data-sort="${esc(key)}"` : ""}>${esc(label)}</th>`).join("");
  const rows = data.items.map((item) => {
    if (item.kind !== "search") return `<tr class="job" data-job="${esc(item.job_name)}">${jobCells(item, metricNames, hpNames)}</tr>`;
    const best = item.best_job_name ? ` · best <span class="best">★</span> ${esc(item.best_job_name)} (${esc(item.objective)} ${fmtNum(item.metrics?.[item.objective])})` : "";
    return `<tr class="group" data-search="${esc(item.job_name)}"><td><input type="checkbox" class="select-search" value="${esc(runKey(item))}" aria-label="select every trial of ${esc(item.job_name)}"></td><td colspan="${COLUMNS.length - 1 + hpNames.length + metricNames.length}">` +
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
  if (data.items.some((i) => i.status === "running" || i.status === "queued")) later(refresh, 5000);
}
// the list re-read while jobs run (see listPage: a refresh skips the redraw while the user is selecting or typing)
function refresh() { route(true); }

// Selected rows: compare them (the compare page, a search's checkbox brings all its trials) or stop them
// (console-clone-stop.js).
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
  stopButton.onclick = () => stopManyPanel(selected().jobs.filter(stoppable));
}
