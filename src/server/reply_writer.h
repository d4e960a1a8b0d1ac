// What one API writes for a reply: the text before the first token, each
// released delta (streamed) or nothing until the end (one body), the end, and
// an error that happened after the status line was sent. The route code that
// waits for the turn, runs the generator and watches the client is the same
// for every API; only the writer differs (OpenAI chat and completions now).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "chat/reply_stream.h"

namespace sluice::server {

class ReplyWriter {
 public:
  virtual ~ReplyWriter() = default;
  virtual bool streaming() const = 0;
  const char* content_type() const { return streaming() ? "text/event-stream" : "application/json"; }
  // Written once the request's turn has come, before prefill (may be empty).
  virtual std::string begin() = 0;
  // A released part of the reply; streamed writers return the events for it,
  // others keep it for end() and return "".
  virtual std::string delta(const chat::ReplyDelta& d, const std::vector<chat::LogprobEntry>& logprobs) = 0;
  virtual std::string end(const chat::Outcome& o) = 0;
  // A failure after begin() (the status line is gone): the API's error event or body.
  virtual std::string error(const std::string& message, const std::string& type, const std::string& code) = 0;
  // Sent while the client waits (queued, prefilling: at least every --keep-alive seconds on a
  // stream) and between prefill chunks and tokens when no socket can be polled, to find a
  // gone client: an SSE comment, or whitespace before a JSON body.
  virtual std::string keep_alive() { return streaming() ? ": keep-alive\n\n" : " "; }
  // After each prefill chunk of a streamed reply: an SSE comment clients ignore (llama-server's
  // return_progress in spirit), so a long prompt shows progress; nothing for a JSON body.
  virtual std::string progress(int64_t done, int64_t total) const {
    return streaming() ? ": prefill " + std::to_string(done) + "/" + std::to_string(total) + "\n\n" : "";
  }
};

}  // namespace sluice::server
