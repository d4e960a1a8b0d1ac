// Reads one tool call as it is generated, in a model family's own syntax: the
// text between the syntax's call_begin and call_end markers arrives in pieces,
// and the reader says the call's name (and id) as soon as they are written, then
// its arguments piece by piece. Every piece is final: the pieces joined are the
// call's arguments text, so a streamed call and the whole reply agree byte for
// byte (tool-call arguments are streamed as they are generated, issue 31).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::chat {

class CallReader {
 public:
  virtual ~CallReader() = default;
  // More of the call's text. Returns the arguments text that has become certain
  // ("" until the head, i.e. the name, has been read).
  virtual std::string feed(std::string_view text) = 0;
  // The call's text is complete (its end marker, or the end of generation): the
  // rest of the arguments; nullopt when the text is not a call. A reader whose head
  // has been read never returns nullopt: once its name is out, the call stands.
  virtual std::optional<std::string> finish() = 0;
  bool has_head() const { return has_head_; }
  const std::string& name() const { return name_; }
  const std::string& id() const { return id_; }

 protected:
  void set_head(std::string name, std::string id) {
    name_ = std::move(name);
    id_ = std::move(id);
    has_head_ = true;
  }

 private:
  bool has_head_ = false;
  std::string name_, id_;
};

// A fresh "call_..." id, unique within the process.
std::string new_tool_call_id();

// DeepSeek-V3: function<｜tool▁sep｜>NAME\n```json\n{..}\n``` (fences optional).
std::unique_ptr<CallReader> deepseek_v3_call_reader();
// Kimi K2: functions.NAME:IDX<|tool_call_argument_begin|>{..} (the head is the call's id).
std::unique_ptr<CallReader> kimi_k2_call_reader();
// Qwen3: \n{"name": "NAME", "arguments": {..}}\n. Other key orders, or arguments
// written as a JSON string, are read whole when the call ends.
std::unique_ptr<CallReader> qwen3_call_reader();
// Kimi K3 XTML: tool="NAME" index="K"<|sep|> then typed arguments
// (<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>) written
// out as a compact JSON object in generated order, or one
// <|open|>json type="object"<|sep|>{..}<|close|>json<|sep|> block as written.
std::unique_ptr<CallReader> kimi_k3_call_reader();
// gpt-oss harmony: NAME <|constrain|>json<|message|>{..} (after "to=functions.").
std::unique_ptr<CallReader> gpt_oss_call_reader();

}  // namespace sluice::chat
