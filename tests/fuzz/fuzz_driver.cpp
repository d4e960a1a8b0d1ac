// A small mutation fuzzer for targets written against the libFuzzer API
// (LLVMFuzzerTestOneInput), so they also build with -fsanitize=fuzzer under
// clang. Debian's g++ has no libFuzzer, so CI runs this driver in the
// AddressSanitizer build: seed inputs from a corpus directory, then random
// mutations for a fixed time, from a seed that changes every run (printed). A
// crash or sanitizer report fails the test; the input that caused it is written
// to fuzz-crash-<target>.bin first. The libFuzzer tree (-DSLUICE_FUZZ=ON) runs
// the same targets coverage-guided.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
std::vector<uint8_t> g_current;
std::string g_name;

void save_current() {
  std::string path = "fuzz-crash-" + g_name + ".bin";
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(g_current.data(), 1, g_current.size(), f);
    std::fclose(f);
  }
}

void mutate(std::vector<uint8_t>& v, std::mt19937_64& rng, const std::vector<std::vector<uint8_t>>& corpus) {
  const int ops = 1 + int(rng() % 4);
  for (int k = 0; k < ops; ++k) {
    switch (rng() % 7) {
      case 0:  // flip a bit
        if (!v.empty()) v[rng() % v.size()] ^= uint8_t(1u << (rng() % 8));
        break;
      case 1:  // random byte
        if (!v.empty()) v[rng() % v.size()] = uint8_t(rng());
        break;
      case 2:  // insert bytes
        v.insert(v.begin() + long(v.empty() ? 0 : rng() % (v.size() + 1)), size_t(1 + rng() % 8), uint8_t(rng()));
        break;
      case 3:  // erase a range
        if (!v.empty()) {
          size_t a = rng() % v.size(), n = 1 + rng() % std::min<size_t>(16, v.size() - a);
          v.erase(v.begin() + long(a), v.begin() + long(a + n));
        }
        break;
      case 4:  // interesting values
        if (!v.empty()) {
          static const uint8_t vals[] = {0, 0xff, 0x7f, 0x80, '"', '{', '}', '[', ']', ',', ':', '-', '9', '\\'};
          v[rng() % v.size()] = vals[rng() % sizeof(vals)];
        }
        break;
      case 5:  // splice with another corpus entry
        if (!corpus.empty()) {
          const auto& o = corpus[rng() % corpus.size()];
          if (!o.empty()) {
            size_t a = rng() % o.size(), n = 1 + rng() % (o.size() - a);
            v.insert(v.begin() + long(v.empty() ? 0 : rng() % (v.size() + 1)), o.begin() + long(a),
                     o.begin() + long(a + n));
          }
        }
        break;
      case 6:  // truncate
        if (!v.empty()) v.resize(rng() % v.size());
        break;
    }
  }
  if (v.size() > (1u << 16)) v.resize(1u << 16);
}
}  // namespace

// usage: fuzz_<target> CORPUS_DIR SECONDS [SEED [MAX_INPUTS]]
// CI passes a fixed seed and input count, so a run there is a reproducible
// regression check; exploring (a new seed each run) is for runs by hand.
int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR SECONDS [SEED [MAX_INPUTS]]\n", argv[0]);
    return 2;
  }
  g_name = std::filesystem::path(argv[0]).filename().string();
  const double seconds = std::atof(argv[2]);
  // A new seed each run unless one is given (the run prints it, to repeat it).
  const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10)
                                 : uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  const uint64_t max_inputs = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : UINT64_MAX;
  std::vector<std::vector<uint8_t>> corpus;
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
    std::ifstream in(e.path(), std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (corpus.empty()) corpus.emplace_back();
  std::atexit(+[] {});
  for (const auto& c : corpus) {
    g_current = c;
    LLVMFuzzerTestOneInput(c.data(), c.size());
  }
  std::mt19937_64 rng(seed);
  std::fprintf(stderr, "%s: seed %llu (pass it as the third argument to repeat this run)\n", g_name.c_str(),
               (unsigned long long)seed);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  uint64_t runs = 0;
  std::set_terminate([] {
    save_current();
    std::abort();
  });
  while (std::chrono::steady_clock::now() < end && runs < max_inputs) {
    for (int i = 0; i < 64 && runs < max_inputs; ++i, ++runs) {
      g_current = corpus[rng() % corpus.size()];
      mutate(g_current, rng, corpus);
      save_current();  // cheap insurance: the last input is on disk if a sanitizer aborts
      LLVMFuzzerTestOneInput(g_current.data(), g_current.size());
    }
  }
  std::printf("%s: %llu inputs, seed %llu, no crash\n", g_name.c_str(), (unsigned long long)runs,
              (unsigned long long)seed);
  std::remove(("fuzz-crash-" + g_name + ".bin").c_str());
  return 0;
}
