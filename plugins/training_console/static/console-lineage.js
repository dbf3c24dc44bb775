// A job page's Lineage panel (#lineage, #/job/.../lineage scrolls to it): what made the job's model, from the record
// its upload stage kept (GET .../lineage, training_console/lineage.py): the code and its digest, each channel's data
// version (shortened; the whole one on hover and copied by its button), the image and the digest the backend ran, the
// hyperparameters, resources and hosts, versions, who triggered it, the run it reproduces and the chain of parent
// models, each linked to its job's page when the user may read that job. Every value is the job's: shown escaped.
import {apiJob, esc, jobHref} from "./console-util.js";
import {Superseded, pageData} from "./console-router.js";

const dash = '<span class="muted">-</span>';
const val = (v) => v == null || v === "" ? dash : esc(v);
const code = (v) => v == null || v === "" ? dash : `<code>${esc(v)}</code>`;
const json = (v) => v && Object.keys(v).length ? `<code>${esc(JSON.stringify(v))}</code>` : dash;

function fmtBytes(n) {
  if (n == null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

// A data version (a sha256): its first 12 characters, the whole one in the tooltip and on the copy button.
function version(v, channel) {
  if (!v) return dash;
  return `<code class="data-version" data-channel="${esc(channel)}" data-version="${esc(v)}" title="${esc(v)}">${esc(v.slice(0, 12))}…</code>` +
    ` <button class="copy" data-copy="${esc(v)}" title="copy the whole data version">copy</button>`;
}

const plural = (n, what) => `${n} ${what}${n === 1 ? "" : "s"}`;
const jobLink = (ref, label) => ref ? `<a href="${jobHref(ref)}" class="lineage-job" data-job="${esc(ref.job_name)}">${esc(label)}</a>` : esc(label);

function parentItem(p) {
  const r = p.record;
  const made = r ? `<br><span class="muted">code ${esc((r.code_digest || "?").slice(0, 19))} · data ${esc(Object.entries(r.data_versions || {}).map(([c, v]) => `${c}@${(v || "?").slice(0, 12)}`).join(", ") || "none")} · image ${esc(r.image || "-")}@${esc(r.image_digest || "-")}</span>` : "";
  return `<li class="parent-link" data-model="${esc(p.model_uri || p.requested)}">${p.job_name ? jobLink(p.job, p.job_name) + " " : ""}<span class="muted wrap">${esc(p.model_uri || p.requested)}</span>${made}</li>`;
}

function panel(data) {
  if (!data.record) return `<p class="muted" id="lineage-note">${esc(data.note)}</p>`;
  const r = data.record;
  const rows = [
    ["code", `<span id="lineage-code-source" class="wrap">${esc(r.code.source_uri)}</span>`],
    ["code digest", `<span id="lineage-code-digest">${code(r.code.digest)}</span>${r.code.files != null ? ` <span class="muted">${esc(plural(r.code.files, "file"))}, ${esc(fmtBytes(r.code.bytes))}</span>` : ""}`],
  ];
  if (r.code.archive_sha256) rows.push(["SDK archive", code(r.code.archive_sha256)]);
  for (const [name, c] of Object.entries(r.channels || {})) {
    rows.push([`channel ${name}`, `<span class="wrap">${esc(c.uri)}</span><br>${version(c.data_version, name)}` +
      (c.objects != null ? ` <span class="muted">${esc(plural(c.objects, "object"))}, ${esc(fmtBytes(c.bytes))}</span>` : "")]);
  }
  rows.push(["image", `<span id="lineage-image">${val(r.image.name)}</span> <span class="muted">(${esc(r.image.backend)})</span>`],
    ["image digest", `<span id="lineage-image-digest">${code(r.image.digest)}</span>`],
    ["hyperparameters", json(r.hyperparameters)],
    ["resources", json(Object.fromEntries(Object.entries(r.resources).filter(([k, v]) => k !== "hosts" && v != null)))],
    ["hosts", val((r.resources.hosts || []).join(", "))],
    ["triggered by", `<span id="lineage-user">${val(r.airflow.triggering_user || r.airflow.owner)}</span>`],
    ["versions", json(r.versions)]);
  if (data.reproduces) rows.push(["reproduces", `<span id="lineage-reproduces">${jobLink(data.reproduces.job, data.reproduces.job_name)}</span>`]);
  if (r.published_uri) rows.push(["published", `<span class="wrap muted">${esc(r.published_uri)}</span>`]);
  const chain = data.parents.length ? `<ol id="parent-chain">${data.parents.map(parentItem).join("")}</ol>` : '<p class="muted" id="parent-chain">No parent model: trained from scratch.</p>';
  return `<table class="kv"><tbody>${rows.map(([k, v]) => `<tr><td>${esc(k)}</td><td class="wrap">${v}</td></tr>`).join("")}</tbody></table>
    <h3>Parent models</h3>${chain}${data.chain_note ? `<p class="muted" id="chain-note">${esc(data.chain_note)}</p>` : ""}`;
}

export async function showLineage(job, section) {
  const el = document.getElementById("lineage-body");
  if (!el) return;
  let data;
  try { data = await pageData(apiJob(job) + "/lineage"); } catch (err) {
    if (err instanceof Superseded) return;  // the user went elsewhere: the newer page draws
    el.innerHTML = `<p class="error" id="lineage-note">${esc(err.message)}</p>`;
    return;
  }
  el.innerHTML = panel(data);
  el.querySelectorAll("button.copy").forEach((b) => {
    b.onclick = () => navigator.clipboard?.writeText(b.dataset.copy).then(() => { b.textContent = "copied"; }, () => { b.textContent = "select it: " + b.dataset.copy; });
  });
  if (section === "lineage") document.getElementById("lineage")?.scrollIntoView();
}
