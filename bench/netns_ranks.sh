#!/usr/bin/env bash
# Expert parallelism between "hosts" on one machine, measured so that a model can be checked
# against it: RANKS ranks (one core each, --threads 1, bound by mpirun), each in its own network
# namespace (scripts/netns-ranks.sh), their links unshaped (the veth's native rate and latency) or
# shaped by tc tbf to each RATE; decode at each batch size on MODEL with the experts resident,
# against one process. bench/netns_model.py reads the JSON lines it writes.
#
# Usage: bench/netns_ranks.sh SLUICE MODEL OUT_DIR [RANKS] [RATES] [BATCHES]
#   RANKS   2 (at most the cores: each rank gets a core of its own)
#   RATES   space-separated: "native 10gbit" (native: no tc)
#   BATCHES space-separated: "1 4 16"
# Environment:
#   REPS        repetitions of every batch size (3), interleaved: batch 1, 4, 16, then again
#   QUIET_LOCK  a lock file (e.g. /tmp/quiet.lock): each unit (one batch size of one repetition)
#               runs under `flock -x` on it, so that other work holding it shared (builds) is
#               neither running nor started while it measures; released between units
#   OTHERS_MAX  CPU seconds that processes other than the unit's may use during it (3): a unit
#               starts once the machine has been idle for 2 s, and one that others disturbed more
#               is measured again (at most 4 times; its records stay, marked by unit_cpu)
#   TOKENS      decode passes timed per run (6); PROMPT prompt tokens in all (64, split between
#               the batch's sequences): enough prefill routing that every expert of a 128-expert
#               layer is resident before the timed passes
#   RAM_ONE / RAM_RANK  the budget in GiB of one process / of each rank (6.5 / 4.5)
# Needs root, mpicxx (libopenmpi-dev), g++, taskset (util-linux) and python3.
#
# One unit (one batch size, one repetition), its order reversed every other repetition:
#   one_t1   one process, one thread, on core 0 alone: the spine's and the routed experts' time a
#            pass (bench's in-run timers) and every pass's routes, the model's compute inputs
#   pair_t1  RANKS such processes at once, one per core (no MPI): the same inputs with every core
#            busy, as the ranks' are (memory bandwidth and cache shared), one record per process
#   probe    per rate: the exchange alone (bench/exchange_probe.cpp) at the batch's rows, back to
#            back and a pass apart (one_t1's pass: the link idles between exchanges as in a run),
#            and the 12-byte exchange (latency and software)
#   ranks    per rate: RANKS ranks, --threads 1, each bound to a core (rank 0's bench JSON: the
#            pass, its routed experts and exchange; the fastest and slowest rank's)
#   stream   just before and after each ranks run: the memory bandwidth of each core alone and of
#            both at once (bench/stream_probe.cpp): ranks on one machine share its memory
#   one_all  one process on every core (--threads = cores): the speed-up's baseline
# Every record carries the load average before and after its unit and the unit's CPU seconds
# (unit_cpu: the machine's busy and idle time, the hypervisor's steal, this unit's, others').
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sluice=$1 model=$2 out=$3
ranks=${4:-2}
rates=${5:-"native 10gbit"}
batches=${6:-"1 4 16"}
reps=${REPS:-3}
tokens=${TOKENS:-6}
prompt=${PROMPT:-64}
ram_one=${RAM_ONE:-6.5}
ram_rank=${RAM_RANK:-4.5}
cores=$(nproc)
netns="$here/../scripts/netns-ranks.sh"
((ranks <= cores)) || { echo "netns_ranks: $ranks ranks on $cores cores would share cores; give at most $cores" >&2; exit 2; }
mkdir -p "$out"
results="$out/results.jsonl"
: >"$results"

# What the model needs of the checkpoint (spine and expert bytes, config), kept beside the results.
python3 "$here/netns_model.py" --summary "$model" >"$out/checkpoint.json"

probe="$out/exchange_probe"
mpicxx -O2 -std=c++20 -Wall "$here/exchange_probe.cpp" -o "$probe"
stream_probe="$out/stream_probe"
g++ -O3 -march=native -std=c++20 -Wall -pthread "$here/stream_probe.cpp" -o "$stream_probe"

