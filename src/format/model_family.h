// The family table (format/model_families.def) as records: what config.json
// and the tensor names say about each model family. Every layer finds a
// model's family here, by model_type, instead of comparing the string itself;
// the layers above keep their per-family pieces (builders, chat syntaxes,
// synthetic recipes) in arrays indexed by FamilyId, derived from the same rows.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "format/config.h"
#include "format/tensor_names.h"

namespace sluice {

struct ModelLayout;

// One value per row of format/model_families.def, in its order.
enum class FamilyId : uint8_t {
#define SLUICE_MODEL_FAMILY(model_type, text_config, experts, tensors, moe_layers, builder, chat_syntax, synth) model_type,
#include "format/model_families.def"
};

// How a family names its routed experts' tensors (the layer prefix
// "model.layers.N." and the text model's prefix excluded).
struct ExpertTensorNames {
  bool stacked = false;    // one tensor per projection holding every expert along dim 0 (gpt-oss MXFP4)
  std::string_view group;  // "mlp.experts": expert e's projections are "<group>.<e>.<projection>"
  // Per expert: gate, up, down. Stacked: gate_up and down ("<group>.<projection>_blocks" / "_scales").
  std::string_view projection[3];
};

// The prefix of every tensor name of a nested release's text model (Kimi K3).
inline constexpr std::string_view kNestedTextPrefix = "language_model.";

struct ModelFamily {
  FamilyId id;
  std::string_view model_type;
  // The text model's config is a text_config object when there is one, and its
  // tensor names begin "language_model." (Kimi K3's release).
  bool nested_text_config = false;
  ExpertTensorNames experts;
  // Every other tensor's name (format/tensor_names.h).
  const TensorNames* tensors = nullptr;
  // Fills layout.moe (sized to the layer count), n_experts and top_k from the text config.
  void (*read_moe_layers)(const Config& text, ModelLayout& layout) = nullptr;
};

// The base name (the text model's prefix excluded) of expert e's projection `which`
// (0 gate, 1 up, 2 down) in layer l of a family whose experts are stored one by one.
std::string expert_tensor_base(const ModelFamily& f, int64_t layer, int64_t expert, int which);

// Every family, in the table's order.
std::span<const ModelFamily> model_families();
const ModelFamily& model_family(FamilyId id);
// The family whose model_type this is, or nullptr.
const ModelFamily* find_model_family(std::string_view model_type);
// The family of config.json's model_type; fails naming the supported ones.
const ModelFamily& model_family_of(const Config& top);
// "deepseek_v3, kimi_k2, ..." for error messages.
std::string supported_model_types();

// K3's drafters are not families of the table (they build no decoder): a
// config says which one it describes.
enum class DrafterFamily { None, DSpark, Eagle3 };
// DSpark: model_type k3_dspark; EAGLE-3: an `architectures` entry beginning "Eagle3".
DrafterFamily drafter_family_of(const Config& c);
// The --arch name of `sluice synth` for a drafter ("k3_dspark", "k3_eagle3"), and back.
std::string_view drafter_family_name(DrafterFamily f);
DrafterFamily drafter_family_named(std::string_view name);  // None if it names no drafter

}  // namespace sluice
