# Sourced by the server benchmarks: starting and stopping one `sluice serve`.
# The caller sets bin (the sluice binary), model (the model directory) and dir
# (a scratch directory, removed by the caller's EXIT trap, which also calls
# stop_server_on_exit).
pid=
serve() {  # serve EXTRA_ARGS...: starts a server on a free port; sets pid and port, its stderr in $dir/log
  "$bin" serve --model "$model" --port 0 --served-model-name m "$@" 2> "$dir/log" &
  pid=$!
  for _ in $(seq 600); do
    port=$(grep -o 'on http://127.0.0.1:[0-9]*' "$dir/log" | grep -o '[0-9]*$' || true)
    [ -n "$port" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "server did not start" >&2; cat "$dir/log" >&2; exit 1
}
stop() { kill -TERM "$pid"; wait "$pid" || true; pid=; }  # SIGTERM: the server drains and exits
stop_server_on_exit() { if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; fi; }
