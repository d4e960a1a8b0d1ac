// /v1/responses: request bodies -> the chat request they mean (400 naming the
// Responses field otherwise), the store behind previous_response_id, and the
// Response object and stream events the writer produces.
#include <gtest/gtest.h>

#include "chat/api_error.h"
#include "server/response_store.h"
#include "server/responses_api.h"

namespace sluice::server::server_responses_test {
namespace {

using nlohmann::json;

const RequestLimits kLimits{1000, 77, {}};

json body(json extra = json::object()) {
  json b = {{"model", "m"}, {"input", "hi"}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

std::string bad_param(const json& b, const ResponseStore* store = nullptr) {
  try {
    parse_responses_request(b, kLimits, store);
  } catch (const chat::ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
    for (const char* chat_name : {"messages", "max_completion_tokens", "response_format", "reasoning_effort", ".function."})
      EXPECT_EQ(std::string(e.what()).find(chat_name), std::string::npos) << e.what();
    return e.param();
  }
  ADD_FAILURE() << "accepted: " << b.dump();
  return "";
}

const json kTool = {{"type", "function"},
                    {"name", "get_weather"},
                    {"description", "weather"},
                    {"strict", true},
                    {"parameters",
                     {{"type", "object"},
                      {"properties", {{"city", {{"type", "string"}}}}},
                      {"required", {"city"}},
                      {"additionalProperties", false}}}};

TEST(ServerResponses, StringInputAndInstructions) {
  ResponsesRequest rr = parse_responses_request(
      body({{"instructions", "be brief"}, {"max_output_tokens", 9}, {"temperature", 0}, {"store", false}}), kLimits,
      nullptr);
  EXPECT_EQ(rr.req.kind, chat::GenerationRequest::Kind::Chat);
  EXPECT_EQ(rr.req.messages, json::parse(R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])"));
  EXPECT_EQ(rr.conversation, json::parse(R"([{"role":"user","content":"hi"}])"));  // instructions are not kept
  EXPECT_EQ(*rr.req.max_tokens, 9);
  EXPECT_EQ(rr.req.sampling.temperature, 0);
  EXPECT_FALSE(rr.store);
  EXPECT_EQ(rr.echo["instructions"], "be brief");
  EXPECT_EQ(rr.echo["max_output_tokens"], 9);
}

TEST(ServerResponses, ItemsBecomeChatTurns) {
  const json input = json::parse(R"([
    {"role": "developer", "content": "rules"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
    {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
     "content": [{"type": "output_text", "text": "let me look", "annotations": [], "logprobs": []}]},
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}", "status": "completed"},
    {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{\"city\":\"Rome\"}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "rain"},
    {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "sun"}]}
  ])");
  ResponsesRequest rr = parse_responses_request(body({{"input", input}, {"tools", {kTool}}}), kLimits, nullptr);
  const json want = json::parse(R"([
    {"role": "system", "content": "rules"},
    {"role": "user", "content": "ab"},
    {"role": "assistant", "content": "let me look", "reasoning_content": "think", "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}},
      {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
    {"role": "tool", "tool_call_id": "call_2", "content": "sun"}
  ])");
  EXPECT_EQ(rr.req.messages, want);
  // A reply's text after its calls (the order this server writes them when a call is cut short)
  // joins the same assistant turn, as the stored conversation holds it.
  const json later = json::parse(R"([{"role": "user", "content": "q"},
    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "t"}]}])");
  EXPECT_EQ(parse_responses_request(body({{"input", later}}), kLimits, nullptr).req.messages[1],
            json::parse(R"({"role": "assistant", "content": "t", "tool_calls": [
              {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]})"));
  ASSERT_TRUE(rr.req.tools.is_array());
  EXPECT_EQ(rr.req.tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(rr.echo["tools"][0], kTool);  // echoed as sent
}

TEST(ServerResponses, ToolChoiceFormatAndReasoning) {
  ResponsesRequest rr = parse_responses_request(
      body({{"tools", {kTool}}, {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}}, {"parallel_tool_calls", false}}),
      kLimits, nullptr);
  EXPECT_EQ(rr.req.tool_choice, chat::GenerationRequest::ToolChoice::Named);
  EXPECT_EQ(rr.req.tool_choice_name, "get_weather");
  EXPECT_FALSE(rr.req.parallel_tool_calls);
  rr = parse_responses_request(body({{"tools", {kTool}}, {"tool_choice", "none"}}), kLimits, nullptr);
  EXPECT_TRUE(rr.req.tools.is_null());  // none: no tools offered
  rr = parse_responses_request(
      body({{"text", {{"format", {{"type", "json_schema"}, {"name", "x"}, {"strict", true},
                                  {"schema", {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}},
                                              {"required", {"a"}}, {"additionalProperties", false}}}}}}}}),
      kLimits, nullptr);
  ASSERT_TRUE(rr.req.grammar);
  chat::GrammarCursor c(rr.req.grammar);
  EXPECT_TRUE(c.feed("{\"a\": 3}") && c.complete());
  rr = parse_responses_request(body({{"text", {{"format", {{"type", "json_object"}}}}}}), kLimits, nullptr);
  EXPECT_TRUE(rr.req.json_object && rr.req.grammar);
  for (const auto& [sent, effort] : std::vector<std::pair<std::string, std::string>>{
           {"none", "none"}, {"minimal", "low"}, {"medium", "medium"}, {"high", "high"}, {"xhigh", "max"}}) {
    rr = parse_responses_request(body({{"reasoning", {{"effort", sent}, {"summary", "auto"}}}}), kLimits, nullptr);
    EXPECT_EQ(rr.req.reasoning_effort, effort) << sent;
    EXPECT_EQ(rr.echo["reasoning"]["effort"], sent);
  }
  // What the Agents SDK sends besides: include, store, stream_options on a stream, truncation disabled.
  rr = parse_responses_request(body({{"include", json::array()}, {"store", true}, {"stream", true},
                                     {"stream_options", {{"include_obfuscation", false}}}, {"truncation", "disabled"},
                                     {"prompt_cache_retention", "in-memory"}, {"metadata", {{"k", "v"}}}}),
                               kLimits, nullptr);
  EXPECT_TRUE(rr.req.stream && rr.store);
  EXPECT_EQ(rr.echo["metadata"], json({{"k", "v"}}));
}

