// Fuzz target: model.safetensors.index.json. The input is written as the index
// of a directory holding the shipped model's two shards; opening the checkpoint
// must succeed or throw sluice::Error, and every tensor it then lists must lie
// inside its shard.
#include <cstdint>
#include <string>

#include "format/checkpoint.h"
#include "fuzz_files.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = sluice::fuzz::scratch_dir();
  const std::string shipped = std::string(SLUICE_FIXTURES) + "/../../models/sluice-k3-mini/";
  for (const char* shard : {"model-00001-of-000002.safetensors", "model-00002-of-000002.safetensors"})
    sluice::fuzz::link_file(dir, shard, shipped + shard);
  sluice::fuzz::write_input("model.safetensors.index.json", data, size);
  try {
    sluice::Checkpoint ck(dir, false);
    for (const auto& name : ck.names()) (void)ck.get(name);
  } catch (const sluice::Error&) {
  }
  return 0;
}
