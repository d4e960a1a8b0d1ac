// Drives `sluice serve` with the official openai npm client (pinned in
// tests/node/package.json): chat and completions, streamed and not, seeds,
// the Responses API (plain, streamed, tools, previous_response_id, errors),
// prompt scoring (echo + logprobs + max_tokens 0, against `sluice logits`),
// stop strings, logprobs, usage, prefix reuse, tools, errors and auth.
//   node openai_client.mjs SLUICE_BINARY MODEL_DIR
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, runner, printableBias, metric } from './harness.mjs';

const require = createRequire(new URL('../node/package.json', import.meta.url));
const { default: OpenAI } = require('openai');

const [binary, modelDir] = process.argv.slice(2);
const MODEL = path.basename(modelDir);
const server = await startServer(binary, modelDir);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const bias = printableBias();
const user = (content) => [{ role: 'user', content }];
const t = runner();

async function streamChat(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let content = '', finish = null, usage = null, role = null, ids = new Set(), chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    ids.add(chunk.id);
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) content += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { content, finish, usage, role, ids, chunks };
}

await t.test('models.list names the served model', async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.deepEqual(models, [MODEL]);
});

await t.test('chat completion: shape and usage', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: user('Hello'), max_tokens: 12, seed: 1, logit_bias: bias });
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, MODEL);
  assert.ok(Number.isInteger(r.created) && Math.abs(r.created - Date.now() / 1000) < 600);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.choices[0].message.content.length, 12);  // printable ASCII: one byte per token
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
});

await t.test('same seed, same output; another seed, another output', async () => {
  const p = { model: MODEL, messages: user('Tell me a story'), max_tokens: 24, temperature: 1.0, logit_bias: bias };
  const a = await client.chat.completions.create({ ...p, seed: 42 });
  const b = await client.chat.completions.create({ ...p, seed: 42 });
  const c = await client.chat.completions.create({ ...p, seed: 43 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.notEqual(a.choices[0].message.content, c.choices[0].message.content);
  const g1 = await client.chat.completions.create({ ...p, temperature: 0 });
  const g2 = await client.chat.completions.create({ ...p, temperature: 0, seed: 99 });
  assert.equal(g1.choices[0].message.content, g2.choices[0].message.content);
});

await t.test('streamed chat equals the non-streamed reply, with usage last', async () => {
  const p = { model: MODEL, messages: user('Stream please'), max_tokens: 20, seed: 5, logit_bias: bias, top_k: 40, top_p: 0.9, min_p: 0.01 };
  const whole = await client.chat.completions.create(p);
  const s = await streamChat(p);
  assert.equal(s.role, 'assistant');
  assert.equal(s.content, whole.choices[0].message.content);
  assert.equal(s.finish, 'length');
  assert.equal(s.ids.size, 1);
  // The same prompt again: all but its last token come from the kept state.
  assert.deepEqual({ ...s.usage, prompt_tokens_details: null }, { ...whole.usage, prompt_tokens_details: null });
  assert.equal(s.usage.prompt_tokens_details.cached_tokens, whole.usage.prompt_tokens - 1);
});

await t.test('completions, streamed and not', async () => {
  const p = { model: MODEL, prompt: 'Once upon a time', max_tokens: 10, seed: 3, logit_bias: bias };
  const r = await client.completions.create(p);
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].text.length, 10);
  assert.equal(r.usage.prompt_tokens, 'Once upon a time'.length);
  const stream = await client.completions.create({ ...p, stream: true });
  let text = '', finish = null;
  for await (const chunk of stream) for (const c of chunk.choices) { text += c.text; if (c.finish_reason) finish = c.finish_reason; }
  assert.equal(text, r.choices[0].text);
  assert.equal(finish, 'length');
  const echo = await client.completions.create({ ...p, echo: true });
  assert.equal(echo.choices[0].text, 'Once upon a time' + r.choices[0].text);
});

await t.test('stop strings end the reply before them, streamed or not', async () => {
  const p = { model: MODEL, messages: user('Count'), max_tokens: 40, seed: 11, logit_bias: bias };
  const full = (await client.chat.completions.create(p)).choices[0].message.content;
  const at = 12;
  const stop = full.slice(at, at + 3);
  const expected = full.slice(0, full.indexOf(stop));
  const r = await client.chat.completions.create({ ...p, stop: [stop, '\u0000never'] });
  assert.equal(r.choices[0].message.content, expected);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await streamChat({ ...p, stop });
  assert.equal(s.content, expected);
  assert.equal(s.finish, 'stop');
  const c = await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 40, seed: 11, logit_bias: bias });
  const cs = c.choices[0].text.slice(5, 7);
  const cr = await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 40, seed: 11, logit_bias: bias, stop: cs });
  assert.equal(cr.choices[0].text, c.choices[0].text.slice(0, c.choices[0].text.indexOf(cs)));
});

