#include "server/http_server.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <strings.h>

#include <httplib.h>

#include "chat/batch_scheduler.h"
#include "compute/expert_exchange.h"
#include "chat/generator.h"
#include "chat/prompt_boundaries.h"
#include "chat/output_grammar.h"
#include "server/anthropic_api.h"
#include "server/batch_runner.h"
#include "server/error_body.h"
#include "server/chat_page.h"
#include "server/heartbeat.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "server/openai_writer.h"
#include "server/peer_socket.h"
#include "server/queue.h"
#include "server/api_request.h"
#include "server/response.h"
#include "server/response_store.h"
#include "server/responses_api.h"
#include "server/retry_after.h"
#include "server/text_routes.h"
#include "util/error.h"

namespace sluice::server {

using chat::ApiError;
using chat::ChatCodec;
using chat::ChatOptions;
using chat::EmitFn;
using chat::Generator;
using chat::LogprobEntry;
using chat::Outcome;
using chat::ReplyDelta;
using chat::GenerationRequest;
using chat::tool_call_grammar;

using nlohmann::json;

namespace {

const char* kJson = "application/json";
using Clock = std::chrono::steady_clock;

void send_error(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(to_text(body), kJson);
}

void send_error(httplib::Response& res, const ApiError& e) { send_error(res, e.status(), error_body(e)); }

const char* error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 408: return "timeout_error";
    case 504: return "timeout_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// The status a content provider's reply really ended with, when that is not the
// status line it started with (499: the client left; 500/503: it failed or the
// server stopped). Read and reset by the request logger on the same thread.
thread_local int tls_outcome = 0;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Constant-time comparison for the API key.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

// Under mpirun: once a rank is lost no pass can run, and the server stays up only to say why.
std::string ranks_lost() {
  const ExpertExchange* x = expert_exchange();
  return x ? x->lost() : std::string();
}

}  // namespace

TransportOptions transport_options(const ServerOptions& o, Metrics& metrics) {
  TransportOptions t = o.transport;
  // Every generation request holds a worker while it waits or runs; the rest answer at once.
  t.workers = o.max_queue + size_t(o.parallel) + 8;
  t.max_connections = std::max(t.max_connections, o.max_queue + 64);
  t.on_refused = [&metrics](int status) { metrics.count_request(Route::Connection, status); };
  return t;
}

struct HttpServer::Impl {
  const Model& model;
  const ChatCodec& codec;
  ServerOptions opts;
  Metrics metrics;
  GenerationQueue queue;
  Generator generator;
  // --parallel > 1: the scheduler that decodes the running requests together, on the runner's thread.
  std::unique_ptr<chat::BatchScheduler> scheduler;
  std::unique_ptr<BatchRunner> runner;
  ResponseStore responses;  // /v1/responses kept for previous_response_id
  mutable chat::PromptBoundaries boundaries;  // where the prompt cache keeps checkpoints
  mutable chat::ReplyReplay replay;  // earlier replies, fed as generated when they are sent again
  std::atomic<bool> stopping{false};
  HttpTransport http;  // last: its threads stop before the members above go

  Impl(const Model& m, const ChatCodec& c, ServerOptions o)
      : model(m),
        codec(c),
        opts(std::move(o)),
        queue(opts.max_queue, size_t(opts.parallel)),
        generator(m, c, metrics, opts.context_length, opts.drafter, opts.speculation, opts.cache,
                  opts.prefill_chunk > 0 ? opts.prefill_chunk : 64, opts.prefill_slice_seconds, opts.prefill_span),
        scheduler(opts.parallel > 1 ? std::make_unique<chat::BatchScheduler>(m, c, generator, metrics, opts.parallel)
                                    : nullptr),
        runner(scheduler ? std::make_unique<BatchRunner>(*scheduler) : nullptr),
        boundaries(c),
        replay(c, opts.replay_bytes),
        http(transport_options(opts, metrics)) {
    metrics.set_queue([this] { return queue.waiting(); }, [this] { return queue.running(); });
    setup();
  }

