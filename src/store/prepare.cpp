#include "store/prepare.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "experts/drive_placement.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "format/expert_index.h"
#include "format/manifest.h"
#include "format/model_dir.h"
#include "store/expert_dirs.h"
#include "store/file_checksum.h"
#include "util/atomic_file.h"
#include "util/disk_space.h"
#include "util/error.h"
#include "util/numeric.h"
#include "util/progress.h"
#include "util/xxh3.h"

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

// A pack: blocks of tensors back to back, every block starting on a 4 KiB
// boundary of the file (padding tensors fill the gaps). A block is an expert
// (one pack per layer), or one projection of an expert (packs spread over drives).
void write_pack(const std::string& path, const std::string& label, const nlohmann::ordered_json& meta,
                const std::vector<std::vector<TensorView>>& blocks, bool progress_on) {
  std::vector<std::tuple<std::string, DType, std::vector<int64_t>, uint64_t, const uint8_t*>> items;
  uint64_t off = 0;
  int pad = 0;
  for (const auto& block : blocks) {
    const uint64_t aligned = (off + 4095) & ~uint64_t(4095);
    if (aligned > off) {
      items.emplace_back(fmt::format("__pad.{}", pad++), DType::U8, std::vector<int64_t>{int64_t(aligned - off)},
                         aligned - off, nullptr);
      off = aligned;
    }
    for (const auto& t : block) {
      items.emplace_back(t.name(), t.dtype(), t.shape(), t.nbytes(), t.data);
      off += t.nbytes();
    }
  }
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  h["__metadata__"] = meta;
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
  Progress progress(label, at, progress_on);
  uint64_t done = 0;
  for (const auto& [nm, dt, shape, len, src] : items) {
    if (src) f.write(src, len);
    else f.zeros(len);
    done += len;
    progress.update(done);
  }
  f.commit();
  progress.finish();
}

// Each expert's tensors, from the expert index; experts whose bytes are slices
// of stacked tensors (gpt-oss) cannot be repacked under their own names.
std::vector<std::vector<std::vector<TensorView>>> expert_tensors(const Checkpoint& ck, const ExpertIndex& index) {
  std::vector<std::vector<std::vector<TensorView>>> out(size_t(index.layers()));
  for (int32_t l = 0; l < index.layers(); ++l) {
    out[size_t(l)].resize(size_t(index.experts(l)));
    for (int32_t e = 0; e < index.experts(l); ++e) {
      if (index.tensors(l, e).empty())
        fail("--pack-experts: expert {} of layer {} is a slice of a stacked tensor; this layout is already one "
             "run per tensor and cannot be repacked by name",
             e, l);
      for (const auto& name : index.tensors(l, e)) out[size_t(l)][size_t(e)].push_back(ck.get(name));
    }
  }
  return out;
}

// An expert's projections: its tensors grouped by name up to the last dot
// (`...gate_proj.weight` with `...gate_proj.weight_scale_inv`).
std::vector<std::vector<TensorView>> projections(const std::vector<TensorView>& tensors) {
  std::vector<std::vector<TensorView>> out;
  std::vector<std::string> bases;
  for (const auto& t : tensors) {
    const std::string base = t.name().substr(0, t.name().rfind('.'));
    auto it = std::find(bases.begin(), bases.end(), base);
    if (it == bases.end()) {
      bases.push_back(base);
      out.push_back({t});
    } else {
      out[size_t(it - bases.begin())].push_back(t);
    }
  }
  return out;
}

struct Packs {
  std::vector<std::string> names, paths;
  std::vector<int32_t> dirs;  // per pack: index into PrepareOptions::expert_dirs (empty without them)
};

