#!/usr/bin/env bash
# Stream-mode tests against a synthetic model served by nginx on loopback (HF
# layout <root>/<org>/<name>/resolve/main/<file>), optionally behind the
# fault-injecting proxy. Each scenario uses its own temporary directory, nginx
# and proxy, and stops them on exit.
#   remote_test.sh SLUICE_BINARY SCENARIO ARCH
# SCENARIO: full | stream | resume | faults      ARCH: deepseek_v3_fp8 | kimi_k3
set -euo pipefail
umask 022  # nginx workers (another user when run as root) must read the served files
SLUICE=$1
SCENARIO=$2
ARCH=$3
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-remote-XXXXXX")
chmod 755 "$WORK"  # nginx workers run as another user
PIDS=()
cleanup() {
  local rc=$?
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for d in "$WORK"/ng*; do [ -d "$d" ] && "$HERE/nginx.sh" stop "$d"; done
  if [ $rc -ne 0 ]; then
    echo "--- FAILED ($SCENARIO $ARCH), logs:" >&2
    for f in "$WORK"/*.log "$WORK"/ng*/logs/error.log; do [ -f "$f" ] && { echo "== $f" >&2; tail -20 "$f" >&2; }; done
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
die() { echo "FAIL: $*" >&2; exit 1; }
log() { echo "== $*"; }

# --- the served model --------------------------------------------------------
REPO=org/model
SRC=$WORK/root/$REPO/resolve/main
mkdir -p "$SRC"
case $ARCH in
  deepseek_v3_fp8) "$SLUICE" synth --arch deepseek_v3 --expert-format fp8 --out "$SRC" --quiet >/dev/null ;;
  kimi_k3)
    "$SLUICE" synth --arch kimi_k3 --out "$SRC" --quiet >/dev/null
    # A mirror that ran `sluice prepare` publishes per-expert checksums.
    "$SLUICE" prepare --model "$SRC" --quiet >/dev/null ;;
  *) die "unknown arch $ARCH" ;;
esac
echo '{"note": "synthetic"}' > "$SRC/generation_config.json"
TOKENS=5,17,9,100,3,44,7,8,250,61
"$SLUICE" logits --model "$SRC" --tokens $TOKENS --decode-from 5 --output "$WORK/want.st"
WANT_GEN=$("$SLUICE" generate --model "$SRC" --tokens 5,17,9 --max-new 6 --ignore-eos)

PORT=$("$HERE/nginx.sh" start "$WORK/root" "$WORK/ng")
BASE=http://127.0.0.1:$PORT

shard_names() { ls "$SRC" | grep '^model-.*\.safetensors$'; }
same_shards() {  # every shard byte-identical to the served one
  for f in $(shard_names); do cmp "$SRC/$f" "$1/$f" || die "$1/$f differs from the served shard"; done
}
field() { sed -n "s/.*$1=\([0-9]*\).*/\1/p" "$2" | tail -1; }
check_logits() {  # DIR OUT [env...]: logits bitwise equal to the served model's
  local dir=$1 out=$2
  shift 2
  env "$@" "$SLUICE" logits --model "$dir" --tokens $TOKENS --decode-from 5 --output "$out" 2> "$WORK/logits.log" \
    || { cat "$WORK/logits.log" >&2; die "logits on $dir failed"; }
  cmp "$WORK/want.st" "$out" || die "logits of $dir differ from the full model's"
}
start_proxy() {  # NAME [args...]: the port is then in $WORK/NAME.port (not in a subshell: the proxy
                 # stops when its parent exits)
  local name=$1
  shift
  rm -f "$WORK/$name.port"
  "$PY" "$HERE/fault_proxy.py" --upstream "$PORT" --port-file "$WORK/$name.port" --log "$WORK/$name.log" \
    --max-seconds 300 "$@" &
  PIDS+=($!)
  for _ in $(seq 100); do [ -f "$WORK/$name.port" ] && break; sleep 0.05; done
  [ -f "$WORK/$name.port" ] || die "the proxy did not start"
}
set_base() {  # DIR URL: point a stream-mode directory at another server
  "$PY" - "$1/sluice-remote.json" "$2" <<'PYEOF'
import json, sys
p, base = sys.argv[1], sys.argv[2]
j = json.load(open(p)); j["base"] = base; json.dump(j, open(p, "w"))
PYEOF
}

case $SCENARIO in
full)
  log "full pull"
  "$SLUICE" pull "$REPO" --base "$BASE" --dir "$WORK/full" --full --quiet | tee "$WORK/pull.out"
  same_shards "$WORK/full"
  cmp "$SRC/config.json" "$WORK/full/config.json"
  cmp "$SRC/generation_config.json" "$WORK/full/generation_config.json"
  [ ! -e "$WORK/full/sluice-remote.json" ] || die "a full pull must not be stream mode"
  [ ! -e "$WORK/full/.sluice-pull" ] || die "staging directory left behind"
  check_logits "$WORK/full" "$WORK/full.st"
  log "pulling again fetches no shard bytes"
  "$SLUICE" pull "$REPO" --base "$BASE" --dir "$WORK/full" --full --quiet | tee "$WORK/pull2.out"
  [ "$(field downloaded "$WORK/pull2.out")" -lt 200000 ] || die "second pull downloaded shard bytes again"
  log "a missing repository is a clear error"
  if "$SLUICE" pull org/nothing --base "$BASE" --dir "$WORK/none" --quiet 2> "$WORK/err.log"; then die "pull of a missing repo succeeded"; fi
  grep -q "config.json" "$WORK/err.log" && grep -q "404" "$WORK/err.log" || die "unclear error: $(cat "$WORK/err.log")"
  ;;
