#include "util/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "util/error.h"

namespace sluice {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) fail("{}: cannot create: {}", tmp_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (f_) {
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }
}

void AtomicFile::write(const void* data, uint64_t n) {
  if (n && std::fwrite(data, 1, n, f_) != n) fail("{}: write failed: {}", path_, std::strerror(errno));
}

void AtomicFile::zeros(uint64_t n) {
  static const std::vector<uint8_t> z(1 << 16, 0);
  while (n > 0) {
    const uint64_t k = std::min<uint64_t>(n, z.size());
    write(z.data(), k);
    n -= k;
  }
}

void AtomicFile::commit() {
  bool ok = std::fflush(f_) == 0;
  ok = fsync(fileno(f_)) == 0 && ok;
  ok = std::fclose(f_) == 0 && ok;
  f_ = nullptr;
  if (!ok) {
    std::remove(tmp_.c_str());
    fail("{}: write failed: {}", path_, std::strerror(errno));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail("{}: rename failed: {}", path_, std::strerror(errno));
}

}  // namespace sluice
