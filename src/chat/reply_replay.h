// Re-sent replies render to the tokens the model generated (issue 31, item 5).
//
// An agent sends the whole conversation again on every turn, the server's own
// earlier replies included, as the client re-serialized them: a tool call's
// arguments with other key order or spacing, reasoning left out (chat
// completions clients) or kept, text as shown. Rendered through the chat
// template, such a reply's tokens differ from those the model generated (other
// JSON text, a canonical tokenization the model did not pick, a template's own
// call syntax), so the prefix kept from the previous turn ends at that message
// and the model is shown a reply it did not write.
//
// ReplyReplay remembers, for each complete reply the server generated, the
// prompt it was generated from and the tokens generated (its end-of-turn token
// included), in a store bounded in bytes (least recently used forgotten first).
// A reply is found again by the conversation before it (a digest of the tools,
// the reasoning effort and every message before it, each as the client sent
// it, with JSON arguments compared as values) and by what identifies the reply:
// its tool-call ids (chat `tool_calls[].id`, Anthropic `tool_use.id`, the
// Responses API's `call_id`, also through `previous_response_id`; ids are
// compared after their prefix, so `toolu_X` is `call_X`), or, for a reply
// without calls, its text. It is used when the message as sent says what the
// model generated: the same calls (names, ids, arguments equal as JSON values),
// the same text (surrounding whitespace aside), and the same reasoning or none
// (a client that does not send reasoning back gets it restored).
//
// The new prompt is then the stored prompt, the generated tokens, and the
// template's rendering of the messages after the reply. So what is exact:
// every replayed turn is fed as the model generated it and as it was served
// (the prompt before it included: a turn that was itself replayed stays
// replayed), whatever the template would now write for it; the template
// decides the glue after the reply and everything after it. A template that
// renders earlier turns differently once later messages exist (Qwen3's, which
// drops the reasoning of turns before the last user message) is therefore not
// followed for replayed turns: the model sees the reasoning it generated, and
// the prefix state kept from the previous turn stays valid.
//
// The end of the reply in the template's rendering is found without knowing
// the template: the conversation is rendered twice more with the reply
// replaced, once by a plain text turn and once by a turn of the same shape
// (same calls, other values); what both renders have in common with the
// prompt at its end starts inside the reply, and the reply ends at the first
// end-of-turn token there (the one the model generated last). The two must
// agree, else (a template whose later messages depend on the reply's shape)
// the prompt is the plain rendering. Replies cut by max_tokens, a stop string
// or a grammar, and cancelled ones, are not kept.
#pragma once
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_codec.h"
#include "chat/reply_parser.h"

namespace sluice::chat {

// A reply as generated: every token taken (the end-of-turn token included) and
// what the client was given (text, reasoning, calls).
struct GeneratedReply {
  std::vector<int32_t> tokens;
  bool ended_by_stop_token = false;  // not by max_tokens, a stop string, a grammar or a cancel
  std::string content, reasoning;
  std::vector<ToolCall> calls;
};

class ReplyReplay {
 public:
  static constexpr size_t kDefaultMaxBytes = size_t(64) << 20;
  // max_bytes: what the kept prompts and replies may take (0: nothing is kept).
  ReplyReplay(const ChatCodec& codec, size_t max_bytes = kDefaultMaxBytes) : codec_(codec), max_bytes_(max_bytes) {}

  struct Replayed {
    std::vector<int32_t> prompt;
    int64_t tokens = 0;   // taken from the store: the earlier prompt and the reply
    size_t message = 0;   // the replayed reply's index in messages
  };
  // The prompt for `messages` (whose plain rendering is `rendered`) with the
  // latest reply in it that the store holds and the message matches; nullopt
  // when there is none. Thread-safe.
  std::optional<Replayed> apply(const nlohmann::json& messages, const nlohmann::json& tools, const ChatOptions& opts,
                                const std::vector<int32_t>& rendered);
  // Keeps a reply generated after `messages` rendered (and replayed) as `prompt`.
  // Returns whether it was kept (only complete replies are).
  bool record(const nlohmann::json& messages, const nlohmann::json& tools, const ChatOptions& opts,
              const std::vector<int32_t>& prompt, const GeneratedReply& reply);

  size_t size() const;
  size_t bytes() const;

  // Exposed for the tests: a message as the digest sees it, and whether a sent
  // assistant message says what `reply` holds.
  static nlohmann::json canonical_message(const nlohmann::json& m);
  static bool same_reply(const nlohmann::json& sent, const GeneratedReply& reply);

 private:
  struct Entry {
    std::string key;
    std::vector<int32_t> prompt;
    GeneratedReply reply;
    size_t bytes = 0;
  };
  // The digests of the conversation before each message (digests[i]: messages[0..i)).
  static std::vector<std::string> digests(const nlohmann::json& messages, const nlohmann::json& tools,
                                          const ChatOptions& opts);
  static std::string reply_key(const nlohmann::json& m);  // "" when nothing identifies it
  // What the rendering has after the reply at messages[i], or nullopt when its end cannot be told.
  std::optional<std::vector<int32_t>> tail_after(const nlohmann::json& messages, size_t i, const nlohmann::json& tools,
                                                 const ChatOptions& opts, const std::vector<int32_t>& rendered,
                                                 const std::vector<int32_t>& generated) const;

  const ChatCodec& codec_;
  size_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace sluice::chat