stream)
  log "stream pull"
  "$SLUICE" pull "$BASE/$REPO" --dir "$WORK/s" --stream --quiet | tee "$WORK/pull.out"
  shard=$(field shard "$WORK/pull.out")
  local_b=$(field local "$WORK/pull.out")
  [ "$local_b" -lt "$shard" ] || die "stream pull fetched every byte ($local_b of $shard)"
  for f in $(shard_names); do
    [ "$(stat -c %s "$WORK/s/$f")" = "$(stat -c %s "$SRC/$f")" ] || die "$f: sparse shard has the wrong size"
  done
  [ -e "$WORK/s/sluice-remote.json" ] || die "no stream-mode marker"
  "$SLUICE" cache status --model "$WORK/s" | tee "$WORK/status0.out"
  [ "$(field cached "$WORK/status0.out")" = 0 ] || die "fresh stream pull has cached experts"
  log "logits in stream mode equal the full model's"
  check_logits "$WORK/s" "$WORK/s1.st"
  gen=$("$SLUICE" generate --model "$WORK/s" --tokens 5,17,9 --max-new 6 --ignore-eos)
  [ "$gen" = "$WANT_GEN" ] || die "generate in stream mode: $gen, full mode: $WANT_GEN"
  "$SLUICE" cache status --model "$WORK/s" | tee "$WORK/status1.out"
  [ "$(field cached "$WORK/status1.out")" -gt 0 ] || die "nothing cached after a run"
  "$SLUICE" cache verify --model "$WORK/s"
  log "offline with everything cached: no network at all"
  "$HERE/nginx.sh" stop "$WORK/ng"
  check_logits "$WORK/s" "$WORK/s2.st" SLUICE_OFFLINE=1
  set_base "$WORK/s" "http://127.0.0.1:9"  # nothing listens there
  check_logits "$WORK/s" "$WORK/s3.st"
  PORT=$("$HERE/nginx.sh" start "$WORK/root" "$WORK/ng2")
  set_base "$WORK/s" "http://127.0.0.1:$PORT"
  log "a corrupt cached expert is detected on read and fetched again"
  "$PY" - "$WORK/s" <<'PYEOF'
