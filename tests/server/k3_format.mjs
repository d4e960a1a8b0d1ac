// Kimi K3's own chat format end to end (a K3-architecture checkpoint with a
// tiktoken tokenizer carrying the XTML markers: k3_format_model.mjs), driven by
// the openai client: reasoning split per reasoning_effort, forced tool calls
// (tool_choice required / named) whose arguments match their schemas, an agent
// loop with two tools run to completion (also on the shipped model), json_schema
// output, and the same replies with --speculate.
//   node k3_format.mjs SLUICE_BINARY K3_MINI_DIR
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { startServer, runner } from './harness.mjs';
import { makeK3FormatModel } from './k3_format_model.mjs';

const require = createRequire(new URL('../node/package.json', import.meta.url));
const { default: OpenAI } = require('openai');
const [binary, k3Mini] = process.argv.slice(2);
const MODEL = 'k3-format';
const model = makeK3FormatModel(k3Mini);
const t = runner();
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather for a city', strict: true,
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer' } },
      required: ['city', 'days'], additionalProperties: false } } },
  { type: 'function', function: { name: 'add', description: 'Adds two numbers', strict: true,
    parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'], additionalProperties: false } } },
];
const impl = {
  get_weather: ({ city, days }) => JSON.stringify({ city, days, forecast: 'rain' }),
  add: ({ a, b }) => String(a + b),
};
const checkCall = (c, allowed) => {
  assert.ok(allowed.includes(c.function.name), c.function.name);
  const a = JSON.parse(c.function.arguments);
  if (c.function.name === 'get_weather') {
    assert.equal(typeof a.city, 'string');
    assert.ok([...a.city].length <= 12, a.city);
    assert.ok(Number.isInteger(a.days), c.function.arguments);
    assert.deepEqual(Object.keys(a).sort(), ['city', 'days']);
  } else {
    assert.ok(Number.isInteger(a.a) && Number.isInteger(a.b), c.function.arguments);
  }
  return a;
};

// The agent loop: forced calls for two steps, then a free answer; returns the transcript.
async function agentLoop(client, extra = {}) {
  const messages = [{ role: 'system', content: 'You can call tools.' }, { role: 'user', content: 'What is the weather in Oslo, and what is 2 + 3?' }];
  const transcript = [];
  const choices = ['required', { type: 'function', function: { name: 'add' } }, 'none'];
  for (const tool_choice of choices) {
    const r = await client.chat.completions.create({ model: MODEL, messages, tools, tool_choice, max_tokens: 160, temperature: 0, ...extra });
    const m = r.choices[0].message;
    transcript.push({ tool_choice, finish_reason: r.choices[0].finish_reason, reasoning: m.reasoning_content, content: m.content, tool_calls: m.tool_calls?.map((c) => `${c.function.name}(${c.function.arguments})`) });
    messages.push({ role: 'assistant', content: m.content ?? null, reasoning_content: m.reasoning_content, ...(m.tool_calls ? { tool_calls: m.tool_calls } : {}) });
    if (tool_choice === 'none') {
      assert.equal(m.tool_calls, undefined);
      break;
    }
    assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
    for (const c of m.tool_calls) {
      const result = impl[c.function.name](checkCall(c, tool_choice === 'required' ? ['get_weather', 'add'] : ['add']));
      transcript.push({ tool: c.function.name, result });
      messages.push({ role: 'tool', tool_call_id: c.id, content: result });
    }
  }
  return transcript;
}

const server = await startServer(binary, model.dir, ['--served-model-name', MODEL]);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 300000 });
const ask = (extra) => client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'And God said' }], max_tokens: 24, temperature: 0, ...extra });
let loop;
try {
  await t.test('thinking on by default: the reply starts in reasoning; streamed equals whole', async () => {
    const a = await ask({});
    assert.ok(a.choices[0].message.reasoning_content, JSON.stringify(a.choices[0].message));
    const rt = a.usage.completion_tokens_details.reasoning_tokens;
    assert.ok(rt > 0 && rt <= a.usage.completion_tokens, JSON.stringify(a.usage));
    let reasoning = '', content = '';
    for await (const ch of await ask({ stream: true })) {
      reasoning += ch.choices[0]?.delta?.reasoning_content ?? '';
      content += ch.choices[0]?.delta?.content ?? '';
    }
    assert.equal(reasoning, a.choices[0].message.reasoning_content);
    assert.equal(content, a.choices[0].message.content ?? '');
  });
  await t.test('reasoning_effort none: no effort message, no reasoning; a bad effort is a 400 naming it', async () => {
    const on = await ask({ reasoning_effort: 'low' }), off = await ask({ reasoning_effort: 'none' });
    assert.ok(off.usage.prompt_tokens < on.usage.prompt_tokens, `${off.usage.prompt_tokens} vs ${on.usage.prompt_tokens}`);
    assert.equal(off.choices[0].message.reasoning_content, undefined);
    assert.equal(off.usage.completion_tokens_details.reasoning_tokens, 0, JSON.stringify(off.usage));
    assert.ok(off.choices[0].message.content.length > 0);
    await assert.rejects(ask({ reasoning_effort: 'extreme' }), (e) => e.status === 400 && e.param === 'reasoning_effort');
  });
  await t.test('tool_choice required and named: a call of an allowed tool whose arguments match its schema', async () => {
    for (const [tool_choice, allowed] of [['required', ['get_weather', 'add']], [{ type: 'function', function: { name: 'get_weather' } }, ['get_weather']]]) {
      for (const parallel_tool_calls of [true, false]) {
        const r = await ask({ tools, tool_choice, parallel_tool_calls, max_tokens: 400 });
        assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
        const calls = r.choices[0].message.tool_calls;
        assert.ok(calls.length >= 1);
        if (!parallel_tool_calls) assert.equal(calls.length, 1);
        for (const c of calls) checkCall(c, allowed);
      }
    }
    await assert.rejects(ask({ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }), (e) => e.status === 400 && e.param === 'tool_choice.function.name');
    const bad = structuredClone(tools);
    bad[0].function.parameters.properties.city.pattern = '^[A-Z]';
    await assert.rejects(ask({ tools: bad, tool_choice: 'required' }), (e) => e.status === 400 && e.param === 'tools[0].function.parameters.properties.city.pattern');
  });
  await t.test('response_format json_schema: the reply validates', async () => {
    const schema = { type: 'object', properties: { verse: { type: 'string', maxLength: 20 }, chapter: { type: 'integer' }, holy: { type: 'boolean' } }, required: ['verse', 'chapter', 'holy'], additionalProperties: false };
    const r = await ask({ reasoning_effort: 'none', max_tokens: 80, response_format: { type: 'json_schema', json_schema: { name: 'v', schema, strict: true } } });
    const j = JSON.parse(r.choices[0].message.content);
    assert.deepEqual(Object.keys(j), ['chapter', 'holy', 'verse']);
    assert.ok(Number.isInteger(j.chapter) && typeof j.holy === 'boolean' && [...j.verse].length <= 20);
    await assert.rejects(ask({ response_format: { type: 'json_schema', json_schema: { name: 'v', schema: { type: 'string', format: 'date' } } } }),
      (e) => e.status === 400 && e.param === 'response_format.json_schema.schema.format');
  });
  await t.test('an agent loop with two tools runs to completion', async () => {
    loop = await agentLoop(client);
    console.log(`agent loop transcript (openai chat completions, K3-format model):\n${loop.map((s) => JSON.stringify(s)).join('\n')}`);
  });
} finally {
  assert.equal((await server.stop()).code, 0);
}

const spec = await startServer(binary, model.dir, ['--served-model-name', MODEL, '--speculate']);
try {
  await t.test('--speculate: the same agent loop, token for token', async () => {
    const sc = new OpenAI({ baseURL: `${spec.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 300000 });
    const again = await agentLoop(sc);
    // Tool call ids are random; everything else must match.
    assert.deepEqual(again, loop);
  });
} finally {
  assert.equal((await spec.stop()).code, 0);
  model.remove();
}

// The same loop on the shipped model (ChatML template without tool syntax: Qwen3-style calls as text),
// one call per turn.
const shipped = await startServer(binary, k3Mini, ['--served-model-name', MODEL]);
try {
  await t.test('the agent loop on the shipped model runs to completion', async () => {
    const sc = new OpenAI({ baseURL: `${shipped.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 300000 });
    // One call per turn: this model, forced to call, goes on to write further calls until max_tokens.
    const steps = await agentLoop(sc, { parallel_tool_calls: false });
    console.log(`agent loop transcript (openai chat completions, shipped model):\n${steps.map((s) => JSON.stringify(s)).join('\n')}`);
  });
} finally {
  assert.equal((await shipped.stop()).code, 0);
}
t.finish();
