// Lighthouse's accessibility audit of the page a browser test drove to, in snapshot mode: it
// attaches to the test's own Chromium (through its DevTools port) and audits the page as it is,
// signed in, with its cards open, without navigating or resetting anything.
//
// Usage: node audit.mjs PORT URL-PREFIX
// Prints one JSON line: {"score": 0..1, "failing": [{"id","title","items":[...]}]}. Exit status 0
// when it printed a result, 2 on bad arguments or when no page matches, 1 when Lighthouse failed.
import puppeteer from 'puppeteer-core';
import { snapshot } from 'lighthouse';

const [port, prefix] = process.argv.slice(2);
if (!port || !prefix) {
  console.error('usage: node audit.mjs PORT URL-PREFIX');
  process.exit(2);
}

const browser = await puppeteer.connect({ browserURL: `http://127.0.0.1:${port}`, defaultViewport: null });
try {
  const pages = await browser.pages();
  const page = pages.find((p) => p.url().startsWith(prefix));
  if (!page) {
    console.error(`no page at ${prefix}: ${pages.map((p) => p.url()).join(', ')}`);
    process.exit(2);
  }
  const config = {
    extends: 'lighthouse:default',
    settings: {
      onlyCategories: ['accessibility'],
      // The page as the test laid it out: no mobile emulation, no throttling.
      formFactor: 'desktop',
      screenEmulation: { disabled: true },
      throttlingMethod: 'provided',
    },
  };
  const result = await snapshot(page, { config });
  const lhr = result.lhr;
  const category = lhr.categories.accessibility;
  const failing = category.auditRefs
    .map((ref) => lhr.audits[ref.id])
    .filter((audit) => audit.score !== null && audit.score < 1)
    .map((audit) => ({
      id: audit.id,
      title: audit.title,
      items: (audit.details?.items ?? []).slice(0, 5).map((item) => item.node?.snippet ?? item.node?.selector ?? ''),
    }));
  console.log(JSON.stringify({ score: category.score, failing }));
} catch (error) {
  console.error(`lighthouse: ${error?.stack ?? error}`);
  process.exitCode = 1;
} finally {
  await browser.disconnect();
}
