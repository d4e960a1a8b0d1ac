// Fuzz target: splitting generated text into content, reasoning and tool calls
// for each family's syntax, fed in the pieces the input's first bytes choose,
// ended normally or cut off (max_tokens). Nothing is lost or invented: content +
// reasoning + the calls' text account for the input, the same text split
// differently gives the same result, and a call's streamed pieces are exactly its
// arguments (a call cut off never completes).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "chat/reply_parser.h"

namespace {

struct Result {
  std::string content, reasoning, calls;
};

Result run(const sluice::chat::ReplySyntax& syn, bool tools, std::string_view text, const uint8_t* cuts, size_t ncuts,
           bool cut) {
  sluice::chat::ReplyParser p(syn, tools);
  Result r;
  std::map<size_t, std::string> streamed;
  std::map<size_t, int> state;  // 1: begun, 2: ended, 3: cut
  size_t completed = 0;
  auto take = [&](sluice::chat::ReplyDelta d) {
    r.content += d.content;
    r.reasoning += d.reasoning;
    for (const auto& part : d.call_parts) {
      if (part.begins != (state[part.index] == 0)) __builtin_trap();  // begins once, first
      if (state[part.index] >= 2) __builtin_trap();                    // nothing after its end
      streamed[part.index] += part.arguments;
      state[part.index] = part.ends ? 2 : part.cut ? 3 : 1;
      if (part.ends && part.cut) __builtin_trap();
    }
    for (const auto& c : d.tool_calls) {
      r.calls += c.name + "\x1f" + c.arguments + "\x1e";
      // The calls complete in order, each with the arguments its pieces spelled.
      if (state[completed] != 2 || streamed[completed] != c.arguments) __builtin_trap();
      ++completed;
    }
  };
  size_t at = 0, k = 0;
  while (at < text.size()) {
    const size_t n = ncuts ? 1 + cuts[k++ % ncuts] % 16 : text.size();
    take(p.push(text.substr(at, n)));
    at += n;
  }
  take(p.finish(cut));
  for (const auto& [i, st] : state)
    if (st == 1 || (st == 3 && !cut)) __builtin_trap();  // every call ended, or was cut by the cut
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const int family = data[0] % 5;
  const bool tools = data[1] & 1, in_reasoning = data[1] & 2, cut = data[1] & 4;
  const size_t ncuts = data[2] % 8;
  if (size < 3 + ncuts) return 0;
  const uint8_t* cuts = data + 3;
  const std::string_view text(reinterpret_cast<const char*>(data) + 3 + ncuts, size - 3 - ncuts);
  sluice::chat::ReplySyntax syn = family == 0   ? sluice::chat::deepseek_v3_syntax()
                                    : family == 1 ? sluice::chat::kimi_k2_syntax()
                                    : family == 2 ? sluice::chat::qwen3_syntax()
                                    : family == 3 ? sluice::chat::kimi_k3_syntax()
                                                  : sluice::chat::gpt_oss_syntax();
  syn.starts_in_reasoning = in_reasoning;
  const Result a = run(syn, tools, text, cuts, ncuts, cut);
  const Result b = run(syn, tools, text, nullptr, 0, cut);
  if (a.content != b.content || a.reasoning != b.reasoning || a.calls != b.calls) __builtin_trap();
  if (a.content.size() + a.reasoning.size() > text.size()) __builtin_trap();  // invented text
  return 0;
}
