// The training-jobs page's hash routes (#/ the list, #/job/<dag_id>/<run_id>/<map_index>[/<section>] one job,
// #/run/<dag_id>/<run_id> a DAG run's tab), the one timer that re-reads the page shown, and links into Airflow's UI.
// The pages register with start() (console.js): they import from here, never the reverse.
import {ROOT, esc} from "./console-util.js";
import {api} from "./console-api.js";

export const main = document.getElementById("main");
let pages = null;  // {list, job, run}: start()'s
let poller = null;
let routeSeq = 0;  // counts routes: a page whose data arrives after a newer route began draws nothing

// A page's data. The user may have gone elsewhere while it was read (or a finished job's redraw raced their click):
// then the older page stops here instead of drawing over the page they went to.
export class Superseded extends Error {}
export async function pageData(path) {
  const seq = routeSeq;
  const data = await api(path);
  if (seq !== routeSeq) throw new Superseded("superseded by a newer page");
  return data;
}

// The page shown re-reads itself later (a running job, a list with running jobs); the next route cancels it.
export function later(fn, ms) { poller = setTimeout(fn, ms); }

function parseHash() {
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return {parts, params: new URLSearchParams(query || "")};
}

export async function route(timed = false) {  // timed: the list's timed refresh, not the user's navigation
  routeSeq += 1;
  if (poller) { clearTimeout(poller); poller = null; }
  const {parts, params} = parseHash();
  try {
    if (parts[0] === "job" && parts.length >= 4) await pages.job({dag_id: parts[1], run_id: parts[2], map_index: Number(parts[3])}, parts[4]);
    else if (parts[0] === "run" && parts.length >= 3) await pages.run(parts[1], parts[2]);
    else await pages.list(params, {}, timed);
  } catch (err) {
    if (err instanceof Superseded) return;  // the newer route draws
    main.innerHTML = `<p class="error" id="error">${esc(err.message)}</p>`;
  }
}

export function start(routes) {
  pages = routes;
  window.addEventListener("hashchange", () => route());
  route();
}

// Links into the Airflow UI: inside the UI's iframe (sandboxed: no top navigation) the parent's router is driven
// through its history, which same-origin frames may use; opened on its own, a plain link.
export function airflowLink(path, label) {
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
