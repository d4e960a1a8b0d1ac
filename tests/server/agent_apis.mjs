// What coding agents need from the server beyond request fields (issue 31), on
// the three APIs (chat completions, Anthropic Messages, Responses), with a
// scripted model (the real DeepSeek-V3 tokenizer; it writes a tool call, or its
// answer once a tool output is in the conversation: tests/agents/scripted_model.mjs):
// - tool-call arguments are streamed as they are generated (several deltas);
// - a call cut off by max_tokens ends one way: finish_reason length / stop_reason
//   max_tokens / status incomplete, and no tool input (whole or streamed) is given;
// - keep-alives (SSE comment, ping, response.in_progress) at least every
//   --keep-alive while a request is queued and while its prompt is prefilled;
// - Anthropic's wording for a prompt over the context and for input + max_tokens
//   over it; ignored fields counted in /metrics; dropped hosted tools named;
// - one log line per request (id, endpoint, tokens, queue wait, TTFT, tokens/s, finish).
//   node agent_apis.mjs SLUICE_BINARY MAKE_TEST_MODEL
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, runner, metric, logged } from './harness.mjs';
import { makeAgentModel } from '../agents/scripted_model.mjs';

const [binary, makeModel] = process.argv.slice(2);
const t = runner();
const MODEL = 'm';
const CONTEXT = 16000;
const ARGS = { city: 'Oslo', days: 3, note: 'bring an umbrella and a warm coat' };
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-agent-apis-'));
const dir = makeAgentModel(makeModel, path.join(tmp, 'model'), { name: 'get_weather', args: ARGS, answer: 'It rains in Oslo.' });
const server = await startServer(binary, dir, ['--served-model-name', MODEL, '--keep-alive', '0.5',
  '--context-length', String(CONTEXT), '--prefill-chunk', '100000']);
const url = server.url;
const schema = { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer', exclusiveMinimum: 0 }, note: { type: 'string' } }, required: ['city'] };

// One request per API, the same conversation; `extra` per API.
const apis = {
  chat: (extra = {}) => ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'Weather?' }],
    tools: [{ type: 'function', function: { name: 'get_weather', parameters: schema } }], ...extra }],
  messages: (extra = {}) => ['/v1/messages', { model: MODEL, max_tokens: 200, messages: [{ role: 'user', content: 'Weather?' }],
    tools: [{ name: 'get_weather', input_schema: schema, eager_input_streaming: true }], ...extra }],
  responses: (extra = {}) => ['/v1/responses', { model: MODEL, input: 'Weather?',
    tools: [{ type: 'function', name: 'get_weather', parameters: schema, strict: false }], ...extra }],
};
const limit = { chat: (n) => ({ max_tokens: n }), messages: (n) => ({ max_tokens: n }), responses: (n) => ({ max_output_tokens: n }) };

// A streamed request: the SSE events (with their arrival times) and the gaps between received bytes.
async function stream(route, body) {
  const t0 = Date.now();
  const r = await fetch(url + route, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) });
  if (r.status !== 200) assert.fail(`${r.status}: ${await r.text()}`);
  const events = [], arrivals = [];
  let text = '';
  for await (const chunk of r.body) {
    arrivals.push(Date.now());
    text += Buffer.from(chunk).toString();
    let at;
    while ((at = text.indexOf('\n\n')) >= 0) {
      const raw = text.slice(0, at);
      text = text.slice(at + 2);
      const data = raw.split('\n').find((l) => l.startsWith('data: '));
      events.push({ at: Date.now() - t0, raw, data: data && data !== 'data: [DONE]' ? JSON.parse(data.slice(6)) : null });
    }
  }
  return { events, arrivals, t0, headers: r.headers };
}

async function post(route, body) {
  const r = await fetch(url + route, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json(), headers: r.headers };
}

