// Clone (or train again from a job's model): the job's spec, edited in the page, triggers a new run of its DAG through
// Airflow's REST API. Reproduce: the same, with the conf the plugin builds from the job's lineage record (the same
// code digest, data versions, image and hyperparameters). Stop: one job (its page) or the list's selected jobs, each
// through the job's own stop endpoint.
import {ROOT, apiJob, esc} from "./console-util.js";
import {api} from "./console-api.js";
import {route} from "./console-router.js";

function cloneConf(job, resume) {
  const conf = {...(job.spec && Object.keys(job.spec).length ? job.spec : job.conf)};
  delete conf.job_name;  // a clone is a new job: a new name is derived from its run
  delete conf.owner;  // the platform sets it from whoever triggers the clone (validate_spec refuses a given one)
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

export function clonePanel(job, resume) {
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
export function stopPanel(job) {
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

// The list's selected jobs, asked in the page too; a line per job says whether its stop was requested.
export function stopManyPanel(targets) {
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
}

// Reproduce: the plugin answers the DAG to trigger and the conf that pins what the job ran (training_console/
// reproduce.py) or one line why it cannot; the trigger is Airflow's REST API with the user's own session, as Clone's.
// The new run refuses with one line naming the channel when a channel's data changed since, unless the box is ticked.
export async function reproducePanel(key) {
  const panel = document.getElementById("clone");
  panel.innerHTML = `<p class="muted">Reading the job's lineage…</p>`;
  let found;
  try {
    found = await api(apiJob(key) + "/reproduction");
  } catch (err) {
    panel.innerHTML = `<div class="actions below"><span id="reproduce-error" class="error"></span><button id="reproduce-cancel">Close</button></div>`;
    document.getElementById("reproduce-error").textContent = "Cannot reproduce: " + err.message.replace(/^\d+: /, "");
    document.getElementById("reproduce-cancel").onclick = () => { panel.innerHTML = ""; };
    return;
  }
  const pins = found.conf.reproduces;
  const channels = Object.entries(pins.data_versions).map(([c, v]) => `${esc(c)} @ <code>${esc(v.slice(0, 12))}</code>`).join(", ");
  panel.innerHTML = `<h2>Reproduce ${esc(pins.job_name)}: trigger <code>${esc(found.dag_id)}</code></h2>
    <p class="muted" id="reproduce-pins">code <code>${esc(pins.code_digest)}</code>; data ${channels || "none"};
    image ${esc(found.conf.image_uri || "-")}${pins.image_digest ? ` @ <code>${esc(pins.image_digest)}</code>` : ""}</p>
    <label class="muted"><input type="checkbox" id="reproduce-allow-changed"> train on a channel's new data if it changed since</label>
    <div class="actions below"><button class="primary" id="reproduce-trigger">Trigger ${esc(found.dag_id)}</button>
    <button id="reproduce-cancel">Cancel</button><span id="reproduce-error" class="error"></span></div>`;
  panel.scrollIntoView();
  document.getElementById("reproduce-cancel").onclick = () => { panel.innerHTML = ""; };
  document.getElementById("reproduce-trigger").onclick = async () => {
    const conf = {...found.conf, reproduces: {...pins, allow_changed_data: document.getElementById("reproduce-allow-changed").checked}};
    try {
      const run = await api(`${ROOT}/api/v2/dags/${encodeURIComponent(found.dag_id)}/dagRuns`, {method: "POST", body: JSON.stringify({logical_date: null, conf})});
      location.hash = `#/run/${encodeURIComponent(found.dag_id)}/${encodeURIComponent(run.dag_run_id)}`;
    } catch (err) {
      document.getElementById("reproduce-error").textContent = "Not triggered: " + paramProblem(err.message.replace(/^400: /, ""));
    }
  };
}
