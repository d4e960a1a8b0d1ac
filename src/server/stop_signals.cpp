#include "server/stop_signals.h"

#include <pthread.h>

#include <thread>

namespace sluice::server {

StopSignals::StopSignals() {
  std::signal(SIGPIPE, SIG_IGN);
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
}

void StopSignals::serve(HttpServer& srv) const {
  const sigset_t sigs = signals_;
  std::thread waiter([&srv, sigs] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig != 0) srv.stop();
  });
  srv.run();
  // run() also returns on its own failure; wake the waiter so it can be joined.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
}

}  // namespace sluice::server
