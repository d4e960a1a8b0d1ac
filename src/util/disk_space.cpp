#include "util/disk_space.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "util/error.h"
#include "util/progress.h"

namespace sluice {

uint64_t free_disk_bytes(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p = fs::absolute(path);
  while (!p.empty() && !fs::exists(p) && p != p.root_path()) p = p.parent_path();
  struct statvfs st;
  if (::statvfs(p.c_str(), &st) != 0) fail("{}: cannot read the free space: {}", p.string(), std::strerror(errno));
  return uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
}

void require_free_disk(const std::string& path, uint64_t bytes, const std::string& what) {
  const uint64_t margin = 256ull << 20;
  const uint64_t free = free_disk_bytes(path);
  if (bytes + margin > free)
    fail("{} needs {} in {}, but its filesystem has only {} free", what, human_bytes(double(bytes)), path,
         human_bytes(double(free)));
}

}  // namespace sluice