  // The routes and handlers, in the order setup() installs them.
  void setup();
  void configure_sockets();      // the body limit, TCP_NODELAY, SO_REUSEADDR
  void add_api_key_check();      // --api-key: 401 before any route but / and /health
  void add_error_bodies();       // request counting; a JSON body for every error
  void add_info_routes();        // the chat page, /health, /metrics, /v1/models
  void add_generation_routes();  // the three APIs' POST routes, stored responses
  void add_text_routes();        // /tokenize, /detokenize, /apply-template
  void add_post_only_answers();  // 405 for GET on the generation routes
  using BodyHandler = std::function<void(const std::string& body, httplib::Response& res)>;
  // A POST handler: reads the body within --max-request-bytes (413 past it), then calls `handle`.
  httplib::Server::HandlerWithContentReader post(BodyHandler handle);
  size_t http_backlog() const { return std::min<size_t>(4096, opts.transport.max_connections); }
  // A generation request: prepare (parse, render, check: errors before queueing),
  // wait for the turn, then stream the reply through the API's writer.
  struct Job;
  std::shared_ptr<Job> prepare_openai(const std::string& body, GenerationRequest::Kind kind) const;
  std::shared_ptr<Job> new_job() const;  // its deadline counts from now
  bool wait_for_turn(Job& job, httplib::Response& res);  // false: the client left while waiting
  bool stream_reply(Job& job, httplib::DataSink& sink);   // the content provider's body
  // --parallel > 1: the generation on the scheduler's thread; this worker writes what it
  // releases and watches the client. `write` returns false once the client is gone.
  Outcome run_batched(Job& job, const std::function<bool(const std::string&)>& write);
  void openai_route(const std::string& body, httplib::Response& res, GenerationRequest::Kind kind);
  void anthropic_route(const std::string& body, httplib::Response& res, bool count_tokens);
  void responses_route(const std::string& body, httplib::Response& res);
  void finish_preparation(Job& job) const;  // the forced-call grammar, the context check
  // The rendered prompt with an earlier reply in it fed as generated (chat/reply_replay.h).
  void replay_prompt(Job& job) const;
  void start_reply(const std::shared_ptr<Job>& job, httplib::Response& res);
  // Ignored fields counted in /metrics; dropped hosted tools named in a header.
  void note(Job& job, httplib::Response& res);
  // The per-request log line: id, endpoint, prompt / cached / new tokens, queue wait,
  // time to first token, tokens/s, and how it ended (`end`, or the finish reason).
  void log_request(const Job& job, const Outcome& o, const std::string& end) const;
};

void HttpServer::Impl::setup() {
  configure_sockets();
  add_api_key_check();
  add_error_bodies();
  add_info_routes();
  add_generation_routes();
  add_text_routes();
  add_post_only_answers();
}

void HttpServer::Impl::configure_sockets() {
  // Twice the limit: the route handlers count the bytes themselves and answer 413 first.
  http.set_payload_max_length(opts.max_request_bytes * 2);
  http.set_tcp_nodelay(true);
  // SO_REUSEADDR for quick restarts, but not httplib's default SO_REUSEPORT, which
  // would let a second server share the port silently.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const char*>(&yes), sizeof yes);
  });
}

void HttpServer::Impl::add_api_key_check() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // The chat page needs no key (a browser cannot send one); with a key it shows no model card.
    if (opts.api_key.empty() || req.path == "/health" || req.path == "/") return httplib::Server::HandlerResponse::Unhandled;
    // The scheme is case-insensitive (RFC 9110 11.1); Anthropic clients send x-api-key.
    const std::string auth = req.get_header_value("Authorization");
    const bool bearer = auth.size() > 7 && strncasecmp(auth.c_str(), "bearer ", 7) == 0;
    if (bearer && same_secret(auth.substr(7), opts.api_key)) return httplib::Server::HandlerResponse::Unhandled;
    if (req.has_header("x-api-key") && same_secret(req.get_header_value("x-api-key"), opts.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string msg = "missing or wrong API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')";
    if (req.path.rfind("/v1/messages", 0) == 0)  // Anthropic's error shape on its routes
      send_error(res, 401, anthropic_error_body(ApiError(401, "authentication_error", "", "", msg)));
    else
      send_error(res, 401, error_body(msg, "authentication_error", "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
}

void HttpServer::Impl::add_error_bodies() {
  // Every answered request is counted here, by route template.
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.count_request(route_of(req.path), tls_outcome ? tls_outcome : res.status);
    tls_outcome = 0;
  });
  // Whatever httplib answers by itself (404, 413, 400 for a broken request line...) gets a JSON body.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg;
    switch (res.status) {
      case 404: msg = fmt::format("no route for {} {}", req.method, req.path); break;
      case 413: msg = "request body is larger than the server's limit (--max-request-bytes)"; break;
      default: msg = fmt::format("HTTP {}", res.status);
    }
    res.set_content(to_text(error_body(msg, error_type(res.status))), kJson);
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, 500, error_body(fmt::format("internal error: {}", e.what()), "server_error"));
    } catch (...) {
      send_error(res, 500, error_body("internal error", "server_error"));
    }
  });
}

void HttpServer::Impl::add_info_routes() {
  http.Get("/", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(chat_page(chat_page_card(model, codec, opts)), "text/html; charset=utf-8");
  });
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    if (const std::string why = ranks_lost(); !why.empty()) {
      res.status = 503;
      res.set_content(to_text({{"status", "unavailable"}, {"reason", why}}), kJson);
      return;
    }
    res.set_content("{\"status\":\"ok\"}", kJson);
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", opts.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "sluice"}};
    res.set_content(to_text({{"object", "list"}, {"data", json::array({m})}}), kJson);
  });
  http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != opts.model_name) {
      send_error(res, 404, error_body(fmt::format("model '{}' does not exist", std::string(req.matches[1])),
                                      "invalid_request_error", "model", "model_not_found"));
      return;
    }
    res.set_content(
        to_text({{"id", opts.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "sluice"}}), kJson);
  });
}

