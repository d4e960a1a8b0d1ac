#include "cli/text_generation.h"

#include <algorithm>

#include "util/error.h"
#include "util/progress.h"

namespace sluice::cli {

std::vector<int32_t> encode_prompt(const text::Tokenizer& tok, const Model& model, const std::string& text) {
  std::vector<int32_t> ids = tok.encode(text);
  if (ids.empty()) fail("the prompt encodes to no tokens");
  for (int32_t id : ids)
    if (id >= model.info().vocab)
      fail("prompt token {} is outside the model's vocabulary ({}): tokenizer and model do not match", id,
           model.info().vocab);
  return ids;
}

std::vector<int32_t> stream_text(Session& s, const text::Tokenizer& tok, const std::vector<int32_t>& prompt,
                                 const TextGenOptions& o, std::FILE* out) {
  const auto& eos = s.model().info().eos_ids;
  text::IncrementalDecoder dec(tok);
  std::vector<int32_t> kept;
  auto on_token = [&](int32_t id) {
    // the stop token ends the text; it is not part of it
    if (!o.ignore_eos && std::find(eos.begin(), eos.end(), id) != eos.end()) return;
    if (!tok.valid_id(id)) fail("generated token {} is not in the tokenizer's vocabulary", id);
    kept.push_back(id);
    std::string piece = dec.push(id);
    std::fwrite(piece.data(), 1, piece.size(), out);
    std::fflush(out);
  };
  const ExpertStats before = s.model().expert_stats();
  if (o.speculate) {
    NgramDrafter drafter;
    SpeculationOptions so;
    so.max_draft = o.draft_max;
    SpeculationStats st;
    generate_speculative(s, prompt, o.max_new, o.ignore_eos, drafter, so, &st, on_token);
    if (o.stats)
      std::fprintf(stderr, "[speculation: %lld tokens in %lld passes, %lld of %lld drafts accepted (%.0f%%)]\n",
                   (long long)st.generated, (long long)st.passes, (long long)st.accepted, (long long)st.proposed,
                   100 * st.acceptance());
  } else {
    generate_greedy(s, prompt, o.max_new, o.ignore_eos, on_token);
  }
  if (o.stats) {
    const ExpertStats after = s.model().expert_stats();
    std::fprintf(stderr, "[experts: %s needed, %s read from storage]\n",
                 human_bytes(double(after.bytes_needed - before.bytes_needed)).c_str(),
                 human_bytes(double(after.bytes_read - before.bytes_read)).c_str());
  }
  std::string rest = dec.flush();
  std::fwrite(rest.data(), 1, rest.size(), out);
  return kept;
}

}  // namespace sluice::cli
