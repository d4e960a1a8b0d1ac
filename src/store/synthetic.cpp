#include "store/synthetic.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <vector>

#include "format/dtype.h"
#include "format/model_family.h"
#include "store/synthetic_recipe.h"
#include "util/atomic_file.h"
#include "util/disk_space.h"
#include "util/error.h"
#include "util/numeric.h"
#include "util/progress.h"

namespace sluice {

const SynthRecipe* none_synth_recipe() { return nullptr; }

const ModelFamily& synth_family(const nlohmann::json& config) {
  const std::string type = config.value("model_type", "");
  if (const ModelFamily* f = find_model_family(type)) return *f;
  fail("synth: internal: a recipe wrote model_type '{}', which is no family", type);
}

namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------- data
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  // Uniform with the given standard deviation (cheap stand-in for a normal).
  double centred(double std) { return (2.0 * uniform() - 1.0) * std * 1.7320508075688772; }
};

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

void put(std::vector<uint8_t>& out, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

// Whether element `index` lies in a row of a residual writer that the routing
// structure keeps at zero (the topic coordinates of the residual stream).
bool topic_row(const Spec& s, uint64_t index, RoutingRole role, const RoutingStructure* routing) {
  if (role != RoutingRole::ResidualWriter) return false;
  const int64_t cols = s.shape.empty() ? 1 : s.shape.back();
  return int64_t(index) / cols < routing->dims();
}

// Where the routing structure shapes a tensor (router rows and bias, embedding,
// lm_head), the value it gives element `index`; else the drawn value `v`.
double routed_value(const Spec& s, uint64_t index, double v, RoutingRole role, RoutingStructure* routing) {
  if (role == RoutingRole::RouterBias) return routing->bias(int64_t(index));
  if (role == RoutingRole::None || s.init != Init::Normal) return v;
  const int64_t cols = s.shape.empty() ? 1 : s.shape.back();
  if (role == RoutingRole::ResidualWriter) return topic_row(s, index, role, routing) ? 0.0 : v;
  const int64_t col = int64_t(index) % cols;
  return col < routing->dims() ? routing->value(int64_t(index) / cols, col) : v * routing->rest_scale();
}

// Appends element `index` of `count` to buf and returns how many elements it
// wrote (packed one-byte codes go 8 at a time).
uint64_t append_element(const Spec& s, uint64_t index, uint64_t count, Rng& rng, RoutingRole role,
                        RoutingStructure* routing, std::vector<uint8_t>& buf) {
  switch (s.init) {
    case Init::Normal:
    case Init::Bias:
    case Init::Norm:
    case Init::DtBias: {
      const double drawn = s.init == Init::Norm     ? 1.0 + rng.centred(0.05)
                           : s.init == Init::DtBias ? -2.0 + rng.centred(1.0)
                                                    : rng.centred(s.a);
      const double v = routed_value(s, index, drawn, role, routing);
      if (s.dtype == DType::F32) {
        float f = float(v);
        put(buf, &f, 4);
      } else {
        uint16_t h = f32_to_bf16(float(v));
        put(buf, &h, 2);
      }
      return 1;
    }
    case Init::ALog: {
      float f = int64_t(index) < int64_t(s.a) ? float((rng.uniform() < 0.5 ? -1 : 1) * (0.4 + 0.8 * rng.uniform())) : 0.0f;
      put(buf, &f, 4);
      return 1;
    }
    case Init::Codes: {  // packed nibbles (MXFP4 codes or INT4 values), 8 bytes per step where possible
      // A topic row of a residual writer holds zeros: INT4 level 8 (I32 words), MXFP4 code 0 (bytes).
      const bool zero = topic_row(s, index, role, routing);
      if (dtype_size(s.dtype) == 4) {
        uint32_t w = zero ? (rng.next(), 0x88888888u) : uint32_t(rng.next());
        put(buf, &w, 4);
        return 1;
      }
      uint64_t w = rng.next();
      if (zero) w = 0;
      const uint64_t n = std::min<uint64_t>(8, count - index);
      put(buf, &w, n);
      return n;
    }
    case Init::Mxfp4Scale:
      buf.push_back(uint8_t(s.a + double(int(rng.next() % 3) - 1)));
      return 1;
    case Init::Fp8: {  // magnitudes in [0.5, 2): exponent 6 or 7, any mantissa, random sign (0 in a topic row)
      uint64_t r = rng.next();
      buf.push_back(topic_row(s, index, role, routing) ? uint8_t(0)
                                                       : uint8_t(((r & 1) << 7) | ((6 + ((r >> 1) & 1)) << 3) | ((r >> 2) & 7)));
      return 1;
    }
    case Init::Fp8Scale: {
      float f = float(s.a);
      put(buf, &f, 4);
      return 1;
    }
    case Init::Int4Scale: {
      uint16_t h = f32_to_bf16(float(s.a * (0.9 + 0.2 * rng.uniform())));
      put(buf, &h, 2);
      return 1;
    }
    case Init::Shape: {
      int32_t v[2] = {int32_t(s.shape.size() ? int64_t(s.a / 1e6) : 0), int32_t(int64_t(s.a) % 1000000)};
      put(buf, &v[index], 4);
      return 1;
    }
  }
  return 1;
}

// Generates the tensor's bytes in chunks, calling sink(bytes) for each.
template <class Sink>
void generate(const Spec& s, uint64_t seed, RoutingStructure* routing, Sink&& sink) {
  Rng rng(name_hash(s.name) ^ seed);
  const RoutingRole role = routing ? routing_role(s.name) : RoutingRole::None;
  if (role != RoutingRole::None) routing->begin(role, s.name);
  const uint64_t total = s.bytes();
  std::vector<uint8_t> buf;
  buf.reserve(1 << 22);
  uint64_t emitted = 0;
  auto flush = [&](bool force) {
    if (buf.size() >= (1u << 22) || (force && !buf.empty())) {
      emitted += buf.size();
      sink(buf);
      buf.clear();
    }
  };
  const uint64_t count = total / uint64_t(dtype_size(s.dtype));
  for (uint64_t index = 0; index < count;) {
    index += append_element(s, index, count, rng, role, routing, buf);
    flush(false);
  }
  flush(true);
  if (emitted != total) fail("synth: internal size mismatch for {}", s.name);
}

int dtype_rank(DType d) {  // safetensors writes larger dtypes first, then by name
  switch (d) {
    case DType::F64: return 12;
    case DType::I64: return 11;
    case DType::F32: return 10;
    case DType::I32: return 9;
    case DType::BF16: return 8;
    case DType::F16: return 7;
    case DType::I16: return 6;
    case DType::F8_E4M3: return 5;
    case DType::F8_E5M2: return 4;
    case DType::F8_E8M0: return 3;
    case DType::I8: return 2;
    case DType::U8: return 1;
    case DType::BOOL: return 0;
  }
  return 0;
}


// The recipe of --arch's family, indexed by FamilyId (the same rows in the same order).
const SynthRecipe* recipe_of(const std::string& arch) {
  static const SynthRecipe* const recipes[] = {
#define SLUICE_MODEL_FAMILY(model_type, text_config, experts, tensors, moe_layers, builder, chat_syntax, synth) \
  synth##_synth_recipe(),
#include "format/model_families.def"
  };
  const ModelFamily* family = find_model_family(arch);
  return family ? recipes[size_t(family->id)] : nullptr;
}

// "deepseek_v3, kimi_k2, ..." of the families with a recipe (and a router bias, if asked).
std::string families_with_recipe(bool router_bias) {
  std::string list;
  for (const ModelFamily& f : model_families())
    if (const SynthRecipe* r = recipe_of(std::string(f.model_type)); r && (!router_bias || !r->experts_key.empty()))
      list += (list.empty() ? "" : ", ") + std::string(f.model_type);
  return list;
}

const SynthRecipe& recipe(const SynthOptions& o) {
  if (const SynthRecipe* r = recipe_of(o.arch)) return *r;
  fail("synth: --arch '{}' is not supported ({} are)", o.arch, families_with_recipe(false));
}

}  // namespace

