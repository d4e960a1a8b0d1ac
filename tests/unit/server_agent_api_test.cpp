// The APIs as coding agents use them (issue 31): the request fields of the
// current Anthropic Messages and OpenAI Responses / Chat references are accepted,
// provider-only features are ignored and listed, hosted tools are left out and
// named, freeform and namespaced tools are served, and a call cut off by
// max_tokens ends the same way on every API. Request shapes follow what Claude
// Code, Codex, opencode and Qwen Code send (tests/agents runs the real ones).
#include <gtest/gtest.h>

#include <algorithm>

#include "chat/api_error.h"
#include "chat/chat_codec.h"
#include "chat/output_grammar.h"
#include "server/anthropic_api.h"
#include "server/freeform_tools.h"
#include "server/openai_writer.h"
#include "server/api_request.h"
#include "server/responses_api.h"

namespace sluice::server::server_agent_api_test {
namespace {

using nlohmann::json;

const RequestLimits kLimits{1000, 77, {}};
const chat::ByteCodec kCodec(512);  // the writers use it only for logprobs

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

std::string anthropic_bad_param(const json& body) {
  try {
    parse_anthropic_request(body, kLimits);
  } catch (const chat::ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
    return e.param();
  }
  ADD_FAILURE() << "accepted: " << body.dump();
  return "";
}

// The shape of Claude Code's first request (its prompt texts shortened).
json claude_code_request() {
  return json::parse(R"({
    "model": "m", "max_tokens": 32000, "stream": true,
    "metadata": {"user_id": "{\"device_id\":\"d\",\"session_id\":\"s\"}"},
    "system": [{"type": "text", "text": "billing header"},
               {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
      {"role": "user", "content": [{"type": "text", "text": "<system-reminder>context</system-reminder>"},
                                   {"type": "text", "text": "Run echo hi", "cache_control": {"type": "ephemeral"}}]},
      {"role": "system", "content": [{"type": "text", "text": "A mid-conversation reminder.", "cache_control": {"type": "ephemeral"}}]}
    ],
    "tools": [
      {"name": "Bash", "description": "Runs a command", "eager_input_streaming": true, "input_schema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
        "properties": {"command": {"type": "string"}, "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": 600000},
                       "url": {"type": "string", "format": "uri", "pattern": "^https?://"}},
        "required": ["command"], "additionalProperties": false}},
      {"name": "Read", "defer_loading": true, "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}},
        "allOf": [{"required": ["file_path"]}]}},
      {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    ],
    "thinking": {"type": "adaptive", "display": "omitted"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"},
    "service_tier": "auto", "speed": "fast", "cache_control": {"type": "ephemeral"}
  })");
}

TEST(AgentApis, ClaudeCodesRequestIsAccepted) {
  RequestNotes notes;
  const chat::GenerationRequest r = parse_anthropic_request(claude_code_request(), kLimits, false, &notes);
  EXPECT_EQ(r.reasoning_effort, "high");
  EXPECT_TRUE(r.reasoning_hidden);  // display "omitted"
  ASSERT_EQ(r.tools.size(), 2u);  // web_search is the provider's
  EXPECT_EQ(r.tools[0]["function"]["name"], "Bash");
  EXPECT_EQ(notes.dropped_tools, std::vector<std::string>{"web_search"});
  for (const char* f : {"service_tier", "speed", "cache_control", "tools.defer_loading"}) EXPECT_TRUE(has(notes.ignored, f)) << f;
  // The system blocks, the user turn, then the mid-conversation system message in its place.
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["role"], "user");
  EXPECT_EQ(r.messages[2]["role"], "system");
  EXPECT_EQ(r.messages[2]["content"], "A mid-conversation reminder.");
  // Forced calls hold real agents' schemas to their shape (value checks like exclusiveMinimum,
  // format, pattern and allOf are not enforced for a tool that is not strict)...
  EXPECT_NO_THROW(chat::tool_call_grammar(chat::qwen3_syntax(), r.tools, {"Bash", "Read"}, true, r.strict_tools));
  // ...and refused for a strict tool, naming the keyword.
  json strict = claude_code_request();
  strict["tools"][0]["strict"] = true;
  const chat::GenerationRequest s = parse_anthropic_request(strict, kLimits);
  try {
    chat::tool_call_grammar(chat::qwen3_syntax(), s.tools, {"Bash"}, true, s.strict_tools);
    ADD_FAILURE() << "a strict tool's unenforceable keyword was accepted";
  } catch (const chat::ApiError& e) {
    EXPECT_EQ(e.param(), "tools[0].function.parameters.properties.timeout.exclusiveMinimum");
  }
}

