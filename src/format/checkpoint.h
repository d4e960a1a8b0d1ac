// A Hugging Face checkpoint directory: config.json plus either one
// model.safetensors or shards listed in model.safetensors.index.json.
// Shard file names are only ever taken from the index's weight_map.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "format/safetensors.h"

namespace sluice {

class Checkpoint {
 public:
  // use_prepared_spine: when `sluice prepare` has written sluice-spine.safetensors
  // and sluice-manifest.json here, tensors present in the spine file are read from it.
  // `extra`: further files in `dir` (expert packs) whose tensors take precedence.
  explicit Checkpoint(const std::string& dir, bool use_prepared_spine = true, const std::vector<std::string>& extra = {});

  const std::string& dir() const { return dir_; }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  TensorView get(const std::string& name) const;  // throws naming the tensor and directory
  std::vector<std::string> names() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
  void overlay_prepared_spine();
  void overlay(const std::string& file);
};

}  // namespace sluice
