// What both TypeScript Agent SDK bench drivers share (benches/ts_sdk_driver.mjs here and
// host/tollgate/benches/turn_ts_sdk.mjs): the SDK and zod loaded from TS_SDK_NODE_MODULES (a
// node_modules folder outside this repository, so neither is a dependency of the project), and a
// query's private scratch folders.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const NM = process.env.TS_SDK_NODE_MODULES;

/** The file URL of `pkg`'s ES module entry in TS_SDK_NODE_MODULES. */
function esmEntry(pkg) {
  const dir = path.join(NM, ...pkg.split('/'));
  const pj = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  const pick = (x) => (typeof x === 'string' ? x : x && (pick(x.import) ?? pick(x.node) ?? pick(x.default)));
  const rel = pick(pj.exports?.['.'] ?? pj.exports) ?? pj.module ?? pj.main ?? 'index.js';
  return pathToFileURL(path.join(dir, rel)).href;
}

export const sdk = await import(esmEntry('@anthropic-ai/claude-agent-sdk'));
export const { z } = await import(esmEntry('zod'));

/** A new temporary folder named `<prefix>…` holding `cfg`, `home` and `tmp`. */
export function scratchDirs(prefix) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  for (const x of ['cfg', 'home', 'tmp']) fs.mkdirSync(path.join(d, x));
  return d;
}
