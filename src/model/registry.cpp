// build_decoder: the builder of config.json's family (format/model_families.def).
#include "format/config.h"
#include "format/model_family.h"
#include "format/quantization.h"
#include "model/architectures.h"
#include "util/error.h"

namespace sluice {

namespace {

using DecoderBuilder = std::unique_ptr<Decoder> (*)(std::unique_ptr<Checkpoint>, const Config&, Backend&);

// Indexed by FamilyId: the same rows in the same order.
constexpr DecoderBuilder kBuilders[] = {
#define SLUICE_MODEL_FAMILY(model_type, text_config, experts, tensors, moe_layers, builder, chat_syntax, synth) &build_##builder,
#include "format/model_families.def"
};

}  // namespace

ModelInfo basic_model_info(const Config& cfg, const std::string& arch) {
  ModelInfo info;
  info.arch = arch;
  info.vocab = cfg.req_int("vocab_size");
  info.hidden = cfg.req_int("hidden_size");
  info.n_layers = cfg.req_int("num_hidden_layers");
  if (info.vocab <= 0 || info.hidden <= 0 || info.n_layers <= 0)
    fail("{}: vocab_size, hidden_size and num_hidden_layers must be positive", cfg.source());
  // The context: cfg is the text model's config (Kimi K3's nested text_config
  // included); Kimi Linear names it model_max_length.
  for (const char* key : {"max_position_embeddings", "model_max_length"}) {
    if (!cfg.has(key)) continue;
    info.max_positions = cfg.req_int(key);
    if (info.max_positions <= 0) fail("{}: {} must be positive, got {}", cfg.source(), key, info.max_positions);
    break;
  }
  info.eos_ids = cfg.get_token_ids("eos_token_id");
  return info;
}

std::unique_ptr<Decoder> build_decoder(const Config& cfg, std::unique_ptr<Checkpoint> ckpt, Backend& be) {
  cfg.req_string("model_type");
  check_quantization_config(cfg);  // before any weight is read
  return kBuilders[size_t(model_family_of(cfg).id)](std::move(ckpt), cfg, be);
}

}  // namespace sluice
