// A memory-mapped safetensors file with a strictly validated header.
// Layout: u64 header length N | N bytes of JSON | data. Every tensor's byte
// range is checked against its dtype and shape, the file size, and the other
// tensors before anything is used.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace sluice {

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the data section
  int64_t numel() const;
};

// A tensor in memory: points into a mapped file.
struct TensorView {
  const TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;
  const std::string* file = nullptr;  // for messages
  uint64_t file_offset = 0;           // absolute offset of the first byte in the file
  DType dtype() const { return info->dtype; }
  const std::vector<int64_t>& shape() const { return info->shape; }
  int64_t numel() const { return info->numel(); }
  uint64_t nbytes() const { return info->end - info->begin; }
  const std::string& name() const { return info->name; }
};

class SafetensorsFile {
 public:
  // Opens and validates; throws sluice::Error naming the file (and tensor) on any problem.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Parses a header from raw bytes (used by open and by the fuzzer). `file_size` is the
  // total file size the header must fit in.
  static std::map<std::string, TensorInfo> parse_header(const uint8_t* bytes, uint64_t file_size,
                                                        const std::string& path, uint64_t* data_start,
                                                        std::map<std::string, std::string>* metadata);

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  TensorView get(const std::string& name) const;  // throws if absent
  uint64_t data_start() const { return data_start_; }
  uint64_t file_size() const { return size_; }
  // The whole file as mapped (for turning tensor pointers back into file offsets).
  const uint8_t* map_base() const { return map_; }

 private:
  std::string path_;
  int fd_ = -1;
  const uint8_t* map_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes a safetensors file (used by tests, the logits command and synthetic models).
struct TensorData {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace sluice
