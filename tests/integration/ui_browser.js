// The UI walk-through a new user does, in headless Debian chromium driven by playwright-core (no browser download):
// log in, trigger training_job from the trigger form with the demo values, watch the run succeed, open the
// training-jobs view from Airflow's nav entry (the view in Airflow's sandboxed iframe, as a user meets it), see the
// loss curve, download the model, clone the job with a bad value (refused in the page, naming the field), fix it and
// trigger, watch a running job's curve grow, Stop it (asked in the page) and see who stopped it. Run by
// test_ui_browser.py, which starts Airflow and passes everything in the environment; screenshots go to $UI_SHOTS;
// results to $UI_RESULT.
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { chromium } = require("playwright-core");
const { watchCsp } = require("./csp_watch");

const BASE = process.env.UI_BASE_URL;
const SHOTS = process.env.UI_SHOTS;
const DEMO = JSON.parse(process.env.UI_DEMO_CONF);  // the demo job spec (what `make demo` runs)
const result = { steps: [], csp_violations: [] };

function step(name) { result.steps.push(name); console.log(`[ui] ${name}`); }
async function shot(page, name, options = {}) { await page.screenshot({ path: path.join(SHOTS, `${name}.png`), ...options }); }

async function waitForRun(page, dagId, runId, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let run = {};
    try {  // a busy machine can stall one poll: poll again
      run = await (await page.request.get(`${BASE}/api/v2/dags/${dagId}/dagRuns/${encodeURIComponent(runId)}`, { timeout: 60000 })).json();
    } catch (err) { console.log(`[ui] poll of ${runId}: ${err.message.split("\n")[0]}`); }
    if (run.state === "success" || run.state === "failed") return run;
    assert.ok(Date.now() < deadline, `run ${runId} still ${run.state} after ${timeoutMs / 1000} s`);
    await page.waitForTimeout(1000);
  }
}

// The form groups Params in sections (accordion items); open the one holding a field.
async function openSectionOf(page, selector) {
  for (const trigger of await page.locator("[role=dialog] button[id*=':trigger:']").all()) {
    if (await page.locator(selector).first().isVisible()) return;
    const id = await trigger.getAttribute("id");
    if (id.endsWith(":advancedOptions") || (await trigger.getAttribute("aria-expanded")) === "true") continue;
    await trigger.click();
    await page.waitForTimeout(300);
  }
  assert.ok(await page.locator(selector).first().isVisible(), `${selector} not found in the trigger form`);
}

