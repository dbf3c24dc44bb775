// One job's page (#/job/<dag_id>/<run_id>/<map_index>[/<section>]): its failure, metrics (charts.js), spec, stages,
// artifacts, lineage (console-lineage.js), output files and logs, with Stop, Clone and "Train again from this model"; re-read while it runs.
import {apiJob, badge, esc, fmtDur, fmtTime, jobHref, tagChips} from "./console-util.js";
import {airflowLink, later, main, pageData, route} from "./console-router.js";
import {clonePanel, reproducePanel, stopPanel} from "./console-clone-stop.js";
import {showFiles} from "./console-files.js";
import {showLineage} from "./console-lineage.js";
import {logViewer} from "./console-logs.js";
import {draw as drawCharts} from "./charts.js";

let refreshLog = null;  // the open job's log, re-read while it trains

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

// The promotion decision of a retraining run (its approve_promotion task, from the API): one line, none when nobody
// was asked. Its words are the API's (who, why): set as textContent, never as markup.
function approvalLine(a) {
  if (!a || !a.asked) return "";
  if (a.timed_out) return `Promotion: no answer within ${a.timeout || "the timeout"}, ${a.decision} (the DAG's default)`;
  return `Promotion ${a.decision} by ${a.by || "someone"}${a.at ? " at " + fmtTime(a.at) : ""}${a.reason ? ": " + a.reason : ""}`;
}

// An elastic job's hosts that were started again (the launch stage's result, from the API): one line, none without.
function restartsLine(restarts) {
  const hosts = Object.entries(restarts || {});
  if (!hosts.length) return "";
  return "Hosts started again: " + hosts.map(([host, n]) => `${host} (${n}×)`).join(", ");
}

async function drawMetrics(key) {
  const data = await pageData(apiJob(key) + "/metrics");
  const el = document.getElementById("charts");
  if (!el) return;
  await drawCharts(el, [{label: key.job_name || "", series: data.series || {}}]);
  if (document.getElementById("job-status")?.dataset.status !== data.status) { route(); return; }  // started or finished: redraw (it polls on)
  const queueLine = document.getElementById("queue-line");
  if (queueLine && data.queue_line) queueLine.textContent = data.queue_line;  // its place moves while it waits
  else if (data.status === "running" || data.status === "queued") {
    later(() => { drawMetrics(key).catch(() => {}); if (refreshLog) refreshLog(); }, 2000);
  }
}

export async function jobPage(key, section) {
  const job = await pageData(apiJob(key));
  document.getElementById("where").innerHTML = `<span class="muted">/</span> <a href="#/?dag_id=${encodeURIComponent(job.dag_id)}">${esc(job.dag_id)}</a> <span class="muted">/</span> ${esc(job.job_name || job.run_id)}`;
  const ended = job.status === "failed" || job.status === "stopped";
  const running = job.status === "running" || job.status === "queued";
  const failure = ended ? `<section id="failure"><h2>${job.status === "stopped" ? "Stopped" : "Failure"}</h2>
      ${kvTable([["stage", esc(job.failed_stage_label || job.failed_stage || "")], ...(job.failure_class ? [["class", esc(job.failure_class)]] : [])])}
      <pre id="failure-reason">${esc(job.failure || "No reason recorded: see the failed task's log.")}</pre></section>` : "";
  const stageRows = job.stages.filter((s) => s.state).map((s) => {
    const secs = s.start ? ((s.end ? new Date(s.end) : new Date()) - new Date(s.start)) / 1000 : null;
    return `<tr><td>${esc(s.label)}</td><td>${esc(s.state)}</td><td class="num">${fmtDur(secs)}</td><td>${airflowLink(`/dags/${encodeURIComponent(job.dag_id)}/runs/${encodeURIComponent(job.run_id)}/tasks/${encodeURIComponent(s.task_id)}${job.map_index >= 0 ? "/mapped/" + job.map_index : ""}`, "task")}</td></tr>`;
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
        <button id="reproduce-btn" title="Run again on the same code digest, data versions, image and hyperparameters (from its lineage)">Reproduce</button>
        ${job.model_uri ? '<button id="resume-btn">Train again from this model</button>' : ""}
      </div></div>
    ${job.status === "queued" && job.queue ? `<p id="queue-line" class="muted">${esc(job.queue_line || "queued in " + job.queue)}</p>` : ""}
    ${approvalLine(job.approval) ? '<p id="approval"></p>' : ""}
    ${restartsLine(job.restarts) ? '<p id="restarts" class="muted"></p>' : ""}
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
    <section id="lineage"><h2>Lineage</h2><div id="lineage-body"><p class="muted">Loading…</p></div></section>
    <section id="files"><h2>Output files</h2><div id="file-list"><p class="muted">Loading…</p></div><div id="file-preview"></div></section>
    <section id="logs"><h2>Logs</h2>
      <div class="filters"><span role="tablist">${job.hosts.map((h, i) => `<button class="host-tab" role="tab" data-host="${esc(h)}" aria-selected="${i === 0}">${esc(h)}</button>`).join("")}</span>
        <input id="log-search" type="search" placeholder="search this host's log" size="28">
        <label class="muted"><input type="checkbox" id="log-follow"> follow</label>
        <button id="log-download">Download log</button><span class="muted" id="log-count"></span></div>
      <pre id="host-log">Loading…</pre></section>`;
  const approval = document.getElementById("approval");
  if (approval) { approval.textContent = approvalLine(job.approval); approval.dataset.decision = job.approval.decision; }
  const restarts = document.getElementById("restarts");
  if (restarts) restarts.textContent = restartsLine(job.restarts);
  document.getElementById("clone-btn").onclick = () => clonePanel(job, false);
  document.getElementById("reproduce-btn").onclick = () => reproducePanel(job);
  if (job.model_uri) document.getElementById("resume-btn").onclick = () => clonePanel(job, true);
  if (running) document.getElementById("stop").onclick = () => stopPanel(job);
  refreshLog = logViewer(job, running);
  refreshLog();
  showFiles(job);
  showLineage(job, section);
  if (section) document.getElementById(section)?.scrollIntoView();
  await drawMetrics(job);
}
