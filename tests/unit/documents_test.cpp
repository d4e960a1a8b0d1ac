#include "text/documents.h"

#include <fstream>
#include <functional>

#include <gtest/gtest.h>

#include "support/test_support.h"
#include "util/error.h"

namespace sluice::text::documents_test {
namespace {

std::string write(const test::TempDir& tmp, const std::string& name, const std::string& content) {
  const std::string path = tmp.file(name);
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

using test::error_of;

TEST(Documents, JsonLinesTakeStringsAndTextFieldsAndSkipBlankLines) {
  auto tok = Tokenizer::load(test::fixture("../../models/sluice-k3-mini"));
  test::TempDir tmp;
  const auto path = write(tmp, "d.jsonl", "\"hello world\"\n\n  \r\n{\"text\": \"second one\", \"id\": 7}\n");
  const auto docs = read_jsonl_documents(*tok, path);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0], tok->encode("hello world"));
  EXPECT_EQ(docs[1], tok->encode("second one"));
}

TEST(Documents, TextFileIsOneDocumentByteForByte) {
  auto tok = Tokenizer::load(test::fixture("../../models/sluice-k3-mini"));
  test::TempDir tmp;
  const std::string text = "line one\nline two\n\n\"quoted\"";
  EXPECT_EQ(read_text_document(*tok, write(tmp, "d.txt", text)), tok->encode(text));
}

TEST(Documents, ErrorsNameTheFileAndLine) {
  auto tok = Tokenizer::load(test::fixture("../../models/sluice-k3-mini"));
  test::TempDir tmp;
  const auto bad = write(tmp, "bad.jsonl", "\"ok\"\n{not json\n");
  EXPECT_NE(error_of([&] { read_jsonl_documents(*tok, bad); }).find("bad.jsonl:2: not JSON"), std::string::npos);
  const auto num = write(tmp, "num.jsonl", "\"ok\"\n\n42\n");
  EXPECT_NE(error_of([&] { read_jsonl_documents(*tok, num); }).find("num.jsonl:3: expected a JSON string"),
            std::string::npos);
  const auto empty = write(tmp, "empty.jsonl", "\n \n");
  EXPECT_NE(error_of([&] { read_jsonl_documents(*tok, empty); }).find("empty.jsonl: no documents"), std::string::npos);
  EXPECT_NE(error_of([&] { read_text_document(*tok, tmp.file("missing.txt")); }).find("missing.txt: cannot open"),
            std::string::npos);
}

}  // namespace
}  // namespace sluice::text::documents_test
