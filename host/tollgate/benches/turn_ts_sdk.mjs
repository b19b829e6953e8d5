// The refund flow through the official TypeScript Agent SDK, driven by benches/turn.rs.
//
// Reads one command per stdin line and answers one JSON line on stdout:
//   run <n> -> one query() with the refund flow script against MOCK_URL:
//              {"ok","to_end_ms","result","error"}
// The SDK's in-process MCP server offers the same two tools as the Tollgate agent: lookup_order
// (a read, answered in process) and record_credit (POSTs to PAYMENTS_URL/credits with an
// Idempotency-Key, as the ledger guest does), both `alwaysLoad` as Tollgate lists its tools. A
// PreToolUse hook allows both, as an application that runs them without approval would. Environment: TS_SDK_NODE_MODULES (holds
// @anthropic-ai/claude-agent-sdk and zod), CLAUDE_BIN, MOCK_URL, PAYMENTS_URL, PROJECT (cwd), PROMPT.
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { performance } from 'node:perf_hooks';
import { scratchDirs, sdk, z } from '../../claude/benches/ts_sdk_load.mjs';

async function runOnce(n) {
  const d = scratchDirs('tollgate-ts-turn-');
  const server = sdk.createSdkMcpServer({
    name: 'tools', version: '1.0.0',
    tools: [
      sdk.tool('lookup_order', 'Looks an order up by its ID.', { order_id: z.string() }, async (a) => ({
        content: [{ type: 'text', text: JSON.stringify({ order_id: a.order_id, status: 'delivered', total_cents: 4200, currency: 'EUR' }) }],
      }), { annotations: { readOnlyHint: true }, alwaysLoad: true }),
      sdk.tool('record_credit', 'Records a store-credit note on an order.', { order_id: z.string(), amount_cents: z.number() }, async (a) => {
        const response = await fetch(`${process.env.PAYMENTS_URL}/credits`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': `ts-${n}` },
          body: JSON.stringify(a),
        });
        return { content: [{ type: 'text', text: await response.text() }] };
      }, { annotations: { idempotentHint: true }, alwaysLoad: true }),
    ],
  });
  const allow = async () => ({ hookSpecificOutput: { hookEventName: 'PreToolUse', permissionDecision: 'allow' } });
  const options = {
    pathToClaudeCodeExecutable: process.env.CLAUDE_BIN,
    env: {
      PATH: process.env.PATH, HOME: path.join(d, 'home'), CLAUDE_CONFIG_DIR: path.join(d, 'cfg'), TMPDIR: path.join(d, 'tmp'),
      ANTHROPIC_BASE_URL: process.env.MOCK_URL, ANTHROPIC_API_KEY: 'dummy', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      HTTPS_PROXY: 'http://127.0.0.1:1', NO_PROXY: '127.0.0.1,localhost', CLAUDE_CODE_MAX_RETRIES: '0',
    },
    settingSources: [], cwd: process.env.PROJECT, permissionMode: 'default', includePartialMessages: true,
    mcpServers: { tools: server },
    hooks: { PreToolUse: [{ matcher: 'mcp__tools__.*', hooks: [allow] }] },
  };
  const t0 = performance.now();
  let result = null; let error = null;
  try {
    for await (const msg of sdk.query({ prompt: process.env.PROMPT, options })) {
      if (msg.type === 'result' && result === null) result = msg;
    }
  } catch (e) { error = String(e?.message ?? e).slice(0, 300); }
  const toEnd = performance.now() - t0;
  fs.rmSync(d, { recursive: true, force: true });
  return { ok: !!result && !result.is_error && !error, to_end_ms: toEnd, result: result?.result ?? null, error };
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const [cmd, n] = line.trim().split(/\s+/);
  const out = cmd === 'run' ? await runOnce(n ?? '0') : { error: `unknown command ${cmd}` };
  process.stdout.write(JSON.stringify(out) + '\n');
}
