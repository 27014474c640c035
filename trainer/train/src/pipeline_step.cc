// A pipeline stage's step (train_loop.h pipeline_forward_backward): the program of its stage
// (pipeline_schedule.h), each pass on the model's activation slot of its (micro-batch, chunk),
// the transfers with the neighbours as one exchange each on the pipeline group.
#include <algorithm>
#include <chrono>

#include "ax/trainer/comm/activity.h"
#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/train/train_loop.h"

namespace ax::train {
namespace {

int64_t count_targets(const Batch& batch) {
  return std::count_if(batch.targets.begin(), batch.targets.end(),
                       [](int32_t t) { return t >= 0; });
}

std::vector<Batch> micro_batches_of(const Model& model, const StepRows& rows) {
  const int64_t B = model.batch();
  AX_CHECK(rows.rows > 0 && rows.rows % B == 0) << rows.rows << " rows in micro-batches of " << B;
  AX_CHECK_EQ(rows.length, model.seq_len());
  std::vector<Batch> out;
  for (int64_t first = 0; first < rows.rows; first += B) out.push_back(rows.micro_batch(first, B));
  return out;
}

// Seconds of the steady clock, for the recorder.
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

double pipeline_forward_backward(Model* model, const StepRows& rows, PipelineSchedule schedule,
                                 PipelineRecorder* recorder) {
  using T = PipelineTransfer::Kind;
  using Span = PipelineSpan::Kind;
  const ModelParallel& par = model->parallel();
  AX_CHECK(par.pipeline_size > 1 && par.pipeline != nullptr);
  const std::vector<Batch> batches = micro_batches_of(*model, rows);
  const int m = static_cast<int>(batches.size());
  const int chunks = model->stage_chunks();
  std::vector<int64_t> targets(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) targets[i] = count_targets(batches[i]);
  const double total = static_cast<double>(std::max<int64_t>(1, rows.global_targets));
  std::vector<int> slot(batches.size() * static_cast<size_t>(chunks), -1);
  auto slot_of = [&](int i, int chunk) -> int& {
    return slot[static_cast<size_t>(i * chunks + chunk)];
  };

  // One exchange of a program step's transfers. A micro-batch without targets has no backward
  // pass on any stage (every stage reads the same rows), so its gradient is never sent; with a
  // seq axis it has one (Model::backward_stage: the other slices of its rows may hold targets,
  // and their attention's backward pass needs this slice's part of the exchange).
  const bool every_backward = par.seq_size > 1;
  auto transfer = [&](const std::vector<PipelineTransfer>& transfers) {
    std::vector<comm::P2POp> ops;
    for (const PipelineTransfer& t : transfers) {
      const bool gradient = t.kind == T::kSendGradient || t.kind == T::kRecvGradient;
      if (gradient && !every_backward && targets[static_cast<size_t>(t.micro_batch)] == 0) {
        continue;
      }
      switch (t.kind) {
        case T::kSendActivation:
          ops.push_back(
              comm::P2POp::send(model->stage_output(slot_of(t.micro_batch, t.chunk)), t.peer));
          break;
        case T::kRecvActivation: {
          int& s = slot_of(t.micro_batch, t.chunk);
          s = model->acquire_slot();
          ops.push_back(comm::P2POp::recv(model->stage_input(s), t.peer));
          break;
        }
        case T::kSendGradient:
          ops.push_back(comm::P2POp::send(model->stage_gradient(), t.peer));
          break;
        case T::kRecvGradient:
          ops.push_back(
              comm::P2POp::recv(model->stage_gradient_in(slot_of(t.micro_batch, t.chunk)), t.peer));
          break;
      }
    }
    if (ops.empty()) return;
    const double start = recorder != nullptr ? now_seconds() : 0;
    comm::collective_or_die(par.pipeline->exchange(ops), "a pipeline transfer");
    if (recorder != nullptr) recorder->add(Span::kWait, -1, 0, start, now_seconds());
  };

  model->zero_grad();
  if (recorder != nullptr) recorder->begin(now_seconds());
  double loss = 0;
  for (const PipelineAction& a :
       pipeline_program(schedule, par.pipeline_rank, par.pipeline_size, m, chunks)) {
    const int i = a.event.micro_batch;
    int& s = slot_of(i, a.event.chunk);
    const bool forward = a.event.kind == PipelineEvent::Kind::kForward;
    comm::set_phase(forward ? comm::Phase::kForward : comm::Phase::kBackward);
    transfer(a.before);
    const double start = recorder != nullptr ? now_seconds() : 0;
    if (forward) {
      if (s < 0) s = model->acquire_slot();
      const float mean = model->forward_stage(batches[static_cast<size_t>(i)], s, a.event.chunk);
      AX_CHECK_EQ(model->slot_targets(s), targets[static_cast<size_t>(i)]);
      loss += static_cast<double>(mean) * static_cast<double>(targets[static_cast<size_t>(i)]);
    } else {
      // Each micro-batch's mean loss weighted by its share of the global batch's targets, as
      // forward_backward does.
      model->backward_stage(
          s, static_cast<float>(static_cast<double>(targets[static_cast<size_t>(i)]) / total));
      model->release_slot(s);
      s = -1;
    }
    if (recorder != nullptr) {
      recorder->add(forward ? Span::kForward : Span::kBackward, i, a.event.chunk, start,
                    now_seconds());
    }
    transfer(a.after);
  }
  if (recorder != nullptr) recorder->end(now_seconds());
  comm::set_phase(comm::Phase::kBackward);
  model->reduce_gradients();
  return model->last_stage() ? loss / total : 0.0;
}

double pipeline_evaluate_loss(Model* model, const StepRows& rows) {
  const ModelParallel& par = model->parallel();
  AX_CHECK(par.pipeline_size > 1 && par.pipeline != nullptr);
  const int s = par.pipeline_rank, P = par.pipeline_size, chunks = model->stage_chunks();
  double sum = 0;
  // Forward passes one micro-batch and chunk after another in one slot: evaluation keeps no
  // activations. The chunks form a ring (chunk c = v·P + s sends to c + 1), passed around as
  // one token, so no two stages ever wait on each other.
  const int slot = model->acquire_slot();
  for (const Batch& batch : micro_batches_of(*model, rows)) {
    for (int v = 0; v < chunks; ++v) {
      const int c = v * P + s;
      if (c > 0) {
        comm::collective_or_die(par.pipeline->recv(model->stage_input(slot), (s + P - 1) % P),
                                "a pipeline transfer");
      }
      const float mean = model->forward_stage(batch, slot, v);
      sum += static_cast<double>(mean) * static_cast<double>(model->slot_targets(slot));
      if (c < P * chunks - 1) {
        comm::collective_or_die(par.pipeline->send(model->stage_output(slot), (s + 1) % P),
                                "a pipeline transfer");
      }
    }
  }
  model->release_slot(slot);
  const double total = static_cast<double>(std::max<int64_t>(1, rows.num_targets));
  return model->last_stage() ? sum / total : 0.0;
}

}  // namespace ax::train
