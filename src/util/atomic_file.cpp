#include "util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace sluice {

AtomicFile::AtomicFile(std::string path, mode_t mode) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  // The mode is set at creation (no window in which others may open it); O_TRUNC for a left-over temporary.
  const int fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) failed("cannot create", errno);
  f_ = ::fdopen(fd, "wb");
  if (!f_) {
    const int err = errno;
    ::close(fd);
    std::remove(tmp_.c_str());
    failed("cannot create", err);
  }
}

AtomicFile::~AtomicFile() {
  if (f_) {
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }
}

void AtomicFile::failed(const char* what, int err) const {
  const bool creating = std::strcmp(what, "cannot create") == 0;  // names the temporary file, as it was made
  const std::string msg = fmt::format("{}: {}: {}", creating ? tmp_ : path_, what, std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) throw DiskFull(msg);
  throw Error(msg);
}

void AtomicFile::write(const void* data, uint64_t n) {
  if (n && std::fwrite(data, 1, n, f_) != n) failed("write failed", errno);
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
  int err = 0;
  if (std::fflush(f_) != 0) err = errno;
  if (fsync(fileno(f_)) != 0 && !err) err = errno;
  if (std::fclose(f_) != 0 && !err) err = errno;
  f_ = nullptr;
  if (err) {
    std::remove(tmp_.c_str());
    failed("write failed", err);
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) failed("rename failed", errno);
}

}  // namespace sluice