await t.test('logprobs and top_logprobs', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: user('hi'), max_tokens: 6, seed: 2, logprobs: true, top_logprobs: 3, logit_bias: bias });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 6);
  assert.equal(lp.map((e) => e.token).join(''), r.choices[0].message.content);
  for (const e of lp) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[2].logprob);
    assert.deepEqual(e.bytes, [...Buffer.from(e.token)]);
  }
  const c = await client.completions.create({ model: MODEL, prompt: 'abc', max_tokens: 4, seed: 2, logprobs: 2, logit_bias: bias });
  assert.equal(c.choices[0].logprobs.tokens.length, 4);
  assert.equal(c.choices[0].logprobs.top_logprobs[0] && Object.keys(c.choices[0].logprobs.top_logprobs[0]).length, 2);
});

await t.test('a follow-up turn reuses the conversation state', async () => {
  const first = user('Remember this: apples');
  const a = await client.chat.completions.create({ model: MODEL, messages: first, max_tokens: 8, seed: 9, logit_bias: bias });
  const reusedBefore = await metric(server.url, 'sluice_prompt_tokens_reused_total');
  const second = [...first, { role: 'assistant', content: a.choices[0].message.content }, { role: 'user', content: 'And now?' }];
  const b = await client.chat.completions.create({ model: MODEL, messages: second, max_tokens: 4, seed: 9, logit_bias: bias });
  assert.ok(b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens, JSON.stringify(b.usage));
  assert.ok((await metric(server.url, 'sluice_prompt_tokens_reused_total')) > reusedBefore);
});

await t.test('a repeated or diverging request rolls the state back instead of prefilling', async () => {
  const p = { model: MODEL, messages: user('Rollback please, twice over'), max_tokens: 10, seed: 4, logit_bias: bias };
  const a = await client.chat.completions.create(p);
  const b = await client.chat.completions.create(p);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  assert.equal(b.usage.prompt_tokens_details.cached_tokens, b.usage.prompt_tokens - 1);
  // The reply edited by the client: the common part of the conversation is kept.
  const edited = [...p.messages, { role: 'assistant', content: 'edited' }, { role: 'user', content: 'ok' }];
  const c = await client.chat.completions.create({ ...p, messages: edited });
  assert.ok(c.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens - 1, JSON.stringify(c.usage));
});

await t.test('tools are accepted, tool turns render; a tool_choice naming no tool is a 400', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
  const r = await client.chat.completions.create({ model: MODEL, messages: user('Weather in Paris?'), tools, max_tokens: 4, seed: 1, logit_bias: bias });
  assert.equal(r.choices[0].finish_reason, 'length');
  const convo = [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '18 C, sunny' },
  ];
  const r2 = await client.chat.completions.create({ model: MODEL, messages: convo, tools, max_tokens: 4, seed: 1 });
  assert.equal(r2.usage.completion_tokens <= 4, true);
  await assert.rejects(
    client.chat.completions.create({ model: MODEL, messages: user('x'), tools, tool_choice: { type: 'function', function: { name: 'nope' } } }),
    (e) => e.status === 400 && e.param === 'tool_choice.function.name');
});

await t.test('tool_choice required / named: even a random model replies with a call matching the schema', async () => {
  const tools = [
    { type: 'function', function: { name: 'get_weather', strict: true, parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 8 }, days: { type: 'integer' } }, required: ['city', 'days'], additionalProperties: false } } },
    { type: 'function', function: { name: 'noop', parameters: { type: 'object', properties: {}, additionalProperties: false } } },
  ];
  for (const [tool_choice, names] of [['required', ['get_weather', 'noop']], [{ type: 'function', function: { name: 'get_weather' } }, ['get_weather']]]) {
    for (let seed = 0; seed < 3; seed++) {
      const r = await client.chat.completions.create({ model: MODEL, messages: user('Weather in Paris?'), tools, tool_choice, parallel_tool_calls: false, max_tokens: 300, seed, temperature: 1 });
      assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
      const [c, ...more] = r.choices[0].message.tool_calls;
      assert.equal(more.length, 0);
      assert.ok(names.includes(c.function.name), c.function.name);
      const a = JSON.parse(c.function.arguments);
      if (c.function.name === 'get_weather') assert.ok(typeof a.city === 'string' && [...a.city].length <= 8 && Number.isInteger(a.days), c.function.arguments);
      else assert.deepEqual(a, {});
    }
  }
});