// Bodies are read here rather than by httplib so that the size limit holds for
// chunked uploads too (httplib checks only Content-Length).
httplib::Server::HandlerWithContentReader HttpServer::Impl::post(BodyHandler handle) {
  return [this, handle](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    std::string body;
    bool too_big = false;
    if (req.has_header("Content-Length")) {
      const std::string cl = req.get_header_value("Content-Length");
      uint64_t n = 0;
      for (char c : cl) n = (c >= '0' && c <= '9' && n < (uint64_t(1) << 60)) ? n * 10 + uint64_t(c - '0') : n;
      too_big = n > opts.max_request_bytes;
    }
    const bool complete = !too_big && reader([&](const char* data, size_t len) {
      if (body.size() + len > opts.max_request_bytes) {
        too_big = true;
        return false;
      }
      body.append(data, len);
      return true;
    });
    if (!complete && !too_big) {
      send_error(res, 400, error_body("the request body could not be read (cut short or broken chunked encoding)",
                                      "invalid_request_error"));
      return;
    }
    if (too_big) {
      send_error(res, 413,
                 error_body(fmt::format("request body is larger than the server's limit of {} bytes",
                                        opts.max_request_bytes),
                            "invalid_request_error"));
      return;
    }
    handle(body, res);
  };
}

void HttpServer::Impl::add_generation_routes() {
  auto openai = [this](GenerationRequest::Kind kind) {
    return [this, kind](const std::string& body, httplib::Response& res) { openai_route(body, res, kind); };
  };
  http.Post("/v1/chat/completions", post(openai(GenerationRequest::Kind::Chat)));
  http.Post("/v1/completions", post(openai(GenerationRequest::Kind::Completion)));
  http.Post("/v1/messages", post([this](const std::string& b, httplib::Response& res) { anthropic_route(b, res, false); }));
  http.Post("/v1/messages/count_tokens",
            post([this](const std::string& b, httplib::Response& res) { anthropic_route(b, res, true); }));
  http.Post("/v1/responses", post([this](const std::string& b, httplib::Response& res) { responses_route(b, res); }));
  auto not_held = [](httplib::Response& res, const std::string& id) {
    send_error(res, 404, error_body(fmt::format("Response with id '{}' not found.", id), "invalid_request_error"));
  };
  http.Get(R"(/v1/responses/([^/]+))", [this, not_held](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (auto e = responses.get(id)) res.set_content(to_text(e->response), kJson);
    else not_held(res, id);
  });
  http.Delete(R"(/v1/responses/([^/]+))", [this, not_held](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (responses.erase(id))
      res.set_content(to_text({{"id", id}, {"object", "response.deleted"}, {"deleted", true}}), kJson);
    else not_held(res, id);
  });
}

