#include "format/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "format/model_dir.h"
#include "util/error.h"

namespace sluice {

namespace fs = std::filesystem;

Checkpoint::Checkpoint(const std::string& dir, bool use_prepared_spine, const std::vector<std::string>& extra)
    : dir_(dir) {
  fs::path index = fs::path(dir) / "model.safetensors.index.json";
  fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(index)) {
    std::ifstream in(index);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", index.string(), e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: missing object field 'weight_map'", index.string());
    std::map<std::string, std::pair<const SafetensorsFile*, int32_t>> opened;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail("{}: weight_map entry '{}' must be a file name", index.string(), it.key());
      std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard == ".." || shard.empty())
        fail("{}: weight_map entry '{}' names '{}', which is not a file in the checkpoint directory",
             index.string(), it.key(), shard);
      auto f = opened.find(shard);
      if (f == opened.end()) {
        std::error_code ec;
        if (!fs::exists(fs::path(dir) / shard, ec))
          fail("{}: shard {} (listed in model.safetensors.index.json for '{}') is missing; {}", dir, shard, it.key(),
               incomplete_model_advice(dir));
        files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / shard).string()));
        f = opened.emplace(shard, std::make_pair(files_.back().get(), int32_t(files_.size() - 1))).first;
      }
      if (!f->second.first->has(it.key()))
        fail("{}: weight_map says tensor '{}' is in {}, but that shard does not contain it", index.string(),
             it.key(), shard);
      where_[it.key()] = f->second;
    }
  } else if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const auto& [name, _] : files_.back()->tensors()) where_[name] = {files_.back().get(), 0};
  } else {
    fail("{}: no weights: neither model.safetensors nor model.safetensors.index.json is there; {}", dir,
         incomplete_model_advice(dir));
  }
  if (use_prepared_spine) overlay_prepared_spine();
  for (const auto& f : extra) overlay(f);
}

void Checkpoint::overlay(const std::string& file) {
  files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir_) / file).string()));
  const int32_t index = int32_t(files_.size() - 1);
  for (const auto& [name, _] : files_.back()->tensors()) where_[name] = {files_.back().get(), index};
}

void Checkpoint::overlay_prepared_spine() {
  const fs::path spine = fs::path(dir_) / kSpineFile;
  const fs::path manifest = fs::path(dir_) / kManifestFile;
  if (!fs::exists(spine) || !fs::exists(manifest)) return;
  const Manifest& m = *this->manifest();
  // Packs spread over several drives: each directory must be there (a drive not mounted, or moved).
  for (size_t d = 0; d < m.expert_dirs.size(); ++d)
    if (!fs::is_directory(m.expert_dirs[d]))
      fail("{}: expert directory {} (drive {} of {}) does not exist: mount it, or if it moved, record where with "
           "`sluice prepare --model {} --expert-dirs DIR,... --relocate`",
           manifest.string(), m.expert_dirs[d], d + 1, m.expert_dirs.size(), dir_);
  // The manifest records the shard sizes the spine was made from.
  for (size_t i = 0; i < m.files.size(); ++i) {
    const fs::path p = m.file_path(dir_, i);
    if (!fs::exists(p))
      fail("{}: {} is missing; run `sluice prepare` again", manifest.string(), p.string());
    if (fs::file_size(p) != m.files[i].second)
      fail("{}: {} changed since `sluice prepare` (size differs); run it again", manifest.string(), p.string());
  }
  overlay(kSpineFile);
  // Expert packs written by `prepare --pack-experts`, exactly as the manifest lists them.
  for (size_t p = 0; p < m.packs.size(); ++p) overlay(m.pack_path(dir_, p));
}

const Manifest* Checkpoint::manifest() const {
  if (!manifest_) manifest_.emplace(find_manifest(dir_));
  return *manifest_ ? &**manifest_ : nullptr;
}

int32_t Checkpoint::file_index(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("{}: checkpoint has no tensor '{}'", dir_, name);
  return it->second.second;
}

TensorView Checkpoint::get(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("{}: checkpoint has no tensor '{}'", dir_, name);
  return it->second.first->get(name);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : where_) out.push_back(n);
  return out;
}

}  // namespace sluice
