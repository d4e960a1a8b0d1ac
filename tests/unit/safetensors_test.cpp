// The safetensors reader rejects every malformed header with an error naming
// the file and (where there is one) the tensor, and never crashes.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "format/checkpoint.h"
#include "format/safetensors.h"
#include "support/test_support.h"
#include "util/error.h"

namespace sluice::safetensors_test {
namespace {

std::string raw_file(const std::string& header, size_t data_bytes) {
  std::string s(8, '\0');
  uint64_t n = header.size();
  std::memcpy(s.data(), &n, 8);
  return s + header + std::string(data_bytes, '\x01');
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

std::string error_of(const std::string& path) {
  try {
    SafetensorsFile f(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripsWrittenTensors) {
  test::TempDir tmp;
  std::vector<uint8_t> a(24), b(2);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(i);
  write_safetensors(tmp.file("x.safetensors"),
                    {{"a", DType::F32, {2, 3}, a}, {"b", DType::BF16, {1}, b}}, {{"format", "pt"}});
  SafetensorsFile f(tmp.file("x.safetensors"));
  ASSERT_EQ(f.tensors().size(), 2u);
  auto t = f.get("a");
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.dtype(), DType::F32);
  EXPECT_EQ(std::memcmp(t.data, a.data(), 24), 0);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(t.file_offset % 8, 0u);
}

struct BadCase {
  const char* label;
  std::string bytes;
  const char* must_mention;
};

TEST(Safetensors, RejectsMalformedFilesWithNamedErrors) {
  test::TempDir tmp;
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::vector<BadCase> cases = {
      {"empty", "", "truncated"},
      {"short length", std::string(5, '\0'), "truncated"},
      {"header past end", raw_file(ok, 8).substr(0, 20), "past the end"},
      {"not json", raw_file("{nope", 0), "not valid JSON"},
      {"number beyond double", raw_file(R"({"x":1e999})", 0), "not valid JSON"},
      {"not object", raw_file("[1,2]", 0), "JSON object"},
      {"unknown dtype", raw_file(R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8), "'w'"},
      {"byte count", raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "need 12"},
      {"offsets past data", raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "truncated"},
      {"end before begin", raw_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8), "end before begin"},
      {"overlap", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12), "overlap"},
      {"negative dim", raw_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "'w'"},
      {"missing offsets", raw_file(R"({"w":{"dtype":"F32","shape":[2]}})", 8), "data_offsets"},
      {"overflowing shape", raw_file(R"({"w":{"dtype":"F32","shape":[281474976710656,281474976710656],"data_offsets":[0,8]}})", 8), "'w'"},
      {"huge header length", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "limit"},
  };
  for (const auto& c : cases) {
    std::string path = tmp.file(std::string(c.label) + ".safetensors");
    write(path, c.bytes);
    std::string err = error_of(path);
    EXPECT_NE(err.find(path), std::string::npos) << c.label << ": " << err;
    EXPECT_NE(err.find(c.must_mention), std::string::npos) << c.label << ": " << err;
  }
}

TEST(Checkpoint, ShardedIndexIsFollowedExactly) {
  test::TempDir tmp;
  std::vector<uint8_t> four(4, 0);
  write_safetensors(tmp.file("part-a.safetensors"), {{"x", DType::F32, {1}, four}});
  write_safetensors(tmp.file("zz-b.safetensors"), {{"y", DType::F32, {1}, four}});
  write(tmp.file("model.safetensors.index.json"),
        R"({"metadata":{},"weight_map":{"x":"part-a.safetensors","y":"zz-b.safetensors"}})");
  Checkpoint c(tmp.path());
  EXPECT_TRUE(c.has("x"));
  EXPECT_TRUE(c.has("y"));
  EXPECT_EQ(c.files().size(), 2u);

  write(tmp.file("model.safetensors.index.json"), R"({"weight_map":{"x":"zz-b.safetensors"}})");
  try {
    Checkpoint bad(tmp.path());
    FAIL() << "index naming the wrong shard accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
  write(tmp.file("model.safetensors.index.json"), R"({"weight_map":{"x":"../etc/passwd"}})");
  EXPECT_THROW(Checkpoint{tmp.path()}, Error);
}

}  // namespace
}  // namespace sluice::safetensors_test
