// build_decoder: dispatch on config.json's model_type.
#include "format/config.h"
#include "format/quantization.h"
#include "model/architectures.h"
#include "util/error.h"

namespace sluice {

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
  const std::string type = cfg.req_string("model_type");
  check_quantization_config(cfg);  // before any weight is read
  if (type == "deepseek_v3" || type == "kimi_k2") return build_deepseek_v3(std::move(ckpt), cfg, be);
  if (type == "qwen3_moe") return build_qwen3_moe(std::move(ckpt), cfg, be);
  if (type == "gpt_oss") return build_gpt_oss(std::move(ckpt), cfg, be);
  if (type == "kimi_linear" || type == "kimi_k3") return build_kimi(std::move(ckpt), cfg, be);
  fail("{}: model_type '{}' is not supported (deepseek_v3, kimi_k2, qwen3_moe, gpt_oss, kimi_linear, kimi_k3 are)",
       cfg.source(), type);
}

}  // namespace sluice
