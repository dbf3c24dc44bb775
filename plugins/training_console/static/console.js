// The training-jobs page (ui/index.html): plain ES modules, no build step, no CDN. Data from the plugin's API
// (/training-jobs/api), logs and actions through Airflow's REST API (/api/v2), both authenticated by the Airflow UI's
// session cookie. This entry wires the routes to their pages:
//   console-router.js  hash routes, the page's re-read timer, links into Airflow's UI
//   console-list.js    the list (filters, sorting, hyperparameter columns, selection)
//   console-job.js     one job: spec, stages, artifacts, metrics (charts.js); its logs (console-logs.js), output
//                      files (console-files.js), Clone and Stop (console-clone-stop.js)
//   console-util.js, console-api.js   the helpers the compare page (compare.js) shares
import {BASE} from "./console-util.js";
import {main, pageData, start} from "./console-router.js";
import {listPage} from "./console-list.js";
import {jobPage} from "./console-job.js";

// the tab on a DAG run: its job (or the trials of its search)
async function runPage(dagId, runId) {
  const data = await pageData(`${BASE}/api/jobs?dag_id=${encodeURIComponent(dagId)}&run_id=${encodeURIComponent(runId)}`);
  const items = data.items;
  if (items.length === 1 && items[0].kind === "job") return jobPage(items[0]);
  if (!items.length) { main.innerHTML = `<p class="muted">This DAG run has no training job (yet).</p>`; return; }
  return listPage(new URLSearchParams({dag_id: dagId}), {run_id: runId});
}

start({list: listPage, job: jobPage, run: runPage});
