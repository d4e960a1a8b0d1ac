// Helpers shared by the test binaries: fixture paths, reading reference
// tensors, relative-error checks, temporary directories, running the CLI.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sluice::test {

std::string fixture(const std::string& rel);  // path under tests/fixtures
std::string sluice_binary();

// Reads a whole tensor converted to double / int64 (F32, F64, BF16, I64, I32).
std::vector<double> read_f64(const std::string& file, const std::string& name, std::vector<int64_t>* shape = nullptr);
std::vector<int64_t> read_i64(const std::string& file, const std::string& name);

// n prompt tokens in [3, vocab), spread over the vocabulary (the same list every time).
std::vector<int32_t> spread_prompt(int64_t n, int64_t vocab);
// a and b hold the same floats bit for bit.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b);

// max over rows of ||a_row - b_row|| / ||b_row|| for [rows, cols] data.
double max_row_rel_error(const std::vector<double>& a, const std::vector<double>& b, int64_t cols);

// A fresh directory removed at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The message of the sluice::Error that f() throws; "" when it throws none.
std::string error_of(const std::function<void()>& f);

// Copies tests/fixtures/golden/NAME into a writable directory under `tmp`.
std::string copy_golden(const TempDir& tmp, const std::string& name);

// Standard base64 with padding (for writing tiktoken rank files in tests).
std::string base64(const std::string& bytes);

// Writes a small Kimi-K3-shaped tiktoken tokenizer into DIR (created): the 256
// byte ranks, a few merges, then [BOS] [EOS] <|end_of_msg|> <|open|> <|close|>
// <|sep|> as specials in K3's order (eos <|end_of_msg|>, no chat template).
void write_k3_tokenizer(const std::string& dir);

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};
// Runs the sluice binary with the given arguments (shell-quoted here).
CommandResult run_sluice(const std::vector<std::string>& args);

}  // namespace sluice::test