TEST(AgentApis, AnthropicThinkingModesAndContextEdits) {
  json b = claude_code_request();
  b["thinking"] = {{"type", "disabled"}};
  EXPECT_EQ(parse_anthropic_request(b, kLimits).reasoning_effort, "none");
  b["thinking"] = {{"type", "enabled"}, {"budget_tokens", 2048}};
  b.erase("output_config");
  EXPECT_EQ(parse_anthropic_request(b, kLimits).reasoning_effort, "max");
  b["output_config"] = {{"effort", "xhigh"}};
  EXPECT_EQ(parse_anthropic_request(b, kLimits).reasoning_effort, "max");
  b["thinking"] = {{"type", "sometimes"}};
  EXPECT_EQ(anthropic_bad_param(b), "thinking.type");
  // Clearing thinking keeps the last N turns' reasoning.
  json h = {{"model", "m"}, {"max_tokens", 10},
            {"messages", json::parse(R"([
              {"role": "user", "content": "a"},
              {"role": "assistant", "content": [{"type": "thinking", "thinking": "t1", "signature": ""}, {"type": "text", "text": "x"}]},
              {"role": "user", "content": "b"},
              {"role": "assistant", "content": [{"type": "thinking", "thinking": "t2", "signature": ""}, {"type": "text", "text": "y"}]},
              {"role": "user", "content": "c"}])")},
            {"context_management", {{"edits", {{{"type", "clear_thinking_20251015"}, {"keep", {{"type", "thinking_turns"}, {"value", 1}}}}}}}}};
  chat::GenerationRequest r = parse_anthropic_request(h, kLimits);
  EXPECT_FALSE(r.messages[1].contains("reasoning_content"));
  EXPECT_EQ(r.messages[3]["reasoning_content"], "t2");
  // Clearing tool uses acts only past its trigger: noted, and refused by the route beyond it.
  h["context_management"] = {{"edits", {{{"type", "clear_tool_uses_20250919"}, {"trigger", {{"type", "input_tokens"}, {"value", 5000}}}}}}};
  RequestNotes notes;
  parse_anthropic_request(h, kLimits, false, &notes);
  EXPECT_EQ(notes.edit_trigger, 5000);
  h["context_management"] = {{"edits", {{{"type", "rewrite_history"}}}}};
  EXPECT_EQ(anthropic_bad_param(h), "context_management.edits[0].type");
  // Fields outside the reference stay refused, and so do threads (state this server does not keep).
  json u = claude_code_request();
  u["frobnicate"] = 1;
  EXPECT_EQ(anthropic_bad_param(u), "frobnicate");
  u = claude_code_request();
  u["thread"] = {{"type", "continue"}};
  EXPECT_EQ(anthropic_bad_param(u), "thread");
  u = claude_code_request();
  u["messages"][0]["content"] = {{{"type", "image"}, {"source", {{"type", "base64"}}}}};
  EXPECT_EQ(anthropic_bad_param(u), "messages[0].content[0].type");
}

TEST(AgentApis, AnthropicBuiltInClientToolsAndToolChanges) {
  json b = {{"model", "m"}, {"max_tokens", 10}, {"messages", {{{"role", "user"}, {"content", "x"}}}},
            {"tools", json::parse(R"([{"type": "bash_20250124", "name": "bash"},
                                      {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 1000},
                                      {"type": "code_execution_20250825", "name": "code_execution"},
                                      {"type": "mcp_toolset", "mcp_server_name": "s"}])")}};
  RequestNotes notes;
  chat::GenerationRequest r = parse_anthropic_request(b, kLimits, false, &notes);
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[0]["function"]["name"], "bash");
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["properties"]["command"]["type"], "string");
  EXPECT_EQ(r.tools[1]["function"]["name"], "str_replace_based_edit_tool");
  EXPECT_EQ(notes.dropped_tools.size(), 2u);
  b["tools"][0]["name"] = "shell";
  EXPECT_EQ(anthropic_bad_param(b), "tools[0].name");
  // A system message may add and remove tools mid-conversation.
  json c = {{"model", "m"}, {"max_tokens", 10},
            {"tools", {{{"name", "a"}, {"input_schema", {{"type", "object"}}}}}},
            {"messages", json::parse(R"([{"role": "user", "content": "x"},
              {"role": "system", "content": [
                {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": {"name": "b", "input_schema": {"type": "object"}}}},
                {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "a"}}]}])")}};
  r = parse_anthropic_request(c, kLimits);
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0]["function"]["name"], "b");
}

