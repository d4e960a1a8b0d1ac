#!/usr/bin/env bash
# Aggregate decode throughput of the server with continuous batching: for
# --parallel 1, 2 and 4, C = 1, 2 and 4 clients each send one greedy
# completion at the same moment (different prompts, max_tokens TOKENS); the
# aggregate is the completion tokens of all of them over the wall time from
# the first request sent to the last reply. Each (parallel, clients) cell is
# measured ROUNDS times in one server run; the best round is printed with the
# batched passes and mean batch size the server counted for the cell.
#   bench/serve_parallel.sh [MODEL_DIR] [SLUICE_BINARY] [TOKENS] [ROUNDS] [extra serve args...]
set -euo pipefail
model=${1:-models/sluice-k3-mini}
bin=${2:-build/src/sluice}
tokens=${3:-64}
rounds=${4:-2}
shift $(( $# < 4 ? $# : 4 ))
dir=$(mktemp -d)
. "$(dirname "$0")/lib_serve.sh"
trap 'stop_server_on_exit; rm -rf "$dir"' EXIT


# clients C: C concurrent requests; prints "tokens seconds"
cat > "$dir/clients.py" <<'PY'
import json, sys, threading, time, urllib.request
port, n, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
prompts = ["In the beginning God created", "And the LORD spake unto Moses, saying", "Blessed are the meek",
           "And it came to pass in those days"]
got = [0] * n
def one(i):
    body = json.dumps({"model": "m", "prompt": prompts[i % len(prompts)], "max_tokens": tokens, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    got[i] = json.load(urllib.request.urlopen(req, timeout=600))["usage"]["completion_tokens"]
threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
t0 = time.monotonic()
for t in threads: t.start()
for t in threads: t.join()
print(sum(got), time.monotonic() - t0)
PY
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

echo "model $model, $tokens tokens per request, best of $rounds; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-9s %-8s %-12s %-10s %-12s\n' parallel clients tokens/s passes mean_batch
for parallel in 1 2 4; do
  serve --parallel "$parallel" "$@"
  python3 "$dir/clients.py" "$port" 1 4 > /dev/null  # warm-up
  for clients in 1 2 4; do
    p0=$(metric sluice_batch_passes_total); s0=$(metric sluice_batch_sequences_total)
    best=0
    for _ in $(seq "$rounds"); do
      read -r n secs < <(python3 "$dir/clients.py" "$port" "$clients" "$tokens")
      best=$(python3 -c "print(max($best, $n / $secs))")
    done
    p1=$(metric sluice_batch_passes_total); s1=$(metric sluice_batch_sequences_total)
    mean=$(python3 -c "d = $p1 - $p0; print(f'{($s1 - $s0) / d:.2f}' if d else '-')")
    printf '%-9s %-8s %-12.1f %-10s %-12s\n' "$parallel" "$clients" "$best" "$(python3 -c "print(int($p1 - $p0))")" "$mean"
  done
  stop
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
