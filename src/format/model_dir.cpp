#include "format/model_dir.h"

#include <filesystem>

#include "util/error.h"

namespace sluice {

namespace fs = std::filesystem;

namespace {
constexpr const char* kWhatAModelHolds =
    "config.json, the weights (model.safetensors, or shards listed in model.safetensors.index.json) and the "
    "tokenizer files";
}  // namespace

std::string incomplete_model_advice(const std::string& dir) {
  std::error_code ec;
  const fs::path staging = fs::path(dir) / ".sluice-pull";
  if (fs::is_directory(staging, ec))
    return fmt::format("an interrupted `sluice pull` left its unfinished files in {}: run the same `sluice pull "
                       "... --dir {}` again to finish the download",
                       staging.string(), dir);
  return fmt::format("the download or copy of {} is incomplete: fetch it again (`sluice pull ORG/NAME --dir {}` "
                     "resumes where an interrupted pull stopped)",
                     dir, dir);
}

void check_directory(const std::string& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st))
    fail("{}: no such directory (--model takes a directory holding {}; `sluice pull ORG/NAME --dir DIR` downloads "
         "one)",
         dir, kWhatAModelHolds);
  if (!fs::is_directory(st)) fail("{}: is a file, not a model directory (one holding {})", dir, kWhatAModelHolds);
}

void check_model_dir(const std::string& dir) {
  std::error_code ec;
  check_directory(dir);
  if (!fs::exists(fs::path(dir) / "config.json", ec)) {
    if (fs::is_directory(fs::path(dir) / ".sluice-pull", ec))
      fail("{}: no config.json yet; {}", dir, incomplete_model_advice(dir));
    fail("{}: not a model directory: it has no config.json (a model directory holds {})", dir, kWhatAModelHolds);
  }
  // Before the tokenizer is looked for: a download that stopped after the small files.
  if (!fs::exists(fs::path(dir) / "model.safetensors", ec) &&
      !fs::exists(fs::path(dir) / "model.safetensors.index.json", ec))
    fail("{}: no weights: neither model.safetensors nor model.safetensors.index.json is there; {}", dir,
         incomplete_model_advice(dir));
}

}  // namespace sluice
