// The gradients of one step on a pipeline rank (TrainStep::set_pipeline): the rank's actions of
// the schedule (parallel/pipeline.h), each chunk's forward and backward through the model's
// pipeline calls (Note [Pipeline parts] in model/model.h), the hidden states and their gradients
// over the pipeline group, then the loss, the gradient reductions and the global norm.
#include <algorithm>
#include <deque>
#include <span>
#include <vector>

#include "memo/core/error.h"
#include "memo/train/step.h"

namespace memo {

// Note [Pipeline step]
// A pipeline rank runs pipeline_actions(shape, k, rank) for its data-parallel share of k
// micro-batches (the same windows as without a pipeline: rank d of the data-parallel group takes
// micro-batches [d k, (d + 1) k)). A forward of chunk g > 0 first receives the micro-batch's
// hidden state from chunk g - 1's rank; a backward of chunk g below the last receives the
// gradient of its output from chunk g + 1's rank; results go to the neighbour by posted sends
// (Note [Pipeline sends]) with one tag per stream: 2 g for the activations into chunk g, 2 g + 1
// for the gradients into chunk g. The last chunk's forward runs its loss and backward at once
// (its backward action then has nothing left to do). Every rank draws every micro-batch's tokens
// from the same source: chunk 0 needs the inputs, the last chunk the targets. After the last
// action the posted sends complete, and:
// - the loss: the last rank's sum, summed over the pipeline group (the others add 0) and then
//   over the data-parallel group, over the step's token count: the one-process mean;
// - tied embeddings: the first rank's lookup gradient and the last rank's head gradient are
//   summed over the embedding group, so both copies take the same update;
// - each rank's gradients are summed over its data-parallel group (the same stage on every
//   data-parallel rank), as without a pipeline;
// - under tensor and context parallelism (N = P x T x C x D ranks, the T ranks of a context-
//   parallel rank consecutive, the T C of one stage too) each chunk call runs the rank's chunks of
//   each sequence and its sequence-parallel rows and tensor parts as without a pipeline, the
//   hidden states pass between the same rank of neighbouring stages, the last stage's loss is
//   summed over the context-parallel group, and after the step the gradients over it (each rank's
//   share of every tensor) and the whole tensors' (norms, learned positions) over the
//   tensor-parallel group;
// - the squared norm: each rank's tensors (the tied embedding once, on the first rank; under
//   tensor parallelism the whole tensors once, summed over the group first), summed over the
//   pipeline group in rank order.
// Every kernel of a micro-batch sees the one-process run's values in the same order, so the
// losses and every gradient but a tied embedding's equal one process's bit for bit; that
// embedding's two halves are added once, and the norm's partial sums are grouped by rank, each to
// a rounding. Loss masks (the eod mask, prompt-completion data) count the same targets as one
// process (counted_tokens: every rank draws every micro-batch). The noise probe (Note
// [Noise-scale accounting]) measures each micro-batch's gradient in parts: a rank's chunk writes
// one range of the buffer (Model::pipeline_chunk_params) and runs its micro-batches in order, so
// after each backward the probe takes that range's part of that micro-batch's gradient
// (after_micro_part), and end_step sums the parts over the pipeline group (each tensor lives on
// one chunk of one stage, so the squares add up), under 1F1B and interleaving alike; a tied
// embedding's two halves add their cross term (Note [Tied embedding probe]). Not yet: the
// gradient reduction overlapped with the backward. The actions run in a PipelineStage
// (train/pipeline_stage.h), whose hidden-state buffers come from the activation allocator and
// go back once the schedule says their send arrived (Note [Pipeline send completion]), so a
// static plan covers them.
void TrainStep::set_pipeline(Pipeline pipeline) {
  MEMO_CHECK(
      pipeline.group && pipeline.group->size() == pipeline.shape.stages && pipeline.make_strategy,
      "set_pipeline: a group of ", pipeline.group ? pipeline.group->size() : 0, " ranks for ",
      pipeline.shape.stages, " stages");
  MEMO_CHECK(model_.pipeline(), "set_pipeline: the model is not a pipeline rank's");
  pipeline_ = std::move(pipeline);
  stage_ = std::make_unique<PipelineStage>(model_, *pipeline_->group, pipeline_->shape, alloc_,
                                           pipeline_->make_strategy);
}

// Note [Tied embedding probe]
// With a tied embedding across stages the micro-batch gradient's embedding part is the sum of
// two halves on two ranks: the first rank's lookup gradient L_i and the last rank's head
// gradient H_i, and |L_i + H_i|^2 = |L_i|^2 + |H_i|^2 + 2 <L_i, H_i>. Each rank's probe adds its
// half's squares to its part, and the first rank adds the cross term: L_i is zero outside the rows
// of micro-batch i's input tokens (this rank's vocabulary part of them under tensor parallelism),
// so after its backward of micro-batch i the last rank sends H_i's rows of those tokens (at most
// T x C floats, a hidden state's size) over the embedding group, and the first rank, whose backward
// of micro-batch i comes after (the gradient flows from the last stage to the first), receives
// them and takes the dot product with its L_i rows. Both run their micro-batches in order, so one
// tag keeps the messages matched (MPI does not reorder one sender's messages of a tag).
namespace {

constexpr int kTiedProbeTag = 0;  // the embedding group carries nothing else in a step

// The rows of this rank's part of the embedding that `ids` look up, sorted and once each.
std::vector<int64_t> looked_up_rows(const Model& model, const ParamInfo& embed,
                                    std::span<const int32_t> ids) {
  const int64_t part = embed.shape.at(0);
  const Communicator* tp = model.tensor_parallel_group();
  const int64_t v0 = tp ? int64_t(tp->rank()) * part : 0;
  std::vector<int64_t> rows;
  for (int32_t id : ids)
    if (id >= v0 && id < v0 + part) rows.push_back(id - v0);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

const ParamInfo& embedding_param(const ParamLayout& layout) {
  for (const ParamInfo& p : layout.params())
    if (p.role == ParamRole::kEmbedding) return p;
  MEMO_CHECK(false, "pipeline: the tied embedding is not in this rank's layout");
  return layout.params().front();
}

}  // namespace

StepGradients TrainStep::pipeline_gradients(int64_t step, int64_t micro_steps) {
  const Pipeline& pp = *pipeline_;
  Communicator& group = *pp.group;
  const int64_t first = int64_t(data_parallel_.rank()) * micro_steps;
  const int64_t tokens = counted_tokens(step, first, micro_steps);
  if (probe_) {
    probe_->set_micro_steps(micro_steps, data_parallel_.size());
    if (!micro_counts_.empty()) probe_->set_counts(micro_counts_, tokens);
  }
  // the noise probe: each chunk's part of each micro-batch's gradient, the micro-batches of a
  // chunk in order
  const size_t chunks = model_.pipeline()->chunks.size();
  std::vector<int> probed(chunks, 0);
  std::vector<std::pair<int64_t, int64_t>> ranges;  // each chunk's part of the buffer
  if (probe_)
    for (size_t c = 0; c < chunks; ++c) ranges.push_back(model_.pipeline_chunk_params(int(c)));
  Communicator* const tp = model_.tensor_parallel_group();
  Communicator* const cp = model_.context_parallel_group();
  const Tensor grads = model_.grads_tensor();
  // Under context parallelism the probe reads each micro-batch's part summed over the group's
  // shares, under tensor parallelism with its whole tensors summed over the group, once per
  // micro-batch (so not again after the step), as without a pipeline; each whole tensor counts
  // once, on the group's first rank.
  auto whole_sq = [&](int64_t offset, int64_t numel) {
    double sq = 0.0;
    for (const ParamInfo& p : model_.layout().params())
      if (!p.is_split() && p.offset >= offset && p.offset + p.numel <= offset + numel)
        sq += model_.backend().sum_squares(grads.part(p.offset, Shape{p.numel}));
    return sq;
  };
  // Note [Tied embedding probe]: the first and the last rank of a tied embedding
  Communicator* const tied = probe_ ? pp.embedding_group : nullptr;
  const bool first_rank = model_.pipeline()->first;
  const auto [copy_offset, copy_numel] = model_.pipeline_head_copy_params();
  const int64_t C = model_.config().hidden_size, B = shape_.micro_batch;
  std::deque<std::vector<float>> sent_rows;  // the head copy's rows, until the sends complete
  std::vector<int32_t> ids(size_t(B * shape_.seq)), targets(ids.size());
  auto rows_of = [&](int micro) {  // micro-batch `micro`'s embedding rows on this rank
    source_(step, first + micro, ids.data(), targets.data(), B);
    return looked_up_rows(model_, embedding_param(model_.layout()), ids);
  };
  MEMO_CHECK(!tied || model_.backend().host_can_access(model_.backend().device_space()),
             "pipeline: the tied embedding's probe reads the gradients on the host");
  auto reduce = [&](int64_t offset, int64_t numel) {  // the micro-batch's whole part
    const Tensor part = grads.part(offset, Shape{numel});
    if (cp) cp->all_reduce_sum(part);
    if (tp) model_.reduce_tensor_parallel_grads(part);
  };
  auto probe = [&](int micro, int chunk) {
    if (!probe_) return;
    MEMO_CHECK(micro == probed[size_t(chunk)], "pipeline: micro-batch ", micro,
               "'s backward on chunk ", chunk, " after ", probed[size_t(chunk)], " of them");
    ++probed[size_t(chunk)];
    const auto [offset, numel] = ranges[size_t(chunk)];
    reduce(offset, numel);
    double adjust = tp && tp->rank() != 0 ? -whole_sq(offset, numel) : 0.0;
    const float* g = model_.grads();
    if (tied && copy_numel > 0 && size_t(chunk) + 1 == chunks) {  // the last rank: H_i's rows
      reduce(copy_offset, copy_numel);
      const std::vector<int64_t> rows = rows_of(micro);
      std::vector<float>& out = sent_rows.emplace_back(rows.size() * size_t(C));
      for (size_t r = 0; r < rows.size(); ++r)
        std::copy_n(g + copy_offset + rows[r] * C, C, out.data() + r * size_t(C));
      tied->post_send(
          ConstTensor(out.data(), {int64_t(rows.size()), C}, DType::kF32, MemSpace::kHost), 0,
          kTiedProbeTag);
      probe_->after_micro_part(grads, copy_offset, copy_numel, micro);
    }
    if (tied && first_rank && chunk == 0) {  // the first rank: 2 <L_i, H_i>
      const std::vector<int64_t> rows = rows_of(micro);
      std::vector<float> head(rows.size() * size_t(C));
      tied->recv_tagged(
          Tensor(head.data(), {int64_t(rows.size()), C}, DType::kF32, MemSpace::kHost), 1,
          kTiedProbeTag);
      const float* lookup = g + embedding_param(model_.layout()).offset;
      double dot = 0.0;
      for (size_t r = 0; r < rows.size(); ++r)
        for (int64_t c = 0; c < C; ++c)
          dot += double(lookup[rows[r] * C + c]) * double(head[r * size_t(C) + size_t(c)]);
      adjust += 2.0 * dot;
    }
    probe_->after_micro_part(grads, offset, numel, micro, adjust);
  };
  model_.zero_grads();
  double loss_sum = stage_->run(
      int(micro_steps), B, shape_.seq, 1.0f / float(tokens),
      [&](int64_t micro, int32_t* inputs, int32_t* targets) {
        source_(step, first + micro, inputs, targets, B);
      },
      probe);
  if (tied) tied->wait_sends();  // the head copy's rows (Note [Tied embedding probe])
  group.all_reduce_sum(std::span<double>(&loss_sum, 1));
  if (!probe_) {  // the context-parallel shares, the whole tensors' (no-ops without --cp, --tp)
    if (cp) cp->all_reduce_sum(grads);
    model_.reduce_tensor_parallel_grads();
  }
  if (pp.embedding_group) pp.embedding_group->all_reduce_sum(model_.grad_weights().embed);
  if (data_parallel_.size() > 1) {
    data_parallel_.all_reduce_sum(model_.grads_tensor());
    data_parallel_.all_reduce_sum(std::span<double>(&loss_sum, 1));
  }
  StepGradients g;
  g.loss = loss_sum / double(tokens);
  // the tied embedding's second copy (the last rank's head) counts once, on the first rank;
  // under tensor parallelism each rank's parts and the whole tensors once, on its rank 0
  const bool skip_embedding = pp.embedding_group && !model_.pipeline()->first;
  Backend& be = model_.backend();
  if (!skip_embedding && !tp) {
    g.grad_sq = be.sum_squares(model_.grads_tensor());
  } else {
    for (const ParamInfo& p : model_.layout().params())
      if ((p.role != ParamRole::kEmbedding || !skip_embedding) &&
          (!tp || p.is_split() || tp->rank() == 0))
        g.grad_sq += be.sum_squares(model_.grads_tensor().part(p.offset, Shape{p.numel}));
  }
  if (tp) tp->all_reduce_sum(std::span<double>(&g.grad_sq, 1));
  group.all_reduce_sum(std::span<double>(&g.grad_sq, 1));
  if (probe_) probe_->end_step(g.grad_sq, &data_parallel_, &group, tp);  // before clipping
  return g;
}

double pipeline_forward_loss(Model& model, const TrainStep::Pipeline& pp, const int32_t* inputs,
                             const int32_t* targets, int64_t rows, int64_t seq,
                             ActivationStrategy& strategy, ActivationAllocator& alloc) {
  Communicator& group = *pp.group;
  const PipelineShape shape = pp.shape;
  const int G = shape.chunks(), rank = group.rank();
  const int64_t T = model.pipeline_rows(rows, seq), C = model.config().hidden_size;
  Backend& be = model.backend();
  const DType act = be.activation_dtype();
  RawAllocator& device = be.allocator(be.device_space());
  // a batch of validation at a time: its hidden states, one per chunk of this rank
  std::vector<RawBuffer> out;
  RawBuffer in(device, T * C * dtype_bytes(act), "a pipeline hidden state");
  const Tensor x = in.tensor({T, C}, act);
  double loss = 0.0;
  for (int v = 0; v < shape.virtual_stages; ++v) {
    const int g = shape.chunk_of(rank, v);
    if (g > 0) group.recv_tagged(x, shape.rank_of(g - 1), 2 * g);
    if (g + 1 == G) {
      loss = model.pipeline_last_loss(inputs, targets, rows, seq, x, strategy, alloc);
      continue;
    }
    out.emplace_back(device, T * C * dtype_bytes(act), "a pipeline hidden state");
    const Tensor y = out.back().tensor({T, C}, act);
    model.pipeline_forward_only(v, inputs, rows, seq, x, y, strategy, alloc);
    group.post_send(y, shape.rank_of(g + 1), 2 * (g + 1));
  }
  group.wait_sends();
  group.all_reduce_sum(std::span<double>(&loss, 1));
  return loss;
}

}  // namespace memo
