// Drives the dashboard in headless Chromium (see test.sh). Exits 1 on the first failed check.
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const { chromium } = require("playwright-core");

const { PROXY, KEY_A, KEY_B, SHOT } = process.env;
const fail = (why) => { console.error("FAIL: " + why); process.exit(1); };
const stats = async (key) => (await fetch(PROXY + "/ctxgc/stats", { headers: { authorization: "Bearer " + key } })).json();

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const elsewhere = [];
  page.on("request", (r) => { if (!r.url().startsWith(PROXY)) elsewhere.push(r.url()); });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(PROXY + "/ctxgc/");
  await page.fill("#key", KEY_A);
  await page.click("#auth button[type=submit]");
  await page.waitForSelector("tr.session", { timeout: 10000 });
  const a = await stats(KEY_A), b = await stats(KEY_B);
  // Its numbers are /ctxgc/stats's for this caller.
  const card = async (metric) => (await page.textContent(`[data-metric="${metric}"] .value`)).trim();
  const n = (x) => Number(String(x).replace(/[^0-9.]/g, ""));
  if (n(await card("requests")) !== a.requests) fail(`requests card ${await card("requests")} vs ${a.requests}`);
  if (n(await card("received")) !== a.received_tokens_estimate) fail(`received card vs ${a.received_tokens_estimate}`);
  if (n(await card("sent")) !== a.sent_tokens_estimate) fail(`sent card vs ${a.sent_tokens_estimate}`);
  if (n(await card("fail_open")) !== a.fail_open) fail("fail-open card");
  // What the upstream billed, at the lab's prices (the test's model has one: nothing unpriced).
  const billed = await card("billed");
  if (Math.abs(n(billed) - a.billed_usd) > 0.01 || a.unpriced_sessions !== 0) fail(`billed card ${billed} vs ${a.billed_usd} (${a.unpriced_sessions} unpriced)`);
  // What the clients' own requests would have been billed (the lab's cache model on them),
  // and the ratio, each dividing what it says over the sessions that have both figures.
  const client = await card("client_billed");
  if (!(a.client_billed_usd > 0) || Math.abs(n(client) - a.client_billed_usd) > 0.01) fail(`client-alone card ${client} vs ${a.client_billed_usd}`);
  const ratio = await card("billed_vs_client");
  if (a.billed_vs_client == null || Math.abs(n(ratio) - a.billed_vs_client) > 0.001) fail(`billed ÷ client card ${ratio} vs ${a.billed_vs_client}`);
  const shown = await page.$$eval("tr.session", (rows) => rows.map((r) => r.dataset.session));
  const mine = Object.keys(a.usage).sort(), theirs = Object.keys(b.usage);
  if (JSON.stringify(shown.slice().sort()) !== JSON.stringify(mine)) fail(`sessions shown ${shown} vs ${mine}`);
  if (mine.length !== 2 || theirs.length !== 2) fail(`expected two sessions per tenant: ${mine} / ${theirs}`);
  const text = await page.content();
  for (const id of theirs) if (text.includes(id)) fail("another tenant's session is shown: " + id);
  if (text.includes(KEY_A) || text.includes(KEY_B)) fail("a key appears in the page");
  // A session's chart, its hidden outputs, and one original through recall.
  await page.click(`tr.session[data-session="${mine[0]}"]`);
  await page.waitForSelector("#trims tbody tr", { timeout: 10000 });
  if ((await page.$$("#chart polyline")).length !== 2) fail("the chart has no lines");
  const hidden = await page.$$("#trims tbody tr");
  const events = await page.$$("#events tbody tr");
  if (a.events > 0 && events.length < 1) fail("the session's events are not listed");
  if (hidden.length < 1) fail("no hidden output listed");
  // Each hidden output says why: a trim at insertion, a repeat pointer, or an event's decision.
  const whys = await page.$$eval("#trims tbody td.why", (cells) => cells.map((c) => c.textContent));
  if (whys.length !== hidden.length || whys.some((w) => !w.trim())) fail("a hidden output says not why: " + whys);
  if (!whys.some((w) => w.startsWith("trimmed at insertion"))) fail("no trim at insertion explained: " + whys);
  const detail = await page.evaluate(async (id) => (await fetch("/ctxgc/sessions/" + encodeURIComponent(id), {
    headers: { authorization: "Bearer " + sessionStorage.getItem("ctxgc-key") } })).json(), mine[0]);
  const byEvent = detail.trims.filter((t) => t.why);
  if (events.length > 0 && !byEvent.length) fail("the session's events hid nothing that says why");
  if (byEvent.length && !whys.some((w) => w.startsWith("pruned") || w.startsWith("summarised"))) fail("an event's decision is not shown: " + whys);
  await page.click("#trims tbody tr button");
  await page.waitForSelector("#original:not([hidden])");
  const original = await page.textContent("#original");
  if (!original.includes("error[E0308]: mismatched types")) fail("the original did not come back whole");
  // Another tenant's session is not served to this caller.
  const other = await page.evaluate(async (id) => (await fetch("/ctxgc/sessions/" + encodeURIComponent(id), {
    headers: { authorization: "Bearer " + sessionStorage.getItem("ctxgc-key") } })).status, theirs[0]);
  if (other !== 404) fail("another tenant's session detail answered " + other);
  if (elsewhere.length) fail("the page fetched from elsewhere: " + elsewhere);
  if (errors.length) fail("script errors: " + errors);
  await page.click("#original");
  await page.screenshot({ path: SHOT, fullPage: true });
  console.log(`ok: ${a.requests} requests, ${mine.length} sessions of the caller shown, ${theirs.length} of another tenant hidden, ${hidden.length} originals (${byEvent.length} hidden by an event, each with why) and ${events.length} events listed; screenshot ${SHOT}`);
} finally {
  await browser.close();
}
