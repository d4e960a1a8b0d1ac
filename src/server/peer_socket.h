// Noticing that an HTTP client went away while its request waits or runs: the
// server polls the connection's socket (HttpTransport::current_socket) for the
// peer's close once per prefill chunk and once per token.
#pragma once

namespace sluice::server {

// True once the peer has closed or reset the connection (never blocks).
bool peer_closed(int fd);

}  // namespace sluice::server