void HttpServer::Impl::add_text_routes() {
  // Text utilities: answered at once, never queued behind a generation.
  auto text_route = [](std::function<json(const json&)> reply) {
    return [reply](const std::string& body, httplib::Response& res) {
      try {
        res.set_content(to_text(reply(parse_json_body(body))), kJson);
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    };
  };
  http.Post("/tokenize", post(text_route([this](const json& b) { return tokenize_reply(codec, b); })));
  http.Post("/detokenize",
            post(text_route([this](const json& b) { return detokenize_reply(codec, b, model.info().vocab); })));
  http.Post("/apply-template", post(text_route([this](const json& b) {
              RequestLimits limits;
              limits.vocab = model.info().vocab;
              return apply_template_reply(codec, b, limits, opts.model_name);
            })));
}

void HttpServer::Impl::add_post_only_answers() {
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/v1/responses"})
    http.Get(path, [](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", "POST");
      send_error(res, 405, error_body(fmt::format("{} takes POST", req.path), "invalid_request_error"));
    });
}

// Per-request state shared with the content provider.
struct HttpServer::Impl::Job {
  // From arrival: past it the generation stops (ServerOptions::request_timeout).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  bool past_deadline() const { return std::chrono::steady_clock::now() >= deadline; }
  GenerationRequest req;
  std::vector<int32_t> prompt;
  std::unique_ptr<ReplyWriter> writer;  // set before the reply starts
  std::shared_ptr<GenerationQueue::Turn> turn;
  std::string echo_text;
  int fd = -1;  // the client's socket, polled for its close (-1: none to poll)
  Route route = Route::Other;
  std::string id;  // the reply's id, for the request log
  RequestNotes notes;
  Clock::time_point arrived = Clock::now(), started{};  // started: the turn came
  bool waiting = false;  // the reply's status line went out while the request still waits for its turn
  int64_t replayed = 0;  // prompt tokens taken from the replay store (an earlier prompt and its reply)
};

std::shared_ptr<HttpServer::Impl::Job> HttpServer::Impl::new_job() const {
  auto job = std::make_shared<Job>();
  if (opts.request_timeout.count() > 0) job->deadline = std::chrono::steady_clock::now() + opts.request_timeout;
  return job;
}

std::shared_ptr<HttpServer::Impl::Job> HttpServer::Impl::prepare_openai(const std::string& raw_body,
                                                                        GenerationRequest::Kind kind) const {
  json body = parse_json_body(raw_body);
  RequestLimits limits;
  limits.vocab = model.info().vocab;
  limits.default_seed = std::random_device{}();
  limits.defaults = opts.sampling_defaults;
  auto job = new_job();
  job->route = kind == GenerationRequest::Kind::Chat ? Route::ChatCompletions : Route::Completions;
  job->req = kind == GenerationRequest::Kind::Chat ? parse_chat_request(body, limits, &job->notes)
                                         : parse_completion_request(body, limits);
  GenerationRequest& req = job->req;
  if (req.model != opts.model_name)
    throw ApiError(404, "invalid_request_error", "model", "model_not_found",
                   fmt::format("model '{}' does not exist; this server serves '{}'", req.model, opts.model_name));
  if (kind == GenerationRequest::Kind::Chat) {
    job->prompt = codec.render_chat(req.messages, req.tools, ChatOptions{req.reasoning_effort});
    replay_prompt(*job);
  } else if (req.prompt_is_ids) {
    job->prompt = req.prompt_ids;
  } else {
    job->prompt = codec.encode(req.prompt_text);
  }
  if (req.echo) {
    if (req.prompt_is_ids) {
      auto d = codec.detokenizer();
      for (int32_t id : req.prompt_ids) job->echo_text += d->push(id);
      job->echo_text += d->flush();
    } else {
      job->echo_text = req.prompt_text;
    }
  }
  finish_preparation(*job);
  return job;
}

void HttpServer::Impl::replay_prompt(Job& job) const {
  auto r = replay.apply(job.req.messages, job.req.tools, ChatOptions{job.req.reasoning_effort}, job.prompt);
  if (!r) return;
  job.prompt = std::move(r->prompt);
  job.replayed = r->tokens;
}

void HttpServer::Impl::finish_preparation(Job& job) const {
  GenerationRequest& req = job.req;
  if (req.tool_choice != GenerationRequest::ToolChoice::Auto) {
    std::vector<std::string> allowed;
    if (req.tool_choice == GenerationRequest::ToolChoice::Named) allowed.push_back(req.tool_choice_name);
    else
      for (const auto& t : req.tools) allowed.push_back(t["function"]["name"].get<std::string>());
    req.grammar = tool_call_grammar(codec.reply_syntax(job.prompt), req.tools, allowed, req.parallel_tool_calls,
                                    req.strict_tools);
  }
  generator.max_new_tokens(req, int64_t(job.prompt.size()));  // 400 now rather than after queueing
  if (req.kind == GenerationRequest::Kind::Chat && job.route != Route::CountTokens)
    req.prompt_boundaries = boundaries.find(req.messages, req.tools, ChatOptions{req.reasoning_effort}, job.prompt);
}

void HttpServer::Impl::note(Job& job, httplib::Response& res) {
  for (const auto& f : job.notes.ignored) metrics.count_ignored(job.route, f);
  if (!job.notes.dropped_tools.empty()) {
    std::string names;
    for (const auto& t : job.notes.dropped_tools) names += (names.empty() ? "" : ", ") + t;
    // Hosted tools this server cannot run were not offered to the model.
    res.set_header("sluice-dropped-tools", names);
    metrics.count_dropped_tools(job.route, int64_t(job.notes.dropped_tools.size()));
  }
}

void HttpServer::Impl::start_reply(const std::shared_ptr<Job>& job, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  if (job->writer->streaming()) res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      job->writer->content_type(), [this, job](size_t, httplib::DataSink& sink) { return stream_reply(*job, sink); },
      [job](bool) { job->turn.reset(); });
}

