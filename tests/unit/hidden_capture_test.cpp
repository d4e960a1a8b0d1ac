// The hidden-state capture drafters read (model/model.h HiddenCapture,
// Session::capture_hidden): the captured rows are the target's own layer
// outputs bit for bit, over prefill chunks and verification batches, capturing
// changes none of the target's outputs, and rejected rows roll back.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "runtime/session.h"
#include "support/test_device.h"
#include "support/test_support.h"

namespace sluice::hidden_capture_test {
namespace {

std::vector<int32_t> prompt_of(const Model& m, int64_t n) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(int32_t((7 + 37 * i) % m.info().vocab));
  return p;
}

TEST(HiddenCapture, RowsAreTheLayerOutputsBitForBit) {
  auto model = load_model(test::fixture("golden/kimi_k3_tiny"), test::on_test_device());
  const int64_t D = model->info().hidden;
  const std::vector<int64_t> layers{5, 0, 3};  // any order, the row follows it
  const auto prompt = prompt_of(*model, 11), more = std::vector<int32_t>{5, 9, 14, 2};
  Session s(*model), t(*model);
  s.set_prefill_chunk(4);  // several prefill passes
  t.set_prefill_chunk(4);
  s.capture_hidden(layers);
  const std::vector<float> plain_logits = t.feed(prompt);
  EXPECT_EQ(s.feed(prompt), plain_logits) << "capturing changes the target's output";
  ForwardTrace trace;
  Session r(*model);
  r.set_prefill_chunk(4);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), more.begin(), more.end());
  r.feed_all(all, &trace);
  EXPECT_EQ(s.feed_all(more), t.feed_all(more));  // a verification-style batch
  HiddenCapture* c = s.hidden_capture();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->start, 0);
  const int64_t P = int64_t(all.size()), W = c->width();
  ASSERT_EQ(int64_t(c->rows.size()), P * W);
  for (int64_t p = 0; p < P; ++p)
    for (size_t j = 0; j < layers.size(); ++j) {
      const float* got = c->rows.data() + p * W + int64_t(j) * D;
      const float* want = trace.hidden[size_t(layers[j])].data() + p * D;
      ASSERT_TRUE(std::equal(got, got + D, want)) << "position " << p << ", layer " << layers[j];
    }
  // s fed the prompt layer by layer (a span of chunks of 4, Model::forward_span); chunk by chunk
  // the capture holds the same rows.
  ASSERT_GT(s.prefill_piece(), int64_t(prompt.size()));
  Session q(*model);
  q.set_prefill_chunk(4);
  q.set_prefill_span(0);
  q.capture_hidden(layers);
  EXPECT_EQ(q.feed(prompt), plain_logits);
  q.feed_all(more);
  EXPECT_EQ(q.hidden_capture()->rows, c->rows) << "chunk by chunk and layer by layer capture different rows";
}

TEST(HiddenCapture, RollbackDropsRejectedRows) {
  auto model = load_model(test::fixture("golden/kimi_k3_tiny"), test::on_test_device());
  const auto prompt = prompt_of(*model, 6);
  Session s(*model);
  s.capture_hidden({1, 4});
  s.feed(prompt);
  HiddenCapture& c = *s.hidden_capture();
  const int64_t W = c.width();
  const std::vector<float> taken = c.take(s.position());
  EXPECT_EQ(int64_t(taken.size()), 6 * W);
  EXPECT_EQ(c.start, 6);
  EXPECT_TRUE(c.rows.empty());
  // A verification batch of 4, of which 2 are kept: the capture keeps their rows.
  s.checkpoint();
  s.feed_all({3, 8, 1, 9});
  const std::vector<float> four = c.rows;
  ASSERT_EQ(int64_t(four.size()), 4 * W);
  s.rollback(2);
  EXPECT_EQ(c.rows, std::vector<float>(four.begin(), four.begin() + 2 * W));
  EXPECT_EQ(c.changed_from, -1) << "nothing the reader took was dropped";
  // Rows fed again after the rollback are the same bits as the first time.
  s.feed_all({1, 9});
  EXPECT_EQ(c.rows, four);
  // A restored state's rows were never captured: the reader is told to start over.
  Session u(*model);
  s.restore(u.image(), 0);
  EXPECT_EQ(s.hidden_capture()->changed_from, 0);
  EXPECT_EQ(s.hidden_capture()->start, 0);
  EXPECT_TRUE(s.hidden_capture()->rows.empty());
}

TEST(HiddenCapture, RollbackBelowWhatWasTakenIsReported) {
  auto model = load_model(test::fixture("golden/kimi_k3_tiny"), test::on_test_device());
  Session s(*model);
  s.capture_hidden({2});
  s.checkpoint(/*record=*/true);
  s.feed(prompt_of(*model, 8));
  s.hidden_capture()->take(s.position());
  s.rollback(5);
  EXPECT_EQ(s.hidden_capture()->changed_from, 5);
  EXPECT_EQ(s.hidden_capture()->start, 5);
  EXPECT_TRUE(s.hidden_capture()->rows.empty());
}

}  // namespace
}  // namespace sluice::hidden_capture_test