async function setMonaco(page, editor, text) {
  await editor.locator(".view-line").first().click({ force: true });  // an overlay may sit on top: focus anyway
  await page.keyboard.press("Control+A");
  await page.keyboard.press("Delete");
  await page.keyboard.insertText(text);
  await page.keyboard.press("Control+Shift+End");  // whatever the editor auto-closed after the text
  await page.keyboard.press("Delete");
  await page.locator("text=Configuration JSON").click();  // the form takes the JSON when the editor loses focus
  await page.waitForTimeout(500);
}

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
  const context = await browser.newContext({ viewport: { width: 1440, height: 960 }, acceptDownloads: true });
  await watchCsp(context, result.csp_violations);  // every page of the view draws under its CSP
  const page = await context.newPage();
  page.setDefaultTimeout(90000);  // two shared cores under a whole test suite: slow, not broken
  try {
    // 1. log in (simple auth manager)
    await page.goto(`${BASE}/`);
    await page.fill("input[name=username]", "admin");
    await page.fill("input[name=password]", process.env.UI_PASSWORD);
    await page.keyboard.press("Enter");
    await page.waitForURL((u) => !u.pathname.startsWith("/auth"));
    step("logged in");

    // 2. the trigger form of training_job, with the demo values
    await page.goto(`${BASE}/dags/training_job`);
    await page.click("[data-testid=trigger-dag-button]");
    await page.waitForSelector("#element_source_dir", { state: "attached" });
    for (const field of ["source_dir", "entry_point", "output_path", "base_job_name"]) {
      await openSectionOf(page, `#element_${field}`);
      await page.fill(`#element_${field}`, DEMO[field]);
    }
    // object fields (hyperparameters, inputs, metric_definitions) through the form's JSON editor
    await page.click("button[id$=':trigger:advancedOptions']");
    const confEditor = page.locator(".monaco-editor").last();
    await confEditor.waitFor();
    const shown = JSON.parse(await page.evaluate(() => {
      const models = window.monaco?.editor?.getModels?.();
      return models ? models[models.length - 1].getValue() : null;
    }) || "null");
    if (shown) assert.equal(shown.source_dir, DEMO.source_dir, "the form fields reach the run's conf");
    await setMonaco(page, confEditor, JSON.stringify(DEMO));
    await shot(page, "01-trigger-form", { fullPage: true });
    assert.equal(await page.inputValue("#element_source_dir"), DEMO.source_dir);
    const triggered = page.waitForResponse((r) => r.url().includes("/api/v2/dags/training_job/dagRuns") && r.request().method() === "POST");
    await page.locator("[role=dialog] button:has-text('Trigger')").last().click();
    const response = await triggered;
    const run = await response.json();
    assert.equal(response.status(), 200, JSON.stringify(run));
    assert.deepEqual(run.conf.metric_definitions, DEMO.metric_definitions);
    result.run_id = run.dag_run_id;
    step(`triggered ${run.dag_run_id}`);

    // 3. the run succeeds (scheduler, LocalExecutor, API server)
    const finished = await waitForRun(page, "training_job", run.dag_run_id, 420000);
    assert.equal(finished.state, "success", `run ${run.dag_run_id} ${finished.state}`);
    step("run succeeded");

    // 4. the job in the training-jobs view, reached as a user does: Airflow's nav entry, the view in Airflow's
    // sandboxed iframe (no confirm()/alert() there: every action must work in the page itself)
    await page.goto(`${BASE}/`);
    await page.click("a[aria-label='Training jobs']");
    const view = page.frameLocator("iframe[title='Training jobs']");
    const viewFrame = async () => (await page.waitForSelector("iframe[title='Training jobs']")).contentFrame();
    await view.locator("tr.job a.job-link").first().waitFor();
    // the run's job, by the name the view gives it (<base_job_name>-<time>-<hash>)
    const listedRun = await (await page.request.get(`${BASE}/training-jobs/api/jobs?run_id=${encodeURIComponent(run.dag_run_id)}`)).json();
    const jobName = listedRun.items[0].job_name;
    result.job_name = jobName;
    assert.match(jobName, new RegExp(`^${DEMO.base_job_name}-`));
    await page.waitForTimeout(500);
    await shot(page, "02-jobs-list-embedded");
    await view.locator(`tr.job[data-job='${jobName}'] a.job-link`).click();
    await view.locator(".chart[data-metric=loss] .scatterlayer .trace").waitFor();
    assert.equal(await view.locator("#job-name").textContent(), jobName);
    assert.equal(await view.locator("#job-status").getAttribute("data-status"), "succeeded");
    const points = await view.locator(".chart[data-metric=loss] path.point").count();
    assert.equal(points, DEMO.hyperparameters.epochs, "one loss point per epoch");
    await view.locator("#host-log:not(:text('Loading'))").waitFor();
    const hostLog = await view.locator("#host-log").textContent();
    assert.match(hostLog, /loss=/);
    assert.doesNotMatch(hostLog, /DAG bundles|DeprecationWarning|Filling up the DagBag/, "the host log is the training's, not Airflow's");
    assert.equal(await view.locator("#failure").count(), 0, "a successful job shows no failure section");
    const specKeys = await view.locator("table.kv tr td:first-child").allTextContents();
    assert.ok(specKeys.includes("backend") && !specKeys.includes("kubernetes"), "a local job lists no Kubernetes options");
    await shot(page, "03-job-page", { fullPage: true });
    step(`job page of ${jobName} in Airflow's frame: loss curve with ${points} points`);
    // the Lineage panel: the code digest the upload stage kept, the channel's data version (shortened, the whole one
    // on hover), and the image the backend ran ('-': the local backend runs none)
    await view.locator("#lineage-code-digest code").waitFor();
    const lineageApi = await (await page.request.get(`${BASE}/training-jobs/api/jobs/training_job/${encodeURIComponent(run.dag_run_id)}/-1/lineage`)).json();
    const kept = lineageApi.record;
    assert.match(kept.code.digest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(await view.locator("#lineage-code-digest code").textContent(), kept.code.digest);
    const dataCell = view.locator("#lineage code.data-version[data-channel='train']");
    assert.match(kept.channels.train.data_version, /^[0-9a-f]{64}$/);
    assert.equal(await dataCell.getAttribute("title"), kept.channels.train.data_version);
    assert.equal(await dataCell.textContent(), kept.channels.train.data_version.slice(0, 12) + "…");
    assert.equal((await view.locator("#lineage-image-digest").textContent()).trim(), kept.image.digest || "-");
    assert.equal(await view.locator("#parent-chain").textContent(), "No parent model: trained from scratch.");
    await view.locator("#lineage").screenshot({ path: path.join(SHOTS, "03b-lineage.png") });
    result.lineage = { code: kept.code.digest, data: kept.channels.train.data_version, image: kept.image.digest };
    step(`lineage panel: code ${kept.code.digest.slice(7, 19)}, data ${kept.channels.train.data_version.slice(0, 12)}, image ${kept.image.digest || "-"}`);

    // 5. the model link: the plugin streams the local model.tar.gz (no file:// URL); downloaded from the frame
    const href = await view.locator("a.artifact[data-artifact='model.tar.gz']").getAttribute("href");
    assert.ok(!href.startsWith("file:"), href);
    const [download] = await Promise.all([page.waitForEvent("download"), view.locator("a.artifact[data-artifact='model.tar.gz']").click()]);
    const saved = path.join(SHOTS, "downloaded-model.tar.gz");
    await download.saveAs(saved);
    const bytes = fs.readFileSync(saved);
    assert.ok(bytes.length > 100 && bytes[0] === 0x1f && bytes[1] === 0x8b, "model.tar.gz is a gzip file");
    result.model_bytes = bytes.length;
    // the extra link Airflow shows on publish_model points at the same place
    const links = await (await page.request.get(`${BASE}/api/v2/dags/training_job/dagRuns/${encodeURIComponent(run.dag_run_id)}/taskInstances/publish_model/links`)).json();
    assert.ok(links.extra_links.Model.startsWith(`${BASE}/training-jobs/api/jobs/`), JSON.stringify(links));
    const viaLink = await page.request.get(links.extra_links.Model);
    assert.equal(viaLink.status(), 200);
    assert.equal((await viaLink.body()).length, bytes.length);
    step(`model link: ${bytes.length} bytes`);
    // the "Training job" extra link opens the job inside Airflow's UI (the run's Training jobs tab), not outside it
    const jobLink = links.extra_links["Training job"];
    assert.ok(jobLink.startsWith(`${BASE}/dags/training_job/runs/`), jobLink);
    await page.goto(jobLink);
    assert.equal(await page.frameLocator("iframe[title='Training jobs']").locator("#job-name").textContent(), jobName);
    await page.goto(`${BASE}/`);
    await page.click("a[aria-label='Training jobs']");
    await view.locator(`tr.job[data-job='${jobName}'] a.job-link`).click();
    await view.locator("#clone-btn").waitFor();
    step("the Training job extra link opens the job in Airflow's UI");

    // 5b. Reproduce offers the pins of the job's lineage: its code digest and the channel's data version
    await view.locator("#reproduce-btn").click();
    await view.locator("#reproduce-pins").waitFor();
    const pins = await view.locator("#reproduce-pins").textContent();
    assert.match(pins, /^code sha256:[0-9a-f]{64};/);
    assert.ok(pins.includes(result.lineage.data.slice(0, 12)), pins);
    await view.locator("#reproduce-cancel").click();
    step("Reproduce offers the job's code digest and data version");

    // 6. train again from this model: the spec with resume_from = this job's model; then clone with a bad value
    // (the refusal names the field, in the page), fixed, triggered
    await view.locator("#resume-btn").click();
    assert.equal(JSON.parse(await view.locator("#clone-conf").inputValue()).resume_from, `${DEMO.output_path}/${jobName}/output/model.tar.gz`);
    await view.locator("#clone-cancel").click();
    await view.locator("#clone-btn").click();
    const cloneConf = JSON.parse(await view.locator("#clone-conf").inputValue());
    assert.equal(cloneConf.source_dir, DEMO.source_dir);
    assert.deepEqual(cloneConf.hyperparameters, DEMO.hyperparameters);
    assert.ok(!("job_name" in cloneConf), "a clone gets a new job name");
    cloneConf.hyperparameters.epochs = 3;
    await view.locator("#clone-conf").fill(JSON.stringify({ ...cloneConf, resources: { ...(cloneConf.resources || {}), gpu: -1 } }, null, 2));
    await view.locator("#clone-trigger").click();
    await view.locator("#clone-error:text('Not triggered')").waitFor();
    assert.equal(await view.locator("#clone-error").textContent(), "Not triggered: resources.gpu: -1 is less than the minimum of 0");
    await shot(page, "04-bad-value", { fullPage: true });
    step("a bad value is refused in the page, naming resources.gpu");
    await view.locator("#clone-conf").fill(JSON.stringify(cloneConf, null, 2));
    await view.locator("#clone-trigger").click();
    const frame = await viewFrame();
    await frame.waitForFunction((runId) => location.hash.startsWith("#/run/training_job/") && !location.hash.endsWith(encodeURIComponent(runId)), run.dag_run_id);
    const cloneRunId = decodeURIComponent(await frame.evaluate(() => location.hash.split("/").pop()));
    const cloned = await waitForRun(page, "training_job", cloneRunId, 420000);
    assert.equal(cloned.state, "success");
    assert.equal(cloned.conf.hyperparameters.epochs, 3);
    result.clone_run_id = cloneRunId;
    step(`clone ${cloneRunId} succeeded`);

    // 7. the list with both jobs
    await frame.evaluate((q) => { location.hash = `#/?q=${q}`; }, DEMO.base_job_name);
    await frame.waitForFunction(() => document.querySelectorAll("tr.job").length >= 2);
    const listed = await view.locator("tr.job").evaluateAll((rows) => rows.map((r) => r.dataset.job));
    assert.ok(listed.includes(result.job_name) && listed.length >= 2, JSON.stringify(listed));
    await shot(page, "04-jobs-list", { fullPage: true });
    step("jobs list");

    // 7a. a page the user left while it loaded never draws over the one they went back to (CI once saw a finished
    // job's redraw, still reading, replace the list). The job's data is held back 3 s; the user goes back meanwhile.
    const jobApi = (url) => url.pathname.includes(`/training-jobs/api/jobs/training_job/${encodeURIComponent(run.dag_run_id)}/`) &&
      /\/-?\d+$/.test(url.pathname);
    await page.route(jobApi, async (route) => { await new Promise((done) => setTimeout(done, 3000)); await route.continue(); });
    const held = page.waitForResponse((response) => jobApi(new URL(response.url())));
    await view.locator(`tr.job[data-job='${jobName}'] a.job-link`).click();
    await frame.evaluate(() => history.back());
    await frame.waitForFunction(() => location.hash.startsWith("#/?") && document.querySelectorAll("tr.job").length >= 2);
    await held;
    await page.waitForTimeout(1500);  // the left page would draw as soon as its data arrives
    assert.equal(await view.locator("#job-name").count(), 0, "the job page the user left drew over the list");
    assert.ok(await view.locator("tr.job").count() >= 2);
    await page.unroute(jobApi);
    step("a page left while loading does not draw over the list");

    // 7b. a job refused by its first stage says why on its page (not "no reason recorded")
    const refusedRun = await (await page.request.post(`${BASE}/api/v2/dags/training_job/dagRuns`,
      { data: { logical_date: null, conf: { ...DEMO, base_job_name: "typo", entry_point: "trian.py" } } })).json();
    assert.equal((await waitForRun(page, "training_job", refusedRun.dag_run_id, 300000)).state, "failed");
    await frame.evaluate((runId) => { location.hash = `#/run/training_job/${encodeURIComponent(runId)}`; }, refusedRun.dag_run_id);
    await view.locator("#failure-reason").waitFor();
    assert.equal(await view.locator("#failure-reason").textContent(),
      `invalid job spec: entry_point: trian.py is not in source_dir ${DEMO.source_dir}; give a file that is there (a path relative to source_dir)`);
    await shot(page, "06-refused-spec", { fullPage: true });
    step("a refused spec says why on its page");

    // 8. a job that is still training: its curve grows while we watch, and Stop (asked in the page) ends it
    const dialogs = [];
    page.on("dialog", (dialog) => { dialogs.push(dialog.message()); dialog.dismiss(); });
    const slow = JSON.parse(process.env.UI_SLOW_CONF);
    const slowRun = await (await page.request.post(`${BASE}/api/v2/dags/training_job/dagRuns`,
      { data: { logical_date: null, conf: slow } })).json();
    await frame.evaluate((runId) => { location.hash = `#/run/training_job/${encodeURIComponent(runId)}`; }, slowRun.dag_run_id);
    await view.locator("#job-status[data-status=running]").waitFor({ timeout: 300000 });
    const countPoints = () => view.locator(".chart[data-metric=loss] path.point").count();
    await frame.waitForFunction(() => document.querySelectorAll(".chart[data-metric=loss] path.point").length >= 2, null, { timeout: 120000 });
    const before = await countPoints();
    await frame.waitForFunction((n) => document.querySelectorAll(".chart[data-metric=loss] path.point").length > n, before, { timeout: 60000 });
    const after = await countPoints();
    // System metrics (the runtime samples its cgroup every 5 s): their own charts, a curve per host.
    await view.locator('.chart-group[data-group=system] .chart[data-metric="system/memory_bytes"] .scatterlayer .trace').waitFor({ timeout: 60000 });
    await shot(page, "05-job-running", { fullPage: true });
    // the list shows a running job's latest loss too
    await frame.evaluate((q) => { location.hash = `#/?q=${q}`; }, slow.base_job_name);
    await frame.waitForFunction((q) => [...document.querySelectorAll("tr.job")].some((r) => r.dataset.job.startsWith(q) &&
      [...r.querySelectorAll("td.num")].some((td) => /^[0-9.]+$/.test(td.textContent.trim()))), slow.base_job_name);
    step("the list shows the running job's latest loss");
    await frame.evaluate((runId) => { location.hash = `#/run/training_job/${encodeURIComponent(runId)}`; }, slowRun.dag_run_id);
    await view.locator("#job-status[data-status=running]").waitFor();
    await view.locator("#stop").click();
    await view.locator("#stop-yes").waitFor();
    await shot(page, "07-stop-confirm", { fullPage: true });
    await view.locator("#stop-yes").click();
    // The note, or already the stopped job: a quick stop re-renders the page before the note can be seen (CI).
    await view.locator("#stop-requested, #job-status[data-status=stopped]").first().waitFor();
    const stopped = await waitForRun(page, "training_job", slowRun.dag_run_id, 180000);
    assert.equal(stopped.state, "failed");
    await view.locator("#job-status[data-status=stopped]").waitFor({ timeout: 120000 });
    assert.match(await view.locator("#failure-reason").textContent(), /^Stopped by admin at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
    assert.deepEqual(dialogs, [], "no browser dialog: they are ignored in Airflow's frame");
    const final = await countPoints();
    assert.ok(final < 600, `the training stopped (${final} of its 600 points)`);
    await shot(page, "08-job-stopped", { fullPage: true });
    await frame.evaluate(() => { location.hash = "#/?status=stopped"; });
    await frame.waitForFunction((name) => [...document.querySelectorAll("tr.job")].some((r) => r.dataset.job.startsWith(name)), slow.base_job_name);
    result.live_points = [before, after];
    step(`live curve grew ${before} -> ${after} points; stopped`);
    assert.deepEqual(result.csp_violations, [], "no Content-Security-Policy violation on any page");
  } catch (err) {
    await shot(page, "failure", { fullPage: true }).catch(() => {});
    result.error = String(err.stack || err);
    console.error(err);
    process.exitCode = 1;
  } finally {
    fs.writeFileSync(process.env.UI_RESULT, JSON.stringify(result, null, 2));
    await browser.close();
  }
})();
