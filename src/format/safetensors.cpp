#include "format/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "format/model_dir.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace sluice {

namespace {
constexpr uint64_t kMaxHeader = 100ull << 20;  // the format's own limit

// For a file cut short: what to do about its directory's download.
std::string truncated_advice(const std::string& path) {
  return incomplete_model_advice(std::filesystem::path(path).parent_path().string());
}

uint64_t read_u64le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {

// One tensor's header entry: dtype, shape and data_offsets checked against each
// other and against the data section's `data_size` bytes.
TensorInfo parse_tensor_entry(const std::string& path, const std::string& name, const nlohmann::json& v,
                              uint64_t data_size) {
  if (!v.is_object()) fail("{}: tensor '{}': entry must be an object", path, name);
  auto dt = v.find("dtype");
  auto sh = v.find("shape");
  auto off = v.find("data_offsets");
  if (dt == v.end() || !dt->is_string()) fail("{}: tensor '{}': missing or non-string 'dtype'", path, name);
  if (sh == v.end() || !sh->is_array()) fail("{}: tensor '{}': missing or non-array 'shape'", path, name);
  if (off == v.end() || !off->is_array() || off->size() != 2)
    fail("{}: tensor '{}': 'data_offsets' must be an array of two integers", path, name);
  TensorInfo t;
  t.name = name;
  auto d = parse_dtype(dt->get<std::string>());
  if (!d) fail("{}: tensor '{}': unknown dtype '{}'", path, name, dt->get<std::string>());
  t.dtype = *d;
  uint64_t count = 1;
  bool overflow = false;
  for (const auto& s : *sh) {
    if (!s.is_number_unsigned()) fail("{}: tensor '{}': shape entries must be non-negative integers", path, name);
    uint64_t dim = s.get<uint64_t>();
    if (dim > (1ull << 48)) fail("{}: tensor '{}': dimension {} is implausibly large", path, name, dim);
    if (dim != 0 && count > UINT64_MAX / dim) overflow = true;
    count *= dim;
    t.shape.push_back(int64_t(dim));
  }
  for (const auto& o : *off)
    if (!o.is_number_unsigned()) fail("{}: tensor '{}': data_offsets must be non-negative integers", path, name);
  t.begin = (*off)[0].get<uint64_t>();
  t.end = (*off)[1].get<uint64_t>();
  if (t.end < t.begin) fail("{}: tensor '{}': data_offsets [{}, {}] end before begin", path, name, t.begin, t.end);
  if (t.end > data_size)
    fail("{}: tensor '{}': data_offsets [{}, {}] past the end of the data section ({} bytes): the file is "
         "truncated; {}",
         path, name, t.begin, t.end, data_size, truncated_advice(path));
  uint64_t esz = uint64_t(dtype_size(t.dtype));
  if (overflow || count > UINT64_MAX / esz || count * esz != t.end - t.begin)
    fail("{}: tensor '{}': {} bytes stored but dtype {} and shape {} need {}", path, name, t.end - t.begin,
         dtype_name(t.dtype), sh->dump(), overflow ? std::string("more than 2^64") : std::to_string(count * esz));
  return t;
}

}  // namespace

std::map<std::string, TensorInfo> SafetensorsFile::parse_header(const uint8_t* bytes, uint64_t file_size,
                                                                const std::string& path, uint64_t* data_start,
                                                                std::map<std::string, std::string>* metadata) {
  if (file_size < 8)
    fail("{}: truncated safetensors file: {} bytes, the header length alone needs 8; {}", path, file_size,
         truncated_advice(path));
  uint64_t n = read_u64le(bytes);
  if (n > kMaxHeader) fail("{}: header length {} exceeds the 100 MiB limit (corrupt file?)", path, n);
  if (n > file_size - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes): truncated or not a safetensors file; {}",
         path, n, file_size, truncated_advice(path));
  *data_start = 8 + n;
  const uint64_t data_size = file_size - 8 - n;

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(reinterpret_cast<const char*>(bytes + 8), reinterpret_cast<const char*>(bytes + 8 + n));
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: header is not valid JSON (byte {} of the header): {}", path, e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double
    fail("{}: header is not valid JSON: {}", path, e.what());
  }
  if (!j.is_object()) fail("{}: header must be a JSON object", path);

  std::map<std::string, TensorInfo> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("{}: __metadata__ must be an object", path);
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail("{}: __metadata__ value '{}' must be a string", path, m.key());
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    out.emplace(name, parse_tensor_entry(path, name, v, data_size));
  }

  // Overlap check over the byte ranges (zero-sized tensors take no space).
  std::vector<const TensorInfo*> by_begin;
  for (const auto& [_, t] : out)
    if (t.end > t.begin) by_begin.push_back(&t);
  std::sort(by_begin.begin(), by_begin.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_begin.size(); ++i)
    if (by_begin[i]->begin < by_begin[i - 1]->end)
      fail("{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", path, by_begin[i - 1]->name, by_begin[i - 1]->begin,
           by_begin[i - 1]->end, by_begin[i]->name, by_begin[i]->begin, by_begin[i]->end);
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st;
  if (fstat(fd_, &st) != 0) {
    int e = errno;
    ::close(fd_);
    fail("{}: cannot stat: {}", path, std::strerror(e));
  }
  size_ = uint64_t(st.st_size);
  if (size_ > 0) {
    // Private and writable so that the spine streamer can read weights into
    // their own addresses with O_DIRECT and drop them again (io/spine_streamer.h);
    // nothing is ever written back to the file. No commit charge is reserved:
    // only pages the streamer actually reads into become private memory.
    void* m = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd_, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      ::close(fd_);
      fail("{}: mmap failed: {}", path, std::strerror(e));
    }
    map_ = static_cast<const uint8_t*>(m);
  }
  try {
    tensors_ = parse_header(map_, size_, path_, &data_start_, &metadata_);
  } catch (...) {
    if (map_) munmap(const_cast<uint8_t*>(map_), size_);
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(const_cast<uint8_t*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
}

TensorView SafetensorsFile::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("{}: no tensor named '{}'", path_, name);
  TensorView v;
  v.info = &it->second;
  v.data = map_ + data_start_ + it->second.begin;
  v.file = &path_;
  v.file_offset = data_start_ + it->second.begin;
  return v;
}

void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const auto& t : tensors) {
    uint64_t need = uint64_t(dtype_size(t.dtype));
    for (auto d : t.shape) need *= uint64_t(d);
    if (need != t.bytes.size())
      fail("write_safetensors {}: tensor '{}' has {} bytes, shape needs {}", path, t.name, t.bytes.size(), need);
    h[t.name] = {{"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}, {"data_offsets", {off, off + need}}};
    off += need;
  }
  std::string js = h.dump();
  while ((js.size() + 8) % 8) js.push_back(' ');
  AtomicFile f(path);
  uint8_t len[8];
  const uint64_t n = js.size();
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));
  f.write(len, 8);
  f.write(js.data(), js.size());
  for (const auto& t : tensors) f.write(t.bytes.data(), t.bytes.size());
  f.commit();
}

}  // namespace sluice
