#include "io/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "util/error.h"

namespace sluice {

namespace {

double env_double(const char* name, double def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  if (end == v || *end || !(d >= 0)) fail("environment variable {}='{}' is not a non-negative number", name, v);
  return d;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) fail("libcurl initialisation failed");
  });
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

}  // namespace

HttpOptions http_options_from_env() {
  HttpOptions o;
  if (const char* t = std::getenv("HF_TOKEN"); t && *t) o.bearer_token = t;
  o.attempts = std::max(1, int(env_double("SLUICE_HTTP_ATTEMPTS", o.attempts)));
  o.stall_timeout_s = env_double("SLUICE_HTTP_STALL_S", o.stall_timeout_s);
  o.connect_timeout_s = env_double("SLUICE_HTTP_CONNECT_S", o.connect_timeout_s);
  o.backoff_initial_s = env_double("SLUICE_HTTP_BACKOFF_S", o.backoff_initial_s);
  return o;
}

std::string url_join(const std::string& base, const std::string& path) {
  std::string out = base;
  while (!out.empty() && out.back() == '/') out.pop_back();
  out += '/';
  static const char* hex = "0123456789ABCDEF";
  size_t i = 0;
  while (i < path.size() && path[i] == '/') ++i;
  for (; i < path.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += char(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// What one attempt received.
struct HttpClient::Reply {
  uint8_t* buf = nullptr;     // fixed destination (range requests), or null: grow `body`
  uint64_t cap = 0;           // bytes buf can take
  uint64_t got = 0;           // body bytes received
  bool overflow = false;      // more body bytes than expected
  std::string body;           // whole-file requests
  std::string content_range;  // of the final response
  std::string retry_after;
};

namespace {
size_t on_body(char* p, size_t size, size_t n, void* ud) {
  auto* r = static_cast<HttpClient::Reply*>(ud);
  const size_t len = size * n;
  if (r->buf) {
    if (r->got + len > r->cap) {
      r->overflow = true;
      return 0;  // abort the transfer: wrong length
    }
    std::memcpy(r->buf + r->got, p, len);
  } else {
    r->body.append(p, len);
  }
  r->got += len;
  return len;
}

size_t on_header(char* p, size_t size, size_t n, void* ud) {
  auto* r = static_cast<HttpClient::Reply*>(ud);
  const size_t len = size * n;
  const std::string line(p, len);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a redirect or 100): forget earlier headers
    r->content_range.clear();
    r->retry_after.clear();
    return len;
  }
  const auto colon = line.find(':');
  if (colon == std::string::npos) return len;
  const std::string key = lower(trim(line.substr(0, colon)));
  if (key == "content-range") r->content_range = trim(line.substr(colon + 1));
  if (key == "retry-after") r->retry_after = trim(line.substr(colon + 1));
  return len;
}
}  // namespace

HttpClient::HttpClient(HttpOptions opts)
    : opts_(std::move(opts)),
      rng_(uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^ uint64_t(uintptr_t(this))) {
  global_init();
  curl_ = curl_easy_init();
  if (!curl_) fail("libcurl: cannot create a transfer handle");
}

HttpClient::~HttpClient() {
  if (curl_) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

std::string HttpClient::attempt(const std::string& url, const std::string* range, Reply& r, bool* retry,
                                double* wait_s) {
  CURL* c = static_cast<CURL*>(curl_);
  curl_easy_reset(c);  // keeps the connection cache: the next request to the same host reuses it
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "sluice/0.1");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, long(opts_.connect_timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, std::max(1L, long(std::lround(opts_.stall_timeout_s))));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "identity");
  struct curl_slist* headers = nullptr;
  if (!opts_.bearer_token.empty())
    headers = curl_slist_append(headers, ("Authorization: Bearer " + opts_.bearer_token).c_str());
  if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  if (range) curl_easy_setopt(c, CURLOPT_RANGE, range->c_str());
  ++stats_.requests;
  const CURLcode rc = curl_easy_perform(c);
  if (headers) curl_slist_free_all(headers);
  stats_.body_bytes += r.got;
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  *retry = true;
  *wait_s = 0;
  if (r.overflow) return fmt::format("HTTP {}: the body is longer than the {} bytes asked for", status, r.cap);
  if (status == 429 || status == 503) {
    if (!r.retry_after.empty()) {
      char* end = nullptr;
      const double s = std::strtod(r.retry_after.c_str(), &end);
      if (end != r.retry_after.c_str() && s >= 0) *wait_s = std::min(s, opts_.retry_after_max_s);
      else *wait_s = 1;  // an HTTP date: wait a little
    }
    return fmt::format("HTTP {}{}", status, r.retry_after.empty() ? "" : " (Retry-After: " + r.retry_after + ")");
  }
  if (rc != CURLE_OK) return fmt::format("{} (after {} body bytes)", curl_easy_strerror(rc), r.got);
  if (status >= 500 || status == 408) return fmt::format("HTTP {}", status);
  if (status >= 400) {
    *retry = false;
    if (status == 401 || status == 403)
      return fmt::format("HTTP {} (a gated or private repository: set $HF_TOKEN to a token that has access)", status);
    return fmt::format("HTTP {}", status);
  }
  return "";
}