TEST(ServerResponses, BadInputNamesTheResponsesField) {
  EXPECT_EQ(bad_param(body({{"input", 3}})), "input");
  EXPECT_EQ(bad_param(body({{"input", json::array()}})), "input");
  EXPECT_EQ(bad_param({{"input", "x"}}), "model");
  EXPECT_EQ(bad_param(body({{"frobnicate", 1}})), "frobnicate");
  EXPECT_EQ(bad_param(body({{"input", {{{"type", "item_reference"}, {"id", "x"}}}}})), "input[0].type");
  EXPECT_EQ(bad_param(body({{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}, {"image_url", "u"}}}}}}}})),
            "input[0].content[0].type");
  EXPECT_EQ(bad_param(body({{"input", {{{"role", "tool"}, {"content", "x"}}}}})), "input[0].role");
  EXPECT_EQ(bad_param(body({{"input", {{{"type", "function_call"}, {"name", "f"}, {"arguments", "{}"}}}}})),
            "input[0].call_id");
  EXPECT_EQ(bad_param(body({{"input", {{{"type", "function_call_output"}, {"call_id", "c"}}}}})), "input[0].output");
  EXPECT_EQ(bad_param(body({{"input", {{{"type", "reasoning"}, {"encrypted_content", "zz"}, {"summary", json::array()}}}}})),
            "input[0].encrypted_content");
  EXPECT_EQ(bad_param(body({{"tools", {{{"type", "frobnicator"}}}}})), "tools[0].type");
  EXPECT_EQ(bad_param(body({{"tools", {{{"type", "web_search"}}}}, {"tool_choice", {{"type", "web_search_preview"}}}})),
            "tool_choice.type");
  EXPECT_EQ(bad_param(body({{"tools", {{{"type", "function"}, {"name", "bad name"}}}}})), "tools[0].name");
  EXPECT_EQ(bad_param(body({{"tools", {{{"type", "function"}, {"name", "f"}, {"parameters", 3}}}}})), "tools[0].parameters");
  EXPECT_EQ(bad_param(body({{"tools", {kTool}}, {"tool_choice", {{"type", "function"}, {"name", "nope"}}}})),
            "tool_choice.name");
  EXPECT_EQ(bad_param(body({{"tool_choice", "required"}})), "tool_choice");
  EXPECT_EQ(bad_param(body({{"max_output_tokens", 0}})), "max_output_tokens");
  EXPECT_EQ(bad_param(body({{"temperature", 3}})), "temperature");
  EXPECT_EQ(bad_param(body({{"reasoning", {{"effort", "huge"}}}})), "reasoning.effort");
  EXPECT_EQ(bad_param(body({{"text", {{"format", {{"type", "json_schema"}, {"name", "x"},
                                                   {"schema", {{"type", "string"}, {"pattern", "a+"}}}}}}}})),
            "text.format.schema.pattern");
  EXPECT_EQ(bad_param(body({{"text", {{"format", {{"type", "json_schema"}, {"schema", json::object()}}}}}})),
            "text.format.name");
  EXPECT_EQ(bad_param(body({{"text", {{"format", {{"type", "grammar"}}}}}})), "text.format.type");
  EXPECT_EQ(bad_param(body({{"stream_options", {{"include_obfuscation", true}}}})), "stream_options");
  EXPECT_EQ(bad_param(body({{"truncation", "auto"}})), "truncation");
  EXPECT_EQ(bad_param(body({{"background", true}})), "background");
  EXPECT_EQ(bad_param(body({{"include", {"message.output_text.logprobs"}}})), "include[0]");
  EXPECT_EQ(bad_param(body({{"conversation", "conv_1"}})), "conversation");
  EXPECT_EQ(bad_param(body({{"previous_response_id", "resp_gone"}})), "previous_response_id");
}