await t.test('response_format json_object: the reply is one JSON object', async () => {
  // Biases toward closing quotes and braces keep the random model's objects short.
  const jb = { ...bias, '34': 4, '125': 4, '93': 4 };
  let stopped = 0;
  for (let seed = 0; seed < 6; seed++) {
    const r = await client.chat.completions.create({ model: MODEL, messages: user('JSON please'), max_tokens: 120, seed, logit_bias: jb, response_format: { type: 'json_object' } });
    const text = r.choices[0].message.content;
    assert.equal(text.trimStart()[0], '{', text);
    if (r.choices[0].finish_reason === 'stop') {
      stopped++;
      const v = JSON.parse(text);
      assert.equal(typeof v, 'object');
      assert.ok(!Array.isArray(v) && v !== null);
    }
  }
  assert.ok(stopped >= 1, 'no object was ever closed');
});

await t.test('prompt scoring: echo + logprobs + max_tokens 0 gives the logits sluice logits computes', async () => {
  const ids = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100];
  const r = await client.completions.create({ model: MODEL, prompt: ids, echo: true, logprobs: 2, max_tokens: 0 });
  const c = r.choices[0];
  assert.equal(c.text, 'Hello, world');
  assert.equal(c.finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 0);
  assert.equal(c.logprobs.tokens.join(''), 'Hello, world');
  assert.equal(c.logprobs.token_logprobs[0], null);
  assert.equal(c.logprobs.top_logprobs[0], null);
  assert.deepEqual(c.logprobs.text_offset, ids.map((_, i) => i));
  // The engine's own logits at every position (sluice logits), log-softmaxed here in float64.
  const out = path.join(os.tmpdir(), `sluice-score-${process.pid}.safetensors`);
  execFileSync(binary, ['logits', '--model', modelDir, '--tokens', ids.join(','), '--output', out]);
  const buf = fs.readFileSync(out);
  fs.rmSync(out);
  const hlen = Number(buf.readBigUInt64LE(0));
  const meta = JSON.parse(buf.subarray(8, 8 + hlen).toString()).logits;
  const [T, V] = meta.shape;
  assert.equal(T, ids.length);
  const f = new Float32Array(buf.buffer.slice(buf.byteOffset + 8 + hlen + meta.data_offsets[0], buf.byteOffset + 8 + hlen + meta.data_offsets[1]));
  for (let i = 1; i < T; i++) {
    const row = f.subarray((i - 1) * V, i * V);
    const mx = Math.max(...row);
    let z = 0;
    for (const x of row) z += Math.exp(x - mx);
    const lp = row[ids[i]] - mx - Math.log(z);
    assert.ok(Math.abs(c.logprobs.token_logprobs[i] - lp) < 1e-9, `position ${i}: ${c.logprobs.token_logprobs[i]} vs ${lp}`);
    const n = Object.keys(c.logprobs.top_logprobs[i]).length;  // two, unless both are bytes shown as U+FFFD
    assert.ok(n === 2 || n === 1, `${n} alternatives`);
    const best = Math.max(...Object.values(c.logprobs.top_logprobs[i]));
    if (n === 2) assert.ok(Math.abs(best - (mx - mx - Math.log(z))) < 1e-9);  // the most likely token's
  }
  await assert.rejects(client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 0 }), (e) => e.status === 400 && e.param === 'max_tokens');
});

// The Responses API: the same conversation as chat completions gives the same reply.
await t.test('responses.create: string input and instructions reply as chat completions does', async () => {
  const r = await client.responses.create({ model: MODEL, instructions: 'Be brief.', input: 'Hello there', max_output_tokens: 12, temperature: 0 });
  assert.match(r.id, /^resp_/);
  assert.equal(r.object, 'response');
  assert.equal(r.model, MODEL);
  assert.equal(r.instructions, 'Be brief.');
  assert.ok(['completed', 'incomplete'].includes(r.status));
  const msg = r.output.find((o) => o.type === 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.content[0].type, 'output_text');
  const c = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'system', content: 'Be brief.' }, ...user('Hello there')], max_tokens: 12, temperature: 0 });
  assert.equal(r.output_text, c.choices[0].message.content);
  assert.equal(r.usage.input_tokens, c.usage.prompt_tokens);
  assert.equal(r.usage.output_tokens, c.usage.completion_tokens);
  assert.equal(r.status === 'incomplete', c.choices[0].finish_reason === 'length');
  if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  const got = await client.responses.retrieve(r.id);  // held for previous_response_id
  assert.deepEqual(got.output, r.output);
  await client.responses.delete(r.id);
  await assert.rejects(client.responses.retrieve(r.id), (e) => e.status === 404);
});

