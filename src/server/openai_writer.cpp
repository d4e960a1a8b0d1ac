#include "server/openai_writer.h"

#include <map>

#include "server/error_body.h"
#include "server/freeform_tools.h"

namespace sluice::server {

using chat::ChatCodec;
using chat::LogprobEntry;
using chat::Outcome;
using chat::ReplyDelta;
using chat::GenerationRequest;

using nlohmann::json;

namespace {

// One streamed piece of a call: the first carries its id, type and name; a freeform
// tool's piece carries the input text decoded so far instead of JSON arguments.
json tool_call_delta_json(const chat::ToolCallPart& p, const std::string& name, bool freeform, FreeformInput& input) {
  json c = {{"index", p.index}};
  if (p.begins) {
    c["id"] = p.id;
    c["type"] = freeform ? "custom" : "function";
  }
  if (freeform) {
    std::string text = input.feed(p.arguments);
    if (p.ends) text += input.finish();
    json f = {{"input", text}};
    if (p.begins) f["name"] = name;
    c["custom"] = std::move(f);
  } else {
    json f = {{"arguments", p.arguments}};
    if (p.begins) f["name"] = name;
    c["function"] = std::move(f);
  }
  return c;
}

// What the chat and completions writers share: the request, the response's id
// and model, the codec, the whole reply for a body, and the API's error shape.
class OpenAiWriter : public ReplyWriter {
 public:
  OpenAiWriter(const GenerationRequest& req, ResponseMeta meta, const ChatCodec& codec)
      : req_(req), meta_(std::move(meta)), codec_(codec) {}
  bool streaming() const override { return req_.stream; }
  std::string error(const std::string& message, const std::string& type, const std::string& code) override {
    const json e = error_body(message, type, "", code);
    return req_.stream ? sse_event(e) : to_text(e);
  }

 protected:
  // The end of a stream: the chunk with the finish reason, the usage chunk when asked for, [DONE].
  std::string stream_end(const json& last_chunk, const char* object, const Outcome& o) const {
    std::string s = sse_event(last_chunk);
    if (req_.include_usage) s += sse_event(usage_chunk_json(meta_, object, o));
    return s + kSseDone;
  }

  const GenerationRequest& req_;
  ResponseMeta meta_;
  const ChatCodec& codec_;
  ReplyAccumulator acc_;
};

class ChatWriter : public OpenAiWriter {
 public:
  using OpenAiWriter::OpenAiWriter;
  std::string begin() override {
    if (!req_.stream) return "";
    return sse_event(chat_chunk_json(meta_, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr,
                                     req_.include_usage));
  }
  std::string delta(const ReplyDelta& d, const std::vector<LogprobEntry>& lp) override {
    if (!req_.stream) {
      acc_.add(d, lp);
      return "";
    }
    json delta = json::object();
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.content.empty()) delta["content"] = d.content;
    // Calls stream as they are generated: the first piece carries the id and name,
    // later ones the next piece of the arguments (a call cut off by max_tokens just
    // stops; finish_reason "length" says so).
    json calls = json::array();
    for (const auto& p : d.call_parts) {
      if (!p.begins && p.arguments.empty() && !p.ends) continue;
      const std::string& name = call_name(p);
      const bool freeform = req_.freeform_tools.count(name) > 0;
      if (!freeform && !p.begins && p.arguments.empty()) continue;
      json c = tool_call_delta_json(p, name, freeform, freeform_[p.index]);
      if (freeform && !p.begins && c["custom"]["input"] == "") continue;
      calls.push_back(std::move(c));
    }
    if (!calls.empty()) delta["tool_calls"] = std::move(calls);
    if (delta.empty() && lp.empty()) return "";
    json lpj = req_.logprobs ? chat_logprobs_json(lp, codec_) : json();
    return sse_event(chat_chunk_json(meta_, delta, nullptr, lpj, req_.include_usage));
  }
  std::string end(const Outcome& o) override {
    if (!req_.stream) return to_text(chat_completion_json(meta_, acc_, o, req_.logprobs, codec_, req_.freeform_tools));
    return stream_end(chat_chunk_json(meta_, json::object(), o.finish_reason, nullptr, req_.include_usage),
                      "chat.completion.chunk", o);
  }

 private:
  // The name of the call a part belongs to (set on its first part).
  const std::string& call_name(const chat::ToolCallPart& p) {
    if (p.begins) names_[p.index] = p.name;
    return names_[p.index];
  }
  std::map<size_t, std::string> names_;
  std::map<size_t, FreeformInput> freeform_;  // freeform calls' input text, decoded as it streams
};

class CompletionWriter : public OpenAiWriter {
 public:
  CompletionWriter(const GenerationRequest& req, ResponseMeta meta, const ChatCodec& codec, std::string echo)
      : OpenAiWriter(req, std::move(meta), codec), echo_(std::move(echo)), text_bytes_(echo_.size()) {}
  std::string begin() override {
    if (!req_.stream || echo_.empty()) return "";
    return sse_event(completion_chunk_json(meta_, echo_, nullptr, nullptr, req_.include_usage));
  }
  std::string delta(const ReplyDelta& d, const std::vector<LogprobEntry>& lp) override {
    if (!req_.stream) {
      acc_.add(d, lp);
      return "";
    }
    if (d.content.empty() && lp.empty()) return "";
    json lpj = req_.logprobs ? completion_logprobs_json(lp, codec_, text_bytes_) : json();
    text_bytes_ += d.content.size();
    return sse_event(completion_chunk_json(meta_, d.content, nullptr, lpj, req_.include_usage));
  }
  std::string end(const Outcome& o) override {
    if (!req_.stream)
      return to_text(
          completion_json(meta_, echo_ + acc_.reply.content, acc_, o, req_.logprobs, codec_, echo_.size()));
    return stream_end(completion_chunk_json(meta_, "", o.finish_reason, nullptr, req_.include_usage),
                      "text_completion", o);
  }

 private:
  std::string echo_;
  size_t text_bytes_;
};

}  // namespace

std::unique_ptr<ReplyWriter> make_openai_writer(const GenerationRequest& req, const ResponseMeta& meta, const ChatCodec& codec,
                                                std::string echo_text) {
  if (req.kind == GenerationRequest::Kind::Chat) return std::make_unique<ChatWriter>(req, meta, codec);
  return std::make_unique<CompletionWriter>(req, meta, codec, std::move(echo_text));
}

}  // namespace sluice::server
