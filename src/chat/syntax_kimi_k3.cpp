// Kimi K3's XTML chat syntax, rendered by sluice itself (text/xtml.h): reasoning
// until <|close|>think<|sep|>, content in <|open|>response<|sep|>...<|close|>response<|sep|>,
// calls in <|open|>tools<|sep|><|open|>call tool="NAME" index="K"<|sep|>typed
// arguments<|close|>call<|sep|>...<|close|>tools<|sep|>. A checkpoint is K3's when
// its tokenizer has the four XTML markers as special tokens.
#include <fmt/format.h>

#include "chat/api_error.h"
#include "chat/chat_syntax.h"
#include "text/xtml.h"
#include "util/error.h"

namespace sluice::chat {

using json = nlohmann::json;

ReplySyntax kimi_k3_syntax() {
  ReplySyntax s;
  s.name = "kimi_k3";
  s.think_begin.clear();  // the generation prompt opens the thinking channel (starts_in_reasoning)
  s.think_end = "<|close|>think<|sep|>";
  s.drop_markers = {"<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>"};
  s.section_begin = "<|open|>tools<|sep|>";
  s.section_end = "<|close|>tools<|sep|>";
  s.call_begin = "<|open|>call ";
  s.call_end = "<|close|>call<|sep|>";
  s.call_reader = kimi_k3_call_reader;
  return s;
}

namespace {

// The four XTML markers are special tokens and no Jinja template says otherwise
// (a template that spells <|open|> is K3's own, rendered natively).
bool is_xtml_checkpoint(const text::Tokenizer& tok, const text::ChatTemplate* tmpl) {
  for (const char* m : {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"})
    if (auto id = tok.token_id(m); !id || !tok.is_special(*id)) return false;
  return !tmpl || tmpl->source().find("<|open|>") != std::string::npos;
}

std::vector<int32_t> render_xtml(const text::Tokenizer& tok, const json& messages, const json& tools,
                                 const ChatOptions& opts) {
  text::XtmlOptions o;
  o.thinking = opts.reasoning_effort != "none";
  o.thinking_effort = opts.reasoning_effort.empty() || !o.thinking ? "max" : opts.reasoning_effort;
  try {
    // Ordered JSON: a call's arguments keep the order they were written in (it changes the ids).
    const auto msgs = nlohmann::ordered_json::parse(messages.dump());
    const auto tls = tools.is_array() && !tools.empty() ? nlohmann::ordered_json::parse(tools.dump())
                                                         : nlohmann::ordered_json();
    return text::xtml_encode(tok, text::xtml_render(msgs, tls, o));
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", "messages", "",
                   fmt::format("this conversation cannot be written in Kimi K3's chat format: {}", e.what()));
  }
}

const NativeChatFormat kXtml{
    .description = "Kimi K3 XTML chat format",
    .recognises = is_xtml_checkpoint,
    .render = render_xtml,
    .end_of_turn = "<|end_of_msg|>",
};

// K3 arguments: each property as <|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>,
// strings raw (no '<'), everything else as JSON (what text/xtml renders and
// parses); a schema that is not an object of plainly typed properties goes in one
// <|open|>json type="object"<|sep|>...<|close|>json<|sep|> block.
Grammar::Id k3_arguments(Grammar& g, SchemaCompiler& sc, const json* params, const std::string& path) {
  auto json_block = [&](Grammar::Id v) {
    return g.seq({g.lit("<|open|>json type=\"object\"<|sep|>"), v, g.lit("<|close|>json<|sep|>")});
  };
  if (!params) return json_block(sc.any_object());
  const json& s = *params;
  const Grammar::Id whole = sc.value(s, path);  // checks every keyword
  if (!s.is_object() || !s.contains("properties") || s.contains("$ref") || s.contains("anyOf") || s.contains("oneOf"))
    return json_block(whole);
  auto props = sc.properties(s, path);
  Grammar::Id tail = g.lit("");
  for (auto it = props.rbegin(); it != props.rend(); ++it) {
    const auto& [name, ps, required] = *it;
    const std::string ppath = path + ".properties." + name;
    const json* p = ps;
    if (p->is_object() && p->contains("$ref")) p = sc.resolve((*p)["$ref"], ppath + ".$ref");
    std::vector<std::string> types;
    if (p->is_object() && p->contains("type") && (*p)["type"].is_string()) types.push_back((*p)["type"]);
    if (p->is_object() && p->contains("type") && (*p)["type"].is_array())
      for (const auto& t : (*p)["type"]) types.push_back(t.get<std::string>());
    if (types.empty() || (p->is_object() && (p->contains("anyOf") || p->contains("oneOf")))) return json_block(whole);
    std::vector<Grammar::Id> forms;
    for (const auto& t : types) {
      Grammar::Id v;
      std::string attr = t == "integer" ? "number" : t;
      if (t == "string") {
        const bool listed = p->contains("enum") || p->contains("const");
        std::vector<Grammar::Id> alts;
        if (listed)
          for (const auto& e : p->contains("const") ? json::array({(*p)["const"]}) : (*p)["enum"])
            if (e.is_string()) alts.push_back(g.lit(e.get<std::string>()));
        if (listed && alts.empty()) continue;
        auto [lo, hi] = sc.lengths(*p, ppath);
        v = listed ? g.alt(alts) : g.text(hi < 0 ? int64_t(1) << 20 : hi, lo);
      } else {
        json typed = *p;
        typed["type"] = t;
        v = sc.value(typed, ppath);
      }
      forms.push_back(g.seq({g.lit("<|open|>argument key=\"" + text::xtml_escape(name) + "\" type=\"" + attr + "\"<|sep|>"),
                             v, g.lit("<|close|>argument<|sep|>")}));
    }
    if (forms.empty()) return json_block(whole);
    const Grammar::Id with = g.seq({g.alt(forms), tail});
    tail = required ? with : g.alt({with, tail});
  }
  return tail;
}

Grammar::Id k3_call(Grammar& g, const ForcedCall& call) {
  return g.seq({g.lit("<|open|>call tool=\"" + text::xtml_escape(call.name) + "\" index=\""), call_index_digits(g),
                g.lit("\"<|sep|>"), k3_arguments(g, call.schema, call.parameters, call.path),
                g.lit("<|close|>call<|sep|>")});
}

void k3_reply(Grammar& g, const ReplySyntax&, Grammar::Id calls, int64_t, std::vector<Grammar::Id>& reply) {
  reply.insert(reply.end(), {g.lit("<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"), calls,
                             g.lit("<|close|>tools<|sep|><|close|>message<|sep|>")});
}

}  // namespace

const ChatSyntax kimi_k3_chat_syntax{
    .name = "kimi_k3",
    .native = &kXtml,
    .reasoning_opener = "<|open|>think<|sep|>",
    .reply_syntax = kimi_k3_syntax,
    .prepare_messages = nullptr,  // rendered natively
    .call_grammar = k3_call,
    .surround_calls = k3_reply,
};

}  // namespace sluice::chat
