// The vocabulary of `sluice synth`'s recipes: the tensors a synthetic
// checkpoint holds (name, dtype, shape, how its values are drawn, its shard)
// and, per family of the family table (format/model_families.def, column
// synth), the recipe: the config.json of the options and the tensors that
// config describes, under the release's names. One file per recipe
// (store/synthetic_<synth>.cpp); store/synthetic.cpp writes them.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/dtype.h"
#include "format/model_family.h"
#include "store/synthetic.h"

namespace sluice {

// How a tensor's values are drawn (store/synthetic.cpp generates them).
enum class Init { Normal, Norm, Bias, Codes, Mxfp4Scale, Fp8, Fp8Scale, Int4Scale, ALog, DtBias, Shape };

// One tensor of a synthetic checkpoint.
struct Spec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  Init init;
  double a = 0;  // std for Normal/Bias; scale value / byte for the scale kinds; heads for ALog
  int shard = 0;
  uint64_t bytes() const {
    uint64_t n = uint64_t(dtype_size(dtype));
    for (auto d : shape) n *= uint64_t(d);
    return n;
  }
};

// Builds a recipe's tensor list, each tensor in the current shard.
struct Layout {
  std::vector<Spec> t;
  int shard = 0;
  void mat(const std::string& n, int64_t r, int64_t c, double std = -1) {
    t.push_back({n, DType::BF16, {r, c}, Init::Normal, std < 0 ? 1.0 / std::sqrt(double(c)) : std, shard});
  }
  void norm(const std::string& n, int64_t d, DType dt = DType::BF16) { t.push_back({n, dt, {d}, Init::Norm, 0, shard}); }
  void vec(const std::string& n, std::vector<int64_t> shape, Init init, double a, DType dt) {
    t.push_back({n, dt, std::move(shape), init, a, shard});
  }
  // Mxfp4 compressed-tensors (K3), scale bytes centred so values are ~N(0, 1/fan_in).
  void mxfp4(const std::string& base, int64_t r, int64_t c) {
    const double centre = 127 + std::round(std::log2(1.0 / (std::sqrt(double(c)) * 2.926)));
    t.push_back({base + ".weight_packed", DType::U8, {r, c / 2}, Init::Codes, 0, shard});
    t.push_back({base + ".weight_scale", DType::U8, {r, c / 32}, Init::Mxfp4Scale, centre, shard});
  }
  void expert(const std::string& base, int64_t r, int64_t c, const std::string& fmt) {
    if (fmt == "fp8") {
      t.push_back({base + ".weight", DType::F8_E4M3, {r, c}, Init::Fp8, 0, shard});
      t.push_back({base + ".weight_scale_inv", DType::F32, {(r + 127) / 128, (c + 127) / 128}, Init::Fp8Scale,
                   1.0 / std::sqrt(double(c)), shard});
    } else if (fmt == "int4") {
      t.push_back({base + ".weight_packed", DType::I32, {r, c / 8}, Init::Codes, 0, shard});
      t.push_back({base + ".weight_scale", DType::BF16, {r, c / 32}, Init::Int4Scale, 1.0 / (std::sqrt(double(c)) * 4.6), shard});
      t.push_back({base + ".weight_shape", DType::I32, {2}, Init::Shape, double(r) * 1e6 + double(c), shard});
    } else {
      mat(base + ".weight", r, c);
    }
  }
};

struct SynthRecipe {
  // config.json for the options at the real (the release's widths) or the small preset.
  nlohmann::json (*config)(const SynthOptions& o, bool real);
  // The tensors that config describes.
  std::vector<Spec> (*tensors)(const nlohmann::json& config);
  // The key of the text model's nested config ("text_config"), or "" (top level).
  std::string_view text_config_key;
  // The text config's keys of the routed-expert count and top-k; empty when the
  // router routes by softmax (no score-correction bias): realistic routing is not
  // calibrated for it.
  std::string_view experts_key, top_k_key;
};

// The family a recipe's config.json describes (its model_type): its tensor names
// (ModelFamily::tensors, ModelFamily::experts) are the ones a recipe writes.
const ModelFamily& synth_family(const nlohmann::json& config);

// The recipe each row of the family table names: <synth>_synth_recipe(), nullptr for none.
#define SLUICE_MODEL_FAMILY(model_type, text_config, experts, tensors, moe_layers, builder, chat_syntax, synth) \
  const SynthRecipe* synth##_synth_recipe();
#include "format/model_families.def"

}  // namespace sluice
