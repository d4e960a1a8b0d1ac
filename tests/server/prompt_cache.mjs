// --cache-slots and --prompt-cache on the shipped model (Kimi K3 architecture:
// MLA cache plus KDA recurrent state): two alternating conversations both reuse
// their state; a long system prompt's state saved in the directory is found
// again after a restart (fewer tokens prefilled); a corrupted file there is
// ignored with a log line; every reply equals a fresh server's, --speculate too.
//   node prompt_cache.mjs SLUICE_BINARY MODEL_DIR
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { startServer, runner, metric, logged } from './harness.mjs';

const require = createRequire(new URL('../node/package.json', import.meta.url));
const { default: OpenAI } = require('openai');
const [binary, modelDir] = process.argv.slice(2);
const MODEL = 'm';
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-prompt-cache-'));
// Some 400 tokens: past the first periodic save point (256) of a recurrent model.
const SYSTEM = 'Thou art a scribe of the king, and thou shalt write all these words in a book. '.repeat(20);
const conv = (user) => [{ role: 'system', content: SYSTEM }, { role: 'user', content: user }];
const ask = (c, messages) => c.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0 });
const t = runner();

async function withServer(args, fn) {
  const s = await startServer(binary, modelDir, ['--served-model-name', MODEL, ...args]);
  let log = '';
  s.child.stderr.on('data', (d) => { log += d.toString(); });
  try {
    return await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 300000 }), () => log, s.url);
  } finally {
    assert.equal((await s.stop()).code, 0);
  }
}

// What a server without any cache answers (one server per question: nothing reused).
const questions = ['Who made the heaven?', 'Who made the earth?', 'Where is the king?', 'Who made the sea?'];
const fresh = {};
for (const q of questions)
  await withServer([], async (c) => { fresh[q] = (await ask(c, conv(q))).choices[0].message.content; });

await t.test('two alternating conversations both reuse with --cache-slots 2', async () => {
  await withServer(['--cache-slots', '2'], async (c, _log, url) => {
    const a1 = [{ role: 'user', content: 'In the beginning' }], b1 = [{ role: 'user', content: 'Blessed are the meek' }];
    const ra = await ask(c, a1), rb = await ask(c, b1);
    const a2 = [...a1, ra.choices[0].message, { role: 'user', content: 'And then?' }];
    const b2 = [...b1, rb.choices[0].message, { role: 'user', content: 'And then?' }];
    const ra2 = await ask(c, a2), rb2 = await ask(c, b2);
    assert.ok(ra2.usage.prompt_tokens_details.cached_tokens >= ra.usage.prompt_tokens, JSON.stringify(ra2.usage));
    assert.ok(rb2.usage.prompt_tokens_details.cached_tokens >= rb.usage.prompt_tokens, JSON.stringify(rb2.usage));
    assert.equal(await metric(url, 'sluice_prompt_cache_slots'), 2);
    assert.ok(await metric(url, 'sluice_prompt_cache_memory_bytes') > 0);
    assert.equal(await metric(url, 'sluice_prompt_cache_files'), 0);
  });
});

await t.test('the system prompt state survives a restart: fewer tokens prefilled, the same reply', async () => {
  await withServer(['--prompt-cache', dir], async (c) => {
    const r0 = await ask(c, conv(questions[0]));
    assert.equal(r0.choices[0].message.content, fresh[questions[0]]);
    // Departs from the first after the system prompt: the state there is saved.
    const r1 = await ask(c, conv(questions[1]));
    assert.equal(r1.choices[0].message.content, fresh[questions[1]]);
  });
  assert.ok(fs.readdirSync(dir).filter((f) => f.endsWith('.state')).length >= 2, fs.readdirSync(dir).join(' '));
  const saved = fs.readdirSync(dir).filter((f) => f.endsWith('.state'));
  await withServer(['--prompt-cache', dir], async (c, _log, url) => {
    // The files found at start-up, before any request.
    assert.equal(await metric(url, 'sluice_prompt_cache_files'), saved.length);
    const bytes = saved.reduce((n, f) => n + fs.statSync(path.join(dir, f)).size, 0);
    assert.equal(await metric(url, 'sluice_prompt_cache_disk_bytes'), bytes);
    // Departs before the first two questions' departure point: starts at a periodic save.
    const r = await ask(c, conv(questions[2]));
    assert.ok(r.usage.prompt_tokens_details.cached_tokens >= 256, JSON.stringify(r.usage));
    assert.equal(r.choices[0].message.content, fresh[questions[2]]);
    // Shares "Who made the": starts at the departure point saved by the first server.
    const s = await ask(c, conv(questions[3]));
    assert.ok(s.usage.prompt_tokens_details.cached_tokens > r.usage.prompt_tokens_details.cached_tokens, JSON.stringify(s.usage));
    assert.equal(s.choices[0].message.content, fresh[questions[3]]);
    console.log(`after a restart: ${r.usage.prompt_tokens_details.cached_tokens} of ${r.usage.prompt_tokens} and ` +
                `${s.usage.prompt_tokens_details.cached_tokens} of ${s.usage.prompt_tokens} prompt tokens cached`);
  });
});

await t.test('--speculate with the prompt cache: the same replies', async () => {
  await withServer(['--prompt-cache', dir, '--speculate'], async (c) => {
    for (const q of questions) {
      const r = await ask(c, conv(q));
      assert.equal(r.choices[0].message.content, fresh[q]);
    }
  });
});

await t.test('a corrupted file is ignored with a log line; the reply is a fresh server\'s', async () => {
  for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.state'))) {
    const p = path.join(dir, f), b = fs.readFileSync(p);
    b[b.length - 100] ^= 0x20;
    fs.writeFileSync(p, b);
  }
  await withServer(['--prompt-cache', dir], async (c, log) => {
    const r = await ask(c, conv(questions[2]));
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0, JSON.stringify(r.usage));
    assert.equal(r.choices[0].message.content, fresh[questions[2]]);
    await logged(log, /prompt cache: ignoring .*\.state: corrupt or truncated state file/);
  });
});

fs.rmSync(dir, { recursive: true, force: true });
t.finish();