// The streamed pieces of the (first) tool call's arguments, per API.
function argumentPieces(api, events) {
  const pieces = [];
  for (const { data } of events) {
    if (!data) continue;
    if (api === 'chat') for (const c of data.choices?.[0]?.delta?.tool_calls ?? []) { if (c.function?.arguments) pieces.push(c.function.arguments); }
    if (api === 'messages' && data.type === 'content_block_delta' && data.delta.type === 'input_json_delta') pieces.push(data.delta.partial_json);
    if (api === 'responses' && data.type === 'response.function_call_arguments.delta') pieces.push(data.delta);
  }
  return pieces;
}

for (const api of Object.keys(apis)) {
  await t.test(`${api}: tool-call arguments stream as they are generated`, async () => {
    const [route, body] = apis[api]();
    const s = await stream(route, body);
    const pieces = argumentPieces(api, s.events);
    assert.ok(pieces.length >= 3, `${pieces.length} argument pieces: ${JSON.stringify(pieces)}`);
    assert.deepEqual(JSON.parse(pieces.join('')), ARGS);
    // The same call whole.
    const w = await post(route, body);
    assert.equal(w.status, 200, JSON.stringify(w.body));
    const input = api === 'chat' ? JSON.parse(w.body.choices[0].message.tool_calls[0].function.arguments)
      : api === 'messages' ? w.body.content.find((b) => b.type === 'tool_use').input
        : JSON.parse(w.body.output.find((o) => o.type === 'function_call').arguments);
    assert.deepEqual(input, ARGS);
  });

  await t.test(`${api}: a call cut off by max_tokens ends with the length reason and no tool input`, async () => {
    const [route, body] = apis[api](limit[api](12));  // the call's arguments are longer than this
    const w = await post(route, body);
    assert.equal(w.status, 200, JSON.stringify(w.body));
    if (api === 'chat') {
      assert.equal(w.body.choices[0].finish_reason, 'length');
      assert.equal(w.body.choices[0].message.tool_calls, undefined);
      assert.doesNotMatch(w.body.choices[0].message.content ?? '', /tool|｜/);
    } else if (api === 'messages') {
      assert.equal(w.body.stop_reason, 'max_tokens');
      assert.deepEqual(w.body.content.filter((b) => b.type !== 'text'), []);
      assert.ok(w.body.content.every((b) => !/｜|_raw/.test(b.text)), JSON.stringify(w.body.content));
    } else {
      assert.equal(w.body.status, 'incomplete');
      assert.equal(w.body.incomplete_details.reason, 'max_output_tokens');
      assert.deepEqual(w.body.output.filter((o) => o.type === 'function_call'), []);
    }
    const s = await stream(route, body);
    const types = s.events.map((e) => e.data?.type);
    if (api === 'chat') {
      assert.equal(s.events.filter((e) => e.data).at(-1).data.choices[0].finish_reason, 'length');
    } else if (api === 'messages') {
      const start = s.events.find((e) => e.data?.type === 'content_block_start' && e.data.content_block.type === 'tool_use');
      assert.ok(start, 'the call began streaming');
      assert.ok(!s.events.some((e) => e.data?.type === 'content_block_stop' && e.data.index === start.data.index), 'the cut call was closed');
      assert.equal(s.events.find((e) => e.data?.type === 'message_delta').data.delta.stop_reason, 'max_tokens');
    } else {
      assert.ok(types.includes('response.function_call_arguments.delta'), types.join());
      assert.ok(!types.includes('response.function_call_arguments.done'), types.join());
      assert.ok(s.events.every((e) => e.data?.type !== 'response.output_item.done' || e.data.item.type !== 'function_call'));
      assert.equal(types.at(-1), 'response.incomplete');
    }
  });
}

