// Request validation: accepted shapes, and a 400 naming the field for the rest.
#include <gtest/gtest.h>

#include "server/error_body.h"
#include "server/queue.h"
#include "server/api_request.h"

namespace sluice::server::server_request_test {
namespace {

using nlohmann::json;

const RequestLimits kLimits{1000, 77, {}};

json chat(json extra = json::object()) {
  json b = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

std::string bad_param(const json& body, bool completion = false) {
  try {
    completion ? parse_completion_request(body, kLimits) : parse_chat_request(body, kLimits);
  } catch (const chat::ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
    return e.param();
  }
  ADD_FAILURE() << "accepted: " << body.dump();
  return "";
}

TEST(ServerRequest, ParsesAFullChatRequest) {
  chat::GenerationRequest r = parse_chat_request(
      chat({{"max_completion_tokens", 9},
            {"temperature", 0.5},
            {"top_p", 0.9},
            {"top_k", 20},
            {"min_p", 0.05},
            {"seed", -1},
            {"stop", "END"},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}},
            {"logprobs", true},
            {"top_logprobs", 2},
            {"logit_bias", {{"5", -100}}},
            {"user", "u"},
            {"n", 1},
            {"tool_choice", "auto"},
            {"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}}}}}),
      kLimits);
  EXPECT_EQ(*r.max_tokens, 9);
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_k, 20);
  EXPECT_EQ(r.sampling.seed, ~uint64_t(0));
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 2);
  EXPECT_EQ(r.logit_bias.at(5), -100.f);
  EXPECT_EQ(r.tools.size(), 1u);
}

TEST(ServerRequest, FlattensContentPartsAndMapsDeveloper) {
  chat::GenerationRequest r = parse_chat_request(
      chat({{"messages",
             {{{"role", "developer"}, {"content", "be brief"}},
              {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
              {{"role", "assistant"},
               {"content", nullptr},
               {"tool_calls",
                {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}},
              {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "42"}}}}}),
      kLimits);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_TRUE(r.messages[2]["content"].is_null());
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(r.messages[3]["tool_call_id"], "c1");
  EXPECT_EQ(r.sampling.seed, 77u);  // the default seed
}

TEST(ServerRequest, ForcedToolCallsAndSchemas) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "strict": true,
      "parameters": {"type": "object", "properties": {}, "additionalProperties": false}}}])");
  chat::GenerationRequest r = parse_chat_request(chat({{"tools", tools}, {"tool_choice", "required"}}), kLimits);
  EXPECT_EQ(r.tool_choice, chat::GenerationRequest::ToolChoice::Required);
  r = parse_chat_request(chat({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}}), kLimits);
  EXPECT_EQ(r.tool_choice, chat::GenerationRequest::ToolChoice::Named);
  EXPECT_EQ(r.tool_choice_name, "f");
  EXPECT_EQ(bad_param(chat({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}})),
            "tool_choice.function.name");
  r = parse_chat_request(chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"strict", true},
      {"schema", {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}}}}}}}}), kLimits);
  ASSERT_TRUE(r.grammar);
  chat::GrammarCursor c(r.grammar);
  EXPECT_TRUE(c.feed("{\"a\": 12}") && c.complete());
  EXPECT_EQ(bad_param(chat({{"tools", tools}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}})),
            "response_format");
}

TEST(ServerRequest, RefusesWhatItCannotHonour) {
  EXPECT_EQ(bad_param(chat({{"n", 3}})), "n");
  EXPECT_EQ(bad_param(chat({{"presence_penalty", 1}})), "presence_penalty");
  EXPECT_EQ(bad_param(chat({{"tool_choice", "required"}})), "tool_choice");  // no tools to call
  EXPECT_EQ(bad_param(chat({{"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}})), "tool_choice");
  EXPECT_EQ(bad_param(chat({{"response_format", {{"type", "json_schema"}}}})), "response_format.json_schema");
  EXPECT_EQ(bad_param(chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"format", "date"}}}}}}}})),
            "response_format.json_schema.schema.format");
  EXPECT_EQ(bad_param(chat({{"reasoning_effort", "extreme"}})), "reasoning_effort");
  EXPECT_EQ(bad_param(chat({{"functions", json::array()}})), "functions");
  EXPECT_EQ(bad_param(chat({{"modalities", {"text", "audio"}}})), "modalities");
  EXPECT_EQ(bad_param(chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}})),
            "messages[0].content[0].type");
  EXPECT_EQ(bad_param({{"model", "m"}, {"prompt", "x"}, {"suffix", "y"}}, true), "suffix");
  EXPECT_EQ(bad_param({{"model", "m"}, {"prompt", "x"}, {"best_of", 2}}, true), "best_of");
}