TEST(ServerResponses, PreviousResponseContinuesTheHeldConversation) {
  ResponseStore store;
  store.put("resp_1", {json{{"id", "resp_1"}},
                       json::parse(R"([{"role":"user","content":"hi"},{"role":"assistant","content":null,
                         "tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]}])")});
  const json input = json::parse(R"([{"type": "function_call_output", "call_id": "call_1", "output": "rain"}])");
  ResponsesRequest rr = parse_responses_request(
      body({{"previous_response_id", "resp_1"}, {"input", input}, {"instructions", "new rules"}}), kLimits, &store);
  ASSERT_EQ(rr.req.messages.size(), 4u);
  EXPECT_EQ(rr.req.messages[0], json({{"role", "system"}, {"content", "new rules"}}));
  EXPECT_EQ(rr.req.messages[2]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(rr.req.messages[3], json({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "rain"}}));
  EXPECT_EQ(rr.conversation.size(), 3u);
  EXPECT_EQ(rr.echo["previous_response_id"], "resp_1");
}

TEST(ServerResponses, StoreIsBoundedByCountAndBytes) {
  ResponseStore store(3, 1000);
  for (int i = 0; i < 5; ++i) store.put("r" + std::to_string(i), {json{{"i", i}}, json::array()});
  EXPECT_EQ(store.size(), 3u);
  EXPECT_FALSE(store.get("r1"));
  EXPECT_TRUE(store.get("r2") && store.get("r4"));
  store.put("big", {json{{"s", std::string(600, 'x')}}, json::array()});
  EXPECT_LE(store.bytes(), 1000u);
  EXPECT_TRUE(store.get("big"));
  EXPECT_FALSE(store.get("r2"));  // the oldest made room
  store.put("huge", {json{{"s", std::string(2000, 'x')}}, json::array()});
  EXPECT_FALSE(store.get("huge"));  // larger than the whole bound: not kept
  EXPECT_TRUE(store.erase("big"));
  EXPECT_FALSE(store.erase("big"));
}

std::vector<json> events(const std::string& sse) {
  std::vector<json> out;
  size_t at = 0;
  while ((at = sse.find("data: ", at)) != std::string::npos) {
    const size_t end = sse.find("\n\n", at);
    out.push_back(json::parse(sse.substr(at + 6, end - at - 6)));
    const size_t ev = sse.rfind("event: ", at);
    EXPECT_EQ(sse.substr(ev + 7, sse.find('\n', ev) - ev - 7), out.back()["type"]);
    at = end;
  }
  return out;
}

