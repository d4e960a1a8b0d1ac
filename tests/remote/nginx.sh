#!/usr/bin/env bash
# Starts nginx (Debian package) on a free loopback port serving ROOT as static
# files, in its own temporary prefix; prints the port. `nginx.sh stop PREFIX`.
#   nginx.sh start ROOT PREFIX [LIMIT_RATE]
set -euo pipefail
# (Not "NGINX": nginx itself reads that variable for inherited sockets.)
NGINX=${SLUICE_NGINX_BIN:-/usr/sbin/nginx}
cmd=$1
if [ "$cmd" = stop ]; then
  prefix=$2
  if [ -f "$prefix/nginx.pid" ]; then
    kill "$(cat "$prefix/nginx.pid")" 2>/dev/null || true
    for _ in $(seq 50); do [ -f "$prefix/nginx.pid" ] || break; sleep 0.1; done
  fi
  exit 0
fi
root=$(cd "$2" && pwd)
prefix=$3
rate=${4:-0}
mkdir -p "$prefix/logs" "$prefix/tmp"
for attempt in $(seq 20); do
  port=$(( 20000 + (RANDOM % 20000) ))
  cat > "$prefix/nginx.conf" <<CONF
daemon on;
worker_processes 1;
pid $prefix/nginx.pid;
error_log $prefix/logs/error.log warn;
events { worker_connections 256; }
http {
  access_log $prefix/logs/access.log;
  client_body_temp_path $prefix/tmp/body;
  proxy_temp_path $prefix/tmp/proxy;
  fastcgi_temp_path $prefix/tmp/fastcgi;
  uwsgi_temp_path $prefix/tmp/uwsgi;
  scgi_temp_path $prefix/tmp/scgi;
  types { application/octet-stream safetensors; application/json json; }
  default_type application/octet-stream;
  sendfile on;
  keepalive_requests 100000;
  server {
    listen 127.0.0.1:$port;
    root $root;
    limit_rate $rate;
    location / { }
  }
}
CONF
  if "$NGINX" -p "$prefix" -c "$prefix/nginx.conf" -e "$prefix/logs/error.log" </dev/null >/dev/null 2>"$prefix/logs/start.err"; then
    echo "$port"
    exit 0
  fi
done
cat "$prefix/logs/start.err" >&2
exit 1
