#!/usr/bin/env node
// Builds a JavaScript tool module into a tollgate:tool@0.1.0 component.
//
//   node guest-sdk/js/bin/build.mjs TOOL.js -o OUT.wasm [--engine auto|quickjs|starlingmonkey]
//
// 1. Writes an entry module that imports the author's `tools` and exports the WIT interface
//    `tools` made by runtime.js, after giving each tool without an `inputSchema` the one derived
//    from its handler's JSDoc type (bin/schema.mjs).
// 2. Bundles it (rolldown) into one ES module: '@tollgate/guest' resolves to this package, the
//    host shim to the engine's import style; `tollgate:tool/*` and `wasi:*` stay imports.
// 3. Componentizes it with:
//    - quickjs: componentize-qjs --sync, world `tool-provider` of the project's wit/tool. About
//      1.6 MB, builds in a few seconds, the fastest cold calls. QuickJS has no fetch, and
//      componentize-qjs 0.4.5 cannot build a component that imports wasi:http (its build-time
//      linker rejects wasi:http/types), so no outbound HTTP;
//    - starlingmonkey: componentize-js, world `tool-provider-js` of wit/ (the tool world plus
//      wasi:http, for @tollgate/guest/http). About 12 MB, builds in 10-30 s, slower cold calls;
//      has the built-in web fetch and @tollgate/guest/http's fetch (the host's allow-list applies).
//    `auto` (the default) takes starlingmonkey when the bundle calls fetch or imports wasi:http,
//    and quickjs otherwise.
// Prints the size, the engine and the time taken.

import { existsSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { derivedSchemas } from './schema.mjs';

const sdk = resolve(dirname(fileURLToPath(import.meta.url)), '..');
// The WIT world: resolved into wit-packed/ in the package (bin/prepack.mjs), linked in wit/ here.
const witDir = existsSync(join(sdk, 'wit-packed')) ? join(sdk, 'wit-packed') : join(sdk, 'wit');

// An executable of a dependency: in this package's node_modules (a checkout), or in a
// node_modules above it (the package installed as a dependency).
function dependencyBin(name) {
  for (let dir = sdk; ; dir = dirname(dir)) {
    const bin = join(dir, 'node_modules/.bin', name);
    if (existsSync(bin)) return bin;
    if (dirname(dir) === dir) return join(sdk, 'node_modules/.bin', name);
  }
}

function usage(msg) {
  if (msg) console.error(`error: ${msg}`);
  console.error('usage: build.mjs TOOL.js -o OUT.wasm [--engine quickjs|starlingmonkey]');
  process.exit(2);
}

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    out: { type: 'string', short: 'o' },
    engine: { type: 'string', default: 'auto' },
  },
});
if (positionals.length !== 1 || !values.out) usage();
let engine = values.engine;
if (!['auto', 'quickjs', 'starlingmonkey'].includes(engine)) usage(`unknown engine ${engine}`);
const source = resolve(positionals[0]);
const out = resolve(values.out);

let rolldown;
try {
  ({ rolldown } = await import('rolldown'));
} catch {
  console.error(`error: rolldown is not installed (${sdk}/node_modules or above): run scripts/install-guest-toolchains.sh, or npm install @tollgate/guest`);
  process.exit(1);
}

