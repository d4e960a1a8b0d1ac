// Continuous batching in the server (--parallel N) never changes a reply: a
// --parallel 4 server on the project's trained model answers concurrent
// clients (different prompt lengths and max_tokens, greedy and seeded, chat and
// completions, logprobs, a stop string, JSON mode, streaming, one client that
// leaves mid-reply) with the bodies a --parallel 1 server gives each request
// alone; /metrics shows passes over several requests; --speculate with
// --parallel > 1 is refused at start-up; the prompt-cache gauges count what the batch kept.
//   node batching.mjs SLUICE_BINARY MODEL_DIR
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { startServer, runner, metric, sleep } from './harness.mjs';

const require = createRequire(new URL('../node/package.json', import.meta.url));
const { default: OpenAI } = require('openai');
const [binary, modelDir] = process.argv.slice(2);
const MODEL = 'm';
const t = runner();

await t.test('--parallel 2 with --speculate is refused at start-up, naming both', async () => {
  let err = '';
  try {
    execFileSync(binary, ['serve', '--model', modelDir, '--port', '0', '--parallel', '2', '--speculate'], { encoding: 'utf8', stdio: 'pipe' });
  } catch (e) {
    err = String(e.stderr);
  }
  assert.match(err, /--speculate/);
  assert.match(err, /--parallel 1/);
});

const plain = await startServer(binary, modelDir, ['--served-model-name', MODEL]);
const batched = await startServer(binary, modelDir, ['--served-model-name', MODEL, '--parallel', '4', '--cache-slots', '8']);
const [alone, together] = [plain, batched].map((s) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 300000 }));

const verse = 'In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep.';
const cases = [
  ['completion, greedy, long prompt', 'text', { prompt: `${verse} ${verse}`, max_tokens: 40, temperature: 0 }],
  ['completion, seeded, short prompt', 'text', { prompt: 'And God said', max_tokens: 12, temperature: 0.9, top_p: 0.95, seed: 5 }],
  ['completion, logprobs and logit bias', 'text', { prompt: 'Blessed are the meek', max_tokens: 24, temperature: 0.8, seed: 2, logprobs: 3, logit_bias: { 32: 2 } }],
  ['completion, a stop string', 'text', { prompt: verse, max_tokens: 48, temperature: 0, stop: ['the'] }],
  ['chat, greedy', 'chat', { messages: [{ role: 'user', content: 'Who begat whom?' }], max_tokens: 30, temperature: 0 }],
  ['chat, seeded with top_logprobs', 'chat', { messages: [{ role: 'user', content: `Say it again: ${verse}` }], max_tokens: 20, temperature: 0.7, seed: 9, logprobs: true, top_logprobs: 2 }],
  ['chat, JSON mode', 'chat', { messages: [{ role: 'user', content: 'Give a JSON object' }], max_tokens: 16, temperature: 0.7, seed: 1, response_format: { type: 'json_object' } }],
];

// The response without the fields that differ by design: ids, timestamps, and the
// prompt tokens reused from the prompt cache, which depend on what ran before.
function comparable(r) {
  const { id, created, system_fingerprint, ...rest } = r;
  const usage = structuredClone(rest.usage);
  if (usage?.prompt_tokens_details) delete usage.prompt_tokens_details.cached_tokens;
  return { ...rest, usage };
}
const create = (client, kind, p) => (kind === 'chat' ? client.chat.completions : client.completions).create({ model: MODEL, ...p });

// Each request alone on the --parallel 1 server, one after another.
const expected = [];
for (const [, kind, p] of cases) expected.push(comparable(await create(alone, kind, p)));
const streamParams = { model: MODEL, prompt: 'And Moses said unto the LORD', max_tokens: 30, temperature: 0.6, seed: 4, stream: true };
let expectedStream = '';
for await (const chunk of await alone.completions.create(streamParams)) expectedStream += chunk.choices[0]?.text ?? '';

await t.test('concurrent clients on --parallel 4 get the replies each gets alone on --parallel 1', async () => {
  const passesBefore = await metric(batched.url, 'sluice_batch_passes_total');
  // Started a little apart so that requests join and leave a running batch, and one waits for a slot.
  const replies = await Promise.all(cases.map(async ([, kind, p], i) => {
    await sleep(40 * i);
    return comparable(await create(together, kind, p));
  }).concat([(async () => {
    let s = '';
    for await (const chunk of await together.completions.create(streamParams)) s += chunk.choices[0]?.text ?? '';
    return s;
  })(), (async () => {
    // A streamed client that leaves after its first tokens.
    const ctl = new AbortController();
    const r = await fetch(`${batched.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: ctl.signal,
      body: JSON.stringify({ model: MODEL, prompt: verse, max_tokens: 200, temperature: 0, stream: true }),
    });
    const reader = r.body.getReader();
    await reader.read();
    ctl.abort();
    return 'left';
  })()]));
  for (const [i, [name]] of cases.entries()) assert.deepEqual(replies[i], expected[i], name);
  assert.ok(expectedStream.length > 0);
  assert.equal(replies[cases.length], expectedStream, 'streamed');
  assert.equal(expected[3].choices[0].finish_reason, 'stop', 'the stop string never ended the reply');
  const passes = await metric(batched.url, 'sluice_batch_passes_total') - passesBefore;
  const sequences = await metric(batched.url, 'sluice_batch_sequences_total');
  assert.ok(passes > 0, 'no batched pass');
  assert.ok(sequences / (await metric(batched.url, 'sluice_batch_passes_total')) > 1.5, `mean batch ${sequences} / passes`);
  assert.equal(await metric(plain.url, 'sluice_batch_passes_total'), 0);
});

await t.test('after a client left mid-reply the server is idle again and serves the same replies', async () => {
  const end = Date.now() + 30000;
  while ((await metric(batched.url, 'sluice_queue_running')) > 0) {
    assert.ok(Date.now() < end, 'a request kept running after its client left');
    await sleep(20);
  }
  const text = await (await fetch(`${batched.url}/metrics`)).text();
  assert.match(text, /code="499"\} 1/);
  // Nine conversations ended (the one that left too), so all 8 slots hold one: the
  // gauges count what the batch kept, not the cache as the last prefill saw it.
  assert.equal(await metric(batched.url, 'sluice_prompt_cache_slots'), 8);
  assert.ok(await metric(batched.url, 'sluice_prompt_cache_memory_bytes') > 0);
  const [, kind, p] = cases[4];
  assert.deepEqual(comparable(await create(together, kind, p)), expected[4]);
});

const stops = await Promise.all([plain.stop(), batched.stop()]);
await t.test('servers exit cleanly', async () => assert.deepEqual(stops.map((s) => s.code), [0, 0]));
t.finish();