TEST(ServerRequest, TypesAndRanges) {
  EXPECT_EQ(bad_param(json{{"messages", json::array()}}), "model");
  EXPECT_EQ(bad_param(chat({{"messages", json::array()}})), "messages");
  EXPECT_EQ(bad_param(chat({{"messages", {{{"role", "user"}}}}})), "messages[0].content");
  EXPECT_EQ(bad_param(chat({{"messages", {{{"role", "user"}, {"content", "x"}, {"extra", 1}}}}})), "messages[0].extra");
  EXPECT_EQ(bad_param(chat({{"max_tokens", -1}})), "max_tokens");
  EXPECT_EQ(bad_param(chat({{"max_tokens", 0}})), "max_tokens");
  EXPECT_EQ(bad_param(chat({{"max_tokens", 1.5}})), "max_tokens");
  EXPECT_EQ(bad_param(chat({{"max_tokens", 18446744073709551615ull}})), "max_tokens");
  EXPECT_EQ(bad_param(chat({{"max_tokens", 3}, {"max_completion_tokens", 4}})), "max_completion_tokens");
  EXPECT_EQ(bad_param(chat({{"temperature", 2.5}})), "temperature");
  EXPECT_EQ(bad_param(chat({{"temperature", "1"}})), "temperature");
  EXPECT_EQ(bad_param(chat({{"top_p", -0.1}})), "top_p");
  EXPECT_EQ(bad_param(chat({{"min_p", 1.1}})), "min_p");
  EXPECT_EQ(bad_param(chat({{"seed", 1.5}})), "seed");
  EXPECT_EQ(bad_param(chat({{"stop", {"a", "b", "c", "d", "e"}}})), "stop");
  EXPECT_EQ(bad_param(chat({{"stop", {1}}})), "stop[0]");
  EXPECT_EQ(bad_param(chat({{"stop", ""}})), "stop");
  EXPECT_EQ(bad_param(chat({{"stream_options", {{"include_usage", true}}}})), "stream_options");
  EXPECT_EQ(bad_param(chat({{"top_logprobs", 2}})), "top_logprobs");
  EXPECT_EQ(bad_param(chat({{"logprobs", true}, {"top_logprobs", 21}})), "top_logprobs");
  EXPECT_EQ(bad_param(chat({{"logit_bias", {{"1000", 1}}}})), "logit_bias.1000");
  EXPECT_EQ(bad_param(chat({{"logit_bias", {{"-1", 1}}}})), "logit_bias.-1");
  EXPECT_EQ(bad_param(chat({{"tools", {{{"type", "function"}, {"function", {{"name", "a b"}}}}}}})),
            "tools[0].function.name");
  EXPECT_EQ(bad_param({{"model", "m"}, {"prompt", {1, 2000}}}, true), "prompt");
  EXPECT_EQ(bad_param({{"model", "m"}, {"prompt", {"a", "b"}}}, true), "prompt");
  EXPECT_EQ(bad_param({{"model", "m"}, {"prompt", "x"}, {"logprobs", 6}}, true), "logprobs");
}

TEST(ServerRequest, CompletionPrompts) {
  chat::GenerationRequest r = parse_completion_request({{"model", "m"}, {"prompt", {"abc"}}}, kLimits);
  EXPECT_EQ(r.prompt_text, "abc");
  EXPECT_EQ(*r.max_tokens, 16);
  r = parse_completion_request({{"model", "m"}, {"prompt", {{1, 2, 3}}}, {"logprobs", 0}}, kLimits);
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(r.logprobs);
}

TEST(ServerRequest, BodyParsing) {
  auto status = [](const std::string& s) {
    try {
      parse_json_body(s);
    } catch (const chat::ApiError& e) {
      return e.status();
    }
    return 200;
  };
  EXPECT_EQ(status("{\"a\":1}"), 200);
  EXPECT_EQ(status("{"), 400);
  EXPECT_EQ(status("[]"), 400);
  EXPECT_EQ(status(std::string(1000, '[') + std::string(1000, ']')), 400);
  EXPECT_EQ(status("{\"a\":\"\xff\"}"), 400);
  EXPECT_EQ(status("{\"a\":1e999}"), 400);
}

TEST(ServerQueue, FifoWithALimit) {
  GenerationQueue q(2);
  auto a = q.join(), b = q.join(), c = q.join();
  ASSERT_TRUE(a && b && c);
  EXPECT_FALSE(q.join());  // one running + two waiting
  EXPECT_EQ(q.waiting(), 2);
  a->wait();  // front: returns at once
  b.reset();  // a waiting request leaves
  EXPECT_EQ(q.waiting(), 1);
  auto d = q.join();
  EXPECT_TRUE(d);
  a.reset();
  c->wait();  // c is next, before d
  EXPECT_EQ(q.running(), 1);
}

// --parallel N: the first N in line run together, the rest wait in order.
TEST(ServerQueue, SeveralRunningTurns) {
  GenerationQueue q(1, 3);
  EXPECT_EQ(q.slots(), 3);
  auto a = q.join(), b = q.join(), c = q.join(), d = q.join();
  ASSERT_TRUE(a && b && c && d);
  EXPECT_FALSE(q.join());  // three running + one waiting
  EXPECT_EQ(q.running(), 3);
  EXPECT_EQ(q.waiting(), 1);
  EXPECT_TRUE(a->wait());
  EXPECT_TRUE(c->wait());
  EXPECT_FALSE(d->wait([] { return true; }));  // not among the first three: gives up
  b.reset();
  EXPECT_TRUE(d->wait());  // a running turn ended: d runs
  EXPECT_EQ(q.running(), 3);
  EXPECT_EQ(q.waiting(), 0);
}

}  // namespace
}  // namespace sluice::server::server_request_test
