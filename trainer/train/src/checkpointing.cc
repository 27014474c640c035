// The Trainer's checkpoints: the state is captured into host memory at a step boundary; with
// train.checkpoint_async (the default) its files are written on a thread while training goes on,
// and the save is committed at the first step boundary at which every rank has written its files.
// The protocol (temporary directory, COMMIT) is CheckpointManager's; docs/trainer.md
// "Checkpoints" describes what a user sees.
#include <chrono>
#include <cstdio>
#include <thread>

#include "ax/common/strings.h"
#include "trainer.h"

namespace ax::train::internal {
namespace {

using CkptClock = std::chrono::steady_clock;

double ckpt_seconds(CkptClock::time_point from, CkptClock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

std::string ckpt_fixed(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

}  // namespace

void Trainer::prepare_checkpoint_buffers() {
  if (!config_.train.checkpoint_async) return;
  // Reads only the store's layout (host memory): safe beside the steps.
  const ParamStore* store = &model_->store();
  buffers_thread_ = std::thread([this, store] { spare_state_ = host_buffers(*store); });
}

Status Trainer::save_checkpoint() {
  if (saved_step_ == progress_.step) return Status::Ok();
  // A checkpoint request waits for the previous write (and commits it) first.
  AX_RETURN_IF_ERROR(finish_checkpoint());
  const auto t0 = CkptClock::now();
  if (buffers_thread_.joinable()) buffers_thread_.join();
  // Background writes keep their host buffers for the next capture (spare_state_).
  CheckpointState state =
      capture_state(config_, model_->store(), *optimizer_, progress_, std::move(spare_state_));
  spare_state_ = CheckpointState();
  const auto copied = CkptClock::now();
  // Data-parallel replicas and the slices of a seq group hold the same values: the first writes.
  if (dist_->coords.d != 0 || dist_->coords.s != 0) state.tensors.clear();
  const auto context = [&](const Status& s) {
    return s.with_context(
        str_cat("checkpoint of step ", progress_.step, " (the previous checkpoints are intact)"));
  };
  if (!config_.train.checkpoint_async) {
    Status s = checkpoints_.save(state, dist_->checkpoint_group(progress_.step));
    if (!s.ok()) return context(s);
    saved_step_ = progress_.step;
    out_ << "checkpoint: step " << progress_.step << " -> " << checkpoints_.step_dir(progress_.step)
         << " (" << ckpt_fixed(ckpt_seconds(t0, CkptClock::now())) << " s)" << std::endl;
    return Status::Ok();
  }
  auto w = std::make_unique<BackgroundWrite>();
  w->group = dist_->checkpoint_group(progress_.step);
  StatusOr<PendingSave> pending = checkpoints_.begin_save(progress_.step, w->group);
  if (!pending.ok()) return context(pending.status());
  w->pending = std::move(*pending);
  w->state = std::move(state);
  w->started = CkptClock::now();
  BackgroundWrite* raw = w.get();
  const int rank = ctx_.rank;
  w->thread = std::thread([this, raw, rank] {
    raw->written = checkpoints_.write_files(&raw->pending, rank, raw->state);
    raw->finished = CkptClock::now();
    raw->done.store(true, std::memory_order_release);
  });
  w->copy_s = ckpt_seconds(t0, copied);
  w->begin_s = ckpt_seconds(copied, w->started);
  writing_ = std::move(w);
  saved_step_ = progress_.step;
  return Status::Ok();
}

Status Trainer::poll_checkpoint() {
  if (!writing_) return Status::Ok();
  // Every rank started this write at the same step, so every rank takes part in this reduction
  // until the write is committed: the maximum of "still writing" says whether any has not
  // finished.
  const bool writing = !writing_->done.load(std::memory_order_acquire);
  const bool any =
      dist_->all_reduce(dist_->groups.world.get(), writing ? 1.0 : 0.0, comm::ReduceOp::kMax) > 0;
  if (any) return Status::Ok();
  return finish_checkpoint();
}

Status Trainer::finish_checkpoint() {
  if (!writing_) return Status::Ok();
  std::unique_ptr<BackgroundWrite> w = std::move(writing_);
  const auto waited_from = CkptClock::now();
  if (w->thread.joinable()) w->thread.join();
  const double waited_s = ckpt_seconds(waited_from, CkptClock::now());
  spare_state_ = std::move(w->state);  // its buffers serve the next capture
  const auto commit_from = CkptClock::now();
  Status s = checkpoints_.finish_save(w->pending, w->written, w->group);
  if (!s.ok()) {
    return s.with_context(
        str_cat("checkpoint of step ", w->pending.step, " (the previous checkpoints are intact)"));
  }
  const double commit_s = ckpt_seconds(commit_from, CkptClock::now());
  const double stall_s = w->copy_s + w->begin_s + waited_s + commit_s;
  out_ << "checkpoint: step " << w->pending.step << " -> " << checkpoints_.step_dir(w->pending.step)
       << " (written in " << ckpt_fixed(ckpt_seconds(w->started, w->finished))
       << " s in the background; training paused " << ckpt_fixed(stall_s) << " s: host copy "
       << ckpt_fixed(w->copy_s) << ", start " << ckpt_fixed(w->begin_s) << ", wait "
       << ckpt_fixed(waited_s) << ", commit " << ckpt_fixed(commit_s) << ")" << std::endl;
  return Status::Ok();
}

}  // namespace ax::train::internal
