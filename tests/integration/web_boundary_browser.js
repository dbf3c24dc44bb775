// The web boundary in headless Debian chromium (playwright-core, no browser download), run by test_web_boundary.py:
// alice, logged in, visits a page of another origin of this host that forges stops of bob's running job (a form and
// two fetches, her cookie attached); nothing stops. She opens her own job (it names bob's job) through Airflow's nav
// entry: the page says the name belongs to another run and shows none of bob's metrics, files or failure text. The
// list and the compare page draw too. Bob logs in and stops his job with the view's Stop inside Airflow's frame.
// Every Content-Security-Policy violation of any frame is collected ($UI_RESULT: csp_violations).
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { chromium } = require("playwright-core");
const { watchCsp } = require("./csp_watch");

const BASE = process.env.UI_BASE_URL;
const SHOTS = process.env.UI_SHOTS;
const { ALICE_RUN, BOB_SLOW_RUN, BOB_FAILED_RUN, BOBS_FAILURE } = process.env;
const result = { steps: [], csp_violations: [] };

function step(name) { result.steps.push(name); console.log(`[web-boundary] ${name}`); }
async function shot(page, name) { await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true }); }

async function newUserPage(browser, user, password) {
  const context = await browser.newContext({ viewport: { width: 1440, height: 960 } });
  await watchCsp(context, result.csp_violations, `${user}: `);
  const page = await context.newPage();
  page.setDefaultTimeout(90000);  // two shared cores under a whole test suite: slow, not broken
  await page.goto(`${BASE}/`);
  await page.fill("input[name=username]", user);
  await page.fill("input[name=password]", password);
  await page.keyboard.press("Enter");
  await page.waitForURL((u) => !u.pathname.startsWith("/auth"));
  return page;
}

// The training-jobs view from Airflow's nav entry; then one of its pages, by the view's own hash routes.
async function openView(page, hash) {
  await page.goto(`${BASE}/`);
  await page.click("a[aria-label='Training jobs']");
  const frame = await (await page.waitForSelector("iframe[title='Training jobs']")).contentFrame();
  await frame.waitForSelector("tr.job, #job-name");
  if (hash) await frame.evaluate((h) => { location.hash = h; }, hash);
  return frame;
}

async function jobStatus(page, runId) {
  const job = await (await page.request.get(`${BASE}/training-jobs/api/jobs/training_job/${encodeURIComponent(runId)}/-1`)).json();
  return job.status;
}

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
  let page;
  try {
    page = await newUserPage(browser, "alice", process.env.ALICE_PASSWORD);
    step("alice logged in");

    // 1. another origin's page forges stops of bob's running job while alice is logged in
    assert.equal(await jobStatus(page, BOB_SLOW_RUN), "running");
    await page.goto(process.env.EVIL_URL);
    await page.waitForFunction(() => window.attackResults, null, { timeout: 60000 });
    const attacks = await page.evaluate(() => window.attackResults);
    await page.waitForTimeout(3000);  // what a forged stop would have started has had time to show
    assert.equal(await jobStatus(page, BOB_SLOW_RUN), "running", `a forged request stopped bob's job: ${JSON.stringify(attacks)}`);
    step(`forged form and fetches stopped nothing: ${JSON.stringify(attacks)}`);
    // The forged form's answer may not even be shown in the other site's frame: frame-ancestors 'self'.
    result.attack_page_violations = result.csp_violations.splice(0);
    assert.ok(result.attack_page_violations.some((v) => v.includes("frame-ancestors")), JSON.stringify(result.attack_page_violations));

    // 2. alice's own job names bob's job: none of bob's metrics, files or failure text
    let frame = await openView(page, `#/run/training_job/${encodeURIComponent(ALICE_RUN)}`);
    await frame.waitForSelector("#files-note");
    assert.match(await frame.textContent("#files-note"), /belongs to another run/);
    await frame.waitForFunction(() => !/Loading/.test(document.getElementById("charts").textContent) &&
                                      !/Loading/.test(document.getElementById("file-list").textContent));
    assert.match(await frame.textContent("#charts"), /No metric points/);
    assert.equal(await frame.locator(".chart[data-metric=loss]").count(), 0);
    assert.match(await frame.textContent("#file-list"), /belongs to another run/);
    assert.equal(await frame.locator("tr.output-file").count(), 0);
    assert.ok(!(await frame.textContent("main")).includes(BOBS_FAILURE), "bob's failure text on alice's page");
    await shot(page, "01-alice-job-of-another-run");
    step("alice's job page shows nothing of bob's run and says why");

    // 3. the list and the compare page draw (their CSP is collected throughout)
    await frame.evaluate(() => { location.hash = "#/"; });
    await frame.waitForSelector("tr.job");
    const compare = `compare.html?job=${encodeURIComponent(`training_job/${BOB_FAILED_RUN}/-1`)}&job=${encodeURIComponent(`training_job/${ALICE_RUN}/-1`)}`;
    await frame.evaluate((url) => { location.href = url; }, compare);
    frame = await (await page.waitForSelector("iframe[title='Training jobs']")).contentFrame();
    await frame.waitForSelector(".compare-table");
    await frame.waitForSelector(".chart[data-metric=loss] path.point");  // bob's curve: alice may read the DAG
    await shot(page, "02-compare");
    step("list and compare pages drawn");

    // 4. bob stops his job with the view's own Stop, inside Airflow's frame
    const bobPage = await newUserPage(browser, "bob", process.env.BOB_PASSWORD);
    page = bobPage;
    const view = page.frameLocator("iframe[title='Training jobs']");
    await openView(page, `#/run/training_job/${encodeURIComponent(BOB_SLOW_RUN)}`);
    await view.locator(".chart[data-metric=loss] path.point").first().waitFor({ timeout: 120000 });
    await view.locator("#stop").click();
    await view.locator("#stop-yes").click();
    await view.locator("#stop-requested, #job-status[data-status=stopped]").first().waitFor();
    await view.locator("#job-status[data-status=stopped]").waitFor({ timeout: 180000 });
    await shot(page, "03-bob-stopped");
    step("bob stopped his job from the view in Airflow's frame");
  } catch (err) {
    result.error = err.stack || String(err);
    console.error(err);
    if (page) await shot(page, "failure").catch(() => {});
    process.exitCode = 1;
  } finally {
    fs.writeFileSync(process.env.UI_RESULT, JSON.stringify(result, null, 2));
    await browser.close();
  }
})();