json synth_config(const SynthOptions& o) {
  const bool real = o.preset == "real";
  if (!real && o.preset != "small") fail("synth: --preset must be 'real' or 'small', got '{}'", o.preset);
  return recipe(o).config(o, real);
}

namespace {
std::vector<Spec> synth_specs(const SynthOptions& o, const json& cfg) { return recipe(o).tensors(cfg); }
}  // namespace

std::string synth_routing_label(const SynthOptions& o) {
  if (o.routing == "random") return "random (i.i.d. router rows)";
  const RealisticRouting& p = o.realistic;
  return fmt::format("realistic (width {} popularity {} step {} sharpness {} router_noise {} amplitude {} "
                     "lm_sharpness {} lm_noise {})",
                     p.width, p.popularity, p.step, p.sharpness, p.router_noise, p.amplitude, p.lm_sharpness,
                     p.lm_noise);
}

namespace {
// The realistic routing's structure for this model, or none for random routing.
std::unique_ptr<RoutingStructure> routing_structure(const SynthOptions& o, const json& cfg) {
  if (o.routing == "random") return nullptr;
  if (o.routing != "realistic") fail("synth: --routing must be 'random' or 'realistic', got '{}'", o.routing);
  const SynthRecipe& r = recipe(o);
  if (r.experts_key.empty())
    fail("synth: --routing realistic is calibrated for the sigmoid routers of {}; {} routes by softmax",
         families_with_recipe(true), o.arch);
  const json& c = r.text_config_key.empty() ? cfg : cfg[std::string(r.text_config_key)];
  const int64_t E = c[std::string(r.experts_key)].get<int64_t>();
  const int64_t K = c[std::string(r.top_k_key)].get<int64_t>();
  return std::make_unique<RoutingStructure>(o.realistic, o.seed, c["hidden_size"].get<int64_t>(), E, K);
}
}  // namespace