// One pack per MoE layer next to the checkpoint, or per layer and drive with
// --expert-dirs (experts/drive_placement.h says which projection goes where).
Packs write_packs(const Checkpoint& ck, const ExpertIndex& index, const PrepareOptions& o,
                  const std::vector<std::string>& dirs) {
  const auto experts = expert_tensors(ck, index);
  Packs packs;
  if (dirs.empty()) {
    for (int32_t l = 0; l < index.layers(); ++l) {
      if (index.experts(l) == 0) continue;
      const std::string name = fmt::format("sluice-experts-{:05d}.safetensors", l);
      packs.names.push_back(name);
      packs.paths.push_back((fs::path(o.dir) / name).string());
      write_pack(packs.paths.back(), fmt::format("prepare: pack layer {}", l),
                 {{"format", "pt"}, {"sluice_pack", std::to_string(l)}}, experts[size_t(l)], o.progress);
    }
    return packs;
  }
  std::vector<PlacementUnit> units;
  std::vector<std::vector<TensorView>> unit_tensors;
  for (int32_t l = 0; l < index.layers(); ++l)
    for (int32_t e = 0; e < index.experts(l); ++e)
      for (auto& p : projections(experts[size_t(l)][size_t(e)])) {
        uint64_t bytes = 0;
        for (const auto& t : p) bytes += t.nbytes();
        units.push_back({l, e, bytes});
        unit_tensors.push_back(std::move(p));
      }
  const int32_t drives = int32_t(dirs.size());
  const std::vector<int32_t> drive = place_units(units, drives);
  std::vector<uint64_t> per_drive(dirs.size(), 0);
  for (size_t u = 0; u < units.size(); ++u) per_drive[size_t(drive[u])] += units[u].bytes + 4096;
  for (size_t d = 0; d < dirs.size(); ++d) require_free_disk(dirs[d], per_drive[d], "prepare --expert-dirs");
  size_t u = 0;
  for (int32_t l = 0; l < index.layers(); ++l) {
    std::vector<std::vector<std::vector<TensorView>>> blocks(dirs.size());
    for (; u < units.size() && units[u].layer == l; ++u) blocks[size_t(drive[u])].push_back(unit_tensors[u]);
    for (int32_t d = 0; d < drives; ++d) {
      if (blocks[size_t(d)].empty()) continue;
      const std::string name = fmt::format("sluice-experts-{:05d}-d{:02d}.safetensors", l, d);
      packs.names.push_back(name);
      packs.paths.push_back((fs::path(dirs[size_t(d)]) / name).string());
      packs.dirs.push_back(d);
      write_pack(packs.paths.back(), fmt::format("prepare: pack layer {} drive {}", l, d),
                 {{"format", "pt"}, {"sluice_pack", std::to_string(l)}, {"sluice_drive", std::to_string(d)}},
                 blocks[size_t(d)], o.progress);
    }
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

std::vector<std::string> expert_dirs(const PrepareOptions& o) {
  if (o.expert_dirs.empty()) return {};
  if (!o.pack_experts) fail("--expert-dirs spreads expert packs over drives: it needs --pack-experts");
  return absolute_expert_dirs(o.expert_dirs);
}

}  // namespace

PrepareResult prepare(const PrepareOptions& o) {
  if (o.spine != "bf16" && o.spine != "int8") fail("--spine must be bf16 or int8, got '{}'", o.spine);
  check_model_dir(o.dir);
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
  const std::vector<std::string> dirs = expert_dirs(o);
  if (o.pack_experts && dirs.empty()) needed += index.total_bytes() + uint64_t(index.count()) * 4096;
  require_free_disk(o.dir, needed, "prepare");
  if (reuse) {
    res.spine_reused = true;
    res.spine_bytes = fs::file_size(spine_path);
  } else {
    write_spine(spine_path, spine, o.spine, o.progress, &res.spine_bytes);
  }

  Packs packs;
  if (o.pack_experts) packs = write_packs(released, index, o, dirs);
  res.packs = int64_t(packs.names.size());
  // With packs, experts are located (and checksummed) in the packs.
  std::unique_ptr<Checkpoint> packed;
  std::unique_ptr<ExpertIndex> packed_index;
  if (!packs.names.empty()) {
    std::vector<std::string> extra{kSpineFile};
    extra.insert(extra.end(), packs.paths.begin(), packs.paths.end());
    packed = std::make_unique<Checkpoint>(o.dir, false, extra);
    packed_index = std::make_unique<ExpertIndex>(cfg, *packed);
  }
  const Checkpoint& ck = packed ? *packed : released;
  const ExpertIndex& located = packed ? *packed_index : index;
  Manifest man;
  man.spine_format = o.spine;
  man.packs = packs.names;
  if (!dirs.empty()) {
    man.expert_dirs = dirs;
    man.pack_dirs = packs.dirs;
  }
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
      xxh3::State st;
      for (const auto& x : e.extents) {
        const auto& f = ck.files()[size_t(x.file)];
        if (x.offset + x.length > f->file_size())
          fail("{}: expert {} of layer {} extends past the end of the file", f->path(), e.expert, e.layer);
        st.update(f->map_base() + x.offset, x.length);
      }
      e.checksum = st.digest64();
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
