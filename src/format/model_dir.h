// The first look at a --model directory, before anything is read from it, and
// the advice the loaders add when a model's files are missing or cut short:
// errors a first-time user meets name the path and say what to do.
#pragma once
#include <string>

namespace sluice {

// Throws unless DIR exists, is a directory and holds config.json and weights
// (model.safetensors or its index), naming DIR and what a model directory
// holds, or what to do about the interrupted `sluice pull` there.
void check_model_dir(const std::string& dir);
// Only the first two: DIR exists and is a directory (for what needs only its tokenizer).
void check_directory(const std::string& dir);

// What to do about missing or truncated files in DIR: run the interrupted
// `sluice pull` again when DIR/.sluice-pull exists, else download or copy the
// model again. A clause to append after "; ".
std::string incomplete_model_advice(const std::string& dir);

}  // namespace sluice