// With display "omitted" the reasoning is not shown; it travels in the signature and
// comes back into the conversation when the block is sent again.
TEST(AgentApis, OmittedThinkingRoundTripsThroughItsSignature) {
  json b = claude_code_request();
  b["stream"] = false;
  const chat::GenerationRequest r = parse_anthropic_request(b, kLimits);
  auto w = make_anthropic_writer(r, "msg_x", "m", 5);
  chat::ReplyDelta d;
  d.reasoning = "private steps";
  w->delta(d, {});
  d = {};
  d.content = "Done.";
  w->delta(d, {});
  chat::Outcome o;
  o.finish_reason = "stop";
  const json m = json::parse(w->end(o));
  ASSERT_EQ(m["content"].size(), 2u);
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][0]["thinking"], "");
  EXPECT_NE(m["content"][0]["signature"], "");
  json next = {{"model", "m"}, {"max_tokens", 10},
               {"messages", {{{"role", "user"}, {"content", "x"}}, {{"role", "assistant"}, {"content", m["content"]}},
                             {{"role", "user"}, {"content", "y"}}}}};
  const chat::GenerationRequest again = parse_anthropic_request(next, kLimits);
  EXPECT_EQ(again.messages[1]["reasoning_content"], "private steps");
}

// The shape of Codex's request: client_metadata, cache keys, encrypted reasoning
// asked for, namespace groups, a freeform apply_patch tool, hosted web search.
TEST(AgentApis, CodexsRequestIsAccepted) {
  json b = json::parse(R"({
    "model": "m", "stream": true, "store": false, "tool_choice": "auto", "parallel_tool_calls": true,
    "reasoning": {"summary": "auto", "effort": "medium"}, "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "k", "client_metadata": {"x-codex-window-id": "w"}, "text": {"verbosity": "low"},
    "tools": [
      {"type": "function", "name": "exec_command", "strict": false, "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
      {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [
        {"type": "function", "name": "close_agent", "strict": false, "parameters": {"type": "object", "properties": {"target": {"type": "string"}}}}]},
      {"type": "custom", "name": "apply_patch", "description": "Edit files.", "format": {"type": "grammar", "syntax": "lark", "definition": "start: patch"}},
      {"type": "web_search", "external_web_access": false}
    ],
    "input": [
      {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "patch it"}]},
      {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"},
      {"type": "custom_tool_call_output", "call_id": "c1", "output": "ok"},
      {"type": "function_call", "call_id": "c2", "namespace": "multi_agent_v1", "name": "close_agent", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c2", "output": "closed"},
      {"type": "web_search_call", "id": "ws1", "status": "completed", "action": {"type": "search", "query": "q"}}
    ]})");
  RequestNotes notes;
  const ResponsesRequest rr = parse_responses_request(b, kLimits, nullptr, &notes);
  std::vector<std::string> names;
  for (const auto& t : rr.req.tools) names.push_back(t["function"]["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"exec_command", "multi_agent_v1.close_agent", "apply_patch"}));
  EXPECT_TRUE(rr.req.freeform_tools.count("apply_patch"));
  EXPECT_NE(rr.req.tools[2]["function"]["description"].get<std::string>().find("start: patch"), std::string::npos);
  EXPECT_EQ(rr.req.tools[2]["function"]["parameters"]["properties"]["input"]["type"], "string");
  EXPECT_EQ(rr.namespaces, std::set<std::string>{"multi_agent_v1"});
  EXPECT_EQ(notes.dropped_tools, std::vector<std::string>{"web_search"});
  EXPECT_EQ(rr.dropped_tools, "web_search");
  for (const char* f : {"client_metadata", "prompt_cache_key", "text.verbosity", "input.hosted_tool_items"})
    EXPECT_TRUE(has(notes.ignored, f)) << f;
  // The earlier calls replay as the model's own: the freeform input as {"input": ...}, the namespaced name whole.
  const json& m = rr.req.messages;
  ASSERT_GE(m.size(), 6u);
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"], freeform_arguments("*** Begin Patch"));
  EXPECT_EQ(m[4]["tool_calls"][0]["function"]["name"], "multi_agent_v1.close_agent");
}

chat::ToolCallPart part(size_t index, std::string args, bool begins = false, bool ends = false, bool cut = false,
                        std::string name = "") {
  chat::ToolCallPart p;
  p.index = index;
  p.arguments = std::move(args);
  p.begins = begins;
  p.ends = ends;
  p.cut = cut;
  if (begins) p.id = "call_" + std::to_string(index), p.name = std::move(name);
  return p;
}

std::vector<json> sse_events(const std::string& sse) {
  std::vector<json> out;
  for (size_t at = 0; (at = sse.find("data: ", at)) != std::string::npos;) {
    const size_t e = sse.find("\n\n", at);
    const std::string data = sse.substr(at + 6, e - at - 6);
    if (data != "[DONE]") out.push_back(json::parse(data));
    at = e;
  }
  return out;
}

// Freeform calls come back as their text, streamed as it is generated; a function of
// a namespace group comes back with its namespace.
TEST(AgentApis, ResponsesFreeformAndNamespacedCalls) {
  json b = {{"model", "m"}, {"input", "x"}, {"stream", true},
            {"tools", json::parse(R"([{"type": "custom", "name": "apply_patch"},
              {"type": "namespace", "name": "ns", "description": "", "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]}])")}};
  const ResponsesRequest rr = parse_responses_request(b, kLimits, nullptr);
  auto w = make_responses_writer(rr, {"resp_x", "m", 0, 1}, nullptr);
  std::string sse = w->begin();
  chat::ReplyDelta d;
  d.call_parts = {part(0, "{\"input\": \"line 1\\nli", true, false, false, "apply_patch")};
  sse += w->delta(d, {});
  d.call_parts = {part(0, "ne 2\"}", false, true)};
  d.tool_calls = {{"call_0", "apply_patch", "{\"input\": \"line 1\\nline 2\"}"}};
  sse += w->delta(d, {});
  d.call_parts = {part(1, "{}", true, true, false, "ns.f")};
  d.tool_calls = {{"call_1", "ns.f", "{}"}};
  sse += w->delta(d, {});
  chat::Outcome o;
  o.finish_reason = "tool_calls";
  sse += w->end(o);
  std::string input;
  json done;
  for (const auto& e : sse_events(sse)) {
    if (e["type"] == "response.custom_tool_call_input.delta") input += e["delta"].get<std::string>();
    if (e["type"] == "response.custom_tool_call_input.done") done = e;
  }
  EXPECT_EQ(input, "line 1\nline 2");
  EXPECT_EQ(done["input"], "line 1\nline 2");
  const json r = sse_events(sse).back()["response"];
  ASSERT_EQ(r["output"].size(), 2u);
  EXPECT_EQ(r["output"][0]["type"], "custom_tool_call");
  EXPECT_EQ(r["output"][0]["input"], "line 1\nline 2");
  EXPECT_EQ(r["output"][1]["type"], "function_call");
  EXPECT_EQ(r["output"][1]["namespace"], "ns");
  EXPECT_EQ(r["output"][1]["name"], "f");
}

TEST(AgentApis, ChatCompletionsCustomToolsAllowedToolsAndIgnoredFields) {
  json b = json::parse(R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "patch", "input": "diff"}}]},
      {"role": "tool", "tool_call_id": "c", "content": "ok"}],
    "tools": [{"type": "custom", "custom": {"name": "patch", "description": "Edits", "format": {"type": "text"}}},
              {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
              {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}}],
    "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [{"type": "custom", "custom": {"name": "patch"}}, {"type": "function", "function": {"name": "f"}}]}},
    "prompt_cache_key": "k", "safety_identifier": "u", "service_tier": "flex", "store": true, "verbosity": "low",
    "web_search_options": {}})");
  RequestNotes notes;
  const chat::GenerationRequest r = parse_chat_request(b, kLimits, &notes);
  ASSERT_EQ(r.tools.size(), 2u);  // g is not allowed: not declared
  EXPECT_EQ(r.tool_choice, chat::GenerationRequest::ToolChoice::Required);
  EXPECT_TRUE(r.freeform_tools.count("patch"));
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"], freeform_arguments("diff"));
  for (const char* f : {"prompt_cache_key", "safety_identifier", "service_tier", "store", "verbosity"}) EXPECT_TRUE(has(notes.ignored, f)) << f;
  EXPECT_EQ(notes.dropped_tools, std::vector<std::string>{"web_search"});
  // A freeform call comes back as {type: custom, custom: {name, input}}, also streamed.
  for (bool stream : {false, true}) {
    chat::GenerationRequest q = r;
    q.stream = stream;
    auto w = make_openai_writer(q, {"chatcmpl-x", 0, "m"}, kCodec, "");
    std::string out = w->begin();
    chat::ReplyDelta d;
    d.call_parts = {part(0, "{\"input\":\"a\\\"b", true, false, false, "patch")};
    out += w->delta(d, {});
    d.call_parts = {part(0, "\"}", false, true)};
    d.tool_calls = {{"call_0", "patch", "{\"input\":\"a\\\"b\"}"}};
    out += w->delta(d, {});
    chat::Outcome o;
    o.finish_reason = "tool_calls";
    out += w->end(o);
    if (!stream) {
      const json c = json::parse(out)["choices"][0]["message"]["tool_calls"][0];
      EXPECT_EQ(c["type"], "custom");
      EXPECT_EQ(c["custom"]["input"], "a\"b");
      continue;
    }
    std::string input;
    for (const auto& e : sse_events(out))
      for (const auto& c : e["choices"][0]["delta"].value("tool_calls", json::array())) input += c["custom"]["input"].get<std::string>();
    EXPECT_EQ(input, "a\"b");
  }
}

