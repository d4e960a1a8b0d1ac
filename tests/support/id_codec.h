// A chat codec whose text is the token ids: each id is its decimal text and a space (any
// vocabulary, every token visible), for tests that drive the generator with synthetic models.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "chat/chat_codec.h"

namespace sluice::test {

class IdCodec : public chat::ChatCodec {
 public:
  std::string describe() const override { return "ids"; }
  std::vector<int32_t> render_chat(const nlohmann::json&, const nlohmann::json&,
                                   const chat::ChatOptions&) const override {
    return {};
  }
  std::vector<int32_t> encode(const std::string&, bool) const override { return {}; }
  std::unique_ptr<chat::Detokenizer> detokenizer() const override {
    struct D : chat::Detokenizer {
      std::string push(int32_t id) override { return std::to_string(id) + " "; }
      std::string flush() override { return {}; }
    };
    return std::make_unique<D>();
  }
  std::string token_bytes(int32_t id) const override { return std::to_string(id) + " "; }
  std::vector<int32_t> stop_ids() const override { return {}; }
  chat::ReplySyntax reply_syntax(const std::vector<int32_t>&) const override { return {}; }
};

}  // namespace sluice::test
