#!/usr/bin/python3
"""A fault-injecting HTTP proxy for the stream-mode tests (loopback only).

Forwards GETs (with their Range header) to an upstream server on 127.0.0.1.
Every --every'th distinct (path, range) gets, the first time it is asked for,
the next fault of a fixed cycle (each kind at most --per-kind times); later
attempts for the same request pass, so a client that retries always gets
there. Faults:
  drop      close the connection without answering
  truncate  the upstream's status and headers, then half the body, then close
  500       HTTP 500
  429       HTTP 429 with Retry-After: 1
  stall     headers and a few body bytes, then silence for --stall-s seconds
  badrange  206 with a Content-Range one byte off
  short     206 with the right Content-Range but a shorter body and length
  pass      forwarded untouched
--always STATUS answers every request with that status instead.
Every answer is logged to --log as "<fault> <path> <range>". The proxy stops by
itself after --max-seconds, or when its parent process is gone.
"""
import argparse
import http.client
import http.server
import os
import socketserver
import sys
import threading
import time

FAULTS = ["drop", "truncate", "500", "429", "stall", "badrange", "short"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", type=int, required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--stall-s", type=float, default=4.0)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    ap.add_argument("--always", type=int, default=0)
    ap.add_argument("--every", type=int, default=2)
    ap.add_argument("--per-kind", type=int, default=0, help="0: unlimited")
    a = ap.parse_args()

    lock = threading.Lock()
    seen = {}
    counter = [0]
    injected = {k: 0 for k in FAULTS}
    turn = [0]

    def next_fault():
        n = counter[0]
        counter[0] += 1
        if n % a.every:
            return "pass"
        for _ in range(len(FAULTS)):
            k = FAULTS[turn[0] % len(FAULTS)]
            turn[0] += 1
            if a.per_kind == 0 or injected[k] < a.per_kind:
                injected[k] += 1
                return k
        return "pass"
    log = open(a.log, "a", buffering=1)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            rng = self.headers.get("Range", "")
            key = (self.path, rng)
            with lock:
                if a.always:
                    fault = str(a.always)
                elif key in seen:
                    fault = "pass"
                else:
                    fault = next_fault()
                seen[key] = seen.get(key, 0) + 1
                log.write(f"{fault} {self.path} {rng}\n")
            if fault == "drop":
                self.close_connection = True
                return
            if fault in ("500", "429") or a.always:
                status = int(fault)
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            up = http.client.HTTPConnection("127.0.0.1", a.upstream, timeout=30)
            hdrs = {"Range": rng} if rng else {}
            up.request("GET", self.path, headers=hdrs)
            r = up.getresponse()
            body = r.read()
            up.close()
            cr = r.getheader("Content-Range")
            if fault == "badrange" and r.status == 206 and cr:
                unit, spec = cr.split(" ", 1)
                span, total = spec.split("/")
                b0, b1 = span.split("-")
                cr = f"{unit} {int(b0) + 1}-{int(b1) + 1}/{total}"
            if fault == "short" and len(body) > 1:
                body = body[: len(body) // 2]
            self.send_response(r.status)
            if cr:
                self.send_header("Content-Range", cr)
            self.send_header("Content-Type", r.getheader("Content-Type", "application/octet-stream"))
            full_len = len(body) if fault != "truncate" else len(body)
            self.send_header("Content-Length", str(full_len))
            self.end_headers()
            if fault == "truncate":
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            if fault == "stall":
                self.wfile.write(body[: min(4, len(body))])
                self.wfile.flush()
                time.sleep(a.stall_s)
                self.close_connection = True
                return
            self.wfile.write(body)

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    srv = Server(("127.0.0.1", 0), Handler)
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(a.port_file + ".tmp", a.port_file)
    parent = os.getppid()
    deadline = time.time() + a.max_seconds

    def watchdog():
        while time.time() < deadline and os.getppid() == parent:
            time.sleep(0.5)
        srv.shutdown()

    threading.Thread(target=watchdog, daemon=True).start()
    srv.serve_forever(poll_interval=0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
