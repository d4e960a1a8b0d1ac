// HTTP(S) GETs through libcurl for pulling checkpoints and fetching routed
// experts from a model repository. One HttpClient owns one curl easy handle,
// so consecutive requests from it reuse the connection; use one per thread.
//
// Every request is retried with exponential backoff and jitter on transient
// failures (connect/read timeouts, stalls, connection resets, 5xx, 408, 429
// with Retry-After honoured, truncated bodies, wrong lengths or ranges). After
// the retry budget, or at once on a permanent failure (4xx other than
// 408/429), it throws sluice::Error naming what was fetched, the URL and the
// byte range.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice {

struct HttpOptions {
  std::string bearer_token;        // sent as "Authorization: Bearer ..." when set
  int attempts = 8;                // tries per request, including the first
  double connect_timeout_s = 10;   // TCP/TLS connect
  double stall_timeout_s = 20;     // no byte received for this long: abort and retry
  double backoff_initial_s = 0.2;  // doubled each retry (with jitter), capped below
  double backoff_max_s = 8;
  double retry_after_max_s = 30;   // cap on a server's Retry-After
};

// Options from the environment: HF_TOKEN, SLUICE_HTTP_ATTEMPTS,
// SLUICE_HTTP_STALL_S, SLUICE_HTTP_CONNECT_S, SLUICE_HTTP_BACKOFF_S.
HttpOptions http_options_from_env();

// Counters of everything a client did (for reports and tests).
struct HttpStats {
  uint64_t requests = 0, retries = 0, body_bytes = 0;
};

class HttpClient {
 public:
  explicit HttpClient(HttpOptions opts = http_options_from_env());
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // A whole small file. Returns nullopt on 404 (an optional file that is not there).
  std::optional<std::string> get_file(const std::string& url, const std::string& what);

  // Exactly bytes [offset, offset+length) of the object at url into out, which
  // must hold `length` bytes. The reply must be 206 with Content-Range
  // "bytes offset-(offset+length-1)/total" and exactly `length` body bytes;
  // `*total` in: the object's expected size (0: unknown), out: its size.
  void get_range(const std::string& url, uint64_t offset, uint64_t length, uint8_t* out, uint64_t* total,
                 const std::string& what);

  const HttpStats& stats() const { return stats_; }

  struct Reply;  // what one attempt received (internal)

 private:
  // One attempt. Returns an empty string on success, otherwise why it failed;
  // *retry says whether trying again may help, *wait_s a server-requested delay.
  std::string attempt(const std::string& url, const std::string* range, Reply& r, bool* retry, double* wait_s);
  void backoff(int attempt_no, double server_wait_s);
  HttpOptions opts_;
  void* curl_ = nullptr;
  HttpStats stats_;
  uint64_t rng_;
};

// "https://host/a/b" + "c d.json" -> percent-encoded join (path segments keep '/').
std::string url_join(const std::string& base, const std::string& path);

}  // namespace sluice
