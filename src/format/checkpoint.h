// A Hugging Face checkpoint directory: config.json plus either one
// model.safetensors or shards listed in model.safetensors.index.json.
// Shard file names are only ever taken from the index's weight_map.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "format/manifest.h"
#include "format/safetensors.h"

namespace sluice {

class Checkpoint {
 public:
  // use_prepared_spine: when `sluice prepare` has written sluice-spine.safetensors
  // and sluice-manifest.json here, tensors present in the spine file are read from it.
  // `extra`: further files (expert packs; names in `dir`, or absolute paths) whose tensors take precedence.
  explicit Checkpoint(const std::string& dir, bool use_prepared_spine = true, const std::vector<std::string>& extra = {});

  const std::string& dir() const { return dir_; }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  TensorView get(const std::string& name) const;  // throws naming the tensor and directory
  std::vector<std::string> names() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // Index into files() of the file holding `name` (throws like get()).
  int32_t file_index(const std::string& name) const;
  // sluice-manifest.json of this directory, parsed on first use (null when there is none).
  const Manifest* manifest() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<const SafetensorsFile*, int32_t>> where_;
  mutable std::optional<std::optional<Manifest>> manifest_;  // outer: loaded yet
  void overlay_prepared_spine();
  void overlay(const std::string& file);
};

}  // namespace sluice
