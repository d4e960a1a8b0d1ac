#include "format/quantization.h"

#include <string>

#include "util/error.h"

namespace sluice {

using nlohmann::json;

namespace {

// One quantization_config object; `where` names it in errors.
class Checker {
 public:
  Checker(const json& q, std::string where) : q_(q), where_(std::move(where)) {}

  void check() {
    if (!q_.is_object()) fail("{} must be an object", where_);
    const std::string method = string_at(q_, "quant_method", where_ + ".quant_method");
    if (method == "fp8") return fp8();
    if (method == "mxfp4") return;  // gpt-oss: *_blocks / *_scales experts, nothing else to choose
    if (method == "compressed-tensors") return compressed_tensors();
    fail("{}.quant_method is '{}': not supported (fp8, mxfp4 and compressed-tensors are)", where_, method);
  }

 private:
  static std::string string_at(const json& o, const char* key, const std::string& name) {
    if (!o.contains(key) || !o[key].is_string()) fail("{} must be a string", name);
    return o[key].get<std::string>();
  }
  static bool null_or_absent(const json& o, const char* key) { return !o.contains(key) || o[key].is_null(); }

  void fp8() {
    if (q_.contains("fmt") && q_["fmt"] != "e4m3")
      fail("{}.fmt is {}: only e4m3 FP8 weights are supported", where_, q_["fmt"].dump());
    const std::string act = q_.value("activation_scheme", std::string("dynamic"));
    if (act != "dynamic")
      fail("{}.activation_scheme is '{}': static activation (input) scales are not supported", where_, act);
    if (!q_.contains("weight_block_size") || q_["weight_block_size"] != json::array({128, 128}))
      fail("{}.weight_block_size is {}: only 128x128 block scales (weight_scale_inv) are supported", where_,
           q_.contains("weight_block_size") ? q_["weight_block_size"].dump() : "absent (per-tensor scales)");
  }

  void compressed_tensors() {
    const std::string format = q_.value("format", std::string());
    if (format != "pack-quantized" && format != "mxfp4-pack-quantized")
      fail("{}.format is '{}': only pack-quantized (INT4) and mxfp4-pack-quantized weights are supported", where_,
           format);
    if (!null_or_absent(q_, "kv_cache_scheme"))
      fail("{}.kv_cache_scheme is set: a quantized KV cache is not supported", where_);
    if (q_.contains("quantization_status") && q_["quantization_status"] != "compressed")
      fail("{}.quantization_status is {}: only compressed checkpoints are supported", where_,
           q_["quantization_status"].dump());
    if (!q_.contains("config_groups") || !q_["config_groups"].is_object() || q_["config_groups"].empty())
      fail("{}.config_groups must be a non-empty object", where_);
    for (const auto& [name, g] : q_["config_groups"].items()) {
      const std::string gw = where_ + ".config_groups." + name;
      if (!g.is_object()) fail("{} must be an object", gw);
      for (const char* k : {"input_activations", "output_activations"})
        if (!null_or_absent(g, k)) fail("{}.{} is set: activation quantization is not supported", gw, k);
      if (!g.contains("weights") || !g["weights"].is_object()) fail("{}.weights must be an object", gw);
      const json& w = g["weights"];
      const std::string ww = gw + ".weights";
      const std::string gformat = g.value("format", format);
      if (!w.contains("num_bits") || w["num_bits"] != 4)
        fail("{}.num_bits is {}: only 4-bit weights are supported", ww, w.contains("num_bits") ? w["num_bits"].dump() : "absent");
      if (w.value("symmetric", true) != true)
        fail("{}.symmetric is false: asymmetric weights (zero points) are not supported", ww);
      if (w.value("strategy", std::string("group")) != "group")
        fail("{}.strategy is {}: only per-group scales are supported", ww, w["strategy"].dump());
      if (!null_or_absent(w, "actorder")) fail("{}.actorder is set: activation-ordered groups are not supported", ww);
      if (w.value("dynamic", false) != false) fail("{}.dynamic is true: dynamic weight scales are not supported", ww);
      const std::string type = w.value("type", std::string("int"));
      if (gformat == "pack-quantized" && type != "int")
        fail("{}.type is '{}': pack-quantized weights must be int", ww, type);
      if (gformat == "mxfp4-pack-quantized") {
        if (type != "float") fail("{}.type is '{}': MXFP4 weights must be float", ww, type);
        if (w.value("group_size", 32) != 32) fail("{}.group_size is {}: MXFP4 groups are 32", ww, w["group_size"].dump());
      }
      if (w.contains("group_size") && !(w["group_size"].is_number_integer() && w["group_size"].get<int64_t>() > 0))
        fail("{}.group_size must be a positive integer, got {}", ww, w["group_size"].dump());
    }
  }

  const json& q_;
  std::string where_;
};

}  // namespace

void check_quantization_config(const Config& top) {
  const json& j = top.json();
  if (j.contains("quantization_config") && !j["quantization_config"].is_null())
    Checker(j["quantization_config"], top.source() + ": quantization_config").check();
  if (j.contains("text_config") && j["text_config"].is_object()) {
    const json& t = j["text_config"];
    if (t.contains("quantization_config") && !t["quantization_config"].is_null())
      Checker(t["quantization_config"], top.source() + ": text_config.quantization_config").check();
  }
}

}  // namespace sluice
