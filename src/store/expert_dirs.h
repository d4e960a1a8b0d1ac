// The directories (drives) `sluice prepare --pack-experts --expert-dirs A,B,C`
// spreads expert packs over, as the manifest records them (absolute paths), and
// pointing a prepared model at them again after a drive was mounted elsewhere
// or a directory moved: `sluice prepare --model DIR --expert-dirs A,B,C --relocate`.
#pragma once
#include <string>
#include <vector>

namespace sluice {

// Each an existing directory (a drive that is not mounted must not fill the
// directory it would be mounted on), made absolute; throws naming the first
// that is not, or one named twice.
std::vector<std::string> absolute_expert_dirs(const std::vector<std::string>& dirs);

// Rewrites the manifest of `model_dir` to find its packs in `dirs` (in the
// order of the --expert-dirs they were prepared with), after checking that
// every pack is there with the size it was written with. Nothing else changes;
// returns the number of packs found.
int64_t relocate_expert_dirs(const std::string& model_dir, const std::vector<std::string>& dirs);

}  // namespace sluice
