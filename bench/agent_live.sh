#!/usr/bin/env bash
# Live agent sessions: each coding agent (installed by tests/agents, pinned), run
# headless against `sluice serve` with the scripted model of the agent tests
# (the DeepSeek-V3 tokenizer; every prompt answered by a shell tool call, its
# result and an answer), for TURNS prompts (default 7) in one session, then a
# second session with another first prompt. Unlike bench/agent_replay.sh (a
# recorded transcript, whose replies carry the recording server's ids), the
# agent sends this server's own replies back, as it re-serialized them, so the
# replay of generated replies is measured as agents meet it.
# Per request, from the server's log line: prompt tokens, reused (cached),
# prefilled (new), replayed, and "unseen": where the request continues the
# previous one (it reused at least that whole prompt), the tokens of this prompt
# that are neither the previous prompt nor the reply generated to it: what an
# exact cache must prefill. Prefilled exceeds it by one, the previous reply's
# end-of-turn token, generated but never fed. "-" where the request does not
# continue the previous one: another conversation of the agent (opencode's
# title requests), a new session, or a history the agent changed before its
# end (Qwen Code on --continue drops the date reminder from the first user
# message, so its prefix breaks there). The scripted model is tiny: the times show the
# server's overheads, not a large model's prefill.
#   bench/agent_live.sh [AGENTS...]     (default: claude_code codex opencode qwen_code)
#   env: SLUICE (binary, build/src/sluice), MAKE_TEST_MODEL (build/tests/make_test_model), TURNS
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${SLUICE:-build/src/sluice}
make_model=${MAKE_TEST_MODEL:-build/tests/make_test_model}
agents=("$@")
[ ${#agents[@]} -gt 0 ] || agents=(claude_code codex opencode qwen_code)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for a in "${agents[@]}"; do
  mkdir -p "$dir/$a"
  if ! SLUICE_AGENT_RECORD="$dir/$a" SLUICE_AGENT_TURNS=${TURNS:-7} SLUICE_AGENT_NEW_SESSION=1 \
      node tests/agents/run_agent.mjs "$a" "$bin" "$make_model" > "$dir/$a.out" 2>&1; then
    echo "$a: the session failed:"; tail -40 "$dir/$a.out"; exit 1
  fi
  python3 - "$a" "$dir/$a.out" <<'PY'
import re, sys
agent, path = sys.argv[1], sys.argv[2]
rows = []
for l in open(path, errors="replace"):
    m = re.match(r"sluice: \S+ (/v1/\S+): prompt (\d+) tokens \((\d+) cached, (\d+) new\)(?:, (\d+) replayed)?, "
                 r"queued [\d.]+ s(?:, first token ([\d.]+) s, (\d+) tokens)?.*, (finish \S+|.+)$", l.strip())
    if m: rows.append(m.groups())
print(f"\n{agent}: {len(rows)} requests")
print("| request | endpoint | prompt | reused | prefilled | replayed | unseen | prefilled - unseen | TTFT s | generated | end |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
prev = None
for i, (ep, prompt, cached, new, replayed, ttft, gen, end) in enumerate(rows):
    prompt, cached, new = int(prompt), int(cached), int(new)
    # Unseen: past the previous prompt and its reply (a new session's first prompt: all of it
    # past what it shares with earlier prompts is unknown here, so "-").
    unseen = prompt - (prev[0] + prev[1]) if prev and cached >= prev[0] and prompt >= prev[0] + prev[1] else None
    print(f"| {i + 1} | {ep} | {prompt} | {cached} | {new} | {replayed or 0} | {unseen if unseen is not None else '-'} | "
          f"{new - unseen if unseen is not None else '-'} | {ttft or '-'} | {gen or 0} | {end} |")
    prev = (prompt, int(gen or 0))
PY
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
