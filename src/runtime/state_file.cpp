#include "runtime/state_file.h"


#include <algorithm>
#include <cstring>
#include <fstream>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/xxh3.h"

namespace sluice {

namespace {
constexpr char kMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'S', 'T'};
constexpr uint32_t kMaxIdentity = 4096;

class Writer {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  std::vector<uint8_t> out;
};

// Reads fields in order; every read is checked against the bytes left.
class StateFileReader {
 public:
  StateFileReader(std::span<const uint8_t> b, const std::string& name) : b_(b), name_(name) {}
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  const uint8_t* take(uint64_t n, const char* what) {
    need(n, what);
    const uint8_t* p = b_.data() + at_;
    at_ += n;
    return p;
  }
  uint64_t left() const { return b_.size() - at_; }
  uint64_t offset() const { return at_; }
  [[noreturn]] void truncated(const char* what) const {
    fail("{}: truncated state file: {} at byte {} runs past its end ({} bytes)", name_, what, at_, b_.size());
  }

 private:
  void need(uint64_t n, const char* what) const {
    if (n > left()) truncated(what);
  }
  std::span<const uint8_t> b_;
  const std::string& name_;
  uint64_t at_ = 0;
};

// Magic, version and identity: what every reader checks first.
std::string read_preamble(StateFileReader& r, const std::string& name) {
  const uint8_t* m = r.take(sizeof(kMagic), "the magic");
  if (std::memcmp(m, kMagic, sizeof(kMagic)) != 0) fail("{}: not a sluice state file (no SLUICEST magic)", name);
  const uint32_t version = r.get<uint32_t>("the version");
  if (version != kStateFileVersion)
    fail("{}: state file version {}, this build reads version {}", name, version, kStateFileVersion);
  const uint32_t n = r.get<uint32_t>("the identity length");
  if (n > kMaxIdentity) fail("{}: identity of {} bytes (at most {})", name, n, kMaxIdentity);
  const uint8_t* id = r.take(n, "the identity");
  return std::string(reinterpret_cast<const char*>(id), n);
}

std::vector<int32_t> read_tokens(StateFileReader& r, const std::string& name) {
  const uint64_t n = r.get<uint64_t>("the position count");
  if (n > r.left() / sizeof(int32_t)) fail("{}: {} positions do not fit in the {} bytes left", name, n, r.left());
  std::vector<int32_t> t(n);
  if (n > 0) std::memcpy(t.data(), r.take(n * sizeof(int32_t), "the tokens"), n * sizeof(int32_t));
  return t;
}
}  // namespace

std::vector<uint8_t> encode_state(const SessionImage& image, const std::string& identity) {
  if (identity.size() > kMaxIdentity) fail("state file: identity of {} bytes (at most {})", identity.size(), kMaxIdentity);
  Writer w;
  w.bytes(kMagic, sizeof(kMagic));
  w.put<uint32_t>(kStateFileVersion);
  w.put<uint32_t>(uint32_t(identity.size()));
  w.bytes(identity.data(), identity.size());
  w.put<uint64_t>(uint64_t(image.tokens.size()));
  w.bytes(image.tokens.data(), image.tokens.size() * sizeof(int32_t));
  w.put<uint32_t>(uint32_t(image.layers.size()));
  for (const auto& layer : image.layers) {
    w.put<uint32_t>(uint32_t(layer.size()));
    for (const SavedTensor& t : layer) {
      if (int64_t(t.values.size()) != t.rows * t.cols) fail("state file: a tensor of [{}, {}] holds {} values", t.rows, t.cols, t.values.size());
      w.put<uint8_t>(t.per_position ? 1 : 0);
      w.put<int64_t>(t.rows);
      w.put<int64_t>(t.cols);
      w.bytes(t.values.data(), t.values.size() * sizeof(float));
    }
  }
  w.put<uint64_t>(xxh3::hash64(w.out.data(), w.out.size()));
  return std::move(w.out);
}

