// ReplyWriters for the OpenAI chat completions and completions routes: one
// JSON body, or server-sent chunks ending in "data: [DONE]".
#pragma once
#include <memory>
#include <string>

#include "chat/chat_codec.h"
#include "server/reply_writer.h"
#include "server/api_request.h"
#include "server/response.h"

namespace sluice::server {

// echo_text: the prompt's text when a completion request asked for echo.
std::unique_ptr<ReplyWriter> make_openai_writer(const chat::GenerationRequest& req, const ResponseMeta& meta, const chat::ChatCodec& codec,
                                                std::string echo_text);

}  // namespace sluice::server
