// The UI walk-through a new user does, in headless Debian chromium driven by playwright-core (no browser download):
// log in, trigger training_job from the trigger form with the demo values, watch the run succeed, open the job in
// the training-jobs view, see the loss curve, follow the model link, clone the job, watch a running job's curve
// grow and stop it. Run by test_ui_browser.py, which
// starts Airflow and passes everything in the environment; screenshots go to $UI_SHOTS; results to $UI_RESULT.
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { chromium } = require("playwright-core");

const BASE = process.env.UI_BASE_URL;
const SHOTS = process.env.UI_SHOTS;
const DEMO = JSON.parse(process.env.UI_DEMO_CONF);  // the demo job spec (what `make demo` runs)
const result = { steps: [] };

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

    // 4. the job in the training-jobs view (the nav entry, embedded in the Airflow UI)
    await page.goto(`${BASE}/plugin/training-jobs`);
    const frame = page.frameLocator("iframe");
    await frame.locator("tr.job a.job-link").first().waitFor();
    await page.waitForTimeout(500);
    await shot(page, "02-jobs-list-embedded");
    // the page on its own, for the job page and the actions
    await page.goto(`${BASE}/training-jobs/ui/#/run/training_job/${encodeURIComponent(run.dag_run_id)}`);
    await page.waitForSelector(".chart[data-metric=loss] .scatterlayer .trace");
    const jobName = await page.textContent("#job-name");
    result.job_name = jobName;
    assert.match(jobName, new RegExp(`^${DEMO.base_job_name}-`));
    assert.equal(await page.getAttribute("#job-status", "data-status"), "succeeded");
    const points = await page.locator(".chart[data-metric=loss] path.point").count();
    assert.equal(points, DEMO.hyperparameters.epochs, "one loss point per epoch");
    await page.waitForSelector("#host-log:not(:text('Loading'))");
    assert.match(await page.textContent("#host-log"), /loss=/);
    await shot(page, "03-job-page", { fullPage: true });
    step(`job page of ${jobName}: loss curve with ${points} points`);

    // 5. the model link: the plugin streams the local model.tar.gz (no file:// URL)
    const href = await page.getAttribute("a.artifact[data-artifact='model.tar.gz']", "href");
    assert.ok(!href.startsWith("file:"), href);
    const [download] = await Promise.all([page.waitForEvent("download"), page.click("a.artifact[data-artifact='model.tar.gz']")]);
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

    // 6. train again from this model: the spec with resume_from = this job's model; then clone, triggered
    await page.click("#resume-btn");
    assert.equal(JSON.parse(await page.inputValue("#clone-conf")).resume_from, `${DEMO.output_path}/${jobName}/output/model.tar.gz`);
    await page.click("#clone-cancel");
    await page.click("#clone-btn");
    const cloneConf = JSON.parse(await page.inputValue("#clone-conf"));
    assert.equal(cloneConf.source_dir, DEMO.source_dir);
    assert.deepEqual(cloneConf.hyperparameters, DEMO.hyperparameters);
    assert.ok(!("job_name" in cloneConf), "a clone gets a new job name");
    cloneConf.hyperparameters.epochs = 3;
    await page.fill("#clone-conf", JSON.stringify(cloneConf, null, 2));
    await page.click("#clone-trigger");
    await page.waitForFunction((runId) => location.hash.startsWith("#/run/training_job/") && !location.hash.endsWith(encodeURIComponent(runId)), run.dag_run_id);
    const cloneRunId = decodeURIComponent(await page.evaluate(() => location.hash.split("/").pop()));
    const cloned = await waitForRun(page, "training_job", cloneRunId, 420000);
    assert.equal(cloned.state, "success");
    assert.equal(cloned.conf.hyperparameters.epochs, 3);
    result.clone_run_id = cloneRunId;
    step(`clone ${cloneRunId} succeeded`);

    // 7. the list with both jobs
    await page.goto(`${BASE}/training-jobs/ui/#/?q=${DEMO.base_job_name}`);
    await page.waitForSelector("tr.job");
    const listed = await page.locator("tr.job").evaluateAll((rows) => rows.map((r) => r.dataset.job));
    assert.ok(listed.includes(result.job_name) && listed.length >= 2, JSON.stringify(listed));
    await shot(page, "04-jobs-list", { fullPage: true });
    step("jobs list");

    // 8. a job that is still training: its curve grows while we watch, and Stop ends it
    const slow = JSON.parse(process.env.UI_SLOW_CONF);
    const slowRun = await (await page.request.post(`${BASE}/api/v2/dags/training_job/dagRuns`,
      { data: { logical_date: null, conf: slow } })).json();
    await page.goto(`${BASE}/training-jobs/ui/#/run/training_job/${encodeURIComponent(slowRun.dag_run_id)}`);
    await page.waitForSelector("#job-status[data-status=running]", { timeout: 300000 });
    const countPoints = () => page.locator(".chart[data-metric=loss] path.point").count();
    await page.waitForFunction(() => document.querySelectorAll(".chart[data-metric=loss] path.point").length >= 2, null, { timeout: 120000 });
    const before = await countPoints();
    await page.waitForFunction((n) => document.querySelectorAll(".chart[data-metric=loss] path.point").length > n, before, { timeout: 60000 });
    const after = await countPoints();
    // System metrics (the runtime samples its cgroup every 5 s): their own charts, a curve per host.
    await page.waitForSelector('.chart-group[data-group=system] .chart[data-metric="system/memory_bytes"] .scatterlayer .trace', { timeout: 60000 });
    await shot(page, "05-job-running", { fullPage: true });
    page.once("dialog", (dialog) => dialog.accept());
    await page.click("#stop");
    const stopped = await waitForRun(page, "training_job", slowRun.dag_run_id, 180000);
    assert.equal(stopped.state, "failed");
    await page.goto(`${BASE}/training-jobs/ui/#/run/training_job/${encodeURIComponent(slowRun.dag_run_id)}`);
    await page.waitForSelector("#job-status[data-status=failed]");
    result.live_points = [before, after];
    step(`live curve grew ${before} -> ${after} points; stopped`);
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
