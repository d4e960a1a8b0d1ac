#include "store/prepare.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "format/checkpoint.h"
#include "format/config.h"
#include "format/expert_index.h"
#include "format/manifest.h"
#include "store/file_checksum.h"
#include "util/atomic_file.h"
#include "util/disk_space.h"
#include "util/error.h"
#include "util/numeric.h"
#include "util/progress.h"

namespace sluice {

namespace fs = std::filesystem;

namespace {

bool is_router(const std::string& name) {
  for (const char* suffix : {"mlp.gate.weight", "block_sparse_moe.gate.weight", "mlp.router.weight"})
    if (name.size() >= std::strlen(suffix) && name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
      return true;
  return false;
}

// A tensor worth re-quantizing to row-wise int8.
bool int8_candidate(const TensorView& t) {
  return t.shape().size() == 2 && t.shape()[0] >= 16 && t.shape()[1] >= 64 &&
         (t.dtype() == DType::BF16 || t.dtype() == DType::F16 || t.dtype() == DType::F32) && !is_router(t.name());
}

float element(const TensorView& t, int64_t i) {
  switch (t.dtype()) {
    case DType::BF16: { uint16_t h; std::memcpy(&h, t.data + 2 * i, 2); return bf16_to_f32(h); }
    case DType::F16: { uint16_t h; std::memcpy(&h, t.data + 2 * i, 2); return f16_to_f32(h); }
    default: { float f; std::memcpy(&f, t.data + 4 * i, 4); return f; }
  }
}

struct Out {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t bytes;
  const TensorView* src;
  int kind;  // 0 copy, 1 int8 values, 2 int8 row scales
};

void write_spine(const std::string& path, const std::vector<TensorView>& tensors, const std::string& format,
                 bool progress_on, uint64_t* bytes_out) {
  std::vector<Out> outs;
  for (const auto& t : tensors) {
    if (format == "int8" && int8_candidate(t)) {
      outs.push_back({t.name(), DType::I8, t.shape(), uint64_t(t.numel()), &t, 1});
      outs.push_back({t.name() + "_row_scale", DType::F32, {t.shape()[0]}, uint64_t(t.shape()[0]) * 4, &t, 2});
    } else {
      outs.push_back({t.name(), t.dtype(), t.shape(), t.nbytes(), &t, 0});
    }
  }
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  h["__metadata__"] = {{"format", "pt"}, {"sluice_spine", format}};
  uint64_t off = 0;
  for (const auto& o : outs) {
    h[o.name] = {{"dtype", std::string(dtype_name(o.dtype))}, {"shape", o.shape}, {"data_offsets", {off, off + o.bytes}}};
    off += o.bytes;
  }
  std::string hs = h.dump();
  while ((hs.size() + 8) % 8) hs.push_back(' ');
  AtomicFile f(path);
  const uint64_t n = hs.size();
  f.write(&n, 8);
  f.write(hs.data(), hs.size());
  Progress progress("prepare: spine", off, progress_on);
  uint64_t done = 0;
  std::vector<int8_t> q;
  std::vector<float> scales;
  for (const auto& o : outs) {
    const TensorView& t = *o.src;
    if (o.kind == 0) {
      f.write(t.data, o.bytes);
    } else if (o.kind == 1) {
      const int64_t rows = t.shape()[0], cols = t.shape()[1];
      scales.assign(size_t(rows), 0.0f);
      q.resize(size_t(cols));
      for (int64_t r = 0; r < rows; ++r) {
        float amax = 0;
        for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::abs(element(t, r * cols + c)));
        const float s = amax > 0 ? amax / 127.0f : 1.0f;
        scales[size_t(r)] = s;
        for (int64_t c = 0; c < cols; ++c)
          q[size_t(c)] = int8_t(std::lrint(std::clamp(element(t, r * cols + c) / s, -127.0f, 127.0f)));
        f.write(q.data(), uint64_t(cols));
      }
    } else {
      f.write(scales.data(), scales.size() * 4);
    }
    done += o.bytes;
    progress.update(done);
  }
  f.commit();
  progress.finish();
  *bytes_out = uint64_t(fs::file_size(path));
}

// One pack per MoE layer: each expert's tensors back to back, every expert
// starting on a 4 KiB boundary of the file (padding tensors fill the gaps).
std::string write_pack(const std::string& dir, int32_t layer, const std::vector<std::vector<TensorView>>& experts,
                       bool progress_on) {
  const std::string name = fmt::format("sluice-experts-{:05d}.safetensors", layer);
  const std::string path = (fs::path(dir) / name).string();
  std::vector<std::tuple<std::string, DType, std::vector<int64_t>, uint64_t, const uint8_t*>> items;
  uint64_t off = 0;
  int pad = 0;
  for (size_t e = 0; e < experts.size(); ++e) {
    const uint64_t aligned = (off + 4095) & ~uint64_t(4095);
    if (aligned > off) {
      items.emplace_back(fmt::format("__pad.{}", pad++), DType::U8, std::vector<int64_t>{int64_t(aligned - off)},
                         aligned - off, nullptr);
      off = aligned;
    }
    for (const auto& t : experts[e]) {
      items.emplace_back(t.name(), t.dtype(), t.shape(), t.nbytes(), t.data);
      off += t.nbytes();
    }
  }
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  h["__metadata__"] = {{"format", "pt"}, {"sluice_pack", std::to_string(layer)}};
  uint64_t at = 0;
  for (const auto& [n, dt, shape, len, _] : items) {
    h[n] = {{"dtype", std::string(dtype_name(dt))}, {"shape", shape}, {"data_offsets", {at, at + len}}};
    at += len;
  }
  std::string hs = h.dump();
  while ((hs.size() + 8) % 4096) hs.push_back(' ');  // data section starts on a page boundary
  AtomicFile f(path);
  const uint64_t n = hs.size();
  f.write(&n, 8);
  f.write(hs.data(), hs.size());
  Progress progress(fmt::format("prepare: pack layer {}", layer), at, progress_on);
  uint64_t done = 0;
  for (const auto& [nm, dt, shape, len, src] : items) {
    if (src) f.write(src, len);
    else f.zeros(len);
    done += len;
    progress.update(done);
  }
  f.commit();
  progress.finish();
  return name;
}

// Each expert's tensors, from the expert index; experts whose bytes are slices
// of stacked tensors (gpt-oss) cannot be repacked under their own names.
std::vector<std::string> write_packs(const Checkpoint& ck, const ExpertIndex& index, const PrepareOptions& o) {
  std::vector<std::string> packs;
  for (int32_t l = 0; l < index.layers(); ++l) {
    if (index.experts(l) == 0) continue;
    std::vector<std::vector<TensorView>> experts(static_cast<size_t>(index.experts(l)));
    for (int32_t e = 0; e < index.experts(l); ++e) {
      if (index.tensors(l, e).empty())
        fail("--pack-experts: expert {} of layer {} is a slice of a stacked tensor; this layout is already one "
             "run per tensor and cannot be repacked by name",
             e, l);
      for (const auto& name : index.tensors(l, e)) experts[size_t(e)].push_back(ck.get(name));
    }
    packs.push_back(write_pack(o.dir, l, experts, o.progress));
  }
  return packs;
}

// The rest of the manifest's checksums (store/file_checksum.h): each file's bytes
// outside the experts, and the spine file unless it is one of the files already.
void record_spine_checksums(const Checkpoint& ck, const PrepareOptions& o, Manifest& man) {
  std::vector<ExpertExtent> extents;
  for (const auto& e : man.experts) extents.insert(extents.end(), e.extents.begin(), e.extents.end());
  std::vector<std::vector<ExpertExtent>> rest(ck.files().size());
  uint64_t total = 0;
  for (size_t i = 0; i < rest.size(); ++i) {
    rest[i] = bytes_outside(extents, int32_t(i), ck.files()[i]->file_size());
    for (const auto& r : rest[i]) total += r.length;
  }
  const std::string spine_path = (fs::path(o.dir) / kSpineFile).string();
  const bool spine_listed = std::any_of(man.files.begin(), man.files.end(),
                                        [](const auto& f) { return f.first == kSpineFile; });
  const uint64_t spine_size = spine_listed ? 0 : fs::file_size(spine_path);
  Progress progress("prepare: spine checksums", total + spine_size, o.progress);
  uint64_t before = 0;
  auto on_bytes = [&](uint64_t n) { progress.update(before + n); };
  for (size_t i = 0; i < rest.size(); ++i) {
    man.rest_checksums.push_back(xxh3_of_ranges(ck.files()[i]->path(), rest[i], on_bytes));
    for (const auto& r : rest[i]) before += r.length;
  }
  if (!spine_listed)
    man.spine_file = Manifest::SpineFile{spine_size, xxh3_of_ranges(spine_path, {{0, 0, spine_size}}, on_bytes)};
  progress.finish();
}

}  // namespace

PrepareResult prepare(const PrepareOptions& o) {
  if (o.spine != "bf16" && o.spine != "int8") fail("--spine must be bf16 or int8, got '{}'", o.spine);
  PrepareResult res;
  const Config cfg = Config::load(o.dir);
  const Checkpoint released(o.dir, /*use_prepared_spine=*/false);
  const ExpertIndex index(cfg, released);
  // Spine: every tensor the model uses that is not part of a routed expert.
  std::vector<TensorView> spine;
  for (const auto& name : index.spine()) spine.push_back(released.get(name));
  const std::string spine_path = (fs::path(o.dir) / kSpineFile).string();
  bool reuse = false;
  if (fs::exists(spine_path)) {
    try {
      SafetensorsFile existing(spine_path);
      auto it = existing.metadata().find("sluice_spine");
      reuse = it != existing.metadata().end() && it->second == o.spine;
      for (const auto& t : spine) reuse = reuse && existing.has(t.name());
    } catch (const Error&) {
      reuse = false;  // damaged: rewrite
    }
  }
  // Refuse up front when the files cannot fit (spine as it will be written, packs).
  uint64_t needed = 0;
  if (!reuse)
    for (const auto& t : spine)
      needed += o.spine == "int8" && int8_candidate(t) ? uint64_t(t.numel()) + uint64_t(t.shape()[0]) * 4 : t.nbytes();
  if (o.pack_experts) needed += index.total_bytes() + uint64_t(index.count()) * 4096;
  require_free_disk(o.dir, needed, "prepare");
  if (reuse) {
    res.spine_reused = true;
    res.spine_bytes = fs::file_size(spine_path);
  } else {
    write_spine(spine_path, spine, o.spine, o.progress, &res.spine_bytes);
  }

  std::vector<std::string> packs;
  if (o.pack_experts) packs = write_packs(released, index, o);
  res.packs = int64_t(packs.size());
  // With packs, experts are located (and checksummed) in the packs.
  std::unique_ptr<Checkpoint> packed;
  std::unique_ptr<ExpertIndex> packed_index;
  if (!packs.empty()) {
    std::vector<std::string> extra{kSpineFile};
    extra.insert(extra.end(), packs.begin(), packs.end());
    packed = std::make_unique<Checkpoint>(o.dir, false, extra);
    packed_index = std::make_unique<ExpertIndex>(cfg, *packed);
  }
  const Checkpoint& ck = packed ? *packed : released;
  const ExpertIndex& located = packed ? *packed_index : index;
  Manifest man;
  man.spine_format = o.spine;
  man.packs = packs;
  for (const auto& f : ck.files()) man.files.push_back({fs::path(f->path()).filename().string(), f->file_size()});
  for (int32_t l = 0; l < located.layers(); ++l)
    for (int32_t e = 0; e < located.experts(l); ++e) man.experts.push_back({l, e, located.extents(l, e), 0});

  // Checksums, resuming from a partial manifest of an interrupted run.
  const std::string partial_path = (fs::path(o.dir) / (std::string(kManifestFile) + ".partial")).string();
  std::map<std::pair<int32_t, int32_t>, uint64_t> done;
  if (fs::exists(partial_path)) {
    try {
      Manifest p = Manifest::load(partial_path);
      if (p.files == man.files)
        for (const auto& e : p.experts) done[{e.layer, e.expert}] = e.checksum;
    } catch (const Error&) {
    }
  }
  uint64_t total = 0;
  for (const auto& e : man.experts)
    for (const auto& x : e.extents) total += x.length;
  res.expert_bytes = total;
  Progress progress("prepare: expert checksums", total, o.progress);
  uint64_t hashed = 0, since_save = 0;
  Manifest partial = man;
  partial.experts.clear();
  for (auto& e : man.experts) {
    uint64_t bytes = 0;
    for (const auto& x : e.extents) bytes += x.length;
    auto it = done.find({e.layer, e.expert});
    if (it != done.end()) {
      e.checksum = it->second;
      ++res.experts_resumed;
    } else {
      XXH3_state_t* st = XXH3_createState();
      XXH3_64bits_reset(st);
      for (const auto& x : e.extents) {
        const auto& f = ck.files()[size_t(x.file)];
        if (x.offset + x.length > f->file_size())
          fail("{}: expert {} of layer {} extends past the end of the file", f->path(), e.expert, e.layer);
        XXH3_64bits_update(st, f->map_base() + x.offset, x.length);
      }
      e.checksum = XXH3_64bits_digest(st);
      XXH3_freeState(st);
      since_save += bytes;
    }
    partial.experts.push_back(e);
    hashed += bytes;
    progress.update(hashed);
    if (since_save > (4ull << 30)) {  // checkpoint progress every few GB
      partial.save(partial_path);
      since_save = 0;
    }
  }
  progress.finish();
  res.experts = int64_t(man.experts.size());
  record_spine_checksums(ck, o, man);
  man.save((fs::path(o.dir) / kManifestFile).string());
  std::error_code ec;
  fs::remove(partial_path, ec);
  return res;
}

}  // namespace sluice