TEST(ServerResponses, StreamEventsAndTheStoredConversation) {
  ResponsesRequest rr = parse_responses_request(body({{"stream", true}, {"tools", {kTool}}}), kLimits, nullptr);
  std::string stored_id;
  ResponseStore::Entry stored;
  auto w = make_responses_writer(rr, {"resp_x", "m", 5, 3}, [&](const std::string& id, ResponseStore::Entry e) {
    stored_id = id;
    stored = std::move(e);
  });
  ASSERT_TRUE(w->streaming());
  std::string sse = w->begin();
  chat::ReplyDelta d;
  d.reasoning = "hmm";
  sse += w->delta(d, {});
  d = {};
  d.content = "Let";
  sse += w->delta(d, {});
  d.content = " me";
  sse += w->delta(d, {});
  // A call as the parser hands it over: its name, then its arguments as they are generated.
  d = {};
  chat::ToolCallPart part;
  part.begins = true;
  part.id = "call_9";
  part.name = "get_weather";
  part.arguments = "{\"city\":";
  d.call_parts.push_back(part);
  sse += w->delta(d, {});
  d = {};
  part = {};
  part.arguments = "\"Oslo\"}";
  part.ends = true;
  d.call_parts.push_back(part);
  d.tool_calls.push_back({"call_9", "get_weather", "{\"city\":\"Oslo\"}"});
  sse += w->delta(d, {});
  chat::Outcome o;
  o.finish_reason = "tool_calls";
  o.prompt_tokens = 3;
  o.completion_tokens = 7;
  sse += w->end(o);
  const auto ev = events(sse);
  std::vector<std::string> types;
  for (size_t i = 0; i < ev.size(); ++i) {
    types.push_back(ev[i]["type"]);
    EXPECT_EQ(ev[i]["sequence_number"], int(i));
  }
  const std::vector<std::string> want = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done", "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(ev[0]["response"]["status"], "in_progress");
  const json& r = ev.back()["response"];
  EXPECT_EQ(r["id"], "resp_x");
  EXPECT_EQ(r["status"], "completed");
  ASSERT_EQ(r["output"].size(), 3u);
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "hmm");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Let me");
  EXPECT_EQ(r["output"][2]["call_id"], "call_9");
  EXPECT_EQ(r["output"][2]["arguments"], "{\"city\":\"Oslo\"}");
  EXPECT_EQ(r["usage"]["total_tokens"], 10);
  EXPECT_EQ(ev[12]["text"], "Let me");
  EXPECT_EQ(stored_id, "resp_x");
  EXPECT_EQ(stored.response, r);
  ASSERT_EQ(stored.conversation.size(), 2u);
  EXPECT_EQ(stored.conversation[1]["content"], "Let me");
  EXPECT_EQ(stored.conversation[1]["reasoning_content"], "hmm");
  EXPECT_EQ(stored.conversation[1]["tool_calls"][0]["id"], "call_9");
}

TEST(ServerResponses, OneBodyWhenNotStreamedAndIncompleteAtTheLimit) {
  ResponsesRequest rr = parse_responses_request(body({{"store", false}}), kLimits, nullptr);
  bool stored = false;
  auto w = make_responses_writer(rr, {"resp_y", "m", 5, 2}, [&](const std::string&, ResponseStore::Entry) { stored = true; });
  EXPECT_EQ(w->begin(), "");
  chat::ReplyDelta d;
  d.content = "abc";
  EXPECT_EQ(w->delta(d, {}), "");
  chat::Outcome o;
  o.finish_reason = "length";
  const json r = json::parse(w->end(o));
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "abc");
  EXPECT_FALSE(stored);  // store: false
  // Nothing said at all: still one (empty) message, the answer clients look for.
  auto quiet = make_responses_writer(rr, {"resp_z", "m", 5, 2}, nullptr);
  const json q = json::parse(quiet->end(o));
  ASSERT_EQ(q["output"].size(), 1u);
  EXPECT_EQ(q["output"][0]["type"], "message");
  EXPECT_EQ(q["output"][0]["content"][0]["text"], "");
  const json e = json::parse(w->error("boom", "server_error", ""));
  EXPECT_EQ(e["error"]["message"], "boom");
}

}  // namespace
}  // namespace sluice::server::server_responses_test