await t.test('responses stream: events in order, deltas add up to the response', async () => {
  const plain = await client.responses.create({ model: MODEL, input: 'Stream me', max_output_tokens: 16, temperature: 0, store: false });
  const stream = await client.responses.create({ model: MODEL, input: 'Stream me', max_output_tokens: 16, temperature: 0, stream: true });
  const types = [];
  let text = '', last = null, seq = -1;
  for await (const ev of stream) {
    types.push(ev.type);
    assert.equal(ev.sequence_number, seq + 1);
    seq = ev.sequence_number;
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') last = ev.response;
  }
  assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
  assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)), types.join());
  assert.equal(text, plain.output_text);
  assert.deepEqual(last.output.map((o) => o.content[0].text), plain.output.map((o) => o.content[0].text));
});

await t.test('responses with tools: a forced call, its output sent back through previous_response_id', async () => {
  const tools = [{ type: 'function', name: 'get_weather', strict: true, parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 8 } }, required: ['city'], additionalProperties: false } }];
  const r = await client.responses.create({ model: MODEL, input: 'Weather in Paris?', tools, tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 200, temperature: 0 });
  const calls = r.output.filter((o) => o.type === 'function_call');
  assert.equal(calls.length, 1, JSON.stringify(r.output));
  assert.equal(calls[0].name, 'get_weather');
  assert.match(calls[0].call_id, /^call_/);
  assert.ok([...JSON.parse(calls[0].arguments).city].length <= 8);
  const next = await client.responses.create({ model: MODEL, previous_response_id: r.id, tools, max_output_tokens: 6, temperature: 0,
    input: [{ type: 'function_call_output', call_id: calls[0].call_id, output: '18 C, sunny' }] });
  assert.equal(next.previous_response_id, r.id);
  // The same turn with the whole conversation sent again renders the same prompt.
  const full = await client.responses.create({ model: MODEL, tools, max_output_tokens: 6, temperature: 0, store: false,
    input: [{ role: 'user', content: 'Weather in Paris?' }, ...r.output, { type: 'function_call_output', call_id: calls[0].call_id, output: '18 C, sunny' }] });
  assert.equal(full.usage.input_tokens, next.usage.input_tokens);
  assert.equal(full.output_text, next.output_text);
  // Streamed, the call comes as function_call_arguments events.
  const stream = await client.responses.create({ model: MODEL, input: 'Weather in Paris?', tools, tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 200, temperature: 0, stream: true });
  let args = '', done = null;
  for await (const ev of stream) {
    if (ev.type === 'response.function_call_arguments.delta') args += ev.delta;
    if (ev.type === 'response.function_call_arguments.done') done = ev;
  }
  assert.equal(args, calls[0].arguments);
  assert.equal(done.name, 'get_weather');
  // Not stored: nothing to continue from.
  await assert.rejects(client.responses.create({ model: MODEL, previous_response_id: full.id, input: 'x' }),
    (e) => e.status === 400 && e.param === 'previous_response_id' && e.code === 'previous_response_not_found');
});

