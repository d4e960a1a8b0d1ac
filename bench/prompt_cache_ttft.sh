#!/usr/bin/env bash
# Time to first token of a repeated ~2,000-token system prompt after a server
# restart, with and without --prompt-cache: each round starts a server, asks
# one question (max_tokens 1, so the request's time is prefill plus one token),
# stops it, starts it again and asks another question under the same system
# prompt. Rounds alternate the two cases.
#   bench/prompt_cache_ttft.sh [MODEL_DIR] [SLUICE_BINARY] [ROUNDS] [extra serve args...]
set -euo pipefail
model=${1:-models/sluice-k3-mini}
bin=${2:-build/src/sluice}
rounds=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
dir=$(mktemp -d)
. "$(dirname "$0")/lib_serve.sh"
trap 'stop_server_on_exit; rm -rf "$dir"' EXIT
system=$(python3 -c "print(' '.join(['And it came to pass in those days, that there went out a decree from Caesar Augustus, that all the world should be taxed.'] * 60))")

ask() {  # ask QUESTION: prints seconds, prompt tokens, cached tokens
  local body
  body=$(python3 -c "import json,sys; print(json.dumps({'model':'m','messages':[{'role':'system','content':sys.argv[1]},{'role':'user','content':sys.argv[2]}],'max_tokens':1,'temperature':0}))" "$system" "$1")
  curl -s -o "$dir/reply" -w '%{time_total}' -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$port/v1/chat/completions"
  python3 -c "import json; u=json.load(open('$dir/reply'))['usage']; print('', u['prompt_tokens'], u['prompt_tokens_details']['cached_tokens'])"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for mode in plain cache; do
    args=("$@")
    if [ "$mode" = cache ]; then rm -rf "$dir/cache"; args+=(--prompt-cache "$dir/cache"); fi
    serve "${args[@]}"; first=$(ask "Who was the governor of Syria?"); stop
    serve "${args[@]}"; second=$(ask "Where was the child born?"); stop
    echo "round $r $mode: first request (seconds, prompt tokens, cached) $first; after a restart $second"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