import json, os, re, struct, sys
d = sys.argv[1]
cache = json.load(open(os.path.join(d, "sluice-expert-cache.json")))
layer, expert = cache["experts"][0][0], cache["experts"][0][1]
wm = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
pat = re.compile(r"(^|\.)layers\.%d\..*experts\.%d\." % (layer, expert))
name = sorted((n for n in wm if pat.search(n)), key=len)[0]
path = os.path.join(d, wm[name])
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    hdr = json.loads(f.read(n))
    b, e = hdr[name]["data_offsets"]
    f.seek(8 + n + (b + e) // 2)
    f.write(b"\xab" * 8)
print("corrupted", name)
PYEOF
  if "$SLUICE" cache verify --model "$WORK/s" > "$WORK/verify.out"; then die "cache verify missed a corrupt expert"; fi
  grep -q CORRUPT "$WORK/verify.out" || die "cache verify did not name the corrupt expert"
  check_logits "$WORK/s" "$WORK/s4.st"
  grep -q "fetching it again" "$WORK/logits.log" || die "the corrupt expert was not refetched"
  "$SLUICE" cache verify --model "$WORK/s"
  log "a bounded cache evicts (holes punched) and stays correct"
  "$SLUICE" cache prune --model "$WORK/s" --max 0.0002 | tee "$WORK/prune.out"
  "$SLUICE" cache status --model "$WORK/s" | tee "$WORK/status2.out"
  [ "$(field cached_bytes "$WORK/status2.out")" -le 200000 ] || die "prune left the cache over its bound"
  "$SLUICE" cache verify --model "$WORK/s"
  check_logits "$WORK/s" "$WORK/s5.st"
  "$SLUICE" cache status --model "$WORK/s" | tee "$WORK/status3.out"
  [ "$(field cached_bytes "$WORK/status3.out")" -le 400000 ] || die "the runtime ignored the cache bound"
  "$SLUICE" cache verify --model "$WORK/s"
  "$SLUICE" cache prune --model "$WORK/s" --all
  "$SLUICE" cache status --model "$WORK/s" | tee "$WORK/status4.out"
  [ "$(field cached "$WORK/status4.out")" = 0 ] || die "prune --all left experts"
  check_logits "$WORK/s" "$WORK/s6.st"
  ;;
resume)
  # A slow server so the pull can be killed midway. nginx lets a response
  # shorter than about a second of limit_rate through at once, so the rate is
  # set well below the 128 KB range size.
  SLOW=$("$HERE/nginx.sh" start "$WORK/root" "$WORK/ngslow" 50k)
  for mode in full stream; do
    log "$mode pull killed midway, then resumed"
    "$SLUICE" pull "$REPO" --base "http://127.0.0.1:$SLOW" --dir "$WORK/$mode" --$mode --quiet --parallel 2 \
      --chunk-mb 0.125 > "$WORK/killed.log" 2>&1 &
    pid=$!
    PIDS+=($pid)
    for _ in $(seq 300); do
      n=$(cat "$WORK/$mode"/.sluice-pull/*.state 2>/dev/null | wc -l || true)
      [ "${n:-0}" -ge 3 ] && break  # a few 128 KB ranges done, each ~2.5 s at 50 KB/s: far from the end
      kill -0 $pid 2>/dev/null || break
      sleep 0.05
    done
    kill -9 $pid 2>/dev/null || die "the $mode pull finished before it could be interrupted"
    wait $pid 2>/dev/null || true
    [ -d "$WORK/$mode/.sluice-pull" ] || die "no partial state after the kill"
    : > "$WORK/ng/logs/access.log"
    "$SLUICE" pull "$REPO" --base "$BASE" --dir "$WORK/$mode" --$mode --quiet | tee "$WORK/resume.out"
    resumed=$(field resumed "$WORK/resume.out")
    [ "$resumed" -gt 0 ] || die "nothing was resumed"
    # Shard bytes served by the second run: exactly what the first had not finished.
    served=$(awk '$7 ~ /safetensors$/ {s += $10} END {print s + 0}' "$WORK/ng/logs/access.log")
    local_b=$(field local "$WORK/resume.out")
    [ "$served" -eq $((local_b - resumed)) ] || die "resume served $served shard bytes; $local_b local - $resumed resumed expected"
    echo "resumed $resumed bytes, fetched $served more"
  done
  same_shards "$WORK/full"
  check_logits "$WORK/full" "$WORK/r1.st"
  check_logits "$WORK/stream" "$WORK/r2.st"
  ;;
faults)
  export SLUICE_HTTP_STALL_S=1 SLUICE_HTTP_BACKOFF_S=0.05 SLUICE_HTTP_ATTEMPTS=10
  # One proxy per phase, each injecting every kind of fault a few times.
  faulty() {  # NAME: a fresh fault-injecting proxy; its port in $PP
    start_proxy "$1" --stall-s 3 --every 2 --per-kind 3
    PP=$(cat "$WORK/$1.port")
  }
  all_kinds() {
    for k in drop truncate 500 429 stall badrange short; do
      grep -q "^$k " "$WORK/$1.log" || die "the proxy ($1) never injected '$k'"
    done
    echo "$1: $(awk '{print $1}' "$WORK/$1.log" | sort | uniq -c | tr '\n' ' ')"
  }
  log "full pull through the fault-injecting proxy"
  faulty p1
  "$SLUICE" pull "$REPO" --base "http://127.0.0.1:$PP" --dir "$WORK/full" --full --quiet --parallel 4 --chunk-mb 0.25
  same_shards "$WORK/full"
  all_kinds p1
  log "stream pull through the proxy"
  faulty p2
  "$SLUICE" pull "$REPO" --base "http://127.0.0.1:$PP" --dir "$WORK/s" --stream --quiet --parallel 4 --chunk-mb 0.25
  all_kinds p2
  log "generation in stream mode, experts fetched through the proxy"
  faulty p3
  set_base "$WORK/s" "http://127.0.0.1:$PP"
  check_logits "$WORK/s" "$WORK/f1.st"
  all_kinds p3
  "$SLUICE" cache verify --model "$WORK/s"
  log "retry budget exhausted: a clear error naming the expert and URL, nothing half-cached"
  "$SLUICE" cache prune --model "$WORK/s" --all
  start_proxy bad --always 500
  BAD=$(cat "$WORK/bad.port")
  set_base "$WORK/s" "http://127.0.0.1:$BAD"
  if SLUICE_HTTP_ATTEMPTS=3 "$SLUICE" logits --model "$WORK/s" --tokens $TOKENS --output "$WORK/x.st" 2> "$WORK/err.log"; then
    die "logits succeeded with every request failing"
  fi
  cat "$WORK/err.log"
  grep -q "expert [0-9]* of layer [0-9]*" "$WORK/err.log" || die "error does not name the expert"
  grep -q "http://127.0.0.1:$BAD/$REPO/resolve/main/model-" "$WORK/err.log" || die "error does not name the URL"
  grep -q "HTTP 500" "$WORK/err.log" || die "error does not say why"
  "$SLUICE" cache verify --model "$WORK/s"
  set_base "$WORK/s" "http://127.0.0.1:$PP"
  check_logits "$WORK/s" "$WORK/f2.st"
  "$SLUICE" cache verify --model "$WORK/s"
  ;;
*) die "unknown scenario $SCENARIO" ;;
esac
log "ok: $SCENARIO $ARCH"
