#include "engine/model_identity.h"


#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/engine.h"
#include "experts/expert_disk_cache.h"
#include "kernels/isa.h"
#include "util/error.h"
#include "util/xxh3.h"

namespace sluice {

namespace {
class Hasher {
 public:
  void add(const void* p, size_t n) { st_.update(p, n); }
  void add(const std::string& s) {
    const uint64_t n = s.size();
    add(&n, sizeof(n));
    add(s.data(), s.size());
  }
  template <typename T>
  void add_value(T v) {
    add(&v, sizeof(v));
  }
  std::string hex() const {
    const xxh3::Hash128 h = st_.digest128();
    return fmt::format("{:016x}{:016x}", h.high64, h.low64);
  }

 private:
  xxh3::State st_;
};

constexpr uint64_t kLeadBytes = 64 << 10;  // from the start of the tensor data
constexpr uint64_t kSamples = 8, kSampleBytes = 4 << 10;
}  // namespace

std::string model_identity(const Engine& engine) {
  Hasher h;
  const std::string config_path = engine.dir() + "/config.json";
  std::ifstream cf(config_path, std::ios::binary);
  if (!cf) fail("{}: cannot read it for the model's identity", config_path);
  h.add(std::string(std::istreambuf_iterator<char>(cf), std::istreambuf_iterator<char>()));
  const bool sample_data = !is_stream_dir(engine.dir());
  for (const auto& f : engine.checkpoint().files()) {
    h.add(std::filesystem::path(f->path()).filename().string());
    h.add_value(f->file_size());
    const uint8_t* base = f->map_base();
    h.add(base, f->data_start());
    if (!sample_data) continue;
    // Weights changed in place (a tensor edited, the file written again) keep their size and
    // headers, and a change may fall between the samples: the modification time catches it.
    // (A copy that keeps the times, cp -p or rsync -a, keeps the identity.)
    std::error_code ec;
    const auto mtime = std::filesystem::last_write_time(f->path(), ec);
    if (ec) fail("{}: cannot read its modification time for the model's identity: {}", f->path(), ec.message());
    h.add_value(int64_t(mtime.time_since_epoch().count()));
    const uint64_t start = f->data_start(), size = f->file_size(), data = size - start;
    h.add(base + start, std::min(data, kLeadBytes));
    if (data > kSampleBytes)
      for (uint64_t i = 0; i < kSamples; ++i) h.add(base + start + (data - kSampleBytes) * (i + 1) / (kSamples + 1), kSampleBytes);
  }
  if (const Manifest* m = engine.checkpoint().manifest()) {
    h.add(m->spine_format);
    for (const ManifestExpert& e : m->experts) {
      h.add_value(e.layer);
      h.add_value(e.expert);
      h.add_value(e.checksum);
    }
  }
  h.add_value(engine.options().use_prepared_spine);
  return fmt::format("{} {} {} r{} {}", engine.info().arch, engine.options().device.name(), kernels::active_isa().name,
                     kernels::kNumericsRevision, h.hex());
}

}  // namespace sluice