// The keep-alive each API's clients count: an SSE comment, Anthropic's ping, a Responses event.
const isKeepAlive = {
  chat: (e) => e.raw.startsWith(': '),
  messages: (e) => e.data?.type === 'ping',
  responses: (e) => e.data?.type === 'response.in_progress',
};
// Gaps between received bytes before the first generated content (the waiting part).
function waitingGaps(api, s) {
  const firstContent = s.events.find((e) => (api === 'chat' && e.data?.choices?.[0]?.delta?.tool_calls)
    || (api === 'messages' && e.data?.type === 'content_block_start') || (api === 'responses' && e.data?.type === 'response.output_item.added'));
  const until = s.t0 + firstContent.at;
  const times = [s.t0, ...s.arrivals.filter((a) => a <= until)];
  return { gaps: times.slice(1).map((a, i) => a - times[i]), waited: firstContent.at };
}

await t.test('keep-alives every --keep-alive while queued, on every API', async () => {
  // The running request: the model's reply kept going past its end (EOS forbidden), up to 3000
  // tokens (over 5 s at this model's fastest decode seen, ~550 tokens/s); its client goes 3 s after
  // the others queued (the server stops a request whose client is gone), so that a slow build
  // (sanitizers: ~26 tokens/s) does not wait for all of them.
  const ctl = new AbortController();
  const busy = fetch(url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, signal: ctl.signal,
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 3000, logit_bias: { 1: -100 } }) })
    .then((r) => r.status, (e) => e.name);
  await new Promise((r) => setTimeout(r, 300));
  const drop = setTimeout(() => ctl.abort(), 3000);
  const waiting = await Promise.all(Object.keys(apis).map(async (api) => [api, await stream(...apis[api]())]));
  clearTimeout(drop);
  assert.ok([200, 'AbortError'].includes(await busy), `the running request ended with ${await busy}`);
  for (const [api, s] of waiting) {
    const { gaps, waited } = waitingGaps(api, s);
    const beats = s.events.filter((e) => e.at < waited && isKeepAlive[api](e)).length;
    assert.ok(waited > 2000, `${api} waited only ${waited} ms: the test needs a longer wait`);
    assert.ok(Math.max(...gaps) < 1500, `${api}: ${Math.max(...gaps)} ms without a byte while queued (${gaps.join(', ')})`);
    assert.ok(beats >= 2, `${api}: ${beats} keep-alives in ${waited} ms`);
  }
});

await t.test('keep-alives every --keep-alive while a long prompt is prefilled (one chunk)', async () => {
  for (const api of Object.keys(apis)) {
    // A different long prompt each time (no prefix reuse): thousands of tokens in one pass.
    const long = Array.from({ length: 600 }, (_, i) => `${api} line ${i} of the long prompt`).join('\n');
    const [route, body] = apis[api]();
    if (api === 'chat') body.messages[0].content = long;
    else if (api === 'messages') body.messages[0].content = long;
    else body.input = long;
    const s = await stream(route, body);
    const { gaps, waited } = waitingGaps(api, s);
    if (waited < 1500) console.log(`note: ${api}'s prefill took only ${waited} ms`);
    assert.ok(Math.max(...gaps) < 1500, `${api}: ${Math.max(...gaps)} ms without a byte while prefilling (${gaps.join(', ')})`);
    if (waited > 2000) assert.ok(s.events.some((e) => e.at < waited && isKeepAlive[api](e)), `${api}: no keep-alive in ${waited} ms`);
  }
});

await t.test("Anthropic's wording for prompts over the context (Claude Code compacts, or lowers max_tokens)", async () => {
  const huge = 'word '.repeat(CONTEXT + 100);
  let r = await post('/v1/messages', { model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: huge }] });
  assert.equal(r.status, 400);
  assert.equal(r.body.error.type, 'invalid_request_error');
  assert.match(r.body.error.message, new RegExp(`^prompt is too long: \\d+ tokens > ${CONTEXT - 1} maximum$`));
  r = await post('/v1/messages', { model: MODEL, max_tokens: CONTEXT, messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(r.status, 400);
  const m = r.body.error.message.match(/^input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+), decrease input length or `max_tokens` and try again$/);
  assert.ok(m, r.body.error.message);
  assert.equal(Number(m[2]), CONTEXT);
  assert.equal(Number(m[3]), CONTEXT);
  // The same prompt on the OpenAI routes: OpenAI's wording and code.
  r = await post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: huge }] });
  assert.equal(r.body.error.code, 'context_length_exceeded');
  assert.match(r.body.error.message, new RegExp(`maximum context length is ${CONTEXT} tokens`));
  r = await post('/v1/responses', { model: MODEL, input: huge });
  assert.equal(r.body.error.code, 'context_length_exceeded');
  assert.equal(r.body.error.param, 'input');
});

