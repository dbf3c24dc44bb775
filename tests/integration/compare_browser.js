// The compare page in a real browser (headless Debian chromium driven by playwright-core), run by
// test_compare_browser.py against the real Airflow it started: log in, open "Training jobs" from Airflow's nav
// and its "Compare jobs" link (the page inside Airflow's iframe), pick the two jobs, read the overlaid curves and the tables, zoom a chart,
// switch log scale / smoothing / wall-clock axis, then open the shareable URL on its own. Results go to $UI_RESULT.
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { chromium } = require("playwright-core");

const BASE = process.env.UI_BASE_URL;
const SHOTS = process.env.UI_SHOTS;
const JOBS = JSON.parse(process.env.UI_JOBS);  // [{job_name, lr}]
const result = { steps: [] };

function step(name) { result.steps.push(name); console.log(`[compare] ${name}`); }
async function shot(page, name) { await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true }); }

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
  const page = await (await browser.newContext({ viewport: { width: 1440, height: 1000 } })).newPage();
  page.setDefaultTimeout(90000);
  try {
    await page.goto(`${BASE}/`);
    await page.fill("input[name=username]", "admin");
    await page.fill("input[name=password]", process.env.UI_PASSWORD);
    await page.keyboard.press("Enter");
    await page.waitForURL((u) => !u.pathname.startsWith("/auth"));
    step("logged in");

    // Airflow's nav entry, then the view's "Compare jobs": the compare page inside the UI's iframe, the picker first.
    await page.goto(`${BASE}/`);
    await page.click("a[aria-label='Training jobs']");
    const frame = page.frameLocator("iframe[title='Training jobs']");
    await frame.locator("#compare-link").click();
    for (const job of JOBS) await frame.locator(`input.pick[data-job="${job.job_name}"]`).check();
    await frame.locator("#compare").click();
    await frame.locator("#compare-title").waitFor();
    assert.equal(await frame.locator("#compare-title").textContent(), "Comparing 2 jobs");
    step("picked two jobs in the nav entry's page");

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
