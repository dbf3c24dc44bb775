// Content-Security-Policy violations of every frame of a browser context (the training-jobs view runs in Airflow's
// iframe), collected into `into`: the page's own `securitypolicyviolation` events and the lines Chromium logs.
"use strict";

async function watchCsp(context, into, label = "") {
  await context.addInitScript(() => document.addEventListener("securitypolicyviolation",
    (e) => console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || "inline"} in ${e.documentURI}`)));
  context.on("page", (page) => watchPage(page, into, label));
  for (const page of context.pages()) watchPage(page, into, label);
}

function watchPage(page, into, label) {
  page.on("console", (m) => {
    if (/Content Security Policy|CSP violation/i.test(m.text())) into.push(`${label}${m.text()}`);
  });
}

module.exports = { watchCsp };
