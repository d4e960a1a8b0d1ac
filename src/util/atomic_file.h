// Writing a file so that it appears complete or not at all: data goes to
// PATH.tmp, which is flushed, fsynced and renamed over PATH on commit(); if the
// writer is destroyed without commit() the temporary file is removed.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace sluice {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // throws sluice::Error naming the file
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, uint64_t n);  // throws on a short write
  void zeros(uint64_t n);
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
};

}  // namespace sluice
