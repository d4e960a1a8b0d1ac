#!/usr/bin/env bash
# Replays a recorded coding-agent session (bench/agent_transcripts/*.jsonl: one
# {"endpoint", "body"} per request, as the agent sent them) against one
# `sluice serve`, in order, then a second session: the first request again
# with another user prompt (the same system prompt, tools and environment), as
# a new session of the agent would send it. Per request it prints the prompt
# tokens reused and prefilled (the server's request log line), the time to the
# first generated token (the log line's; the client's own first output event
# in brackets), and the routed-expert bytes read from disk (/metrics,
# sluice_expert_bytes_read_total; 0 when the model is in memory), and the
# prompt tokens taken from the replay store (the log line's "N replayed": only
# replies this server generated are replayed, and a recorded session's replies
# carry the recording server's call ids, so a replay of a recording has none).
# Replies are capped at MAX_OUT tokens (default 16): the benchmark is about
# prompts. Each row also gives the seconds the request stalled on expert reads
# (/metrics), and with DRIVE_GBPS set (the drive's rate, e.g. `sluice bench`'s
# probe) its TTFT against a floor of its compute (TTFT less the stall) plus its
# expert bytes at that rate.
#   bench/agent_replay.sh [TRANSCRIPT] [MODEL_DIR] [SLUICE_BINARY] [extra serve args...]
set -euo pipefail
transcript=${1:-bench/agent_transcripts/codex-0.171.0.jsonl}
model=${2:-models/sluice-k3-mini}
bin=${3:-build/src/sluice}
shift $(( $# < 3 ? $# : 3 ))
dir=$(mktemp -d)
. "$(dirname "$0")/lib_serve.sh"
trap 'stop_server_on_exit; rm -rf "$dir"' EXIT
echo "transcript $transcript, model $model, serve args: $*"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
serve "$@"
python3 - "$transcript" "$port" "$dir/log" "${MAX_OUT:-16}" "${DRIVE_GBPS:-}" <<'PY'
import json, re, sys, time, urllib.request

transcript, port, log_path, max_out, drive_gbps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
base = f"http://127.0.0.1:{port}"

def metric(name):
    text = urllib.request.urlopen(base + "/metrics").read().decode()
    m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0

def log_lines():
    return [l for l in open(log_path, errors="replace") if re.match(r"sluice: \S+ /v1/", l)]

def send(endpoint, body):
    body = dict(body, model="m", stream=True)
    if endpoint == "/v1/responses": body["max_output_tokens"] = max_out
    elif endpoint == "/v1/messages": body["max_tokens"] = max_out
    else: body["max_tokens"] = max_out; body.pop("max_completion_tokens", None)
    before_lines, before_bytes = len(log_lines()), metric("sluice_expert_bytes_read_total")
    before_stall = metric("sluice_expert_stall_seconds_total")
    req = urllib.request.Request(base + endpoint, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", "x-api-key": "x",
                                          "anthropic-version": "2023-06-01"})
    t0, first = time.monotonic(), None
    with urllib.request.urlopen(req, timeout=3600) as r:
        for line in r:
            s = line.decode(errors="replace")
            if first is None and s.startswith("data:") and re.search(r'"(delta|partial_json|text_delta)"', s) \
                    and not re.search(r'"delta":\s*""', s):
                first = time.monotonic() - t0
    for _ in range(100):
        lines = log_lines()
        if len(lines) > before_lines: break
        time.sleep(0.05)
    line = lines[-1]
    m = re.search(r"prompt (\d+) tokens \((\d+) cached, (\d+) new\)", line)
    ttft = re.search(r"first token ([\d.]+) s", line)
    replayed = re.search(r"new\), (\d+) replayed", line)
    return {"prompt": int(m.group(1)), "reused": int(m.group(2)), "prefilled": int(m.group(3)),
            "replayed": int(replayed.group(1)) if replayed else 0,
            "ttft": float(ttft.group(1)) if ttft else float("nan"), "client_ttft": first,
            "bytes": metric("sluice_expert_bytes_read_total") - before_bytes,
            "stall": metric("sluice_expert_stall_seconds_total") - before_stall}

rows = []
reqs = [json.loads(l) for l in open(transcript) if l.strip()]
for i, r in enumerate(reqs):
    rows.append((f"1.{i + 1}", send(r["endpoint"], r["body"])))
# A new session: the first request with another user prompt.
first = json.loads(json.dumps(reqs[0]))
items = first["body"].get("input") if isinstance(first["body"].get("input"), list) else first["body"].get("messages")
for it in reversed(items):
    if it.get("role") == "user":
        c = it["content"]
        if isinstance(c, str): it["content"] = "Count the lines of README.md and say how many there are."
        else:
            for part in c:
                if "text" in part: part["text"] = "Count the lines of README.md and say how many there are."
        break
rows.append(("2.1", send(first["endpoint"], first["body"])))

# Against the floor: the turn's compute (its TTFT less the time it stalled on expert reads) plus
# its expert bytes at the drive's rate (DRIVE_GBPS, e.g. bench's probe; unset: no floor column).
gbps = float(drive_gbps) if drive_gbps else 0.0
print("| turn | prompt tokens | reused | prefilled | replayed | TTFT s (client) | stall s | expert bytes read |"
      + (" TTFT / floor |" if gbps else ""))
print("|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if gbps else ""))
for name, x in rows:
    ct = f"{x['client_ttft']:.2f}" if x["client_ttft"] is not None else "-"
    floor = (x["ttft"] - x["stall"]) + x["bytes"] / (gbps * 1e9) if gbps else 0.0
    ratio = f" {x['ttft'] / floor:.2f} |" if gbps and floor > 0 else (" - |" if gbps else "")
    print(f"| {name} | {x['prompt']} | {x['reused']} | {x['prefilled']} | {x['replayed']} | {x['ttft']:.2f} ({ct}) "
          f"| {x['stall']:.2f} | {int(x['bytes']):,} |" + ratio)
PY
stop
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
