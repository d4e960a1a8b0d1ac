// The OpenAI Agents SDK (pinned in tests/node) running an agent loop with two
// tools to completion against `sluice serve`, through the Responses API (the
// SDK's default model, OpenAIResponsesModel: function_call items, outputs sent
// back as function_call_output) and through the chat completions API: on the shipped model (a ChatML template with no tool syntax: Qwen3-style calls
// as text) and on the K3-format model (XTML). The first turn forces a call
// (modelSettings.toolChoice "required", which the server enforces with its
// grammar); the SDK then resets tool choice to auto and the model answers. The
// transcript is printed; the same loop on a --speculate server gives the same items
// (each API against itself).
//   node agents_sdk.mjs SLUICE_BINARY K3_MINI_DIR
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { startServer, runner } from './harness.mjs';
import { makeK3FormatModel } from './k3_format_model.mjs';

const require = createRequire(new URL('../node/package.json', import.meta.url));
const { default: OpenAI } = require('openai');
const { Agent, run, tool, setTracingDisabled, OpenAIChatCompletionsModel, OpenAIResponsesModel } = require('@openai/agents');
const { z } = require('zod');
const [binary, k3Mini] = process.argv.slice(2);
setTracingDisabled(true);
const t = runner();
const calls = [];
const tools = [
  tool({ name: 'get_weather', description: 'The weather for a city', parameters: z.object({ city: z.string().max(12), days: z.number() }),
    execute: async ({ city, days }) => { calls.push(['get_weather', city, days]); return JSON.stringify({ city, days, forecast: 'rain' }); } }),
  tool({ name: 'add', description: 'Adds two numbers', parameters: z.object({ a: z.number(), b: z.number() }),
    execute: async ({ a, b }) => { calls.push(['add', a, b]); return String(a + b); } }),
];

async function agentLoop(url, modelName, api) {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 300000 });
  const agent = new Agent({
    name: 'helper', instructions: 'Answer with the tools.', tools,
    model: api === 'responses' ? new OpenAIResponsesModel(client, modelName) : new OpenAIChatCompletionsModel(client, modelName),
    modelSettings: { toolChoice: 'required', temperature: 0, maxTokens: 200 },
  });
  calls.length = 0;
  const result = await run(agent, 'What is the weather in Oslo, and what is 2 + 3?', { maxTurns: 6 });
  const items = result.newItems.map((i) => {
    const r = i.rawItem;
    if (i.type === 'tool_call_item') return `call ${r.name}(${r.arguments})`;
    if (i.type === 'tool_call_output_item') return `result ${r.name ?? ''}: ${typeof r.output === 'string' ? r.output : JSON.stringify(r.output)}`;
    if (i.type === 'message_output_item') return `answer: ${JSON.stringify(i.content)}`;
    return i.type;
  });
  return { items, final: result.finalOutput, calls: [...calls] };
}

for (const [what, dirOf] of [['shipped model (sluice-k3-mini)', () => ({ dir: k3Mini, remove() {} })], ['K3-format model', () => makeK3FormatModel(k3Mini)]]) {
  const model = dirOf();
  const first = {};
  for (const extra of [[], ['--speculate']]) {
    const server = await startServer(binary, model.dir, ['--served-model-name', 'm', ...extra]);
    try {
      for (const api of ['responses', 'chat']) {
        await t.test(`Agents SDK loop (${api}) on the ${what}${extra.length ? ' with --speculate' : ''}`, async () => {
          const r = await agentLoop(server.url, 'm', api);
          assert.ok(r.calls.length >= 1, JSON.stringify(r));
          for (const [name, x, y] of r.calls) {
            if (name === 'get_weather') assert.ok(typeof x === 'string' && [...x].length <= 12 && typeof y === 'number');
            else assert.ok(typeof x === 'number' && typeof y === 'number');
          }
          assert.equal(typeof r.final, 'string');
          console.log(`agent loop transcript (@openai/agents via ${api}, ${what}${extra.join(' ')}):\n  ${r.items.join('\n  ')}`);
          if (first[api]) assert.deepEqual(r, first[api]);
          else first[api] = r;
        });
      }
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  }
  model.remove();
}
t.finish();
