// Speculative decoding in the server never changes a reply: servers on the
// project's trained model, plain, with --speculate (n-gram drafts) and with
// --draft-model (the model drafting for itself, and a model with another tokenizer drafting
// through text) and with --draft suffix, answer the same
// requests (greedy and seeded sampling, logprobs, logit bias, stop strings,
// JSON mode, streaming, follow-up turns that reuse or roll back the kept
// conversation) with identical bodies, and the speculating one reports drafts
// proposed and accepted in /metrics. Each drafter runs twice: drafting at every
// step (--no-draft-gate: every verification path is taken) and under the gate
// (which may draft rarely, watching lookups or pausing a draft model).
//   node speculation.mjs SLUICE_BINARY MODEL_DIR
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { startServer, runner, metric } from './harness.mjs';

const require = createRequire(new URL('../node/package.json', import.meta.url));
const { default: OpenAI } = require('openai');
const [binary, modelDir] = process.argv.slice(2);
const MODEL = 'm';
const plain = await startServer(binary, modelDir, ['--served-model-name', MODEL]);
const spec = await startServer(binary, modelDir, ['--served-model-name', MODEL, '--speculate', '--draft-max', '6', '--no-draft-gate']);
// The model as its own draft model (every greedy draft is right; the plumbing is what is tested).
const drafted = await startServer(binary, modelDir, ['--served-model-name', MODEL, '--draft-model', modelDir, '--no-draft-gate']);
// Suffix drafts: an index of the conversation and of the earlier requests (this test's requests repeat themselves).
const suffix = await startServer(binary, modelDir, ['--served-model-name', MODEL, '--draft', 'suffix', '--suffix-tokens', '4096', '--no-draft-gate']);
// A draft model with another tokenizer: a golden model without tokenizer files (ids 0-255 are
// bytes, random weights) drafts through text; its drafts are mostly wrong, the replies the same.
const bytesModel = new URL('../fixtures/golden/qwen3_moe_tiny', import.meta.url).pathname;
const crossTok = await startServer(binary, modelDir, ['--served-model-name', MODEL, '--draft-model', bytesModel, '--no-draft-gate', '--draft-max', '4']);
// The same drafters under the gate.
const specGated = await startServer(binary, modelDir, ['--served-model-name', MODEL, '--speculate', '--draft-max', '6']);
const draftedGated = await startServer(binary, modelDir, ['--served-model-name', MODEL, '--draft-model', modelDir]);
const suffixGated = await startServer(binary, modelDir, ['--served-model-name', MODEL, '--draft', 'suffix', '--suffix-tokens', '4096']);
const crossTokGated = await startServer(binary, modelDir, ['--served-model-name', MODEL, '--draft-model', bytesModel, '--draft-max', '4']);
const servers = [plain, spec, drafted, suffix, crossTok, specGated, draftedGated, suffixGated, crossTokGated];
const names = ['plain', 'n-gram', 'draft-model', 'suffix-draft', 'cross-tokenizer draft-model',
  'gated n-gram', 'gated draft-model', 'gated suffix-draft', 'gated cross-tokenizer draft-model'];
const clients = servers.map((s) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 300000 }));
const t = runner();

// A passage the model has seen, given twice and started a third time: n-gram
// drafts from the prompt are mostly right. And a prompt with nothing to copy.
const verse = 'In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep.';
const copyPrompt = `${verse}\n${verse}\n${verse.slice(0, 40)}`;
const freePrompt = 'Blessed are the meek';

// The response without the fields that differ by design (ids, timestamps).
function comparable(r) {
  const { id, created, system_fingerprint, ...rest } = r;
  return rest;
}

// The plain reply and the n-gram server's; every other server's must equal them too.
async function both(kind, params) {
  const replies = await Promise.all(clients.map((x) => (kind === 'chat' ? x.chat.completions : x.completions).create(params)));
  for (let i = 2; i < replies.length; ++i) assert.deepEqual(comparable(replies[i]), comparable(replies[0]), `${names[i]} server`);
  return [comparable(replies[0]), comparable(replies[1])];
}

const cases = [
  ['completion, greedy, copy-heavy', 'text', { prompt: copyPrompt, max_tokens: 48, temperature: 0 }],
  ['completion, greedy, free text', 'text', { prompt: freePrompt, max_tokens: 32, temperature: 0 }],
  ['completion, sampled with top_p and logprobs', 'text',
    { prompt: copyPrompt, max_tokens: 40, temperature: 0.9, top_p: 0.95, seed: 3, logprobs: 3 }],
  ['completion, sampled hot, free text', 'text', { prompt: freePrompt, max_tokens: 32, temperature: 1.2, seed: 8 }],
  ['completion, logit bias and a stop string', 'text',
    { prompt: copyPrompt, max_tokens: 48, temperature: 0, logit_bias: { 32: 3 }, stop: ['void'] }],
  ['chat, greedy with logprobs', 'chat',
    { messages: [{ role: 'user', content: `Say it again: ${verse}` }], max_tokens: 40, temperature: 0, logprobs: true, top_logprobs: 2 }],
  ['chat, sampled, JSON mode', 'chat',
    { messages: [{ role: 'user', content: 'Give a JSON object' }], max_tokens: 24, temperature: 0.7, seed: 1, response_format: { type: 'json_object' } }],
];
for (const [name, kind, p] of cases) {
  await t.test(`same reply with and without speculation: ${name}`, async () => {
    const [a, b] = await both(kind === 'chat' ? 'chat' : 'text', { model: MODEL, ...p });
    assert.deepEqual(b, a);
  });
}

