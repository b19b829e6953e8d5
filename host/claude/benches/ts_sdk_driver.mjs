// The official TypeScript Agent SDK as a benchmark baseline, driven by benches/segment.rs.
//
// Reads one command per stdin line and answers one JSON line on stdout:
//   run   -> one query() with the one-reply script against MOCK_URL: {"ok","to_result_ms","to_end_ms","result"}
//   mem   -> this Node process's own memory: {"vmhwm_kb","vmrss_kb"}
// Environment: TS_SDK_NODE_MODULES (holds @anthropic-ai/claude-agent-sdk and zod), CLAUDE_BIN, MOCK_URL,
// PROJECT (cwd), PROMPT. Options mirror /work/shared/ts-baseline/bench.mjs's `text` scenario.
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { performance } from 'node:perf_hooks';
import { scratchDirs, sdk, z } from './ts_sdk_load.mjs';

async function runOnce() {
  const d = scratchDirs('tollgate-ts-bench-');
  const server = sdk.createSdkMcpServer({
    name: 'tools', version: '1.0.0',
    tools: [sdk.tool('echo', 'Echo the given text back.', { text: z.string() }, async (a) => ({ content: [{ type: 'text', text: `echo: ${a.text}` }] }))],
  });
  const options = {
    pathToClaudeCodeExecutable: process.env.CLAUDE_BIN,
    env: {
      PATH: process.env.PATH, HOME: path.join(d, 'home'), CLAUDE_CONFIG_DIR: path.join(d, 'cfg'), TMPDIR: path.join(d, 'tmp'),
      ANTHROPIC_BASE_URL: process.env.MOCK_URL, ANTHROPIC_API_KEY: 'dummy', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      HTTPS_PROXY: 'http://127.0.0.1:1', NO_PROXY: '127.0.0.1,localhost',
    },
    settingSources: [], cwd: process.env.PROJECT, permissionMode: 'default', includePartialMessages: true,
    mcpServers: { tools: server },
    hooks: { PreToolUse: [{ matcher: 'mcp__tools__echo', hooks: [async () => ({ hookSpecificOutput: { hookEventName: 'PreToolUse', permissionDecision: 'allow' } })] }] },
  };
  const t0 = performance.now();
  let toResult = null; let result = null; let error = null;
  try {
    for await (const msg of sdk.query({ prompt: process.env.PROMPT, options })) {
      if (msg.type === 'result' && toResult === null) { toResult = performance.now() - t0; result = msg; }
    }
  } catch (e) { error = String(e?.message ?? e).slice(0, 300); }
  const toEnd = performance.now() - t0;
  fs.rmSync(d, { recursive: true, force: true });
  return { ok: !!result && !result.is_error && !error, to_result_ms: toResult, to_end_ms: toEnd, result: result?.result ?? null, error };
}

function mem() {
  const st = fs.readFileSync('/proc/self/status', 'utf8');
  const g = (k) => Number((st.match(new RegExp(`^${k}:\\s+(\\d+)`, 'm')) ?? [])[1]);
  return { vmhwm_kb: g('VmHWM'), vmrss_kb: g('VmRSS') };
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const cmd = line.trim();
  const out = cmd === 'run' ? await runOnce() : cmd === 'mem' ? mem() : { error: `unknown command ${cmd}` };
  process.stdout.write(JSON.stringify(out) + '\n');
}