await t.test('provider-only fields are ignored and counted; hosted tools are left out and named', async () => {
  const before = await metric(url, 'sluice_ignored_fields_total{endpoint="messages",field="speed"}');
  const [route, body] = apis.messages({ speed: 'fast', service_tier: 'auto', context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
    tools: [...apis.messages()[1].tools, { type: 'web_search_20250305', name: 'web_search' }] });
  const r = await post(route, body);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.headers.get('sluice-dropped-tools'), 'web_search');
  assert.equal(await metric(url, 'sluice_ignored_fields_total{endpoint="messages",field="speed"}'), (Number.isNaN(before) ? 0 : before) + 1);
  const rr = await post('/v1/responses', { ...apis.responses()[1], client_metadata: { a: 'b' }, tools: [{ type: 'web_search' }] });
  assert.equal(rr.status, 200, JSON.stringify(rr.body));
  assert.equal(rr.body.metadata.sluice_dropped_tools, 'web_search');
  assert.equal(await metric(url, 'sluice_ignored_fields_total{endpoint="responses",field="client_metadata"}'), 1);
  assert.equal(await metric(url, 'sluice_dropped_tools_total{endpoint="responses"}'), 1);
});

await t.test('one log line per request: id, endpoint, tokens, queue wait, first token, tokens/s, finish', async () => {
  const r = await post(...apis.messages());
  await logged(server.log, new RegExp(`^sluice: ${r.body.id} `, 'm'));
  const line = server.log().split('\n').find((l) => l.includes(r.body.id));
  assert.match(line, new RegExp(`^sluice: ${r.body.id} /v1/messages: prompt \\d+ tokens \\(\\d+ cached, \\d+ new\\), queued \\d+\\.\\d\\d s, first token \\d+\\.\\d\\d s, \\d+ tokens at [\\d.]+ tokens/s, finish tool_calls$`));
});

assert.equal((await server.stop()).code, 0);

await t.test('a template that cannot place a mid-conversation system message: said the way Claude Code resends on', async () => {
  // The same model with a chat template that refuses a system message after the first turn.
  const strict = path.join(tmp, 'strict');
  fs.cpSync(dir, strict, { recursive: true });
  const cfg = JSON.parse(fs.readFileSync(path.join(strict, 'tokenizer_config.json'), 'utf8'));
  cfg.chat_template = "{% for m in messages %}{% if m.role == 'system' and not loop.first %}{{ raise_exception('System messages must come first.') }}{% endif %}{{ m.role + ': ' + (m.content or '') + '\\n' }}{% endfor %}";
  fs.writeFileSync(path.join(strict, 'tokenizer_config.json'), JSON.stringify(cfg));
  const s2 = await startServer(binary, strict, ['--served-model-name', MODEL]);
  try {
    const r = await fetch(`${s2.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'a' }, { role: 'system', content: 'b' }] }) });
    assert.equal(r.status, 400);
    const body = await r.json();
    assert.match(body.error.message, /role .{0,2}system.{0,2} must (?:precede an|follow a)/i);  // Claude Code's pattern
    assert.match(body.error.message, /System messages must come first/);
  } finally {
    assert.equal((await s2.stop()).code, 0);
  }
});

fs.rmSync(tmp, { recursive: true, force: true });
t.finish();
