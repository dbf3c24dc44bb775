// The helpers every script of the training-jobs pages shares (console.js's pages, compare.js, charts.js): where the
// plugin and Airflow are served, HTML escaping, number and time formats, and a job's key in URLs. Plain ES modules,
// no build step, no CDN: each page loads its entry with <script type="module">, allowed by the CSP's script-src 'self'.
export const BASE = location.pathname.replace(/\/ui\/.*$/, "");  // /training-jobs
export const ROOT = BASE.replace(/\/training-jobs$/, "");         // where Airflow is served


// Everything a job, its tags, files or logs say is theirs: shown escaped.
export const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));

export const fmtNum = (v) => typeof v === "number" ? (Math.abs(v) >= 1000 || Number.isInteger(v) ? String(v) : v.toPrecision(4)) : "";
export function fmtDur(s) {
  if (s == null) return "";
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return Math.floor(s / 60) + " m " + Math.round(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " m";
}
export const fmtTime = (iso) => iso ? new Date(iso).toLocaleString() : "";

// A job is <dag_id>/<run_id>/<map_index> (a search's trial has its map index, a single job -1), each part URL-encoded:
// the same path in the view's hash routes, the plugin's API, the list's checkboxes and the compare page's query.
const keyPath = (...parts) => parts.map((p) => encodeURIComponent(p)).join("/");
export const jobKey = (k) => keyPath(k.dag_id, k.run_id, k.map_index);
export const runKey = (k) => keyPath(k.dag_id, k.run_id);  // a search: every trial of the run
export const jobHref = (k, section) => `#/job/${jobKey(k)}` + (section ? "/" + section : "");
export const apiJob = (k) => `${BASE}/api/jobs/${jobKey(k)}`;

export const badge = (status) => `<span class="badge s-${esc(status)}" data-status="${esc(status)}">${esc(status)}</span>`;

// tags are what the triggering user typed: shown escaped, as "name" or "name: value"
const tagText = (name, value) => value ? `${name}: ${value}` : name;
export const tagChips = (tags) => Object.entries(tags || {}).map(([k, v]) => `<span class="tag" data-tag="${esc(k)}">${esc(tagText(k, v))}</span>`).join(" ");
