// A Kimi-K3-format test model: models/sluice-k3-mini's weights (Kimi K3
// architecture) with a tiktoken tokenizer that carries K3's XTML markers as
// special tokens, so the server renders and parses K3's own chat format. The
// ranks are the shipped tokenizer's byte-level BPE tokens as raw bytes (rank =
// id, as the merges were learned), so the model still writes its text; ids
// 4092-4095 become <|end_of_msg|> <|open|> <|close|> <|sep|>.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

// GPT-2's byte <-> printable character table (ByteLevel pre-tokenizer).
function unicodeToByte() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
  const map = new Map();
  bs.forEach((b, i) => map.set(String.fromCodePoint(cs[i]), b));
  return map;
}

export function makeK3FormatModel(k3MiniDir) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-k3-format-'));
  for (const f of fs.readdirSync(k3MiniDir))
    if (f.endsWith('.safetensors') || f === 'model.safetensors.index.json') fs.copyFileSync(path.join(k3MiniDir, f), path.join(dir, f));
  const config = JSON.parse(fs.readFileSync(path.join(k3MiniDir, 'config.json'), 'utf8'));
  config.eos_token_id = 4092;  // <|end_of_msg|>
  config.bos_token_id = 4092;
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config, null, 2));
  fs.writeFileSync(path.join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: 4092, do_sample: false }));
  const tok = JSON.parse(fs.readFileSync(path.join(k3MiniDir, 'tokenizer.json'), 'utf8'));
  const u2b = unicodeToByte();
  const lines = [];
  for (const [token, id] of Object.entries(tok.model.vocab)) {
    if (id >= 4092) continue;
    const bytes = Buffer.from([...token].map((ch) => u2b.get(ch)));
    lines[id] = `${bytes.toString('base64')} ${id}`;
  }
  fs.writeFileSync(path.join(dir, 'tiktoken.model'), lines.join('\n') + '\n');
  const specials = ['<|end_of_msg|>', '<|open|>', '<|close|>', '<|sep|>'];
  const decoder = {};
  specials.forEach((content, i) => { decoder[String(4092 + i)] = { content, special: true }; });
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'),
    // The shipped tokenizer's split pattern (the model was trained on it); with pat_str the
    // loader adds no reserved Kimi ids, so the vocabulary stays the model's 4,096.
    JSON.stringify({ eos_token: '<|end_of_msg|>', pat_str: tok.pre_tokenizer.pretokenizers[0].pattern.Regex, added_tokens_decoder: decoder }, null, 2));
  return { dir, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}
