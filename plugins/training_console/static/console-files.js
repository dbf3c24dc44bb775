// The job page's "Output files" section.
import {apiJob, esc} from "./console-util.js";
import {api} from "./console-api.js";

// The job's output prefix, every file: a download link (streamed or presigned, as the artifacts) and, for text
// and JSON, an inline preview. File names are the job's: escaped, and sent back URL-encoded segment by segment.
const TEXT_FILE = /(\.(txt|log|json|jsonl|csv|tsv|ya?ml|md|out|err|ini|cfg|toml|py|sh)|(^|\/)failure)$/i;
const fmtSize = (n) => n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1048576).toFixed(1)} MiB`;
export async function showFiles(job) {
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