void HttpClient::backoff(int attempt_no, double server_wait_s) {
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  const double jitter = 0.5 + double(rng_ % 1000) / 1000.0;  // 0.5x .. 1.5x
  double s = std::min(opts_.backoff_max_s, opts_.backoff_initial_s * std::pow(2.0, attempt_no)) * jitter;
  s = std::max(s, server_wait_s);
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

std::optional<std::string> HttpClient::get_file(const std::string& url, const std::string& what) {
  std::string last;
  int tries = 0;
  for (int a = 0; a < opts_.attempts; ++a) {
    ++tries;
    if (a > 0) ++stats_.retries;
    Reply r;
    bool retry = false;
    double wait = 0;
    last = attempt(url, nullptr, r, &retry, &wait);
    if (last.empty()) {
      long status = 0;
      curl_easy_getinfo(static_cast<CURL*>(curl_), CURLINFO_RESPONSE_CODE, &status);
      if (status == 200) return std::move(r.body);
      last = fmt::format("HTTP {} (expected 200)", status);
      retry = true;
    }
    if (last == "HTTP 404") return std::nullopt;
    if (!retry) break;
    if (a + 1 < opts_.attempts) backoff(a, wait);
  }
  fail("fetching {} from {} failed after {} attempt(s): {}", what, url, tries, last);
}

void HttpClient::get_range(const std::string& url, uint64_t offset, uint64_t length, uint8_t* out, uint64_t* total,
                           const std::string& what) {
  if (length == 0) return;
  const std::string range = fmt::format("{}-{}", offset, offset + length - 1);
  std::string last;
  int tries = 0;
  for (int a = 0; a < opts_.attempts; ++a) {
    ++tries;
    if (a > 0) ++stats_.retries;
    Reply r;
    r.buf = out;
    r.cap = length;
    bool retry = false;
    double wait = 0;
    last = attempt(url, &range, r, &retry, &wait);
    if (last.empty()) {
      long status = 0;
      curl_easy_getinfo(static_cast<CURL*>(curl_), CURLINFO_RESPONSE_CODE, &status);
      unsigned long long a0 = 0, b0 = 0, t0 = 0;
      if (status != 206) {
        last = fmt::format("HTTP {} (expected 206 Partial Content)", status);
      } else if (std::sscanf(r.content_range.c_str(), "bytes %llu-%llu/%llu", &a0, &b0, &t0) != 3) {
        last = fmt::format("missing or malformed Content-Range '{}'", r.content_range);
      } else if (a0 != offset || b0 != offset + length - 1 || (*total && t0 != *total)) {
        last = fmt::format("Content-Range '{}' is not the bytes asked for ({}{})", r.content_range, range,
                           *total ? fmt::format("/{}", *total) : "");
      } else if (r.got != length) {
        last = fmt::format("body of {} bytes, expected {}", r.got, length);
      } else {
        *total = t0;
        return;
      }
      retry = true;
    }
    if (!retry) break;
    if (a + 1 < opts_.attempts) backoff(a, wait);
  }
  fail("fetching {} (bytes {}) from {} failed after {} attempt(s): {}", what, range, url, tries, last);
}

}  // namespace sluice
