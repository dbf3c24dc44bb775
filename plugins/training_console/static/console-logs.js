// The job page's "Logs" section.
import {ROOT, esc} from "./console-util.js";
import {api} from "./console-api.js";

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
export function logViewer(job, running) {
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
