// The compare page in a real browser (headless Debian chromium driven by playwright-core), run by
// test_compare_browser.py against the real Airflow it started: log in, open "Training jobs" from Airflow's nav
// (the page inside Airflow's iframe), find the two jobs by tag and metric range, select them in the list and compare
// them, read the overlaid curves and the tables, zoom a chart, switch log scale / smoothing / wall-clock axis, open
// the shareable URL on its own; then on a job's page search its host log and download it, preview and download its
// output files; last, compare a search's trials from its row in the list. Results go to $UI_RESULT.
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { chromium } = require("playwright-core");
const { watchCsp } = require("./csp_watch");

const BASE = process.env.UI_BASE_URL;
const SHOTS = process.env.UI_SHOTS;
const JOBS = JSON.parse(process.env.UI_JOBS);  // [{job_name, lr}]
const result = { steps: [], csp_violations: [] };

function step(name) { result.steps.push(name); console.log(`[compare] ${name}`); }
async function shot(page, name) { await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true }); }

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
  const context = await browser.newContext({ viewport: { width: 1440, height: 1000 } });
  await watchCsp(context, result.csp_violations);  // the compare page and its charts draw under their CSP
  const page = await context.newPage();
  page.setDefaultTimeout(90000);
  try {
    await page.goto(`${BASE}/`);
    await page.fill("input[name=username]", "admin");
    await page.fill("input[name=password]", process.env.UI_PASSWORD);
    await page.keyboard.press("Enter");
    await page.waitForURL((u) => !u.pathname.startsWith("/auth"));
    step("logged in");

    // The API under the page: a filter it cannot read is one 400 line; a file name reaching out of the job's
    // output prefix is never served.
    const bad = await page.request.get(`${BASE}/training-jobs/api/jobs?metric=${encodeURIComponent("accuracy")}`);
    assert.equal(bad.status(), 400);
    result.bad_filter = (await bad.json()).detail;
    const outside = await page.request.get(`${BASE}/training-jobs/api/jobs/training_job/${JOBS[0].job_name}/-1/files/` +
      encodeURIComponent(`../../${JOBS[1].job_name}/output/model.tar.gz`));
    result.outside_status = outside.status();

    // Airflow's nav entry: the list inside the UI's iframe. The tag filter keeps the two jobs (not the search's
    // trials); a metric range keeps the one whose final loss is under 0.4; then both are selected and compared.
    await page.goto(`${BASE}/`);
    await page.click("a[aria-label='Training jobs']");
    const frame = page.frameLocator("iframe[title='Training jobs']");
    const listed = () => frame.locator("tr.job").evaluateAll((rows) => rows.map((r) => r.dataset.job).sort());
    await frame.locator("#tag").fill("suite:compare-browser");
    await frame.locator("#tag").dispatchEvent("change");
    await frame.locator("#count", { hasText: "2 jobs" }).waitFor();
    assert.deepEqual(await listed(), JOBS.map((j) => j.job_name).sort());
    assert.equal(await frame.locator(`tr.job[data-job="${JOBS[0].job_name}"] .tag[data-tag="suite"]`).textContent(), "suite: compare-browser");
    await frame.locator("#metric").fill("loss<0.4");
    await frame.locator("#metric").dispatchEvent("change");
    await frame.locator("#count", { hasText: "1 job" }).waitFor();
    assert.deepEqual(await listed(), [JOBS[1].job_name]);
    await frame.locator("#metric").fill("");
    await frame.locator("#metric").dispatchEvent("change");
    await frame.locator("#count", { hasText: "2 jobs" }).waitFor();
    await shot(page, "00-list-filtered");
    for (const job of JOBS) await frame.locator(`input.select-job[data-job="${job.job_name}"]`).check();
    await frame.locator("#compare-selected:not([disabled])").click();
    await frame.locator("#compare-title").waitFor();
    assert.equal(await frame.locator("#compare-title").textContent(), "Comparing 2 jobs");
    step("found two jobs by tag and metric range in the nav entry's list, selected and compared them");

    // Each metric's curves overlaid: one trace per job in the loss chart, every epoch a point.
    const loss = frame.locator('.chart[data-metric="loss"]');
    await loss.locator(".scatterlayer .trace").nth(1).waitFor();
    assert.equal(await loss.locator(".scatterlayer .trace").count(), 2);
    assert.equal(await loss.getAttribute("data-points"), "4");
    // The tables: lr differs (marked), epochs does not; final loss side by side.
    assert.equal(await frame.locator('#hyperparameters tr[data-row="lr"] td.differs').count(), 2);
    assert.equal(await frame.locator('#hyperparameters tr[data-row="epochs"] td.differs').count(), 0);
    const finals = await frame.locator('#final-metrics tr[data-row="loss"] td.num').allTextContents();
    assert.equal(finals.length, 2);
    result.final_loss = finals;
    await frame.locator("#hyperparameters-only-diff").check();
    assert.ok(await frame.locator('#hyperparameters tr[data-row="epochs"]').isHidden(), "only differences: epochs hidden");
    // The lineage section (each job's kept record): the same code, its digest not marked; lr marked as differing
    const codeRow = frame.locator('#lineage tr[data-row="code digest"]');
    const digests = await codeRow.locator("td:not(:first-child)").allTextContents();
    assert.equal(digests.length, 2);
    assert.match(digests[0], /^sha256:[0-9a-f]{64}$/);
    assert.equal(digests[1], digests[0]);
    assert.equal(await codeRow.locator("td.differs").count(), 0);
    assert.equal(await frame.locator('#lineage tr[data-row="hyperparameter lr"] td.differs').count(), 2);
    assert.equal(await frame.locator("#lineage-missing").count(), 0, "both jobs have a lineage record");
    result.code_digest = digests[0];
    await shot(page, "01-compare-embedded");
    step(`overlaid loss curves; final loss ${finals.join(" vs ")}`);

    // Zoom: drag a box over the left half of the loss chart; the x range narrows (hover and zoom are Plotly's).
    const plot = loss.locator(".plot");
    const rangeOf = () => plot.evaluate((el) => el._fullLayout.xaxis.range.slice());
    const before = await rangeOf();
    const box = await loss.locator(".nsewdrag").first().boundingBox();
    await page.mouse.move(box.x + box.width * 0.1, box.y + box.height * 0.5);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.3, box.y + box.height * 0.5, { steps: 8 });
    await page.mouse.move(box.x + box.width * 0.5, box.y + box.height * 0.5, { steps: 8 });
    await page.mouse.up();
    await frame.locator('.chart[data-metric="loss"][data-zoomed="true"]').waitFor();
    const after = await rangeOf();
    assert.ok(after[1] - after[0] < (before[1] - before[0]) * 0.8, `zoomed ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
    result.zoom = { before, after };
    // Hover: the value label over the chart names each curve with its value at that step. (Plotly's own Fx.hover:
    // playwright's synthetic mouse moves over the drag layer do not fire Plotly's hover in headless chromium.)
    await plot.evaluate((el) => Plotly.Fx.hover(el, { xval: 1 }));
    await loss.locator(".hoverlayer > *").first().waitFor({ state: "attached" });
    result.hover = await loss.locator(".hoverlayer").textContent();
    await shot(page, "02-compare-zoomed");
    step(`zoomed the loss chart: x ${before.map((v) => v.toFixed(2)).join("..")} -> ${after.map((v) => v.toFixed(2)).join("..")}`);

    // Log scale, smoothing (the raw curves stay, faint) and the wall-clock axis.
    await frame.locator('.chart-tools input[data-option="log"]').check();
    await plot.evaluate((el) => new Promise((resolve) => { const wait = () => el._fullLayout.yaxis.type === "log" ? resolve() : setTimeout(wait, 100); wait(); }));
    await frame.locator('.chart-tools input[data-option="smoothing"]').fill("0.6");
    await frame.locator('.chart-tools input[data-option="smoothing"]').dispatchEvent("input");
    await loss.locator(".scatterlayer .trace").nth(3).waitFor();
    await frame.locator('.chart-tools select[data-option="axis"]').selectOption("wall");
    await frame.locator('.chart-tools select[data-option="axis"]').dispatchEvent("input");
    await page.waitForTimeout(500);
    assert.equal(await plot.evaluate((el) => el._fullLayout.xaxis.type), "date");
    step("log scale, smoothing and wall-clock axis");

    // The shareable URL, opened on its own: the same comparison.
    const href = await frame.locator("#share-link").getAttribute("href");
    assert.equal(new URL(href).searchParams.getAll("job").length, 2, href);
    await page.goto(href);
    await page.waitForSelector("#compare-title");
    await page.waitForSelector('.chart[data-metric="loss"] .scatterlayer .trace');
    const labels = await page.locator("#final-metrics a.compared-job").evaluateAll((as) => as.map((a) => a.dataset.job));
    assert.deepEqual(labels.sort(), JOBS.map((j) => j.job_name).sort());
    await shot(page, "03-compare-shared-url");
    step("shareable URL opens the same comparison");

    // A job's page: search its host log (matches kept and highlighted), download the log; its output files.
    await page.goto(`${BASE}/`);
    await page.click("a[aria-label='Training jobs']");
    await frame.locator(`tr.job[data-job="${JOBS[0].job_name}"] a.job-link`).click();
    await frame.locator(".host-tab[aria-selected=true]").waitFor();
    await frame.locator("#host-log .log-line").first().waitFor();
    await frame.locator("#log-search").fill("epoch=2");
    await frame.locator("#host-log mark").first().waitFor();
    result.log_matches = await frame.locator("#host-log .log-line").allTextContents();
    await shot(page, "04-host-log-searched");
    const [logDownload] = await Promise.all([page.waitForEvent("download"), frame.locator("#log-download").click()]);
    const logFile = path.join(SHOTS, "downloaded-host.log");
    await logDownload.saveAs(logFile);
    result.log_download = fs.readFileSync(logFile, "utf8");
    step(`searched the host log (${result.log_matches.length} line) and downloaded it`);
    await frame.locator('#output-files tr[data-path="metrics.json"] button.file-preview').click();
    await frame.locator("#file-preview-text").waitFor();
    assert.ok(JSON.parse(await frame.locator("#file-preview-text").textContent()).series.loss, "metrics.json previewed");
    const [modelDownload] = await Promise.all([page.waitForEvent("download"),
      frame.locator('#output-files tr[data-path="model.tar.gz"] a.file-download').click()]);
    const modelFile = path.join(SHOTS, "downloaded-model.tar.gz");
    await modelDownload.saveAs(modelFile);
    const bytes = fs.readFileSync(modelFile);
    assert.ok(bytes[0] === 0x1f && bytes[1] === 0x8b, "model.tar.gz is a gzip file");
    result.model_bytes = bytes.length;
    await shot(page, "05-output-files");
    step(`previewed metrics.json and downloaded model.tar.gz (${bytes.length} bytes) from the output files`);

    // A search's row in the list selects all its trials: compared, with its objective against lr.
    await page.goto(`${BASE}/`);
    await page.click("a[aria-label='Training jobs']");
    await frame.locator('tr.group[data-search="compare-search"] input.select-search').check();
    await frame.locator("#compare-selected:not([disabled])").click();
    await frame.locator("#compare-title").waitFor();
    result.search_trials = Number((await frame.locator("#compare-title").textContent()).match(/\d+/)[0]);
    await frame.locator('#objective-plots .chart[data-hyperparameter="lr"]').waitFor();
    await shot(page, "06-search-compared");
    step("a search's two trials compared from its row in the list");

    // Stop from the list: the running job's row selected, the stop confirmed in the page (no confirm() in the
    // iframe), each job stopped through its own stop endpoint; the row then shows it stopped.
    await page.goto(`${BASE}/`);
    await page.click("a[aria-label='Training jobs']");
    await frame.locator("#tag").fill("suite:compare-browser-stop");
    await frame.locator("#tag").dispatchEvent("change");
    const slowRow = frame.locator('tr.job[data-job="compare-slow"]');
    await slowRow.locator('.badge[data-status="running"]').waitFor();
    await slowRow.locator("input.select-job").check();
    await frame.locator("#stop-selected:not([disabled])").click();
    await frame.locator("#stop-many-yes").click();
    await frame.locator(".stop-result").first().waitFor();
    result.stop_results = await frame.locator(".stop-result").allTextContents();
    await shot(page, "07-stop-from-list");
    await slowRow.locator('.badge[data-status="stopped"]').waitFor({ timeout: 180000 });
    step("stopped a running job from the list");
    assert.deepEqual(result.csp_violations, [], "no Content-Security-Policy violation on any page");
  } catch (err) {
    await shot(page, "failure").catch(() => {});
    result.error = String(err.stack || err);
    console.error(err);
    process.exitCode = 1;
  } finally {
    fs.writeFileSync(process.env.UI_RESULT, JSON.stringify(result, null, 2));
    await browser.close();
  }
})();