cfg_field() { python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c=c.get('text_config',c); print(c[sys.argv[2]])" "$model/config.json" "$1"; }
hidden=$(cfg_field hidden_size)
top_k=$(cfg_field num_experts_per_tok)

# --buffered: an expert missing from the cache comes from the page cache (the files were just
# written), not the drive, so the experts are as good as resident after the prompts.
bench_args=(bench --model "$model" --buffered --tokens "$tokens" --probe-seconds 0)
per_seq() { echo $(( prompt / $1 > 1 ? prompt / $1 : 1 )); }

# One bench JSON as a JSON line: the pass and its parts, per pass with the routes.
record() {  # KIND JSON BATCH REP RATE EXTRA_JSON
  python3 - "$@" >>"$results" <<'EOF'
import json, sys
kind, path, b, rep, rate, extra = sys.argv[1:7]
j = json.load(open(path))
r = {"kind": kind, "batch": int(b), "rep": int(rep), "rate": rate or None,
     "tokens_per_s": j["aggregate_tokens_per_second"], "seconds_per_pass": j["seconds_per_pass"],
     "mean_seconds_per_pass": sum(p["seconds"] for p in j["per_pass"]) / len(j["per_pass"]),
     "routed_expert_seconds_per_pass": j["routed_expert_seconds_per_pass"],
     "exchange_seconds_per_pass": j["exchange_seconds_per_pass"],
     "expert_bytes_needed_per_token": j["expert_bytes_needed_per_token"],
     "io_stall_fraction": j["io_stall_fraction"], "peak_rss_bytes": j["peak_rss_bytes"],
     "per_pass": [{k: p[k] for k in ("seconds", "routed_expert_seconds", "exchange_seconds", "routes")}
                  for p in j["per_pass"]]}
if "ranks" in j:
    r["ranks"] = j["ranks"]
r.update(json.loads(extra))
print(json.dumps(r))
EOF
  tail -n1 "$results" | cut -c1-300
}

one_t1() {  # B REP
  taskset -c 0 "$sluice" "${bench_args[@]}" --threads 1 --ram "$ram_one" --prompt-tokens "$(per_seq "$1")" \
    --batch "$1" --json "$out/one_t1-b$1-r$2.json" >"$out/one_t1-b$1-r$2.log" 2>&1
  record one_t1 "$out/one_t1-b$1-r$2.json" "$1" "$2" "" '{"core": 0}'
}

pair_t1() {  # B REP: one single-thread process per core at once
  local pids=() c
  for ((c = 0; c < ranks; c++)); do
    taskset -c "$c" "$sluice" "${bench_args[@]}" --threads 1 --ram "$ram_one" --prompt-tokens "$(per_seq "$1")" \
      --batch "$1" --json "$out/pair_t1-b$1-r$2-c$c.json" >"$out/pair_t1-b$1-r$2-c$c.log" 2>&1 &
    pids+=($!)
  done
  for c in "${pids[@]}"; do wait "$c"; done
  for ((c = 0; c < ranks; c++)); do
    record pair_t1 "$out/pair_t1-b$1-r$2-c$c.json" "$1" "$2" "" "{\"core\": $c, \"processes\": $ranks}"
  done
}

probe_rate() {  # B REP RATE: the exchange alone: the 12-byte one, the batch's rows back to back, and
  # the batch's rows a pass apart (the links idle for one process's pass, one_t1's, between exchanges)
  local shape=() rows width line gap g iterations
  [[ $3 == native ]] || shape=(--rate "$3")
  gap=$(python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; r=[x for x in r if x['kind'] == 'one_t1' and x['batch'] == int(sys.argv[2])]; print(round(r[-1]['mean_seconds_per_pass'] * 1e3) if r else 0)" "$results" "$1")
  for rows in "$ranks" $(($1 * top_k)) gap; do
    width=$hidden iterations=200 g=0
    if [[ $rows == gap ]]; then
      ((gap > 0)) || continue
      rows=$(($1 * top_k)) iterations=20 g=$gap
    fi
    ((rows == ranks)) && width=1
    line=$(NETNS_MPIRUN_ARGS="--bind-to core --map-by core" "$netns" -n "$ranks" "${shape[@]}" -- \
      "$probe" "$width" "$rows" "$iterations" "$g" 2>/dev/null | grep '^exchange')
    python3 - "$3" "$line" "$1" "$2" "$g" >>"$results" <<'EOF'
import json, sys
f = sys.argv[2].split()
print(json.dumps({"kind": "probe", "rate": sys.argv[1], "batch": int(sys.argv[3]), "rep": int(sys.argv[4]),
                  "width": int(f[2]), "rows": int(f[4]), "bytes": int(f[6]), "mean_us": float(f[8]),
                  "min_us": float(f[10]), "gap_ms": float(sys.argv[5])}))
EOF
    tail -n1 "$results"
  done
}

stream() {  # B REP RATE WHEN: each core's memory bandwidth alone and both at once
  local f
  read -ra f <<<"$("$stream_probe" 512 4)"
  echo "{\"kind\": \"stream\", \"batch\": $1, \"rep\": $2, \"rate\": \"$3\", \"when\": \"$4\", \"alone_gbps\": [${f[2]}, ${f[3]}], \"both_gbps\": [${f[5]}, ${f[6]}]}" >>"$results"
  tail -n1 "$results"
}

ranks_rate() {  # B REP RATE
  local shape=() kind=ranks log="$out/ranks-$3-b$1-r$2.log"
  [[ $3 == native ]] || shape=(--rate "$3")
  stream "$1" "$2" "$3" before
  SLUICE_CLUSTER_STATS=1 NETNS_MPIRUN_ARGS="--bind-to core --map-by core --report-bindings" \
    "$netns" -n "$ranks" "${shape[@]}" -- \
    "$sluice" "${bench_args[@]}" --threads 1 --ram "$ram_rank" --prompt-tokens "$(per_seq "$1")" --batch "$1" \
    --json "$out/$kind-$3-b$1-r$2.json" >"$log" 2>&1
  stream "$1" "$2" "$3" after
  local extra
  extra=$(python3 - "$log" "$ranks" <<'EOF'
import json, re, sys
log, ranks = open(sys.argv[1]).read(), int(sys.argv[2])
stats = [tuple(map(int, m)) for m in re.findall(r"rank \d+ of \d+ \(.*\): (\d+) exchanges, computed (\d+) of (\d+) "
                                               r"expert rows, sent (\d+) bytes", log)]
link = [int(x) for x in re.findall(r"netns-ranks: rank \d+ link sent (\d+) bytes", log)]
bound = re.findall(r"MCW rank (\d+) bound to socket \d+\[core (\d+)", log)
assert len(stats) == ranks and len(link) == ranks, log
assert sorted(int(c) for _, c in bound) == list(range(ranks)), "ranks not bound one to a core:\n" + log
print(json.dumps({"ranks_n": ranks, "exchanges": stats[0][0], "rows_per_rank": [s[1] for s in stats],
                  "rows_total": stats[0][2], "link_bytes_per_row": sum(link) / stats[0][2]}))
EOF
)
  record "$kind" "$out/$kind-$3-b$1-r$2.json" "$1" "$2" "$3" "$extra"
}

one_all() {  # B REP
  "$sluice" "${bench_args[@]}" --threads "$cores" --ram "$ram_one" --prompt-tokens "$(per_seq "$1")" --batch "$1" \
    --json "$out/one_all-b$1-r$2.json" >"$out/one_all-b$1-r$2.log" 2>&1
  record one_all "$out/one_all-b$1-r$2.json" "$1" "$2" "" "{\"threads\": $cores}"
}

load() { python3 -c "import json; print(json.dumps(open('/proc/loadavg').read().split()[:3]))"; }

# Waits (at most 60 s) until the cores have been idle for 2 s: work that does not take the lock.
quiet() {
  python3 - <<'EOF'
import sys, time
def busy():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return f[0] + f[1] + f[2] + f[5] + f[6], sum(f)
end = time.time() + 60
while time.time() < end:
    b0, t0 = busy()
    time.sleep(2)
    b1, t1 = busy()
    if (b1 - b0) / max(1, t1 - t0) < 0.05:
        sys.exit(0)
print("netns_ranks: the cores are busy with work outside the lock; waiting", file=sys.stderr)
sys.exit(3)
EOF
}

unit() {  # B REP
  local b=$1 rep=$2 steps=(one_t1 pair_t1 ranks one_all) before after first stat0 stat1 mine0 mine1
  ((rep % 2 == 1)) || steps=(one_all ranks pair_t1 one_t1)
  before=$(load)
  uptime
  first=$(wc -l <"$results")
  times >"$out/.times"  # not in $(...): a subshell's children are not this shell's
  stat0=$(head -n1 /proc/stat) mine0=$(tail -n1 "$out/.times")
  for s in "${steps[@]}"; do
    case $s in
      ranks) for rate in $rates; do probe_rate "$b" "$rep" "$rate"; ranks_rate "$b" "$rep" "$rate"; done ;;
      *) "$s" "$b" "$rep" ;;
    esac
  done
  times >"$out/.times"
  stat1=$(head -n1 /proc/stat) mine1=$(tail -n1 "$out/.times")
  after=$(load)
  uptime
  # On each of the unit's records: its load averages (1, 5, 15 min) before and after, and the CPU
  # seconds of the unit: all the machine's (busy), the hypervisor's steal, and what others than this
  # unit's processes used (busy less this unit's children).
  python3 - "$results" "$first" "$before" "$after" "$stat0" "$stat1" "$mine0" "$mine1" "$(getconf CLK_TCK)" \
    "${OTHERS_MAX:-3}" <<'EOF'
import json, re, sys
path, first, before, after = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
s0, s1 = ([int(x) for x in s.split()[1:]] for s in sys.argv[5:7])
hz = int(sys.argv[9])
def secs(t):  # bash times: "0m1.234s 0m0.567s" (children's user and system)
    return sum(int(m) * 60 + float(x) for m, x in re.findall(r"(\d+)m([\d.]+)s", t))
busy = lambda s: s[0] + s[1] + s[2] + s[5] + s[6] + s[7]  # user nice system irq softirq steal
cpu = {"busy_s": (busy(s1) - busy(s0)) / hz, "idle_s": (s1[3] - s0[3]) / hz, "steal_s": (s1[7] - s0[7]) / hz,
       "mine_s": secs(sys.argv[8]) - secs(sys.argv[7])}
cpu["others_s"] = cpu["busy_s"] - cpu["steal_s"] - cpu["mine_s"]
lines = open(path).read().splitlines()
out = lines[:first] + [json.dumps({**json.loads(l), "load_before": before, "load_after": after, "unit_cpu": cpu})
                       for l in lines[first:]]
open(path, "w").write("\n".join(out) + "\n")
print("netns_ranks: unit CPU seconds " + json.dumps({k: round(v, 1) for k, v in cpu.items()}))
sys.exit(4 if cpu["others_s"] > float(sys.argv[10]) else 0)
EOF
}

