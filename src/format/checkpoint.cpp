#include "format/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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
    std::map<std::string, const SafetensorsFile*> opened;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail("{}: weight_map entry '{}' must be a file name", index.string(), it.key());
      std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard == ".." || shard.empty())
        fail("{}: weight_map entry '{}' names '{}', which is not a file in the checkpoint directory",
             index.string(), it.key(), shard);
      auto f = opened.find(shard);
      if (f == opened.end()) {
        files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / shard).string()));
        f = opened.emplace(shard, files_.back().get()).first;
      }
      if (!f->second->has(it.key()))
        fail("{}: weight_map says tensor '{}' is in {}, but that shard does not contain it", index.string(),
             it.key(), shard);
      where_[it.key()] = f->second;
    }
  } else if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const auto& [name, _] : files_.back()->tensors()) where_[name] = files_.back().get();
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", dir);
  }
  if (use_prepared_spine) overlay_prepared_spine();
  for (const auto& f : extra) overlay(f);
}

void Checkpoint::overlay(const std::string& file) {
  files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir_) / file).string()));
  for (const auto& [name, _] : files_.back()->tensors()) where_[name] = files_.back().get();
}

void Checkpoint::overlay_prepared_spine() {
  const fs::path spine = fs::path(dir_) / "sluice-spine.safetensors";
  const fs::path manifest = fs::path(dir_) / "sluice-manifest.json";
  if (!fs::exists(spine) || !fs::exists(manifest)) return;
  // The manifest records the shard sizes the spine was made from.
  std::ifstream in(manifest);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    for (const auto& f : j.at("files")) {
      const std::string name = f.at("name").get<std::string>();
      const fs::path p = fs::path(dir_) / name;
      if (!fs::exists(p) || fs::file_size(p) != f.at("size").get<uint64_t>())
        fail("{}: {} changed since `sluice prepare` (size differs); run it again", manifest.string(), name);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed manifest: {}", manifest.string(), e.what());
  }
  overlay("sluice-spine.safetensors");
  // Expert packs written by `prepare --pack-experts`, exactly as the manifest lists them.
  if (j.contains("packs") && j["packs"].is_array())
    for (const auto& p : j["packs"])
      if (p.is_string()) overlay(p.get<std::string>());
}

TensorView Checkpoint::get(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("{}: checkpoint has no tensor '{}'", dir_, name);
  return it->second->get(name);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : where_) out.push_back(n);
  return out;
}

}  // namespace sluice
