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

#include "chat/call_reader.h"

namespace sluice::chat {

struct ToolCall {
  std::string id, name, arguments;  // arguments: JSON text as the model wrote it
};

// A tool call's progress while it is generated, for streamed replies: the part
// that begins a call carries its id and name, later parts the next piece of its
// arguments (the pieces joined are the complete call's arguments), and the last
// one says how it ended.
struct ToolCallPart {
  size_t index = 0;          // the call's place among the reply's calls
  std::string id, name;      // set when `begins`
  std::string arguments;     // the next piece of the arguments
  bool begins = false;
  bool ends = false;         // the call is complete (it is in ReplyDelta::tool_calls too)
  bool cut = false;          // the reply was cut off (max_tokens) inside the call: it never completes
};

struct ReplyDelta {
  std::string content, reasoning;
  std::vector<ToolCall> tool_calls;       // calls completed here, with their whole arguments
  std::vector<ToolCallPart> call_parts;   // the progress of calls, in order (complete or not)
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty() && call_parts.empty(); }
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
  // Reads the text between call_begin and call_end as it arrives (chat/call_reader.h).
  std::function<std::unique_ptr<CallReader>()> call_reader;
};

// Each family's syntax, defined in its plug-in file (chat/syntax_<name>.cpp, chat/chat_syntax.h).
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

class ReplyParser {
 public:
  // tools: whether tool calls are parsed at all (the request offered tools).
  ReplyParser(ReplySyntax syntax, bool tools);
  ReplyDelta push(std::string_view text);
  // End of generation: releases held text, closes open blocks. `cut`: max_tokens
  // ended the reply, so a call being written is incomplete: it is dropped (its
  // parts so far end with `cut`), and a held possible start of a marker is dropped
  // rather than shown as text.
  ReplyDelta finish(bool cut = false);
  int calls_seen() const { return calls_; }
  bool in_reasoning() const { return mode_ == Mode::Reasoning; }  // inside the reasoning block now

 private:
  enum class Mode { Content, Reasoning, Section, Call };
  // Reads buf_ as far as it is decided, mode by mode. Each step_<mode> returns
  // whether the mode changed with text left to read.
  void step(ReplyDelta& out, bool final);
  bool step_content(ReplyDelta& out, bool final);
  bool step_reasoning(ReplyDelta& out, bool final);
  bool step_section(ReplyDelta& out, bool final);
  bool step_call(ReplyDelta& out, bool final);
  // What opens the calls in content: the section marker, or the call marker where calls stand alone.
  const std::string& calls_opener() const;
  void emit_text(ReplyDelta& out, std::string_view text);
  // Feeds call text to the reader, announcing the call once its head is read.
  void start_call();
  void feed_call(ReplyDelta& out, std::string_view text);
  // The call's text is complete (`marked`: by its end marker, else by the end of generation).
  void end_call(ReplyDelta& out, bool marked);
  ReplySyntax syn_;
  bool tools_;
  Mode mode_;
  std::string buf_;        // undecided text in the current mode
  std::string ws_;         // whitespace content held until something follows it
  bool any_content_ = false;
  bool after_think_ = false;
  int calls_ = 0;
  std::unique_ptr<CallReader> reader_;  // the call being read (Mode::Call)
  std::string call_text_;                // its text so far, shown if it turns out not to be a call
  std::string call_args_;                // its arguments so far
  bool announced_ = false;               // its head went out as a part
};

}  // namespace sluice::chat