uint64_t synth_bytes(const SynthOptions& o) {
  uint64_t total = 0;
  for (const auto& s : synth_specs(o, synth_config(o))) total += s.bytes();
  return total;
}

uint64_t synthesize(const SynthOptions& o) {
  namespace fs = std::filesystem;
  json cfg = synth_config(o);
  std::vector<Spec> specs = synth_specs(o, cfg);
  std::unique_ptr<RoutingStructure> routing = routing_structure(o, cfg);
  int nshards = 0;
  uint64_t total = 0;
  for (const auto& s : specs) {
    nshards = std::max(nshards, s.shard + 1);
    total += s.bytes();
  }
  require_free_disk(o.out_dir, total, fmt::format("synth --arch {} --preset {}", o.arch, o.preset));
  fs::create_directories(o.out_dir);
  auto shard_name = [&](int i) { return fmt::format("model-{:05d}-of-{:06d}.safetensors", i + 1, nshards); };
  Progress progress("synth", total, o.progress);
  json weight_map = json::object();
  uint64_t written = 0;
  for (int sh = 0; sh < nshards; ++sh) {
    std::vector<const Spec*> mine;
    for (const auto& s : specs)
      if (s.shard == sh) mine.push_back(&s);
    std::sort(mine.begin(), mine.end(), [](const Spec* a, const Spec* b) {
      return dtype_rank(a->dtype) != dtype_rank(b->dtype) ? dtype_rank(a->dtype) > dtype_rank(b->dtype)
                                                          : a->name < b->name;
    });
    json header = json::object();
    header["__metadata__"] = {{"format", "pt"}, {"generator", "sluice synth"}, {"routing", synth_routing_label(o)}};
    uint64_t off = 0;
    for (const Spec* s : mine) {
      header[s->name] = {{"dtype", std::string(dtype_name(s->dtype))}, {"shape", s->shape}, {"data_offsets", {off, off + s->bytes()}}};
      off += s->bytes();
      weight_map[s->name] = shard_name(sh);
    }
    std::string hs = header.dump();
    while ((hs.size() + 8) % 8) hs.push_back(' ');
    const std::string path = (fs::path(o.out_dir) / shard_name(sh)).string();
    AtomicFile f(path);
    const uint64_t n = hs.size();
    f.write(&n, 8);
    f.write(hs.data(), hs.size());
    for (const Spec* s : mine)
      generate(*s, o.seed, routing.get(), [&](const std::vector<uint8_t>& b) {
        f.write(b.data(), b.size());
        written += b.size();
        progress.update(written);
      });
    f.commit();
  }
  progress.finish();
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::ofstream(fs::path(o.out_dir) / "model.safetensors.index.json") << index.dump(2) << "\n";
  std::ofstream(fs::path(o.out_dir) / "config.json") << cfg.dump(2) << "\n";
  return total;
}

}  // namespace sluice