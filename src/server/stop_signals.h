// SIGINT/SIGTERM stop the server: construct StopSignals before any thread starts
// (the engine's pool, httplib's workers), so every thread inherits the blocked
// mask and one waiting thread alone takes the signal; serve() runs the server
// until a signal arrives (then HttpServer::stop drains it) or it fails.
#pragma once
#include <csignal>

#include "server/http_server.h"

namespace sluice::server {

class StopSignals {
 public:
  StopSignals();  // ignores SIGPIPE, blocks SIGINT and SIGTERM in this thread and those it starts
  void serve(HttpServer& srv) const;

 private:
  sigset_t signals_;
};

}  // namespace sluice::server