await t.test('responses errors: status and the Responses field named', async () => {
  const cases = [
    [{ model: MODEL, input: 'x', temperature: 5 }, 400, 'temperature'],
    [{ model: MODEL, input: 'x', max_output_tokens: 0 }, 400, 'max_output_tokens'],
    [{ model: MODEL, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 400, 'input[0].content[0].type'],
    [{ model: MODEL, input: 'x', tools: [{ type: 'web_scraper' }] }, 400, 'tools[0].type'],
    [{ model: MODEL, input: 'x', text: { format: { type: 'json_schema', name: 'x', schema: { type: 'string', pattern: 'a+' } } } }, 400, 'text.format.schema.pattern'],
    [{ model: MODEL, input: 'x', bogus_field: 1 }, 400, 'bogus_field'],
    [{ model: 'no-such-model', input: 'x' }, 404, 'model'],
  ];
  for (const [body, status, param] of cases) {
    await assert.rejects(client.responses.create(body), (e) => {
      assert.equal(e.status, status, JSON.stringify(body));
      assert.equal(e.param, param, JSON.stringify(body));
      assert.ok(e.message.length > 0);
      return true;
    }, `no error for ${JSON.stringify(body)}`);
  }
});

await t.test('errors: status, type and the field named', async () => {
  const cases = [
    [{ model: MODEL, messages: user('x'), temperature: 5 }, 400, 'temperature'],
    [{ model: MODEL, messages: user('x'), max_tokens: -3 }, 400, 'max_tokens'],
    [{ model: MODEL, messages: [] }, 400, 'messages'],
    [{ model: MODEL, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 400, 'messages[0].content[0].type'],
    [{ model: MODEL, messages: user('x'), n: 2 }, 400, 'n'],
    [{ model: MODEL, messages: user('x'), frequency_penalty: 0.5 }, 400, 'frequency_penalty'],
    [{ model: MODEL, messages: user('x'), response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: 'a+' } } } }, 400, 'response_format.json_schema.schema.pattern'],
    [{ model: MODEL, messages: user('x'), stop: ['a', 'b', 'c', 'd', 'e'] }, 400, 'stop'],
    [{ model: MODEL, messages: user('x'), bogus_field: 1 }, 400, 'bogus_field'],
    [{ model: MODEL, messages: user('x'), max_tokens: 70000 }, 400, 'max_tokens'],  // the context is 65,536
    [{ model: 'no-such-model', messages: user('x') }, 404, 'model'],
  ];
  for (const [body, status, param] of cases) {
    await assert.rejects(client.chat.completions.create(body), (e) => {
      assert.equal(e.status, status, JSON.stringify(body));
      assert.equal(e.param, param, JSON.stringify(body));
      assert.ok(e.message.length > 0);
      return true;
    }, `no error for ${JSON.stringify(body)}`);
  }
});

await t.test('with --api-key, requests without the key get 401', async () => {
  const keyed = await startServer(binary, modelDir, ['--api-key', 'sekrit']);
  try {
    const bad = new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e.status === 401);
    const good = new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: 'sekrit', maxRetries: 0 });
    const r = await good.chat.completions.create({ model: MODEL, messages: user('hi'), max_tokens: 2 });
    assert.equal(r.choices.length, 1);
    assert.equal((await fetch(`${keyed.url}/metrics`)).status, 401);
    assert.equal((await fetch(`${keyed.url}/health`)).status, 200);
  } finally {
    assert.equal((await keyed.stop()).code, 0);
  }
});

await t.test('with --ram, metrics count expert reads and cache hits', async () => {
  const streamed = await startServer(binary, modelDir, ['--ram', '0.003']);
  try {
    const c = new OpenAI({ baseURL: `${streamed.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const plain = await client.chat.completions.create({ model: MODEL, messages: user('same'), max_tokens: 8, seed: 3, logit_bias: bias });
    const r = await c.chat.completions.create({ model: MODEL, messages: user('same'), max_tokens: 8, seed: 3, logit_bias: bias });
    assert.equal(r.choices[0].message.content, plain.choices[0].message.content);
    assert.ok((await metric(streamed.url, 'sluice_expert_requests_total')) > 0);
    assert.ok((await metric(streamed.url, 'sluice_expert_bytes_read_total')) > 0);
    const ratio = await metric(streamed.url, 'sluice_expert_cache_hit_ratio');
    assert.ok(ratio >= 0 && ratio <= 1);
    // On the CPU nothing crosses PCIe: the GPU counters are there, and zero.
    for (const name of ['sluice_expert_device_hits_total', 'sluice_expert_device_bytes_copied_total',
                        'sluice_expert_device_copy_seconds_total'])
      assert.equal(await metric(streamed.url, name), 0, name);
  } finally {
    assert.equal((await streamed.stop()).code, 0);
  }
});

await t.test('metrics in Prometheus text format', async () => {
  const res = await fetch(`${server.url}/metrics`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/plain/);
  const text = await res.text();
  for (const name of ['sluice_generation_tokens_total', 'sluice_prompt_tokens_total', 'sluice_queue_waiting', 'sluice_time_per_output_token_seconds_count'])
    assert.match(text, new RegExp(`^${name} `, 'm'));
  assert.ok((await metric(server.url, 'sluice_generation_tokens_total')) > 50);
});

const st = await server.stop();
await t.test('server stops cleanly on SIGTERM', async () => assert.equal(st.code, 0, JSON.stringify(st)));
t.finish();
