#!/usr/bin/env bash
# Expert parallelism between "hosts" on one machine: RANKS ranks, each in its own
# network namespace (scripts/netns-ranks.sh), their links unshaped (the veth's
# native rate and latency) or shaped by tc tbf to each RATE; decode at each
# batch size on MODEL with the experts resident (--ram map), against one
# process. Records, per run: aggregate tokens/s, the exchanges per pass and the
# bytes the ranks' links carried per MoE layer; and the exchange alone
# (bench/exchange_probe.cpp: the same MPI_Allgatherv with no compute) at each
# batch's row count. bench/netns_model.py reads the JSON lines it writes.
#
# Usage: bench/netns_ranks.sh SLUICE MODEL OUT_DIR [RANKS] [RATES] [BATCHES]
#   RATES   space-separated: "native 10gbit 25gbit" (native: no tc)
#   BATCHES space-separated: "1 4 16"
#   TOKENS (env) decode passes timed per run (6); PROMPT (env) prompt tokens in all (64, split between
#   the batch's sequences): enough prefill routing that every expert of a 128-expert layer is in the
#   cache before the timed passes (resident, as --ram map would keep them; bench takes a budget)
#   RAM_ONE / RAM_RANK (env) the budget in GiB of one process / of each rank (6.5 / 4.5)
# Needs root, mpicxx (libopenmpi-dev) and python3.
#
# The machine this was written on has 2 cores: 3 ranks share them, each computing the
# whole spine, so the measurement checks the model's accounting of compute and
# exchange, not a speed-up (bench/netns_model.py says so in its output).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sluice=$1 model=$2 out=$3
ranks=${4:-3}
rates=${5:-"native 10gbit 25gbit"}
batches=${6:-"1 4 16"}
tokens=${TOKENS:-6}
prompt=${PROMPT:-64}
ram_one=${RAM_ONE:-6.5}
ram_rank=${RAM_RANK:-4.5}
netns="$here/../scripts/netns-ranks.sh"
mkdir -p "$out"
results="$out/results.jsonl"
: >"$results"

# What the model needs of the checkpoint (spine and expert bytes, config), kept beside the results.
python3 "$here/netns_model.py" --summary "$model" >"$out/checkpoint.json"

probe="$out/exchange_probe"
mpicxx -O2 -std=c++20 -Wall "$here/exchange_probe.cpp" -o "$probe"