echo "netns_ranks: $model, $ranks ranks (one core each), rates [$rates], batches [$batches], $reps repetitions," \
  "$tokens passes after $prompt-token prompts"
for ((rep = 1; rep <= reps; rep++)); do
  for b in $batches; do
    echo "netns_ranks: batch $b, repetition $rep"
    export -f unit one_t1 pair_t1 probe_rate ranks_rate one_all record load per_seq stream quiet
    export sluice model out ranks rates results probe netns hidden top_k ram_one ram_rank cores prompt tokens
    export stream_probe OTHERS_MAX
    export BENCH_ARGS="${bench_args[*]}"
    # 0: measured quietly; 3: never quiet enough to start (the lock is given back a minute); 4: disturbed.
    for ((attempt = 0, disturbed = 0; attempt < 12 && disturbed < 4; attempt++)); do
      status=0
      if [[ -n ${QUIET_LOCK:-} ]]; then
        flock -x "$QUIET_LOCK" bash -c 'set -euo pipefail; read -ra bench_args <<<"$BENCH_ARGS"; quiet || exit 3
                                        unit "$0" "$1"' "$b" "$rep" || status=$?
      else
        bash -c 'set -euo pipefail; read -ra bench_args <<<"$BENCH_ARGS"; quiet || exit 3; unit "$0" "$1"' "$b" "$rep" \
          || status=$?
      fi
      case $status in
        0) break ;;
        3) sleep 60 ;;
        4) disturbed=$((disturbed + 1)); echo "netns_ranks: batch $b, repetition $rep disturbed by other work; again" ;;
        *) exit "$status" ;;
      esac
    done
  done
done
echo "netns_ranks: results in $results (python3 bench/netns_model.py $results $out/checkpoint.json)"
