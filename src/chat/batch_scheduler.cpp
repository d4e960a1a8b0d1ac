#include "chat/batch_scheduler.h"

#include <algorithm>

namespace sluice::chat {

struct BatchScheduler::Running {
  Job job;
  Outcome out;
  CachedConversation conv;
  std::unique_ptr<ReplyStream> reply;
  int32_t next = -1;  // picked and taken, not yet fed
  int64_t taken = 0, max_new = 0;
  // While its prompt is being fed, a slice per step (null once it decodes).
  std::unique_ptr<Generator::PendingPrefill> prefill;
};

BatchScheduler::BatchScheduler(const Model& model, const ChatCodec& codec, Generator& generator,
                               GenerationCounters& counters, int64_t parallel)
    : model_(model), codec_(codec), generator_(generator), counters_(counters), parallel_(std::max<int64_t>(1, parallel)) {}

BatchScheduler::~BatchScheduler() = default;

void BatchScheduler::add(Job job) { waiting_.push_back(std::move(job)); }

bool BatchScheduler::emit(Running& r, std::vector<float>& row) {
  r.next = r.reply->pick(row.data());
  ++r.taken;
  return r.reply->take(r.next) && r.taken < r.max_new;
}

void BatchScheduler::finish(Running& r) {
  counters_.set_expert_stats(model_.expert_stats());
  r.reply->finish(r.out);
  generator_.keep(std::move(r.conv));
  r.job.done(r.out, nullptr);
}

void BatchScheduler::admit(Job job) {
  auto r = std::make_unique<Running>();
  r->job = std::move(job);
  const GenerationRequest& req = *r->job.req;
  Outcome& out = r->out;
  out.prompt_tokens = int64_t(r->job.prompt.size());
  try {
    r->max_new = generator_.max_new_tokens(req, out.prompt_tokens);
    if (r->max_new == 0) {  // prompt scoring: nothing is decoded, nothing to batch
      out = generator_.run(req, r->job.prompt, r->job.emit, r->job.alive, r->job.progress);
      r->job.done(out, nullptr);
      return;
    }
    r->prefill = std::make_unique<Generator::PendingPrefill>(
        generator_.begin_prefill(r->job.prompt, out, req.prompt_boundaries));
  } catch (...) {
    r->job.done(out, std::current_exception());
    return;
  }
  running_.push_back(std::move(r));
}

bool BatchScheduler::prefill_slice(Running& r) {
  try {
    if (!generator_.prefill_step(*r.prefill, r.job.prompt, r.job.alive, r.out, r.job.progress)) return true;
  } catch (...) {
    r.job.done(r.out, std::current_exception());
    return false;
  }
  r.conv = std::move(r.prefill->conv);
  std::vector<float> logits = std::move(r.prefill->logits);
  r.prefill.reset();
  try {
    if (r.out.cancelled) {
      generator_.keep(std::move(r.conv));
      r.job.done(r.out, nullptr);
      return false;
    }
    r.reply = std::make_unique<ReplyStream>(*r.job.req, codec_, r.job.prompt, generator_.stop_ids(),
                                            model_.info().vocab, counters_, r.job.emit, r.job.alive);
    if (r.job.alive && !r.job.alive()) {
      r.reply->cancel();
      finish(r);
      return false;
    }
    if (!emit(r, logits)) {
      finish(r);
      return false;
    }
  } catch (...) {  // picking or releasing failed: this request ends with the error, its conversation dropped
    r.job.done(r.out, std::current_exception());
    return false;
  }
  return true;
}

bool BatchScheduler::guarded(Running& r, const std::function<bool()>& f) {
  try {
    return f();
  } catch (...) {  // picking or releasing failed: this request ends with the error, its conversation dropped
    r.job.done(r.out, std::current_exception());
    return false;
  }
}

void BatchScheduler::fail_batch(std::exception_ptr e) {
  // A failed pass may have left any of its sessions half fed: they are dropped
  // (the prompts being prefilled were not in it).
  std::vector<std::unique_ptr<Running>> batch;
  for (auto& r : running_)
    if (!r->prefill) batch.push_back(std::move(r));
  std::erase_if(running_, [](const std::unique_ptr<Running>& r) { return !r; });
  for (auto& r : batch) r->job.done(r->out, e);
}

void BatchScheduler::step() {
  while (int64_t(running_.size()) < parallel_ && !waiting_.empty()) {
    Job j = std::move(waiting_.front());
    waiting_.pop_front();
    admit(std::move(j));
  }
  // One slice of each prompt being prefilled: the others' next tokens wait for
  // at most that much (a slice takes about --prefill-slice seconds).
  for (size_t i = 0; i < running_.size();) {
    if (!running_[i]->prefill || prefill_slice(*running_[i])) ++i;
    else running_.erase(running_.begin() + std::ptrdiff_t(i));
  }
  // Gone clients leave before the pass rather than after one more token.
  for (size_t i = 0; i < running_.size();) {
    Running& r = *running_[i];
    if (!r.prefill && r.job.alive && !r.job.alive()) {
      r.reply->cancel();
      guarded(r, [&] {
        finish(r);
        return false;
      });
      running_.erase(running_.begin() + std::ptrdiff_t(i));
    } else {
      ++i;
    }
  }
  std::vector<Session*> sessions;
  std::vector<std::vector<int32_t>> feeds;
  for (auto& r : running_) {
    if (r->prefill) continue;
    sessions.push_back(r->conv.session.get());
    feeds.push_back({r->next});
  }
  if (sessions.empty()) return report_cache();
  try {
    Session::feed_together(sessions, feeds);
  } catch (...) {
    fail_batch(std::current_exception());
    return report_cache();
  }
  ++passes_;
  counters_.add_batch_pass(int64_t(sessions.size()));
  if (passes_ % 16 == 0) counters_.set_expert_stats(model_.expert_stats());
  for (size_t i = 0; i < running_.size();) {
    Running& r = *running_[i];
    if (r.prefill) {
      ++i;
      continue;
    }
    const bool stays = guarded(r, [&] {
      std::vector<float> row = r.conv.session->last_logits();  // pick() may adjust it (logit bias)
      if (emit(r, row)) return true;
      finish(r);
      return false;
    });
    if (stays) ++i;
    else running_.erase(running_.begin() + std::ptrdiff_t(i));
  }
  report_cache();
}

// The gauges count the conversations decoding here as well as the kept ones.
void BatchScheduler::report_cache() {
  uint64_t bytes = 0;
  for (const auto& r : running_) {
    const Session* s = r->prefill ? r->prefill->conv.session.get() : r->conv.session.get();
    if (s) bytes += uint64_t(s->state_bytes());
  }
  generator_.report_cache(int64_t(running_.size()), bytes);
}

}  // namespace sluice::chat
