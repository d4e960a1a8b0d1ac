// Issue 31 item 5, against the real `sluice serve`: a new session of an agent,
// sharing an earlier session's system prompt and tools, starts from them (the
// checkpoint the prompt cache keeps at the end of that head), from memory and
// after a restart from the --prompt-cache directory, and prefills only the
// tokens no earlier prompt had: its cached tokens equal the longest prefix
// its prompt shares with the first session's (computed from /apply-template's
// ids). Later turns of a session prefill only their new messages. Every reply
// is the one a fresh server gives. Run on the shipped model (Kimi K3: MLA
// caches plus KDA recurrent state, which cannot be cut) and on the synthetic
// DeepSeek-V3 model (attention only), through Chat Completions and Messages.
//   node session_reuse.mjs SLUICE_BINARY MODEL_DIR
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, runner, metric, logged } from './harness.mjs';

const [binary, modelDir] = process.argv.slice(2);
const MODEL = 'm';
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-session-reuse-'));
const SYSTEM = 'You are a careful coding agent. Read the files before you change them, and run the tests after. '.repeat(12);
const TOOLS = [{ type: 'function', function: { name: 'shell', description: 'Runs a shell command and returns its output.',
  parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } } }];
// The two sessions' first user messages differ from their first character on.
const Q1 = 'Which files are in this directory?', Q2 = 'Tell me what the tests do.';
const conv = (q) => [{ role: 'system', content: SYSTEM }, { role: 'user', content: q }];
const t = runner();

async function withServer(args, fn) {
  const s = await startServer(binary, modelDir, ['--served-model-name', MODEL, ...args]);
  let log = '';
  s.child.stderr.on('data', (d) => { log += d.toString(); });
  try {
    return await fn(s.url, () => log);
  } finally {
    assert.equal((await s.stop()).code, 0);
  }
}
async function post(url, route, body) {
  const r = await fetch(`${url}${route}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': 'x',
    'anthropic-version': '2023-06-01' }, body: JSON.stringify(body) });
  const j = await r.json();
  assert.equal(r.status, 200, JSON.stringify(j));
  return j;
}
const chat = (url, messages) => post(url, '/v1/chat/completions', { model: MODEL, messages, tools: TOOLS, max_tokens: 12, temperature: 0 });
const messagesApi = (url, q) => post(url, '/v1/messages', { model: MODEL, system: SYSTEM, max_tokens: 12, temperature: 0,
  tools: TOOLS.map((x) => ({ name: x.function.name, description: x.function.description, input_schema: x.function.parameters })),
  messages: [{ role: 'user', content: q }] });
// What the reply says, without its ids.
const said = (r) => JSON.stringify(r.choices ? [r.choices[0].message.content, (r.choices[0].message.tool_calls || []).map((c) => c.function)]
  : r.content.map((b) => b.type === 'tool_use' ? [b.name, b.input] : b.text));
const ids = async (url, messages) => (await post(url, '/apply-template', { messages, tools: TOOLS })).ids;
const common = (a, b) => { let i = 0; while (i < a.length && i < b.length && a[i] === b[i]) ++i; return i; };

// A fresh server per question: nothing reused.
const fresh = {};
for (const q of [Q1, Q2]) await withServer([], async (url) => { fresh[q] = said(await chat(url, conv(q))); });
const freshMessages = await withServer([], async (url) => said(await messagesApi(url, Q2)));

let shared = 0;  // tokens the second session's prompt has in common with the first's
await t.test('a second session starts at the first one\'s system prompt and tools, from memory', async () => {
  await withServer([], async (url, log) => {
    const p1 = await ids(url, conv(Q1)), p2 = await ids(url, conv(Q2));
    shared = common(p1, p2);
    assert.ok(shared > 100 && shared < p2.length - 5, `shared ${shared} of ${p2.length}`);
    const r1 = await chat(url, conv(Q1));
    assert.equal(said(r1), fresh[Q1]);
    assert.equal(r1.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(await metric(url, 'sluice_prompt_cache_checkpoints'), 1);
    // The first session's next turn prefills only what follows its last prompt.
    const m2 = [...conv(Q1), r1.choices[0].message, ...(r1.choices[0].message.tool_calls || []).map((c) =>
      ({ role: 'tool', tool_call_id: c.id, content: 'README.md src tests' })), { role: 'user', content: 'And then?' }];
    const r1b = await chat(url, m2);
    assert.ok(r1b.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens - 1, JSON.stringify(r1b.usage));
    // The second session: only its own tokens are prefilled.
    const r2 = await chat(url, conv(Q2));
    assert.equal(r2.usage.prompt_tokens_details.cached_tokens, shared, JSON.stringify(r2.usage));
    assert.equal(said(r2), fresh[Q2]);
    await logged(log, new RegExp(`prompt ${p2.length} tokens \\(${shared} cached, ${p2.length - shared} new\\)`));
    // A third one, through the Messages API (Claude Code's).
    const r3 = await messagesApi(url, Q2);
    assert.ok(r3.usage.cache_read_input_tokens >= shared, JSON.stringify(r3.usage));
    assert.equal(said(r3), freshMessages);
    console.log(`second session: ${shared} of ${p2.length} prompt tokens reused, ${p2.length - shared} prefilled`);
    // A head of several messages (Codex sends its environment as a user message before the prompt):
    // a new session starts where its prompt's text begins.
    const ENV = '<environment_context>\n  <cwd>/home/user/project</cwd>\n  <shell>bash</shell>\n</environment_context>';
    const withEnv = (q) => [{ role: 'system', content: SYSTEM }, { role: 'user', content: ENV }, { role: 'user', content: q }];
    const e1 = await ids(url, withEnv(Q1)), e2 = await ids(url, withEnv(Q2));
    await chat(url, withEnv(Q1));
    const r4 = await chat(url, withEnv(Q2));
    assert.equal(r4.usage.prompt_tokens_details.cached_tokens, common(e1, e2), JSON.stringify(r4.usage));
    assert.ok(common(e1, e2) > shared);
  });
});

await t.test('after a restart, from the --prompt-cache directory', async () => {
  await withServer(['--prompt-cache', dir], async (url) => {
    assert.equal(said(await chat(url, conv(Q1))), fresh[Q1]);
  });
  await withServer(['--prompt-cache', dir], async (url) => {
    const r2 = await chat(url, conv(Q2));
    assert.equal(r2.usage.prompt_tokens_details.cached_tokens, shared, JSON.stringify(r2.usage));
    assert.equal(said(r2), fresh[Q2]);
  });
});

await t.test('--prompt-checkpoints 0: no checkpoints kept, the same reply (a recurrent model starts over)', async () => {
  await withServer(['--prompt-checkpoints', '0'], async (url) => {
    await chat(url, conv(Q1));
    const r2 = await chat(url, conv(Q2));
    assert.equal(said(r2), fresh[Q2]);
    assert.equal(await metric(url, 'sluice_prompt_cache_checkpoints'), 0);
    console.log(`without checkpoints: ${r2.usage.prompt_tokens_details.cached_tokens} of ${r2.usage.prompt_tokens} reused`);
  });
});

fs.rmSync(dir, { recursive: true, force: true });
t.finish();
