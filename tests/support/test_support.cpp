#include "support/test_support.h"

#include "util/error.h"
#include "support/test_device.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "format/safetensors.h"
#include "util/numeric.h"

namespace sluice::test {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// $SLUICE_FIXTURES_DIR moves the fixtures and $SLUICE_TEST_BINARY the sluice
// binary (test binaries carried to another machine, scripts/test-gpu.sh).
std::string fixture(const std::string& rel) {
  const char* moved = std::getenv("SLUICE_FIXTURES_DIR");
  return std::string(moved && *moved ? moved : SLUICE_FIXTURES) + "/" + rel;
}
std::string sluice_binary() {
  const char* e = std::getenv("SLUICE_TEST_BINARY");
  return e && *e ? e : SLUICE_BINARY;
}

LoadOptions on_test_device() {
  LoadOptions o;
  const char* e = std::getenv("SLUICE_TEST_DEVICE");
  if (e && *e) o.device = parse_device(e);
  const char* on = std::getenv("SLUICE_TEST_EXPERTS_ON");
  if (on && *on) o.experts_on = parse_experts_on(on);
  return o;
}

std::vector<double> read_f64(const std::string& file, const std::string& name, std::vector<int64_t>* shape) {
  SafetensorsFile f(file);
  TensorView t = f.get(name);
  if (shape) *shape = t.shape();
  std::vector<double> out(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::F32: { float v; std::memcpy(&v, t.data + 4 * i, 4); out[size_t(i)] = v; break; }
      case DType::F64: { double v; std::memcpy(&v, t.data + 8 * i, 8); out[size_t(i)] = v; break; }
      case DType::BF16: { uint16_t v; std::memcpy(&v, t.data + 2 * i, 2); out[size_t(i)] = bf16_to_f32(v); break; }
      default: throw std::runtime_error("read_f64: unsupported dtype for " + name);
    }
  }
  return out;
}

std::vector<int64_t> read_i64(const std::string& file, const std::string& name) {
  SafetensorsFile f(file);
  TensorView t = f.get(name);
  std::vector<int64_t> out(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::I64) std::memcpy(&out[size_t(i)], t.data + 8 * i, 8);
    else if (t.dtype() == DType::I32) { int32_t v; std::memcpy(&v, t.data + 4 * i, 4); out[size_t(i)] = v; }
    else throw std::runtime_error("read_i64: unsupported dtype for " + name);
  }
  return out;
}

std::vector<int32_t> spread_prompt(int64_t n, int64_t vocab) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(int32_t(3 + (i * 7919 + i / 13) % (vocab - 3)));
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double max_row_rel_error(const std::vector<double>& a, const std::vector<double>& b, int64_t cols) {
  if (a.size() != b.size() || cols <= 0 || b.size() % size_t(cols)) return INFINITY;
  double worst = 0.0;
  for (size_t r = 0; r < b.size() / size_t(cols); ++r) {
    double num = 0, den = 0;
    for (int64_t c = 0; c < cols; ++c) {
      double d = a[r * size_t(cols) + size_t(c)] - b[r * size_t(cols) + size_t(c)];
      num += d * d;
      den += b[r * size_t(cols) + size_t(c)] * b[r * size_t(cols) + size_t(c)];
    }
    double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    if (!(rel <= worst)) worst = rel;  // NaN propagates as a failure
  }
  return worst;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "sluice-test-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}
TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string base64(const std::string& s) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string o;
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(s[i])) << 16 | uint32_t(uint8_t(s[i + 1])) << 8 | uint8_t(s[i + 2]);
    o += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], t[v & 63]};
  }
  if (s.size() - i == 1) {
    uint32_t v = uint32_t(uint8_t(s[i])) << 16;
    o += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
  } else if (s.size() - i == 2) {
    uint32_t v = uint32_t(uint8_t(s[i])) << 16 | uint32_t(uint8_t(s[i + 1])) << 8;
    o += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
  }
  return o;
}

std::string copy_golden(const TempDir& tmp, const std::string& name) {
  namespace fs = std::filesystem;
  std::string dst = tmp.file(name);
  fs::copy(fixture("golden/" + name), dst);
  for (auto& e : fs::directory_iterator(dst)) fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  return dst;
}

void write_k3_tokenizer(const std::string& d) {
  std::filesystem::create_directories(d);
  std::string ranks;
  int r = 0;
  for (int b = 0; b < 256; ++b) ranks += base64(std::string(1, char(b))) + " " + std::to_string(r++) + "\n";
  for (std::string tok : {"me", "ss", "age", "mess", "message", "ro", "le", "role", "=\"", "\""})
    ranks += base64(tok) + " " + std::to_string(r++) + "\n";
  std::ofstream(d + "/tiktoken.model") << ranks;
  auto special = [&](int off, const char* content) {
    return "\"" + std::to_string(r + off) + "\": {\"content\": \"" + content + "\", \"special\": true}";
  };
  std::ofstream(d + "/tokenizer_config.json")
      << "{\"tokenizer_class\": \"TikTokenTokenizer\", \"eos_token\": \"<|end_of_msg|>\", \"added_tokens_decoder\": {"
      << special(0, "[BOS]") << ", " << special(1, "[EOS]") << ", " << special(2, "<|end_of_msg|>") << ", "
      << special(3, "<|open|>") << ", " << special(4, "<|close|>") << ", " << special(5, "<|sep|>") << "}}";
}

namespace {
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
std::string slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

CommandResult run_sluice(const std::vector<std::string>& args) {
  TempDir tmp;
  std::string cmd = shell_quote(sluice_binary());
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " >" + shell_quote(tmp.file("out")) + " 2>" + shell_quote(tmp.file("err")) + " </dev/null";
  int rc = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  r.out = slurp(tmp.file("out"));
  r.err = slurp(tmp.file("err"));
  return r;
}

}  // namespace sluice::test