void HttpServer::Impl::anthropic_route(const std::string& raw_body, httplib::Response& res, bool count_tokens) {
  try {
    RequestLimits limits;
    limits.vocab = model.info().vocab;
    limits.default_seed = std::random_device{}();
    limits.defaults = opts.sampling_defaults;
    auto job = new_job();
    job->route = count_tokens ? Route::CountTokens : Route::Messages;
    job->req = parse_anthropic_request(parse_json_body(raw_body), limits, count_tokens, &job->notes);
    if (job->req.model != opts.model_name)
      throw ApiError(404, "not_found_error", "model", "",
                     fmt::format("model '{}' does not exist; this server serves '{}'", job->req.model, opts.model_name));
    try {
      job->prompt = codec.render_chat(job->req.messages, job->req.tools, ChatOptions{job->req.reasoning_effort});
    } catch (const ApiError& e) {
      // A template that cannot place a system message after the conversation has begun:
      // said the way Claude Code recognises, so it sends the conversation again without one.
      const json& ms = job->req.messages;
      bool late_system = false;
      for (size_t i = 1; i < ms.size(); ++i) late_system = late_system || (ms[i]["role"] == "system" && ms[i - 1]["role"] != "system");
      if (!late_system) throw;
      throw ApiError(e.status(), e.type(), "messages", e.code(),
                     fmt::format("role \"system\" must precede any user or assistant message for this model's chat "
                                 "template ({})",
                                 e.what()));
    }
    replay_prompt(*job);  // count_tokens too: the tokens the model would be fed
    note(*job, res);
    const int64_t prompt_tokens = int64_t(job->prompt.size());
    if (job->notes.edit_trigger > 0 && prompt_tokens >= job->notes.edit_trigger)
      throw ApiError(400, "invalid_request_error", "context_management", "",
                     fmt::format("{} would act on this prompt of {} tokens (its trigger is {}): this server does not "
                                 "clear or compact context",
                                 job->notes.edit_name, prompt_tokens, job->notes.edit_trigger));
    if (count_tokens) {
      res.set_content(to_text({{"input_tokens", prompt_tokens}}), kJson);
      return;
    }
    // Anthropic's own wording: Claude Code compacts the conversation on the first and
    // lowers max_tokens on the second (it reads the numbers back).
    const int64_t ctx = opts.context_length;
    if (ctx > 0 && prompt_tokens >= ctx)
      throw ApiError(400, "invalid_request_error", "messages", "context_length_exceeded",
                     fmt::format("prompt is too long: {} tokens > {} maximum", prompt_tokens, ctx - 1));
    if (ctx > 0 && prompt_tokens + *job->req.max_tokens > ctx)
      throw ApiError(400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                     fmt::format("input length and `max_tokens` exceed context limit: {} + {} > {}, decrease input "
                                 "length or `max_tokens` and try again",
                                 prompt_tokens, *job->req.max_tokens, ctx));
    finish_preparation(*job);
    job->id = new_response_id("msg_");
    job->writer = make_anthropic_writer(job->req, job->id, opts.model_name, prompt_tokens);
    if (!wait_for_turn(*job, res)) return;
    start_reply(job, res);
  } catch (const ApiError& e) {
    res.status = e.status();
    res.set_content(to_text(anthropic_error_body(e)), kJson);
  }
}

