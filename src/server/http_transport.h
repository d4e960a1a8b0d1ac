// Connections for the HTTP server, kept away from worker threads until a request
// has arrived. httplib alone gives every accepted connection a worker that reads
// its headers with a per-read timeout, so a few clients trickling a byte at a
// time hold every worker. Here one poll loop (the waiting room) holds connections
// while their request head (and a small Content-Length body) arrives, under a
// deadline for the whole head; only complete requests take a worker, and an idle
// keep-alive connection goes back to the waiting room. Connections are capped per
// client address and in total; over a cap, or past a deadline, the client gets a
// JSON error (429, 503, 408, 431) and the connection is closed.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

#include <httplib.h>

namespace sluice::server {

struct TransportOptions {
  // Request line and headers (and a buffered body) must arrive within this of the
  // connection's accept, or of a kept-alive connection's first byte of the next request.
  std::chrono::milliseconds head_timeout{10000};
  std::chrono::milliseconds idle_timeout{30000};  // a kept-alive connection without a new request is closed
  std::chrono::milliseconds io_timeout{5000};     // per read of a large or chunked body, per write
  std::chrono::milliseconds body_timeout{60000};  // a body read by a worker must be complete within this
  size_t max_head_bytes = 64 << 10;               // larger request heads get 431
  size_t buffered_body_bytes = 256 << 10;         // Content-Length bodies up to this arrive before a worker is taken
  size_t max_connections_per_client = 64;         // open connections from one address
  size_t max_connections = 512;                   // open connections in all
  size_t workers = 16;                            // requests handled at the same time
  size_t max_requests_per_connection = 1000;
  // Called for each connection refused by the transport itself, with the status sent.
  std::function<void(int status)> on_refused;
};

class HttpTransport : public httplib::Server {
 public:
  explicit HttpTransport(TransportOptions opts);
  ~HttpTransport() override;
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // After bind_to_port(): room for this many connections waiting to be accepted
  // (httplib listens with a backlog of 5, so a burst of clients waits for SYN retries).
  void set_backlog(int n);

  // Makes listen_after_bind() return once the requests being handled have
  // finished (at most 10 s later), whether or not it has started yet; from now
  // on new connections get 503 and idle ones are closed.
  void request_stop();

  // After listen_after_bind() has returned: closes what is left and joins the threads.
  void drain();

  // The socket of the request the calling thread is handling (valid in route
  // handlers and content providers), or -1 on any other thread.
  static int current_socket();

 private:
  struct Impl;
  friend struct Impl;
  // Called by httplib's accept loop for every new connection.
  bool process_and_close_socket(socket_t sock) override;
  // One request on a connection whose stream the worker owns (httplib's parser and routes).
  bool handle_request(httplib::Stream& stream, bool close_after, bool& closed);
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace sluice::server