DecodedState decode_state(std::span<const uint8_t> bytes, const std::string& name) {
  StateFileReader r(bytes, name);
  DecodedState d;
  d.identity = read_preamble(r, name);
  if (bytes.size() < r.offset() + sizeof(uint64_t)) r.truncated("the checksum");
  const size_t body = bytes.size() - sizeof(uint64_t);
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + body, sizeof(stored));
  const uint64_t actual = xxh3::hash64(bytes.data(), body);
  if (stored != actual)
    fail("{}: corrupt or truncated state file: XXH3 of its {} bytes is {:016x}, the file says {:016x}", name, body,
         actual, stored);
  StateFileReader in(bytes.first(body), name);
  read_preamble(in, name);
  d.image.tokens = read_tokens(in, name);
  const uint64_t positions = d.image.tokens.size();
  const uint32_t n_layers = in.get<uint32_t>("the layer count");
  // Each layer takes at least its tensor count.
  if (n_layers > in.left() / sizeof(uint32_t)) fail("{}: {} layers do not fit in the {} bytes left", name, n_layers, in.left());
  d.image.layers.resize(n_layers);
  for (uint32_t l = 0; l < n_layers; ++l) {
    const uint32_t n_tensors = in.get<uint32_t>("a tensor count");
    constexpr uint64_t kTensorHeader = 1 + 2 * sizeof(int64_t);
    if (n_tensors > in.left() / kTensorHeader)
      fail("{}: layer {}: {} tensors do not fit in the {} bytes left", name, l, n_tensors, in.left());
    for (uint32_t i = 0; i < n_tensors; ++i) {
      SavedTensor t;
      const uint8_t pp = in.get<uint8_t>("a tensor's kind");
      if (pp > 1) fail("{}: layer {} tensor {}: kind {} at byte {} (0 or 1)", name, l, i, pp, in.offset() - 1);
      t.per_position = pp == 1;
      t.rows = in.get<int64_t>("a tensor's rows");
      t.cols = in.get<int64_t>("a tensor's columns");
      const uint64_t floats_left = in.left() / sizeof(float);
      if (t.rows < 0 || t.cols < 0 || (t.cols > 0 && uint64_t(t.rows) > floats_left / uint64_t(t.cols)))
        fail("{}: layer {} tensor {}: [{}, {}] does not fit in the {} bytes left at byte {}", name, l, i, t.rows, t.cols,
             in.left(), in.offset());
      if (t.per_position && uint64_t(t.rows) != positions)
        fail("{}: layer {} tensor {}: {} rows per position for {} positions", name, l, i, t.rows, positions);
      const uint64_t n = uint64_t(t.rows) * uint64_t(t.cols);
      t.values.resize(n);
      if (n > 0) std::memcpy(t.values.data(), in.take(n * sizeof(float), "tensor values"), n * sizeof(float));
      d.image.layers[l].push_back(std::move(t));
    }
  }
  if (in.left() != 0) fail("{}: {} bytes after the last layer at byte {}", name, in.left(), in.offset());
  return d;
}

void write_state_file(const std::string& path, const SessionImage& image, const std::string& identity) {
  const std::vector<uint8_t> bytes = encode_state(image, identity);
  AtomicFile f(path, 0600);  // a conversation's state: the owner's alone
  f.write(bytes.data(), bytes.size());
  f.commit();
}

namespace {
std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open state file", path);
  f.seekg(0, std::ios::end);
  const std::streamoff n = f.tellg();
  if (n < 0) fail("{}: cannot read state file", path);
  f.seekg(0);
  std::vector<uint8_t> b(static_cast<size_t>(n));
  if (n > 0 && !f.read(reinterpret_cast<char*>(b.data()), n)) fail("{}: cannot read state file ({} bytes)", path, n);
  return b;
}
}  // namespace

SessionImage read_state_file(const std::string& path, const std::string& identity) {
  DecodedState d = decode_state(read_all(path), path);
  if (d.identity != identity)
    fail("{}: state made by another model, device or kernel set ({}); this one is {}", path, d.identity, identity);
  return std::move(d.image);
}

StateFileHeader read_state_header(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open state file", path);
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  if (size < 0) fail("{}: cannot read state file", path);
  f.seekg(0);
  // The preamble and the token count first, then exactly the tokens.
  std::vector<uint8_t> head(static_cast<size_t>(std::min<std::streamoff>(size, 16 + kMaxIdentity + 8)));
  f.read(reinterpret_cast<char*>(head.data()), std::streamsize(head.size()));
  StateFileReader r(head, path);
  StateFileHeader h;
  h.identity = read_preamble(r, path);
  const uint64_t n = r.get<uint64_t>("the position count");
  const uint64_t at = r.offset();
  if (n > (uint64_t(size) - at) / sizeof(int32_t)) fail("{}: {} positions do not fit in the file ({} bytes)", path, n, size);
  h.tokens.resize(n);
  f.seekg(std::streamoff(at));
  if (n > 0 && !f.read(reinterpret_cast<char*>(h.tokens.data()), std::streamsize(n * sizeof(int32_t))))
    fail("{}: cannot read its {} tokens", path, n);
  h.file_bytes = uint64_t(size);
  return h;
}

}  // namespace sluice
