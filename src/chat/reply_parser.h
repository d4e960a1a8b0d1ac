// Splits a model's generated text into what the OpenAI API returns separately:
// visible content, reasoning ("<think>...</think>" -> reasoning_content) and
// tool calls written in the model family's own syntax. Incremental: text goes
// in as it is generated, and a tail that may be the start of a marker is held
// back until it is decided.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::chat {

struct ToolCall {
  std::string id, name, arguments;  // arguments: JSON text as the model wrote it
};

struct ReplyDelta {
  std::string content, reasoning;
  std::vector<ToolCall> tool_calls;  // complete calls
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
  void append(ReplyDelta&& o);
};

// How one family writes reasoning and tool calls.
struct ReplySyntax {
  std::string name;
  std::string think_begin = "<think>", think_end = "</think>";
  bool starts_in_reasoning = false;  // the prompt already opened the reasoning block
  std::string section_begin, section_end;  // around all calls; empty when calls stand alone
  std::string call_begin, call_end;
  // Structure that may appear in the content and is not content (K3's channel tags).
  std::vector<std::string> drop_markers;
  // Parses the text between call_begin and call_end; nullopt if malformed.
  std::function<std::optional<ToolCall>(std::string_view body)> parse_call;
};

ReplySyntax deepseek_v3_syntax();  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{..}\n```<｜tool▁call▁end｜>
ReplySyntax kimi_k2_syntax();      // <|tool_calls_section_begin|><|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{..}<|tool_call_end|>
ReplySyntax qwen3_syntax();        // <tool_call>\n{"name": .., "arguments": {..}}\n</tool_call>
// Kimi K3 XTML: reasoning until <|close|>think<|sep|>, content in <|open|>response<|sep|>...<|close|>response<|sep|>,
// calls in <|open|>tools<|sep|><|open|>call tool="NAME" index="K"<|sep|>typed arguments<|close|>call<|sep|>...<|close|>tools<|sep|>
ReplySyntax kimi_k3_syntax();
// gpt-oss harmony: reasoning in <|channel|>analysis<|message|>...<|end|>, the answer in
// <|start|>assistant<|channel|>final<|message|>...; a call is
// <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{..} (or with
// " to=functions.NAME" before <|channel|>), ended by the <|call|> stop token.
ReplySyntax gpt_oss_syntax();

// A fresh "call_..." id, unique within the process.
std::string new_tool_call_id();

class ReplyParser {
 public:
  // tools: whether tool calls are parsed at all (the request offered tools).
  ReplyParser(ReplySyntax syntax, bool tools);
  ReplyDelta push(std::string_view text);
  ReplyDelta finish();  // end of generation: releases held text, closes open blocks
  int calls_seen() const { return calls_; }
  bool in_reasoning() const { return mode_ == Mode::Reasoning; }  // inside the reasoning block now

 private:
  enum class Mode { Content, Reasoning, Section, Call };
  void step(ReplyDelta& out, bool final);
  void emit_text(ReplyDelta& out, std::string_view text);
  ReplySyntax syn_;
  bool tools_;
  Mode mode_;
  std::string buf_;        // undecided text in the current mode
  std::string ws_;         // whitespace content held until something follows it
  bool any_content_ = false;
  bool after_think_ = false;
  int calls_ = 0;
};

}  // namespace sluice::chat
