// The HTTP front end: OpenAI-compatible routes over cpp-httplib, API-key
// check, body limits, the FIFO generation queue (one generation at a time, or
// up to --parallel decoded together by the batch scheduler) and JSON errors for everything.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_codec.h"
#include "chat/reply_replay.h"
#include "model/model.h"
#include "runtime/prompt_cache.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"
#include "server/http_transport.h"

namespace sluice::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  std::string api_key;  // empty: no authentication
  size_t max_request_bytes = size_t(8) << 20;
  size_t max_queue = 16;  // requests that may wait behind the running one
  std::string model_name;  // the id clients send as "model"
  TransportOptions transport;  // deadlines and connection caps (workers are set from max_queue)
  int64_t context_length = 0;  // positions per conversation (0: unbounded)
  std::shared_ptr<Drafter> drafter;  // speculative decoding (same output); null: none
  SpeculationOptions speculation;
  SamplingParams sampling_defaults;  // for requests that do not set them (sampling_defaults(model_dir))
  PromptCacheOptions cache;  // conversations kept for prefix reuse, prompt states saved on disk
  // Requests decoded together in one forward pass (chat/batch_scheduler.h); 1: one at a time.
  int64_t parallel = 1;
  int64_t prefill_chunk = 0;  // prompt tokens per prefill pass (0: the sessions' 64; serve sets the plan's)
  int64_t prefill_span = -1;  // prompt tokens per layer-by-layer span (-1: the model's, 0: none)
  // Prefill chunks sized to take about this long, at most prefill_chunk tokens
  // (chat/prefill_pacer.h); 0: every chunk prefill_chunk tokens.
  double prefill_slice_seconds = 0;
  // A generation request's time from its arrival (queueing, prefill and
  // decoding); past it the work stops within one layer and the client is told
  // (504 before the reply starts, a request_timeout error event after). 0: none.
  std::chrono::milliseconds request_timeout{0};
  // What the chat page at / shows beyond the API's model fields: the memory
  // plan, the directory (server/chat_page.h; `sluice serve` fills it).
  nlohmann::json page_card;
  // A streamed reply gets a keep-alive (SSE comment, Anthropic ping, Responses in_progress
  // event) when it has written nothing for this long: while queued and while prefilling.
  std::chrono::milliseconds keep_alive{5000};
  bool log_requests = true;  // one line per generation request on stderr
  // Bytes of generated replies (with their prompts) kept so that a conversation sent
  // again feeds them as generated (chat/reply_replay.h); 0: off.
  size_t replay_bytes = chat::ReplyReplay::kDefaultMaxBytes;
};

// Refuses options no server can run with, naming the `sluice serve` flag;
// `speculating`: --speculate or --draft-model was given.
void check_options(const ServerOptions& o, bool speculating = false);
// The positions a conversation may use: `requested` (--context-length; 0: the
// model's), at most the model's `model_positions`; an error when neither is known.
int64_t served_context(int64_t requested, int64_t model_positions, const std::string& model_dir);
// The id clients send as "model": `requested` (--served-model-name), else the
// directory's name ("dir/" and "dir/." too).
std::string served_model_name(const std::string& requested, const std::string& model_dir);

class HttpServer {
 public:
  HttpServer(const Model& model, const chat::ChatCodec& codec, ServerOptions opts);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int bind();   // binds host:port; returns the port (useful with port 0); throws on failure
  // Serves until stop(), then waits for the requests being handled: a running
  // generation or prefill ends at its next token or chunk, waiting ones get 503.
  void run();
  void stop();  // safe from any thread (a signal-waiting thread calls it)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::server
