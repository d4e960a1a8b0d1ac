// Writing a file so that it appears complete or not at all: data goes to
// PATH.tmp, which is flushed, fsynced and renamed over PATH on commit(); if the
// writer is destroyed without commit() the temporary file is removed.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "util/error.h"

namespace sluice {

// A write that failed because the file system is full (ENOSPC, or EDQUOT: the
// user's quota): a caller holding a cache can make room and try again.
class DiskFull : public Error {
 public:
  explicit DiskFull(const std::string& what) : Error(what) {}
};

class AtomicFile {
 public:
  // `mode`: the new file's permissions (less the umask); 0600 for private data.
  explicit AtomicFile(std::string path, mode_t mode = 0644);  // throws sluice::Error naming the file
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, uint64_t n);  // throws on a short write (DiskFull when out of space)
  void zeros(uint64_t n);
  void commit();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void failed(const char* what, int err) const;
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
};

}  // namespace sluice
