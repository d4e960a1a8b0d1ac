// For fuzz targets whose parser reads files: a directory of this process,
// created once, where an input is written under a given name.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace sluice::fuzz {

inline const std::string& scratch_dir() {
  static const std::string d = [] {
    const auto p = std::filesystem::temp_directory_path() / ("sluice_fuzz_" + std::to_string(getpid()));
    std::filesystem::create_directories(p);
    return p.string();
  }();
  return d;
}

inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  return path;
}

// Points DIR/name at an existing file (a checkpoint shard the input's JSON refers to).
inline void link_file(const std::string& dir, const std::string& name, const std::string& target) {
  std::error_code ec;
  std::filesystem::remove(dir + "/" + name, ec);
  std::filesystem::create_symlink(target, dir + "/" + name, ec);
}

}  // namespace sluice::fuzz
