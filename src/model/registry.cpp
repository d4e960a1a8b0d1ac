// load_model: dispatch on config.json's model_type.
#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "format/config.h"
#include "store/manifest.h"
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
  if (cfg.has("eos_token_id")) {
    const auto& e = cfg.json()["eos_token_id"];
    if (e.is_number_integer()) info.eos_ids.push_back(e.get<int32_t>());
    else info.eos_ids = [&] {
        std::vector<int32_t> v;
        for (auto x : cfg.get_ints("eos_token_id")) v.push_back(int32_t(x));
        return v;
      }();
  }
  return info;
}

namespace {
std::unique_ptr<Decoder> build_with(const Config& cfg, std::unique_ptr<Checkpoint> ckpt) {
  const std::string type = cfg.req_string("model_type");
  if (type == "deepseek_v3" || type == "kimi_k2") return build_deepseek_v3(std::move(ckpt), cfg);
  if (type == "qwen3_moe") return build_qwen3_moe(std::move(ckpt), cfg);
  if (type == "gpt_oss") return build_gpt_oss(std::move(ckpt), cfg);
  if (type == "kimi_linear" || type == "kimi_k3") return build_kimi(std::move(ckpt), cfg);
  fail("{}: model_type '{}' is not supported (deepseek_v3, kimi_k2, qwen3_moe, gpt_oss, kimi_linear, kimi_k3 are)",
       cfg.source(), type);
}

std::unique_ptr<Decoder> build(const std::string& dir, const Config& cfg, bool use_prepared_spine) {
  return build_with(cfg, std::make_unique<Checkpoint>(dir, use_prepared_spine));
}
}  // namespace

std::unique_ptr<Decoder> build_decoder(const std::string& dir, std::unique_ptr<Checkpoint> ckpt) {
  return build_with(Config::load(dir), std::move(ckpt));
}

std::unique_ptr<Decoder> load_decoder(const std::string& dir, bool use_prepared_spine) {
  return build(dir, Config::load(dir), use_prepared_spine);
}

// generation_config.json may name further stop ids (e.g. end-of-turn and end-of-text).
static void add_generation_stops(const std::string& dir, ModelInfo& info) {
  std::ifstream in(dir + "/generation_config.json");
  if (!in) return;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}/generation_config.json: not valid JSON: {}", dir, e.what());
  }
  if (!j.is_object() || !j.contains("eos_token_id")) return;
  const auto& e = j["eos_token_id"];
  std::vector<int32_t> ids;
  if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
  else if (e.is_array())
    for (const auto& x : e)
      if (x.is_number_integer()) ids.push_back(x.get<int32_t>());
  for (int32_t id : ids)
    if (std::find(info.eos_ids.begin(), info.eos_ids.end(), id) == info.eos_ids.end()) info.eos_ids.push_back(id);
}

std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& opts) {
  auto model = build(dir, Config::load(dir), opts.use_prepared_spine);
  add_generation_stops(dir, model->mutable_info());
  if (opts.stream_experts) {
    StreamingOptions so = opts.streaming;
    if (so.checksums.empty() && opts.use_prepared_spine)
      if (auto m = find_manifest(dir)) so.checksums = m->checksum_table();
    model->set_expert_source(std::make_unique<StreamingExperts>(model->experts(), model->checkpoint(), so));
  }
  model->set_prefetch(opts.prefetch);
  if (opts.stream_experts || opts.spine_budget > 0)
    model->stream_spine(opts.spine_budget > 0 ? opts.spine_budget : UINT64_MAX);
  return model;
}

}  // namespace sluice