// The one way a call cut off by max_tokens ends, on every API (the parser drops it:
// its parts end with `cut`, it is not among the complete calls, the reason is "length"):
// nothing closes it in a stream, and a whole reply leaves it out.
TEST(AgentApis, ACutOffCallEndsTheSameWayOnEveryApi) {
  auto deltas = [] {
    std::vector<chat::ReplyDelta> ds(3);
    ds[0].content = "Let me check.";
    ds[1].call_parts = {part(0, "{\"city\": \"Os", true, false, false, "get_weather")};
    ds[2].call_parts = {part(0, "", false, false, true)};
    return ds;
  };
  chat::Outcome o;
  o.finish_reason = "length";
  const json tools = {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}};
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "whole");
    // Chat completions.
    chat::GenerationRequest c;
    c.stream = stream;
    c.tools = tools;
    auto cw = make_openai_writer(c, {"chatcmpl-x", 0, "m"}, kCodec, "");
    std::string out = cw->begin();
    for (auto& d : deltas()) out += cw->delta(d, {});
    out += cw->end(o);
    if (stream) {
      EXPECT_EQ(sse_events(out).back()["choices"][0]["finish_reason"], "length");
    } else {
      const json m = json::parse(out)["choices"][0];
      EXPECT_EQ(m["finish_reason"], "length");
      EXPECT_FALSE(m["message"].contains("tool_calls"));
      EXPECT_EQ(m["message"]["content"], "Let me check.");
    }
    // Anthropic Messages: stop_reason max_tokens; the tool_use block never gets content_block_stop.
    chat::GenerationRequest a = c;
    auto aw = make_anthropic_writer(a, "msg_x", "m", 1);
    out = aw->begin();
    for (auto& d : deltas()) out += aw->delta(d, {});
    out += aw->end(o);
    if (stream) {
      int started = -1;
      bool stopped = false;
      for (const auto& e : sse_events(out)) {
        if (e["type"] == "content_block_start" && e["content_block"]["type"] == "tool_use") started = e["index"];
        if (e["type"] == "content_block_stop" && e["index"] == started) stopped = true;
        if (e["type"] == "message_delta") {
          EXPECT_EQ(e["delta"]["stop_reason"], "max_tokens");
        }
      }
      EXPECT_GE(started, 0);
      EXPECT_FALSE(stopped);
    } else {
      const json m = json::parse(out);
      EXPECT_EQ(m["stop_reason"], "max_tokens");
      ASSERT_EQ(m["content"].size(), 1u);
      EXPECT_EQ(m["content"][0]["type"], "text");
    }
    // Responses: status incomplete (max_output_tokens); the call's item is never done and is
    // not in the output.
    json rb = {{"model", "m"}, {"input", "x"}, {"stream", stream},
               {"tools", {{{"type", "function"}, {"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}};
    const ResponsesRequest rr = parse_responses_request(rb, kLimits, nullptr);
    auto rw = make_responses_writer(rr, {"resp_x", "m", 0, 1}, nullptr);
    out = rw->begin();
    for (auto& d : deltas()) out += rw->delta(d, {});
    out += rw->end(o);
    const json r = stream ? sse_events(out).back()["response"] : json::parse(out);
    EXPECT_EQ(r["status"], "incomplete");
    EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
    ASSERT_EQ(r["output"].size(), 1u);
    EXPECT_EQ(r["output"][0]["type"], "message");
    if (stream) {
      for (const auto& e : sse_events(out)) {
        EXPECT_NE(e["type"], "response.function_call_arguments.done");
        if (e["type"] == "response.output_item.done") {
          EXPECT_EQ(e["item"]["type"], "message");
        }
      }
    }
  }
}

}  // namespace
}  // namespace sluice::server::server_agent_api_test
