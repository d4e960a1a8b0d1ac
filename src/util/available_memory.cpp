#include "util/available_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "util/progress.h"

namespace sluice {

namespace {

// Limits at or above this are "no limit" (cgroup v1 writes 2^63 rounded down to a page).
constexpr uint64_t kUnlimited = 1ull << 62;

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  out = s.str();
  return true;
}

// A file holding one number, or "max" (v2: no limit).
bool read_number(const std::string& path, uint64_t& v) {
  std::string s;
  if (!read_file(path, s)) return false;
  s.erase(s.find_last_not_of(" \n") + 1);
  if (s == "max") {
    v = UINT64_MAX;
    return true;
  }
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 20) return false;
  try {
    v = std::stoull(s);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// "key value" lines (memory.stat, /proc/meminfo with "key: value kB").
bool read_key(const std::string& path, const std::string& key, uint64_t& v) {
  std::ifstream in(path);
  std::string k;
  uint64_t n = 0;
  while (in >> k >> n) {
    if (k == key || k == key + ":") {
      std::string unit;
      if (in.peek() == ' ' && in >> unit && unit == "kB") n *= 1024;
      v = n;
      return true;
    }
    in.ignore(1 << 20, '\n');
  }
  return false;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

// A cgroup hierarchy the process is in that can hold a memory limit: where it
// is mounted and the process's directory in it.
struct MemoryHierarchy {
  bool v2 = false;
  std::string mount;  // e.g. /sys/fs/cgroup/memory
  std::string dir;    // the process's cgroup directory under it
};

// The memory hierarchies of /proc/self/cgroup, located through /proc/self/mountinfo.
std::vector<MemoryHierarchy> memory_hierarchies(const std::string& root) {
  std::string cgroups, mounts;
  if (!read_file(root + "/proc/self/cgroup", cgroups) || !read_file(root + "/proc/self/mountinfo", mounts)) return {};
  std::string v1_path, v2_path;
  bool have_v1 = false, have_v2 = false;
  for (const auto& line : split(cgroups, '\n')) {
    // "hierarchy-id:controller,list:/path"
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.substr(0, a) == "0" && controllers.empty()) {
      have_v2 = true;
      v2_path = path;
    } else {
      for (const auto& c : split(controllers, ','))
        if (c == "memory") {
          have_v1 = true;
          v1_path = path;
        }
    }
  }
  std::vector<MemoryHierarchy> out;
  for (const auto& line : split(mounts, '\n')) {
    // "id parent major:minor root mountpoint options [optional...] - fstype source superoptions"
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    const auto f = split(line.substr(0, dash), ' ');
    const auto g = split(line.substr(dash + 3), ' ');
    if (f.size() < 5 || g.size() < 3) continue;
    const std::string& mount_root = f[3];
    const std::string& mount_point = f[4];
    bool v2 = false;
    std::string path;
    if (g[0] == "cgroup2" && have_v2) {
      v2 = true;
      path = v2_path;
    } else if (g[0] == "cgroup" && have_v1) {
      const auto opts = split(g[2], ',');
      if (std::find(opts.begin(), opts.end(), "memory") == opts.end()) continue;
      path = v1_path;
    } else {
      continue;
    }
    // The process's path is relative to the hierarchy's root; the mount shows mount_root there.
    std::string rel;
    if (mount_root == "/") rel = path;
    else if (path.rfind(mount_root, 0) == 0) rel = path.substr(mount_root.size());
    // else: a cgroup namespace shows its own root here; the mount is the process's cgroup.
    if (rel == "/") rel.clear();
    out.push_back({v2, root + mount_point, root + mount_point + rel});
  }
  return out;
}

// The tightest limit from `dir` up to the hierarchy's mount: limit less working set.
void apply_hierarchy(const MemoryHierarchy& h, AvailableMemory& a, uint64_t& best) {
  for (std::string dir = h.dir;; dir = dir.substr(0, dir.rfind('/'))) {
    uint64_t limit = UINT64_MAX, used = 0, inactive = 0;
    bool read = false;
    if (h.v2) {
      uint64_t high = UINT64_MAX;
      read = read_number(dir + "/memory.max", limit) && read_number(dir + "/memory.current", used);
      if (read_number(dir + "/memory.high", high)) limit = std::min(limit, high);  // throttled above it
      read_key(dir + "/memory.stat", "inactive_file", inactive);
    } else {
      read = read_number(dir + "/memory.limit_in_bytes", limit) && read_number(dir + "/memory.usage_in_bytes", used);
      read_key(dir + "/memory.stat", "total_inactive_file", inactive);
    }
    if (read && limit < kUnlimited) {
      const uint64_t working = used - std::min(used, inactive);
      const uint64_t left = limit - std::min(limit, working);
      if (left < best) {
        best = left;
        a.cgroup_limited = true;
        a.cgroup = dir;
        a.cgroup_limit = limit;
        a.cgroup_used = working;
      }
    }
    if (dir.size() <= h.mount.size() || dir.rfind('/') == std::string::npos) break;
  }
}

}  // namespace

AvailableMemory available_memory(const std::string& root) {
  AvailableMemory a;
  uint64_t avail = 0;
  if (read_key(root + "/proc/meminfo", "MemAvailable", avail)) a.mem_available = avail;
  uint64_t cgroup_left = UINT64_MAX;
  for (const auto& h : memory_hierarchies(root)) apply_hierarchy(h, a, cgroup_left);
  if (!root.empty() && a.cgroup_limited) a.cgroup = a.cgroup.substr(root.size());
  const uint64_t from_meminfo = a.mem_available > 0 ? a.mem_available : UINT64_MAX;
  const uint64_t least = std::min(from_meminfo, cgroup_left);
  a.bytes = least == UINT64_MAX ? 0 : least;
  return a;
}

std::string AvailableMemory::describe() const {
  const std::string cg = cgroup_limited ? fmt::format("cgroup {}: limit {}, {} in use", cgroup,
                                                      binary_bytes(cgroup_limit), binary_bytes(cgroup_used))
                                        : std::string();
  const std::string mi = mem_available > 0 ? fmt::format("MemAvailable {}", binary_bytes(mem_available)) : "";
  if (cg.empty()) return mi.empty() ? "neither /proc/meminfo nor a cgroup limit could be read" : mi;
  if (mi.empty()) return cg;
  // The one that binds first.
  return cgroup_limit - std::min(cgroup_limit, cgroup_used) <= mem_available ? cg + "; " + mi : mi + "; " + cg;
}

}  // namespace sluice
