#include "memo/train/step.h"

#include <algorithm>
#include <cmath>

#include "memo/core/error.h"

namespace memo {

double StepGradients::grad_norm() const { return std::sqrt(grad_sq); }

TrainStep::TrainStep(Model& model, Optimizer& optimizer, ActivationStrategy& strategy,
                     ActivationAllocator& alloc, const StepShape& shape, BatchSource source,
                     GradNoiseProbe* probe, Communicator& data_parallel)
    : model_(model),
      optimizer_(optimizer),
      strategy_(strategy),
      alloc_(alloc),
      shape_(shape),
      source_(std::move(source)),
      probe_(probe),
      data_parallel_(data_parallel),
      inputs_(size_t(shape.micro_batch * shape.seq)),
      targets_(inputs_.size()) {
  MEMO_CHECK(shape.micro_batch > 0 && shape.seq > 0 && shape.micro_steps > 0, "step of ",
             shape.micro_steps, " micro-batches of ", shape.micro_batch, " x ", shape.seq,
             " tokens");
}

StepGradients TrainStep::gradients(int64_t step) { return gradients(step, shape_.micro_steps); }

StepGradients TrainStep::gradients(int64_t step, int64_t micro_steps) {
  MEMO_CHECK(micro_steps > 0, "step ", step, " of ", micro_steps, " micro-batches");
  if (pipeline_) return pipeline_gradients(step, micro_steps);
  const Tensor grads = model_.grads_tensor();
  const int64_t ranks = data_parallel_.size();
  // rank r runs micro-batches [r k, (r + 1) k) of the step's k P: the windows of one process
  const int64_t first = int64_t(data_parallel_.rank()) * micro_steps;
  const int64_t tokens = counted_tokens(step, first, micro_steps);
  const float grad_scale = 1.0f / float(tokens);
  if (probe_) {
    probe_->set_micro_steps(micro_steps, ranks);
    if (!micro_counts_.empty()) probe_->set_counts(micro_counts_, tokens);
  }
  model_.zero_grads();
  Communicator* const cp = model_.context_parallel_group();
  double loss_sum = 0.0;
  // Note [Overlapped gradient reduction]: without the probe (which reads every micro-batch's
  // local gradient) the last micro-batch's backward starts each part's data-parallel reduction
  // as soon as the part is final; the context- and tensor-parallel groups first sum their shares
  // of it. Every sum adds the ranks in rank order, so the bits are those of reducing the whole
  // buffer after the backward.
  const bool overlap = !probe_ && ranks > 1;
  struct ClearHook {
    Model& model;
    ~ClearHook() { model.set_gradients_ready({}); }
  } clear_hook{model_};
  // The gradient-reduction hook for `part` of the buffer: without the probe (which has summed
  // them after every micro-batch) the context-parallel shares and the tensor-parallel whole
  // tensors, then the data-parallel ranks' sum, started (overlapped) or whole.
  auto reduce = [this, cp](Tensor part, bool overlapped) {
    if (!probe_) {
      if (cp) cp->all_reduce_sum(part);
      model_.reduce_tensor_parallel_grads(part);
    }
    if (overlapped)
      data_parallel_.start_all_reduce_sum(part);
    else
      data_parallel_.all_reduce_sum(part);
  };
  for (int64_t micro = 0; micro < micro_steps; ++micro) {
    source_(step, first + micro, inputs_.data(), targets_.data(), shape_.micro_batch);
    if (overlap && micro + 1 == micro_steps)
      model_.set_gradients_ready([&reduce](Tensor part) { reduce(part, true); });
    loss_sum += model_.forward_backward(inputs_.data(), targets_.data(), shape_.micro_batch,
                                        shape_.seq, grad_scale, strategy_, alloc_);
    // the probe reads each micro-batch's whole gradient: under context parallelism the sum of
    // the group's shares, under tensor parallelism each rank's parts and the whole tensors
    // summed over the group (once per micro-batch, so not again after the step)
    if (probe_ && cp) cp->all_reduce_sum(grads);
    if (probe_) {
      model_.reduce_tensor_parallel_grads();
      probe_->after_micro(grads, micro, model_.tensor_parallel_group(),
                          model_.whole_tensors_sum_squares());
    }
  }
  // The gradients (each already scaled by the global token count) and the losses summed over the
  // data-parallel ranks (forward_backward returns each micro-batch's whole loss on every rank of a
  // context- or tensor-parallel group).
  if (overlap)
    data_parallel_.finish_reductions();
  else
    reduce(grads, false);
  if (ranks > 1) data_parallel_.all_reduce_sum(std::span<double>(&loss_sum, 1));
  StepGradients g;
  g.loss = loss_sum / double(tokens);  // the mean over the counted targets
  g.grad_sq = model_.grad_sum_squares();
  if (probe_) probe_->end_step(g.grad_sq, &data_parallel_);  // before clipping
  return g;
}

// Note [Counted tokens]: the step's loss is the mean over the targets the loss counts, of
// every micro-batch of every data-parallel rank, so a micro-batch's gradient is scaled by
// 1 / (that count) before the first backward. Without a loss mask every target counts and the
// count is the step's shape: no pass over the data and no collective (today's bits). With one
// (Model::counts_target) each rank draws its micro-batches once more to count them, and the
// counts are summed over the data-parallel group (context- and tensor-parallel ranks see the
// whole micro-batch and agree). So neither the micro-batch split nor the layout changes the loss.
int64_t TrainStep::counted_tokens(int64_t step, int64_t first, int64_t micro_steps) {
  const int64_t ranks = data_parallel_.size();
  const int64_t all = shape_.micro_batch * shape_.seq * micro_steps * ranks;
  micro_counts_.clear();
  if (!masked_targets_ && model_.eod_loss_mask() < 0) return all;
  const int64_t n = shape_.micro_batch * shape_.seq;
  double counted = 0.0;
  for (int64_t micro = 0; micro < micro_steps; ++micro) {
    source_(step, first + micro, inputs_.data(), targets_.data(), shape_.micro_batch);
    micro_counts_.push_back(model_.counted_targets(inputs_.data(), targets_.data(), n));
    counted += double(micro_counts_.back());
  }
  if (ranks > 1) data_parallel_.all_reduce_sum(std::span<double>(&counted, 1));
  if (counted == 0.0)
    throw DataError(str("step ", step, ": the loss counts none of its ", all,
                        " targets (every one is masked)"));
  return int64_t(counted);
}

void TrainStep::update(const StepGradients& g, double lr, double clip) {
  const double norm = g.grad_norm();
  if (clip > 0 && norm > clip)
    model_.backend().scale(model_.grads_tensor(), float(clip / (norm + 1e-6)));
  if (!shards_) {
    optimizer_.step(model_.params_tensor(), model_.grads_tensor(), lr);
    return;
  }
  const ZeroShard& mine = (*shards_)[size_t(data_parallel_.rank())];
  const Shape shard{mine.end - mine.begin};
  optimizer_.step(model_.params_tensor().part(mine.begin, shard),
                  model_.grads_tensor().part(mine.begin, shard), lr);
  all_gather_shards(model_.params_tensor(), *shards_, data_parallel_);
}

void TrainStep::warmup(int64_t step) {
  MEMO_CHECK(!pipeline_, "a pipeline step has no warm-up micro-batch");
  source_(step, 0, inputs_.data(), targets_.data(), shape_.micro_batch);
  // the strategy times its second pass (Note [A warm profile] in memory/swap_strategy.cc)
  for (int pass = 0; pass < 2 && strategy_.wants_warmup(); ++pass) {
    model_.zero_grads();
    model_.forward_backward(inputs_.data(), targets_.data(), shape_.micro_batch, shape_.seq, 0.0f,
                            strategy_, alloc_);
  }
}

}  // namespace memo
