// The server on the project's trained model (models/sluice-k3-mini: Kimi K3
// architecture, byte-level BPE tokenizer, ChatML template): greedy chat replies
// equal `sluice generate --chat`, seeded sampling reproduces, and follow-up
// turns that reuse or roll back the conversation state (KDA recurrent state and
// MLA cache) give the replies a fresh server gives.
//   node k3_mini.mjs SLUICE_BINARY MODEL_DIR
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { startServer, runner } from './harness.mjs';

const require = createRequire(new URL('../node/package.json', import.meta.url));
const { default: OpenAI } = require('openai');
const [binary, modelDir] = process.argv.slice(2);
const MODEL = 'sluice-k3-mini';
const N = 24;
const PROMPTS = ['In the beginning God created the heaven and the earth.', 'Blessed are the meek: for they shall inherit the earth.'];
// The CLI's replies first, before the server starts: a synchronous child process run
// between requests blocks this event loop for longer than the server keeps an idle
// connection open, and the client would then send on a socket the server had closed.
const expected = PROMPTS.map((prompt) => {
  const cli = execFileSync(binary, ['generate', '--model', modelDir, '--prompt', prompt, '--chat', '--max-new', String(N)], { encoding: 'utf8' });
  return cli.replace(/\n$/, '').split('<|im_end|>')[0];  // (older generate printed the stop token)
});
const server = await startServer(binary, modelDir, ['--served-model-name', MODEL]);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 300000 });
const t = runner();

for (const [i, prompt] of PROMPTS.entries()) {
  await t.test(`greedy reply equals sluice generate --chat: "${prompt.slice(0, 20)}..."`, async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: prompt }], max_tokens: N, temperature: 0 });
    assert.equal(r.choices[0].message.content, expected[i]);
    assert.equal(r.choices[0].finish_reason, r.usage.completion_tokens < N ? 'stop' : 'length');
  });
}

await t.test('seeded sampling reproduces; a follow-up turn reuses the state', async () => {
  const p = { model: MODEL, messages: [{ role: 'user', content: 'And Moses said' }], max_tokens: 16, temperature: 0.8, top_p: 0.95, seed: 7 };
  const a = await client.chat.completions.create(p);
  const b = await client.chat.completions.create(p);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const next = await client.chat.completions.create({
    ...p, messages: [...p.messages, { role: 'assistant', content: a.choices[0].message.content }, { role: 'user', content: 'And then?' }],
  });
  assert.ok(next.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens - 1, JSON.stringify(next.usage));
});

await t.test('replies with the state reused or rolled back equal a fresh server\'s', async () => {
  const ask = (c, messages) => c.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0 });
  const first = [{ role: 'user', content: 'And the LORD spake unto Moses, saying' }];
  const a = await ask(client, first);
  const extended = [...first, { role: 'assistant', content: a.choices[0].message.content }, { role: 'user', content: 'Speak unto the children of Israel' }];
  const b = await ask(client, extended);  // extends the kept state
  assert.ok(b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens, JSON.stringify(b.usage));
  // Another reply to the same prompt: rolls the state back into b's reply.
  const changed = [...extended, { role: 'assistant', content: 'and he said' }, { role: 'user', content: 'Go' }];
  const c = await ask(client, changed);
  assert.ok(c.usage.prompt_tokens_details.cached_tokens >= b.usage.prompt_tokens - 1, JSON.stringify(c.usage));
  // No checkpoints: a fresh server would otherwise reuse the message boundaries of the first prompt it is asked.
  const fresh = await startServer(binary, modelDir, ['--served-model-name', MODEL, '--prompt-checkpoints', '0']);
  try {
    const fc = new OpenAI({ baseURL: `${fresh.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 300000 });
    for (const [messages, got] of [[changed, c], [extended, b]]) {
      const f = await ask(fc, messages);
      assert.equal(f.usage.prompt_tokens_details.cached_tokens, 0, 'the fresh server reused a state');
      assert.equal(got.choices[0].message.content, f.choices[0].message.content);
      await ask(fc, [{ role: 'user', content: 'x' }]);  // forget it
    }
  } finally {
    assert.equal((await fresh.stop()).code, 0);
  }
});

await t.test('tools on a template without tool syntax: Qwen3-style calls as text, forced by tool_choice', async () => {
  const tools = [{ type: 'function', function: { name: 'find_verse', strict: true, parameters: { type: 'object',
    properties: { book: { type: 'string', maxLength: 10 }, chapter: { type: 'integer' } }, required: ['book', 'chapter'], additionalProperties: false } } }];
  const messages = [{ role: 'user', content: 'Find the verse about the beginning.' }];
  const r = await client.chat.completions.create({ model: MODEL, messages, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 200, temperature: 0 });
  assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
  const [call] = r.choices[0].message.tool_calls;
  assert.equal(call.function.name, 'find_verse');
  const args = JSON.parse(call.function.arguments);
  assert.ok(typeof args.book === 'string' && Number.isInteger(args.chapter), call.function.arguments);
  // The call and its result replay in the next turn; the answer is free text again.
  const next = await client.chat.completions.create({ model: MODEL, tools, max_tokens: 16, temperature: 0,
    messages: [...messages, r.choices[0].message, { role: 'tool', tool_call_id: call.id, content: 'Genesis 1:1' }] });
  assert.ok(next.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(next.usage));
});

const st = await server.stop();
await t.test('server exits cleanly', async () => assert.equal(st.code, 0));
t.finish();
