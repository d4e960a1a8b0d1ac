// The Anthropic SDK (pinned in tests/node) against `sluice serve`'s Messages API:
// a message and its stream give the same blocks, count_tokens agrees with usage,
// tool_choice any / tool force a tool_use block whose input matches the schema,
// an agent loop with two tools runs to completion (tool_result blocks fed back),
// errors come in Anthropic's shape, x-api-key works. On the shipped model and on
// the K3-format model; the transcripts are printed.
//   node anthropic_sdk.mjs SLUICE_BINARY K3_MINI_DIR
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { startServer, runner } from './harness.mjs';
import { makeK3FormatModel } from './k3_format_model.mjs';

const require = createRequire(new URL('../node/package.json', import.meta.url));
const Anthropic = require('@anthropic-ai/sdk').default ?? require('@anthropic-ai/sdk');
const [binary, k3Mini] = process.argv.slice(2);
const t = runner();
const MODEL = 'm';
const tools = [
  { name: 'get_weather', description: 'The weather for a city', input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer' } }, required: ['city', 'days'], additionalProperties: false } },
  { name: 'add', description: 'Adds two integers', input_schema: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'], additionalProperties: false } },
];
const impl = { get_weather: ({ city, days }) => JSON.stringify({ city, days, forecast: 'rain' }), add: ({ a, b }) => String(a + b) };

async function agentLoop(client) {
  const messages = [{ role: 'user', content: 'What is the weather in Oslo, and what is 2 + 3?' }];
  const transcript = [];
  for (const tool_choice of [{ type: 'any', disable_parallel_tool_use: true }, { type: 'tool', name: 'add', disable_parallel_tool_use: true }, { type: 'none' }]) {
    const m = await client.messages.create({ model: MODEL, max_tokens: 1000,  // K3's forced calls may reason first (up to 2048 characters)
      temperature: 0, system: 'Use the tools.', messages, tools, tool_choice });
    transcript.push(`assistant (${tool_choice.type}, ${m.stop_reason}): ` + m.content.map((b) => b.type === 'tool_use' ? `tool_use ${b.name}(${JSON.stringify(b.input)})` : `${b.type} ${JSON.stringify(b.text ?? b.thinking)}`).join(' | '));
    messages.push({ role: 'assistant', content: m.content });
    if (tool_choice.type === 'none') {
      assert.ok(m.content.every((b) => b.type !== 'tool_use'));
      break;
    }
    assert.equal(m.stop_reason, 'tool_use');
    const results = [];
    for (const b of m.content.filter((b) => b.type === 'tool_use')) {
      assert.ok(tool_choice.type === 'any' || b.name === 'add', b.name);
      if (b.name === 'get_weather') assert.ok(typeof b.input.city === 'string' && [...b.input.city].length <= 12 && Number.isInteger(b.input.days));
      else assert.ok(Number.isInteger(b.input.a) && Number.isInteger(b.input.b));
      const out = impl[b.name](b.input);
      transcript.push(`tool_result ${b.name}: ${out}`);
      results.push({ type: 'tool_result', tool_use_id: b.id, content: out });
    }
    messages.push({ role: 'user', content: results });
  }
  return transcript;
}

for (const [what, dirOf] of [['shipped model', () => ({ dir: k3Mini, remove() {} })], ['K3-format model', () => makeK3FormatModel(k3Mini)]]) {
  const model = dirOf();
  const server = await startServer(binary, model.dir, ['--served-model-name', MODEL, '--api-key', 'k']);
  const client = new Anthropic({ baseURL: server.url, apiKey: 'k', maxRetries: 0, timeout: 300000 });
  try {
    await t.test(`${what}: a message, its stream and count_tokens agree`, async () => {
      const p = { model: MODEL, max_tokens: 24, temperature: 0, system: 'You are brief.', messages: [{ role: 'user', content: 'And God said' }] };
      const m = await client.messages.create(p);
      assert.equal(m.type, 'message');
      assert.equal(m.role, 'assistant');
      assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
      const events = [];
      const stream = client.messages.stream(p);
      for await (const e of stream) events.push(e.type);
      const streamed = await stream.finalMessage();
      assert.deepEqual(streamed.content, m.content);
      assert.equal(events[0], 'message_start');
      assert.ok(events.includes('content_block_delta') && events.at(-1) === 'message_stop', events.join(','));
      const n = await client.messages.countTokens({ model: MODEL, system: p.system, messages: p.messages });
      assert.equal(n.input_tokens, m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0));
    });
    await t.test(`${what}: an agent loop with two tools runs to completion`, async () => {
      const transcript = await agentLoop(client);
      console.log(`agent loop transcript (@anthropic-ai/sdk, ${what}):\n  ${transcript.join('\n  ')}`);
    });
    await t.test(`${what}: errors in Anthropic's shape naming the field; a wrong key is 401`, async () => {
      await assert.rejects(client.messages.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }] }),
        (e) => e.status === 400 && e.error?.type === 'error' && e.error.error.type === 'invalid_request_error' && /max_tokens/.test(e.error.error.message));
      await assert.rejects(client.messages.create({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'x' }], tools, tool_choice: { type: 'tool', name: 'nope' } }),
        (e) => e.status === 400 && /tool_choice\.name/.test(e.error.error.message));
      const bad = new Anthropic({ baseURL: server.url, apiKey: 'wrong', maxRetries: 0 });
      await assert.rejects(bad.messages.create({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }),
        (e) => e.status === 401 && e.error.error.type === 'authentication_error');
    });
  } finally {
    assert.equal((await server.stop()).code, 0);
    model.remove();
  }
}
t.finish();