void HttpServer::Impl::responses_route(const std::string& raw_body, httplib::Response& res) {
  try {
    RequestLimits limits;
    limits.vocab = model.info().vocab;
    limits.default_seed = std::random_device{}();
    limits.defaults = opts.sampling_defaults;
    auto job = new_job();
    job->route = Route::Responses;
    ResponsesRequest rr = parse_responses_request(parse_json_body(raw_body), limits, &responses, &job->notes);
    job->req = rr.req;
    if (job->req.model != opts.model_name)
      throw ApiError(404, "invalid_request_error", "model", "model_not_found",
                     fmt::format("model '{}' does not exist; this server serves '{}'", job->req.model, opts.model_name));
    job->prompt = codec.render_chat(job->req.messages, job->req.tools, ChatOptions{job->req.reasoning_effort});
    replay_prompt(*job);
    note(*job, res);
    try {
      finish_preparation(*job);
    } catch (const ApiError& e) {
      if (e.code() != "context_length_exceeded") throw;
      // The Responses API's wording, and its field names.
      throw ApiError(400, "invalid_request_error", e.param() == "max_tokens" ? "max_output_tokens" : "input",
                     "context_length_exceeded",
                     fmt::format("Your input exceeds the context window of this model. Please adjust your input and "
                                 "try again. ({})",
                                 e.what()));
    }
    job->id = new_response_id("resp_");
    ResponsesReplyInfo info{job->id, opts.model_name, unix_now(), int64_t(job->prompt.size())};
    job->writer = make_responses_writer(rr, std::move(info), [this](const std::string& id, ResponseStore::Entry e) {
      responses.put(id, std::move(e));
    });
    if (!wait_for_turn(*job, res)) return;
    start_reply(job, res);
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

bool HttpServer::Impl::wait_for_turn(Job& job, httplib::Response& res) {
  if (const std::string why = ranks_lost(); !why.empty())
    throw ApiError(503, "server_error", "", "rank_lost", fmt::format("the server cannot generate: {}", why));
  auto turn = queue.join();
  if (!turn) {
    const int64_t ahead = queue.running() + queue.waiting();
    res.set_header("Retry-After", std::to_string(retry_after_seconds(ahead, metrics.service_rates(), queue.slots())));
    throw ApiError(429, "rate_limit_error", "", "queue_full",
                   fmt::format("the server is busy: {} requests are already waiting", opts.max_queue));
  }
  job.turn = std::move(turn);
  job.fd = HttpTransport::current_socket();
  const int fd = job.fd;
  // A streamed reply waits here at most one keep-alive interval; then its status line goes
  // out and the rest of the wait happens in the content provider, with keep-alives.
  const auto limit = Clock::now() + opts.keep_alive;
  bool timed_out = false;
  const bool turn_came = job.turn->wait([&] {
    if (stopping || job.past_deadline() || peer_closed(fd)) return true;
    return timed_out = job.writer->streaming() && Clock::now() >= limit;
  });
  if (stopping)  // never started: the client may send it again elsewhere
    throw ApiError(503, "server_error", "", "server_shutdown", "the server is shutting down; send it again later");
  if (turn_came) {
    job.started = Clock::now();
  } else if (job.past_deadline()) {
    log_request(job, {}, "request timeout while queued");
    throw ApiError(504, "server_error", "", "request_timeout",
                   fmt::format("the request waited longer than the server's --request-timeout of {} s for its turn",
                               double(opts.request_timeout.count()) / 1000));
  } else if (timed_out && !peer_closed(fd)) {
    job.waiting = true;
  } else {
    res.status = 499;  // gone while waiting: never starts
    log_request(job, {}, "client gone while queued");
    return false;
  }
  return true;
}

void HttpServer::Impl::log_request(const Job& job, const Outcome& o, const std::string& end) const {
  if (!opts.log_requests) return;
  const auto now = Clock::now();
  auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  const bool started = job.started != Clock::time_point{};
  const double queued = secs((started ? job.started : now) - job.arrived);
  std::string line = fmt::format("sluice: {} {}: prompt {} tokens ({} cached, {} new), queued {:.2f} s", job.id.empty() ? "-" : job.id,
                                 route_path(job.route), job.prompt.size(), o.cached_tokens,
                                 int64_t(job.prompt.size()) - o.cached_tokens, queued);
  if (job.replayed > 0) {  // before "queued": the prompt's account stays together
    const size_t at = line.find(", queued");
    line.insert(at, fmt::format(", {} replayed", job.replayed));
  }
  if (o.first_token_at != Clock::time_point{}) {
    const double decode = secs(now - o.first_token_at);
    line += fmt::format(", first token {:.2f} s, {} tokens at {:.1f} tokens/s", secs(o.first_token_at - job.arrived),
                        o.completion_tokens, o.completion_tokens > 1 && decode > 0 ? double(o.completion_tokens - 1) / decode : 0.0);
  }
  line += ", " + (end.empty() ? "finish " + (o.finish_reason.empty() ? std::string("none") : o.finish_reason) : end);
  std::fprintf(stderr, "%s\n", line.c_str());
}

bool HttpServer::Impl::stream_reply(Job& job, httplib::DataSink& sink) {
  ReplyWriter& w = *job.writer;
  const int fd = job.fd;
  // Writes go through one lock: the heartbeat's thread writes keep-alives between them.
  std::mutex io;
  std::unique_ptr<Heartbeat> heartbeat;  // set and reset on this thread only
  std::atomic<bool> ok{true};            // read without the lock by the socket checks
  bool wrote_this_token = false;
  auto send = [&](const std::string& s) {  // `io` held
    if (ok && !s.empty()) ok = sink.write(s.data(), s.size());
    return ok.load();
  };
  auto write_locked = [&](const std::string& s) {  // `io` held, on this thread
    send(s);
    wrote_this_token = true;
    if (heartbeat) heartbeat->touch();
    return ok.load();
  };
  auto write = [&](const std::string& s) {
    std::lock_guard lk(io);
    return write_locked(s);
  };
  auto gone = [&] { return fd >= 0 ? peer_closed(fd) : !ok; };
  if (job.replayed > 0) metrics.add_replayed(job.replayed);
  write(w.begin());
  if (job.waiting) {
    // Still queued: keep-alives until the turn comes (or the client leaves, or the server stops).
    for (;;) {
      auto last = Clock::now();
      const bool came = job.turn->wait(
          [&] { return stopping || gone() || job.past_deadline() || Clock::now() - last >= opts.keep_alive; });
      if (came) break;
      if (job.past_deadline() && !stopping) {
        write(w.error(fmt::format("the request waited longer than the server's --request-timeout of {} s for its turn",
                                  double(opts.request_timeout.count()) / 1000),
                      "server_error", "request_timeout"));
        if (ok) sink.done();
        tls_outcome = 504;
        log_request(job, {}, "request timeout while queued");
        return ok;
      }
      if (stopping) {
        write(w.error("the server is shutting down; send it again later", "server_error", "server_shutdown"));
        if (ok) sink.done();
        tls_outcome = 503;
        log_request(job, {}, "server shutting down while queued");
        return ok;
      }
      if (gone() || !write(w.keep_alive())) {
        tls_outcome = 499;
        log_request(job, {}, "client gone while queued");
        return false;
      }
    }
    job.started = Clock::now();
  }
  // Called once per prefill chunk and once per token. Without the socket, a
  // write is how a vanished client shows up (SSE comment, or whitespace before the JSON body).
  auto alive = [&] {
    if (stopping || job.past_deadline()) return false;
    if (fd >= 0) return ok && !peer_closed(fd);
    std::lock_guard lk(io);
    if (!wrote_this_token) write_locked(w.keep_alive());
    wrote_this_token = false;
    return ok.load();
  };
  if (w.streaming() && !runner)
    heartbeat = std::make_unique<Heartbeat>(std::chrono::duration_cast<std::chrono::milliseconds>(opts.keep_alive), io,
                                            [&] { send(w.keep_alive()); });
  EmitFn emit = [&](const ReplyDelta& d, const std::vector<LogprobEntry>& lp) {
    std::lock_guard lk(io);
    return write_locked(w.delta(d, lp));
  };
  Outcome o;
  try {
    if (runner)
      o = run_batched(job, write);
    else
      o = generator.run(job.req, job.prompt, emit, alive, [&](int64_t done, int64_t total) {
        std::lock_guard lk(io);
        const std::string p = w.progress(done, total);
        if (!p.empty()) write_locked(p);
      });
  } catch (const std::exception& e) {
    heartbeat.reset();
    write(w.error(fmt::format("generation failed: {}", e.what()), "server_error", ""));
    sink.done();
    tls_outcome = 500;
    log_request(job, o, fmt::format("failed: {}", e.what()));
    return true;
  }
  heartbeat.reset();
  if (o.cancelled && ok && stopping) {  // the client is still there: tell it why
    write(w.error("the server is shutting down: the reply was cut short", "server_error", "server_shutdown"));
    if (ok) sink.done();
    tls_outcome = 503;
    log_request(job, o, "cut short: server shutting down");
    return ok;
  }
  if (o.cancelled && ok && job.past_deadline()) {  // the server's own deadline
    write(w.error(fmt::format("the request took longer than the server's --request-timeout of {} s: the reply was "
                              "cut short",
                              double(opts.request_timeout.count()) / 1000),
                  "server_error", "request_timeout"));
    if (ok) sink.done();
    tls_outcome = 504;
    log_request(job, o, "cut short: request timeout");
    return ok;
  }
  if (o.cancelled || !ok) {
    tls_outcome = 499;  // client closed the connection
    log_request(job, o, "client gone");
    return false;
  }
  if (job.req.kind == GenerationRequest::Kind::Chat &&
      replay.record(job.req.messages, job.req.tools, ChatOptions{job.req.reasoning_effort}, job.prompt, o.generated))
    metrics.set_replay_store(int64_t(replay.size()), uint64_t(replay.bytes()));
  write(w.end(o));
  if (ok) sink.done();
  metrics.add_request_seconds(std::chrono::duration<double>(Clock::now() - job.started).count());
  if (!ok) tls_outcome = 499;
  log_request(job, o, ok ? "" : "client gone at the end");
  job.turn.reset();  // the next request may start now
  return ok;
}

Outcome HttpServer::Impl::run_batched(Job& job, const std::function<bool(const std::string&)>& write) {
  // What the scheduler's thread hands over: the writer's calls to make here, in order, and the end.
  struct Channel {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::function<std::string(ReplyWriter&)>> pieces;
    bool finished = false;
    Outcome outcome;
    std::exception_ptr error;
    std::atomic<bool> gone{false};  // the client left (or a write failed)
  };
  auto ch = std::make_shared<Channel>();
  auto hand_over = [ch](std::function<std::string(ReplyWriter&)> piece) {
    std::lock_guard lk(ch->mu);
    ch->pieces.push_back(std::move(piece));
    ch->cv.notify_all();
  };
  chat::BatchScheduler::Job b;
  b.req = &job.req;
  b.prompt = job.prompt;
  const auto deadline = job.deadline;
  b.alive = [this, ch, deadline] { return !stopping && !ch->gone && std::chrono::steady_clock::now() < deadline; };
  b.emit = [this, ch, hand_over](const ReplyDelta& d, const std::vector<LogprobEntry>& lp) {
    hand_over([d, lp](ReplyWriter& w) { return w.delta(d, lp); });
    return !stopping && !ch->gone;
  };
  b.progress = [hand_over](int64_t done, int64_t total) {
    hand_over([done, total](ReplyWriter& w) { return w.progress(done, total); });
  };
  b.done = [ch](const Outcome& o, std::exception_ptr e) {
    std::lock_guard lk(ch->mu);
    ch->outcome = o;
    ch->error = e;
    ch->finished = true;
    ch->cv.notify_all();
  };
  runner->submit(std::move(b));
  // Until the scheduler is done with the request (the queue's turn is held that long).
  auto last_write = Clock::now();
  for (bool finished = false; !finished;) {
    std::vector<std::function<std::string(ReplyWriter&)>> pieces;
    {
      std::unique_lock lk(ch->mu);
      ch->cv.wait_for(lk, std::chrono::milliseconds(50), [&] { return !ch->pieces.empty() || ch->finished; });
      pieces.swap(ch->pieces);
      finished = ch->finished;
    }
    for (auto& piece : pieces) {
      const std::string text = piece(*job.writer);
      if (text.empty()) continue;
      if (!write(text)) ch->gone = true;
      last_write = Clock::now();
    }
    if (finished || ch->gone) continue;
    if (job.fd >= 0 && peer_closed(job.fd)) {
      ch->gone = true;
    } else if (Clock::now() - last_write > (job.fd >= 0 || job.writer->streaming() ? opts.keep_alive : std::chrono::seconds(1))) {
      // A stream's keep-alive while the prompt is prefilled; without a socket to poll, a write
      // is also how a vanished client shows up.
      if ((job.fd < 0 || job.writer->streaming()) && !write(job.writer->keep_alive())) ch->gone = true;
      last_write = Clock::now();
    }
  }
  if (ch->error) std::rethrow_exception(ch->error);
  return ch->outcome;
}

void HttpServer::Impl::openai_route(const std::string& raw_body, httplib::Response& res, GenerationRequest::Kind kind) {
  try {
    auto job = prepare_openai(raw_body, kind);
    note(*job, res);
    job->id = new_response_id(kind == GenerationRequest::Kind::Chat ? "chatcmpl-" : "cmpl-");
    const ResponseMeta meta{job->id, unix_now(), opts.model_name};
    job->writer = make_openai_writer(job->req, meta, codec, job->echo_text);
    if (!wait_for_turn(*job, res)) return;
    start_reply(job, res);
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

void check_options(const ServerOptions& o, bool speculating) {
  if (o.port < 0 || o.port > 65535) fail("--port must be in 0..65535, got {}", o.port);
  if (o.max_request_bytes < 1024) fail("--max-request-bytes must be at least 1024, got {}", o.max_request_bytes);
  if (o.speculation.max_draft < 1) fail("--draft-max must be >= 1, got {}", o.speculation.max_draft);
  if (o.max_queue > 4096) fail("--max-queue must be at most 4096, got {}", o.max_queue);
  if (o.transport.max_connections_per_client < 1)
    fail("--max-connections-per-client must be >= 1, got {}", o.transport.max_connections_per_client);
  if (o.cache.slots < 1 || o.cache.slots > 1024) fail("--cache-slots must be in 1..1024, got {}", o.cache.slots);
  if (o.parallel < 1 || o.parallel > 256) fail("--parallel must be in 1..256, got {}", o.parallel);
  if (o.parallel > 1 && speculating)
    fail("--speculate and --draft-model verify drafts one request at a time: use them with --parallel 1 "
         "(got --parallel {})", o.parallel);
  if (o.prefill_chunk < 0) fail("--prefill-chunk must be >= 1 (or 0: as the memory plan allows), got {}", o.prefill_chunk);
  if (!(o.prefill_slice_seconds >= 0 && o.prefill_slice_seconds <= 3600))
    fail("--prefill-slice must be in [0, 3600] seconds, got {}", o.prefill_slice_seconds);
}

int64_t served_context(int64_t requested, int64_t model_positions, const std::string& model_dir) {
  if (requested < 0) fail("--context-length must be positive, got {}", requested);
  if (model_positions > 0 && requested > model_positions)
    fail("--context-length {} is more than the model's {} positions (max_position_embeddings)", requested,
         model_positions);
  const int64_t n = requested > 0 ? requested : model_positions;
  if (n <= 0) fail("{}/config.json has no max_position_embeddings: pass --context-length", model_dir);
  return n;
}

std::string served_model_name(const std::string& requested, const std::string& model_dir) {
  if (!requested.empty()) return requested;
  const auto p = std::filesystem::path(model_dir).lexically_normal();
  return p.has_filename() ? p.filename().string() : p.parent_path().filename().string();
}

HttpServer::HttpServer(const Model& model, const ChatCodec& codec, ServerOptions opts)
    : impl_(std::make_unique<Impl>(model, codec, std::move(opts))) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  auto& o = impl_->opts;
  if (o.port == 0) {
    const int port = impl_->http.bind_to_any_port(o.host);
    if (port <= 0) fail("cannot listen on {}: no free port", o.host);
    o.port = port;
  } else if (!impl_->http.bind_to_port(o.host, o.port)) {
    fail("cannot listen on {}:{}: another program has the port, or {} is not an address of this machine (choose "
         "another with --port N, 0 for any free port, or --host)",
         o.host, o.port, o.host);
  }
  impl_->http.set_backlog(int(impl_->http_backlog()));
  return o.port;
}

void HttpServer::run() {
  impl_->http.listen_after_bind();
  impl_->http.drain();
}

void HttpServer::stop() {
  impl_->stopping = true;
  impl_->http.request_stop();
}

}  // namespace sluice::server
