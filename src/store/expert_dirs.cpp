#include "store/expert_dirs.h"

#include <algorithm>
#include <filesystem>

#include <fmt/ranges.h>

#include "format/manifest.h"
#include "util/error.h"

namespace sluice {

namespace fs = std::filesystem;

std::vector<std::string> absolute_expert_dirs(const std::vector<std::string>& dirs) {
  std::vector<std::string> out;
  for (const auto& d : dirs) {
    if (!fs::is_directory(d)) fail("--expert-dirs: {} is not a directory (create it, or mount the drive)", d);
    std::string a = fs::absolute(d).lexically_normal().string();
    while (a.size() > 1 && a.back() == '/') a.pop_back();
    if (std::find(out.begin(), out.end(), a) != out.end()) fail("--expert-dirs: {} is named twice", d);
    out.push_back(a);
  }
  return out;
}

int64_t relocate_expert_dirs(const std::string& model_dir, const std::vector<std::string>& dirs) {
  const std::string path = (fs::path(model_dir) / kManifestFile).string();
  if (!fs::exists(path)) fail("{}: no {} (run `sluice prepare` first)", model_dir, kManifestFile);
  Manifest m = Manifest::load(path);
  if (m.expert_dirs.empty())
    fail("{}: the packs are not spread over expert directories (prepared without --expert-dirs)", path);
  if (dirs.size() != m.expert_dirs.size())
    fail("--relocate: {} directories given, but the packs were spread over {} ({})", dirs.size(),
         m.expert_dirs.size(), fmt::join(m.expert_dirs, ", "));
  Manifest moved = m;
  moved.expert_dirs = absolute_expert_dirs(dirs);
  for (size_t i = 0; i < m.files.size(); ++i) {
    const std::string p = moved.file_path(model_dir, i);
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    if (ec) fail("--relocate: {}: {} (each directory must hold the packs of the one it replaces)", p, ec.message());
    if (size != m.files[i].second) fail("--relocate: {} is {} bytes, the manifest says {}", p, size, m.files[i].second);
  }
  moved.save(path);
  return int64_t(m.packs.size());
}

}  // namespace sluice