await t.test('same streamed text with and without speculation', async () => {
  const p = { model: MODEL, prompt: copyPrompt, max_tokens: 40, temperature: 0.5, seed: 21, stream: true };
  const texts = await Promise.all(clients.map(async (c) => {
    let s = '';
    for await (const chunk of await c.completions.create(p)) s += chunk.choices[0]?.text ?? '';
    return s;
  }));
  assert.ok(texts[0].length > 0);
  for (let i = 1; i < texts.length; ++i) assert.equal(texts[i], texts[0], names[i]);
});

await t.test('follow-up turns (state kept, rolled back into the reply, or extended) give the same replies', async () => {
  const base = { model: MODEL, max_tokens: 32, temperature: 0.8, seed: 4 };
  const first = [{ role: 'user', content: `Repeat: ${verse}` }];
  const [a] = await both('chat', { ...base, messages: first });
  const reply = a.choices[0].message.content;
  // Extends the whole kept conversation.
  const turn2 = [...first, { role: 'assistant', content: reply }, { role: 'user', content: 'Again.' }];
  const [x, y] = await both('chat', { ...base, messages: turn2 });
  assert.deepEqual(y, x);
  assert.ok(y.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(y.usage));
  // Shares the kept prompt and part of the reply: rolls back into the reply.
  const edited = [...first, { role: 'assistant', content: reply.slice(0, Math.floor(reply.length / 2)) + ' amen' }, { role: 'user', content: 'Go on.' }];
  const [u, v] = await both('chat', { ...base, messages: edited });
  assert.deepEqual(v, u);
  // A different conversation.
  const [m, n] = await both('chat', { ...base, messages: [{ role: 'user', content: 'Who begat whom?' }] });
  assert.deepEqual(n, m);
});

await t.test('/metrics counts drafts on the speculating server only', async () => {
  const proposed = await metric(spec.url, 'sluice_speculation_draft_tokens_total');
  const accepted = await metric(spec.url, 'sluice_speculation_accepted_tokens_total');
  const passes = await metric(spec.url, 'sluice_speculation_passes_total');
  assert.ok(passes > 0 && proposed > 0, `passes ${passes}, proposed ${proposed}`);
  assert.ok(accepted > 0 && accepted <= proposed, `accepted ${accepted} of ${proposed}`);
  assert.equal(await metric(plain.url, 'sluice_speculation_draft_tokens_total'), 0);
  assert.equal(await metric(spec.url, 'sluice_generation_tokens_total'), await metric(plain.url, 'sluice_generation_tokens_total'));
  assert.ok(await metric(drafted.url, 'sluice_speculation_accepted_tokens_total') > accepted, 'the draft model guesses better');
  // Suffix drafts: accepted drafts, the gate's counters and the index's bounded size.
  const sAccepted = await metric(suffix.url, 'sluice_speculation_accepted_tokens_total');
  assert.ok(sAccepted > 0 && sAccepted <= await metric(suffix.url, 'sluice_speculation_draft_tokens_total'), `suffix accepted ${sAccepted}`);
  const tokens = await metric(suffix.url, 'sluice_suffix_index_tokens');
  assert.ok(tokens > 0 && tokens <= 4096, `suffix index tokens ${tokens}`);
  assert.ok(await metric(suffix.url, 'sluice_suffix_index_documents') > 1);
  assert.ok(await metric(suffix.url, 'sluice_suffix_index_bytes') > 0);
  assert.ok(await metric(suffix.url, 'sluice_speculation_plain_steps_total') >= 0);
  assert.ok(await metric(suffix.url, 'sluice_speculation_gate_acceptance') > 0);
  // Under the gate: every step is a pass, a plain step or an off step, the lookups' drafts
  // while paused are watched (and ungated servers watch none).
  for (const g of [specGated, suffixGated]) {
    const off = await metric(g.url, 'sluice_speculation_gate_off_steps_total');
    const watched = await metric(g.url, 'sluice_speculation_gate_watched_drafts_total');
    assert.ok(off <= await metric(g.url, 'sluice_speculation_plain_steps_total'), `off ${off}`);
    assert.ok(watched >= 0 && await metric(g.url, 'sluice_speculation_gate_watched_accepted_tokens_total') >= 0);
    assert.ok(await metric(g.url, 'sluice_speculation_gate_seconds_total') >= 0);
  }
  assert.equal(await metric(suffix.url, 'sluice_speculation_gate_watched_drafts_total'), 0);
  assert.equal(await metric(draftedGated.url, 'sluice_speculation_gate_watched_drafts_total'), 0, 'a draft model is not watched');
  assert.equal(await metric(plain.url, 'sluice_suffix_index_tokens'), 0);
  assert.ok(await metric(crossTok.url, 'sluice_speculation_draft_tokens_total') > 0, 'the cross-tokenizer draft model drafted');
});

const stops = await Promise.all(servers.map((s) => s.stop()));
await t.test('servers exit cleanly', async () => assert.deepEqual(stops.map((s) => s.code), servers.map(() => 0)));
t.finish();
