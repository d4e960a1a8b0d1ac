// The responses the server still holds for /v1/responses' previous_response_id
// and GET /v1/responses/{id}: each stored response's object and the
// conversation it ended (its input messages, without the instructions, which a
// follow-up does not inherit, plus the reply as an assistant message). Bounded
// by count and by bytes; the oldest go first. Thread-safe: replies are stored
// by the generation thread while request threads look them up.
#pragma once
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace sluice::server {

class ResponseStore {
 public:
  static constexpr size_t kDefaultMaxResponses = 256;
  static constexpr size_t kDefaultMaxBytes = size_t(64) << 20;
  explicit ResponseStore(size_t max_responses = kDefaultMaxResponses, size_t max_bytes = kDefaultMaxBytes);

  struct Entry {
    nlohmann::json response;      // the Response object as returned
    nlohmann::json conversation;  // chat messages (server/api_request.h's normalised form)
  };
  // Keeps `e` under `id`, dropping the oldest entries while over either bound
  // (an entry larger than max_bytes alone is not kept).
  void put(const std::string& id, Entry e);
  std::optional<Entry> get(const std::string& id) const;
  bool erase(const std::string& id);
  size_t size() const;
  size_t bytes() const;

 private:
  struct Held {
    Entry entry;
    size_t bytes;
  };
  const size_t max_responses_, max_bytes_;
  mutable std::mutex mu_;
  std::map<std::string, Held> held_;
  std::deque<std::string> order_;  // oldest first
  size_t bytes_ = 0;
};

}  // namespace sluice::server