const started = performance.now();
const work = await mkdtemp(join(tmpdir(), 'tollgate-js-'));
try {
  const entry = join(work, 'entry.js');
  // Tools that give no inputSchema get the one their handler's JSDoc type describes.
  const derived = derivedSchemas(source);
  for (const name of Object.keys(derived)) console.error(`${name}: input schema from its JSDoc type`);
  await writeFile(
    entry,
    [
      `import { tools as userTools } from ${JSON.stringify(source)};`,
      `import { makeToolsExport } from ${JSON.stringify(join(sdk, 'src/runtime.js'))};`,
      `const derived = ${JSON.stringify(derived)};`,
      'if (Array.isArray(userTools)) {',
      '  for (const tool of userTools) {',
      '    if (tool && tool.inputSchema === undefined && Object.hasOwn(derived, tool.name)) tool.inputSchema = derived[tool.name];',
      '  }',
      '}',
      'export const tools = makeToolsExport(userTools);',
      '',
    ].join('\n'),
  );

  // The host shim differs per engine, so bundle once to look for fetch, then again for real.
  const probe = await bundleTo(entry, join(work, 'probe.js'), 'quickjs');
  const usesFetch = /\bfetch\s*\(/.test(probe) || /from\s*['"]wasi:http\//.test(probe);
  if (engine === 'auto') engine = usesFetch ? 'starlingmonkey' : 'quickjs';
  if (engine === 'quickjs' && usesFetch) {
    throw new Error('the tool calls fetch, which the QuickJS engine does not have: build with --engine starlingmonkey (or auto)');
  }
  const bundled = join(work, 'bundle.js');
  await mkdir(dirname(out), { recursive: true });
  await bundleTo(entry, bundled, engine);

  // componentize-js cannot follow the wit/deps/tollgate-tool link (preview2-shim refuses it):
  // both engines get a copy with the links resolved.
  const wit = join(work, 'wit');
  await cp(witDir, wit, { recursive: true, dereference: true });
  if (engine === 'quickjs') {
    const bin = dependencyBin('componentize-qjs');
    const args = ['--wit', join(wit, 'deps/tollgate-tool'), '-n', 'tool-provider', '--js', bundled, '--sync', '-o', out];
    const r = spawnSync(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
    if (r.error || r.status !== 0) {
      process.stderr.write(r.stdout || '');
      process.stderr.write(r.stderr || '');
      throw new Error(`componentize-qjs failed${r.error ? `: ${r.error.message}` : ` (exit ${r.status})`}`);
    }
  } else {
    await componentizeStarlingMonkey(bundled, wit, out);
  }
  const { size } = await stat(out);
  const secs = ((performance.now() - started) / 1000).toFixed(1);
  console.error(`${out}: ${size} bytes (${engine}, ${secs} s)`);
} catch (err) {
  console.error(`error: ${err.message}`);
  process.exitCode = 1;
} finally {
  await rm(work, { recursive: true, force: true });
}

// Bundles `entry` into one ES module at `file` and returns its text.
async function bundleTo(entry, file, engine) {
  const bundle = await rolldown({
    input: entry,
    platform: 'neutral',
    logLevel: 'warn',
    plugins: [
      {
        name: 'tollgate',
        resolveId(id) {
          if (id === '@tollgate/guest') return join(sdk, 'src/index.js');
          if (id === '@tollgate/guest/http') return join(sdk, 'src/http.js');
          if (id === 'tollgate:guest/host') return join(sdk, `src/host/${engine}.js`);
          if (id.startsWith('tollgate:tool/') || id.startsWith('wasi:')) return { id, external: true };
          return null;
        },
      },
    ],
  });
  await bundle.write({ file, format: 'esm' });
  await bundle.close();
  return readFile(file, 'utf8');
}

// componentize-js, called in-process rather than through its CLI: it reads the WIT with a
// wasm-tools component running on @bytecodealliance/preview2-shim, whose Node filesystem starts
// with no preopens (0.26), so it cannot see any file ("No such file or directory"; the same
// failure as `jco componentize`). Preopening / here fixes that.
async function componentizeStarlingMonkey(bundled, wit, out) {
  const { _setPreopens } = await import('@bytecodealliance/preview2-shim/filesystem');
  const { componentize } = await import('@bytecodealliance/componentize-js');
  _setPreopens({ '/': '/' });
  const log = console.log;
  console.log = () => {}; // componentize-js reports its progress on stdout
  try {
    const { component } = await componentize({
      sourcePath: bundled,
      witPath: wit,
      worldName: 'tool-provider-js',
    });
    await writeFile(out, component);
  } finally {
    console.log = log;
  }
}