cfg_field() { python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c=c.get('text_config',c); print(c[sys.argv[2]])" "$model/config.json" "$1"; }
hidden=$(cfg_field hidden_size)
top_k=$(cfg_field num_experts_per_tok)

# --buffered: an expert missing from the cache comes from the page cache (the files were just
# written), not the drive, so the experts are as good as resident after the prompts.
bench_args=(bench --model "$model" --buffered --tokens "$tokens" --probe-seconds 0)
per_seq() { echo $(( prompt / $1 > 1 ? prompt / $1 : 1 )); }

echo "netns_ranks: $model, $ranks ranks, rates [$rates], batches [$batches], $tokens passes after $prompt-token prompts"
# One process on all cores (the baseline of the speed-up) and on one thread (the rate a rank
# of a shared machine computes at: the ranks run one thread each here).
for b in $batches; do
  for threads in all 1; do
    targs=()
    [[ $threads == all ]] || targs=(--threads "$threads")
    "$sluice" "${bench_args[@]}" "${targs[@]}" --ram "$ram_one" --prompt-tokens "$(per_seq "$b")" --batch "$b" \
      --json "$out/one-t$threads-b$b.json" >"$out/one-t$threads-b$b.log" 2>&1
    python3 - "$out/one-t$threads-b$b.json" "$b" "$threads" >>"$results" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
print(json.dumps({"kind": "one" if sys.argv[3] == "all" else "one_thread", "batch": int(sys.argv[2]),
                  "tokens_per_s": j["aggregate_tokens_per_second"], "seconds_per_pass": j["seconds_per_pass"],
                  "expert_bytes_needed_per_token": j["expert_bytes_needed_per_token"],
                  "io_stall_fraction": j["io_stall_fraction"], "peak_rss_bytes": j["peak_rss_bytes"]}))
EOF
    tail -n1 "$results"
  done
done

for rate in $rates; do
  shape=()
  [[ $rate == native ]] || shape=(--rate "$rate")
  # The exchange alone: latency (one float per rank) and each batch's rows of the MoE width.
  for rows in $ranks $(for b in $batches; do echo $((b * top_k)); done); do
    width=$hidden
    ((rows == ranks)) && width=1
    line=$("$netns" -n "$ranks" "${shape[@]}" -- "$probe" "$width" "$rows" 200 2>/dev/null | grep '^exchange')
    python3 - "$rate" "$line" >>"$results" <<'EOF'
import json, sys
f = sys.argv[2].split()
print(json.dumps({"kind": "probe", "rate": sys.argv[1], "width": int(f[2]), "rows": int(f[4]), "bytes": int(f[6]),
                  "mean_us": float(f[8]), "min_us": float(f[10])}))
EOF
    tail -n1 "$results"
  done
  for b in $batches; do
    # Paired: one process on one thread just before the ranks, so both see the machine's load of
    # the moment (a shared machine's other work moves these numbers more than the link does).
    "$sluice" "${bench_args[@]}" --threads 1 --ram "$ram_one" --prompt-tokens "$(per_seq "$b")" --batch "$b" \
      --json "$out/paired-$rate-b$b.json" >"$out/paired-$rate-b$b.log" 2>&1
    python3 - "$out/paired-$rate-b$b.json" "$b" "$rate" >>"$results" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
print(json.dumps({"kind": "one_thread", "paired": sys.argv[3], "batch": int(sys.argv[2]),
                  "tokens_per_s": j["aggregate_tokens_per_second"], "seconds_per_pass": j["seconds_per_pass"],
                  "expert_bytes_needed_per_token": j["expert_bytes_needed_per_token"],
                  "io_stall_fraction": j["io_stall_fraction"], "peak_rss_bytes": j["peak_rss_bytes"]}))
EOF
    tail -n1 "$results"
    log="$out/ranks-$rate-b$b.log"
    SLUICE_CLUSTER_STATS=1 OMPI_MCA_mpi_yield_when_idle=1 "$netns" -n "$ranks" "${shape[@]}" -- \
      "$sluice" "${bench_args[@]}" --ram "$ram_rank" --prompt-tokens "$(per_seq "$b")" --batch "$b" --json "$out/ranks-$rate-b$b.json" >"$log" 2>&1
    python3 - "$out/ranks-$rate-b$b.json" "$log" "$rate" "$b" "$ranks" "$tokens" >>"$results" <<'EOF'
import json, re, sys
j = json.load(open(sys.argv[1]))
log = open(sys.argv[2]).read()
rate, b, ranks, passes = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
stats = [tuple(map(int, m)) for m in re.findall(r"rank \d+ of \d+ \(.*\): (\d+) exchanges, computed (\d+) of (\d+) "
                                               r"expert rows, sent (\d+) bytes", log)]
link = [int(x) for x in re.findall(r"netns-ranks: rank \d+ link sent (\d+) bytes", log)]
assert len(stats) == ranks and len(link) == ranks, log
exchanges = stats[0][0]  # the whole run's: prefills (one sequence at a time) and the timed passes
print(json.dumps({"kind": "ranks", "rate": rate, "batch": b, "ranks": ranks,
                  "tokens_per_s": j["aggregate_tokens_per_second"], "seconds_per_pass": j["seconds_per_pass"],
                  "io_stall_fraction": j["io_stall_fraction"], "exchanges": exchanges, "passes": passes, "rows_per_rank": [s[1] for s in stats], "rows_total": stats[0][2],
                  # per routed row (top_k a token): prefill and decode rows alike
                  "sent_bytes_per_row": sum(s[3] for s in stats) / stats[0][2],
                  "link_bytes_per_row": sum(link) / stats[0][2]}))
EOF
    tail -n1 "$results"
  done
done
echo "netns_ranks: results in $results (python3 bench/netns_model.py $results $out/checkpoint.json)"
