#include "memo/model/model.h"

#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "memo/backend/checks.h"
#include "memo/core/error.h"

namespace memo {
namespace {

// The layers of one micro-batch, as the activation strategy re-runs them.
class Layers final : public LayerRunner {
 public:
  Layers(const Architecture& arch, const ModelWeights& weights, const LayerContext& ctx)
      : arch_(arch), weights_(weights), ctx_(ctx) {}
  Backend& backend() const override { return *ctx_.backend; }
  void forward(int layer, Tensor y, const SavedActs& s) const override {
    arch_.forward(y, s, weights_.layers[size_t(layer)], for_layer(ctx_, layer));
  }
  void recompute_tokens(int layer, const SavedActs& s, int64_t row_begin,
                        int64_t row_end) const override {
    arch_.recompute_tokens(s, row_begin, row_end, weights_.layers[size_t(layer)],
                           for_layer(ctx_, layer));
  }
  // Under tensor parallelism a rebuild gathers the same rows of every rank: the least choice. A
  // rank's T/t rows that are not whole reproducible panels cannot be rebuilt in groups bit for
  // bit (Note [Tensor-parallel activations]): then everything travels.
  int64_t agree_offload_rows(int64_t rows) const override {
    if (!ctx_.tp) return rows;
    const int t = ctx_.tp->size();
    const int64_t mine = ctx_.batch * ctx_.seq / t;
    if (all_rows_travel(mine)) return mine;
    const double own = double(rows);
    std::vector<double> all(static_cast<size_t>(t));
    ctx_.tp->all_gather(std::span<double>(all), std::span<const double>(&own, 1));
    return int64_t(*std::min_element(all.begin(), all.end()));
  }
  bool all_rows_travel(int64_t tokens) const override {
    const int64_t g = ctx_.backend->reproducible_rows();
    return ctx_.tp && g > 0 && tokens % g != 0;
  }

 private:
  const Architecture& arch_;
  const ModelWeights& weights_;
  const LayerContext& ctx_;
};

}  // namespace

Model::Model(const ModelConfig& config, Backend& backend, ModelUse use)
    : backend_(&backend),
      config_((config.validate(), config)),
      arch_(memo::architecture(config_.arch)),
      skeletal_(skeletal_layout(config_, backend.activation_dtype())),
      layout_(config_),
      use_(use),
      tied_(std::none_of(layout_.params().begin(), layout_.params().end(),
                         [](const ParamInfo& p) { return p.role == ParamRole::kHead; })) {
  allocate_params();
}

void Model::allocate_params() {
  params_ = grads_ = working_ = Tensor();
  params_storage_ = RawBuffer();  // the old buffers go before the new ones come
  grads_storage_ = RawBuffer();
  working_storage_ = RawBuffer();
  RawAllocator& device = backend_->allocator(backend_->device_space());
  const int64_t n = layout_.total_numel();
  const int64_t bytes = n * int64_t(sizeof(float));
  params_storage_ = RawBuffer(device, bytes, "the parameters");
  params_ = params_storage_.tensor({n}, DType::kF32);
  const bool training = use_ == ModelUse::kTraining;
  if (training) {
    grads_storage_ = RawBuffer(device, bytes, "the gradients");
    grads_ = grads_storage_.tensor({n}, DType::kF32);
  }
  const DType act = backend_->activation_dtype();
  if (act != DType::kF32) {  // Note [Mixed precision]
    working_storage_ = RawBuffer(device, n * dtype_bytes(act), "the bf16 working weights");
    working_ = working_storage_.tensor({n}, act);
  }
  working_stale_ = true;
  w_ = bind_weights(config_, layout_, mixed_precision() ? working_ : params_);
  dw_ = training ? bind_weights(config_, layout_, grads_) : ModelWeights{};
  // the gradient parts, in the layout's order (embedding and positions, layers, norm and head);
  // a part whose tensors the layout does not hold (a pipeline rank's) is empty
  const int64_t L = config_.num_hidden_layers;
  std::vector<int64_t> begin(size_t(L + 2), -1);
  for (const ParamInfo& p : layout_.params()) {
    const size_t i = p.role == ParamRole::kLayer ? size_t(p.layer + 1)
                     : p.role == ParamRole::kEmbedding || p.role == ParamRole::kPositions
                         ? 0
                         : size_t(L + 1);
    if (begin[i] < 0 || p.offset < begin[i]) begin[i] = p.offset;
  }
  grad_parts_.assign(begin.size(), {});
  for (size_t i = begin.size(), end = size_t(layout_.total_numel()); i-- > 0;) {
    const int64_t b = begin[i] < 0 ? int64_t(end) : begin[i];
    grad_parts_[i] = {b, int64_t(end)};
    end = size_t(b);
  }
  // Padding between tensors stays zero in both buffers (ParamLayout), and gradients start at 0.
  backend_->fill(params_, 0.0f);
  if (training) backend_->fill(grads_, 0.0f);
}

void Model::set_parallel(const Parallel& parallel, Communicator* tp_group) {
  if (parallel.tp < 1 || parallel.cp < 1)
    throw ConfigError(str("tensor parallel ", parallel.tp, " and context parallel ", parallel.cp,
                          " must be >= 1"));
  MEMO_CHECK(parallel.cp == 1,
             "context parallelism runs through set_context_parallel (a shape-only",
             " trace gives it a ShapeCommunicator)");
  const bool split = parallel.tp > 1;
  MEMO_CHECK(parallel.tp == 1 || (tp_group && tp_group->size() == parallel.tp), "tensor parallel ",
             parallel.tp, " needs its group of ", parallel.tp, " ranks");
  if (split) {
    const int64_t t = parallel.tp;
    auto refuse = [t](const char* what, int64_t n) {
      throw ConfigError(str("tensor parallel ", t, ": the model's ", n, " ", what,
                            " do not split into ", t, " equal parts; use a --tp that divides ", n));
    };
    if (config_.num_attention_heads % t != 0)
      refuse("attention heads", config_.num_attention_heads);
    if (config_.num_key_value_heads % t != 0)
      refuse("key-value heads (grouped-query attention)", config_.num_key_value_heads);
    if (config_.intermediate_size % t != 0) refuse("MLP units", config_.intermediate_size);
  }
  MEMO_CHECK(!pipeline_, "set_parallel: a pipeline rank's model is split over tensor-parallel ",
             "ranks before set_pipeline takes its part");
  const TensorShard shard{split ? tp_group->rank() : 0, split ? int(parallel.tp) : 1};
  if (shard.ranks != layout_.shard().ranks || shard.rank != layout_.shard().rank) {
    layout_ = ParamLayout(config_, shard);
    skeletal_ = skeletal_layout(config_, backend_->activation_dtype(), shard.ranks);
    rope_.clear();
    allocate_params();
  }
  parallel_ = parallel;
  tp_group_ = parallel.tp > 1 ? tp_group : nullptr;
  tp_split_ = split;
}

int64_t Model::vocab_rows() const {
  const auto [first, end] = vocab_ids();
  return end - first;
}

std::pair<int64_t, int64_t> Model::vocab_ids() const {
  // a pipeline rank holds the embedding, the head or both (Note [Pipeline parts]): the same rows
  const int64_t rows = (w_.head.empty() ? w_.embed : w_.head).rows();
  if (!tp_split_) return {0, rows};
  const int64_t first = int64_t(tp_group_->rank()) * rows;
  return {first, first + std::min(rows, config_.vocab_size - first)};
}

void Model::reduce_tensor_parallel_grads() { reduce_tensor_parallel_grads(grads_); }

void Model::reduce_tensor_parallel_grads(ConstTensor part) {
  if (!tp_split_) return;
  const int64_t begin =
      (static_cast<const char*>(part.data()) - static_cast<const char*>(grads_.data())) /
      int64_t(sizeof(float));
  const int64_t end = begin + part.numel();
  MEMO_CHECK(begin >= 0 && end <= grads_.numel(), "reduce_tensor_parallel_grads: a part outside ",
             "the gradients");
  for (const ParamInfo& p : layout_.params())
    if (!p.is_split() && p.offset >= begin && p.offset + p.numel <= end)
      tp_group_->all_reduce_sum(grads_.part(p.offset, Shape{p.numel}));
}

void Model::gradients_ready(size_t part) {
  if (!grads_ready_) return;
  const auto [begin, end] = grad_parts_.at(part);
  if (end > begin) grads_ready_(grads_.part(begin, Shape{end - begin}));
}

double Model::whole_tensors_sum_squares() {
  if (!tp_split_) return 0.0;
  double sq = 0.0;
  for (const ParamInfo& p : layout_.params())
    if (!p.is_split()) sq += backend_->sum_squares(grads_.part(p.offset, Shape{p.numel}));
  return sq;
}

double Model::grad_sum_squares() {
  if (!tp_split_) return backend_->sum_squares(grads_);
  double sq = 0.0;  // the parts, and the whole tensors on rank 0 only
  for (const ParamInfo& p : layout_.params())
    if (p.is_split() || tp_group_->rank() == 0)
      sq += backend_->sum_squares(grads_.part(p.offset, Shape{p.numel}));
  tp_group_->all_reduce_sum(std::span<double>(&sq, 1));
  return sq;
}

void Model::set_context_parallel(Communicator* group) {
  if (!group || group->size() == 1) {
    cp_.reset();
    return;
  }
  MEMO_CHECK(!pipeline_, "set_context_parallel: a pipeline rank's model shares its sequences ",
             "before set_pipeline takes its part");
  cp_ = ContextParallel{group, 0};
}

void Model::init(uint64_t seed) {
  if (!backend_->has_values()) return;
  if (use_ == ModelUse::kTraining) backend_->fill(grads_, 0.0f);
  if (backend_->host_can_access(backend_->device_space()))
    return init_weights(layout_, params(), config_.initializer_range, seed);
  std::vector<float> host(size_t(layout_.total_numel()), 0.0f);
  init_weights(layout_, host.data(), config_.initializer_range, seed);
  backend_->copy_from_host(params(), host.data(), int64_t(host.size() * sizeof(float)));
}

void Model::zero_grads() {
  MEMO_CHECK(use_ == ModelUse::kTraining,
             "zero_grads: the model was built for inference and holds no gradients");
  backend_->fill(grads_, 0.0f);
}

void Model::refresh_working_weights() const {
  if (!working_stale_) return;
  working_stale_ = false;
  if (mixed_precision()) backend_->convert(working_, params_);
}

std::pair<ConstTensor, ConstTensor> Model::rope_tables(int64_t seq) {
  const int64_t half = config_.head_dim() / 2;
  auto it = rope_.find(seq);
  if (it == rope_.end()) {
    // Meta tables hold nothing worth keeping: one shape at a time, so a bisection over sequence
    // lengths does not pile up address ranges.
    if (!backend_->has_values()) rope_.clear();
    RawAllocator& device = backend_->allocator(backend_->device_space());
    const int64_t bytes = seq * half * int64_t(sizeof(float));
    std::pair<RawBuffer, RawBuffer> t{RawBuffer(device, bytes, "the rope cos table"),
                                      RawBuffer(device, bytes, "the rope sin table")};
    const RopeFrequencies f =
        rope_frequencies(config_.rope_scaling, config_.head_dim(), config_.rope_theta,
                         config_.max_position_embeddings, seq);
    backend_->rope_table(t.first.tensor({seq, half}, DType::kF32),
                         t.second.tensor({seq, half}, DType::kF32), f.inv_freq, f.attention_factor);
    it = rope_.emplace(seq, std::move(t)).first;
  }
  const auto& [cos, sin] = it->second;
  return {cos.tensor({seq, half}, DType::kF32), sin.tensor({seq, half}, DType::kF32)};
}

namespace {

// The backend's matrix-product workspace for one micro-batch (Note [Matrix-product workspace] in
// backend/backend.h): a named request of the activation allocator, so the static plan holds it.
class ScopedMatmulWorkspace {
 public:
  ScopedMatmulWorkspace(Backend& backend, ActivationAllocator& alloc) : backend_(backend) {
    const int64_t bytes = backend.matmul_workspace_bytes();
    if (bytes <= 0) return;
    alloc_ = &alloc;
    t_ = alloc.acquire("matmul.workspace", {(bytes + 3) / 4}, ActKind::kTransient, DType::kF32);
    try {
      backend.set_matmul_workspace(t_);
    } catch (...) {
      alloc.release(t_);
      throw;
    }
  }
  ~ScopedMatmulWorkspace() {
    if (!alloc_) return;
    backend_.set_matmul_workspace(Tensor());
    alloc_->release(t_);
  }
  ScopedMatmulWorkspace(const ScopedMatmulWorkspace&) = delete;
  ScopedMatmulWorkspace& operator=(const ScopedMatmulWorkspace&) = delete;

 private:
  Backend& backend_;
  ActivationAllocator* alloc_ = nullptr;
  Tensor t_;
};

// A micro-batch's token ids as the kernels read them; targets may be null (forward only).
struct TokenIds {
  const int32_t* inputs;
  const int32_t* targets;
};

// Every id is checked here, on the host, against the whole vocabulary; the kernels read them
// from device memory, relative to a rank's rows under tensor parallelism (kOtherShard).
void check_ids(TokenIds ids, int64_t tokens, int64_t vocab_size) {
  check_token_ids("embedding_forward", "token", View<const int32_t>(ids.inputs, {tokens}),
                  vocab_size);
  if (ids.targets)
    check_target_ids("cross_entropy", View<const int32_t>(ids.targets, {tokens}), vocab_size);
}

// Records the whole sequence in cp and returns this rank's share of it.
int64_t context_parallel_share(ContextParallel& cp, int64_t seq) {
  check_context_parallel_seq(seq, cp.ranks());
  cp.seq = seq;
  return seq / cp.ranks();
}

// This rank's chunks of every sequence, chunk-major, copied into `inputs` and `targets`; records
// the whole sequence in cp and returns the rank's share of it.
int64_t take_context_parallel_chunks(ContextParallel& cp, TokenIds& ids,
                                     std::vector<int32_t>& inputs, std::vector<int32_t>& targets,
                                     int64_t batch, int64_t seq) {
  seq = context_parallel_share(cp, seq);
  inputs.resize(size_t(batch * seq));
  targets.resize(inputs.size());
  context_parallel_tokens(inputs.data(), ids.inputs, batch, cp);
  context_parallel_tokens(targets.data(), ids.targets, batch, cp);
  ids = {inputs.data(), targets.data()};
  return seq;
}

// The ids relative to this rank's vocabulary rows [v0, v1), kOtherShard outside them (an ignored
// target stays kIgnoredTarget), in `out`.
const int32_t* local_vocab_ids(std::vector<int32_t>& out, const int32_t* ids, int64_t n, int64_t v0,
                               int64_t v1) {
  out.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i)
    out[size_t(i)] = ids[i] == kIgnoredTarget      ? kIgnoredTarget
                     : ids[i] >= v0 && ids[i] < v1 ? int32_t(ids[i] - v0)
                                                   : kOtherShard;
  return out.data();
}

// The ids copied into `buffer` (grown to fit) in the device space.
TokenIds copy_ids_to_device(Backend& backend, RawBuffer& buffer, TokenIds ids, int64_t T) {
  const int64_t bytes = 2 * T * int64_t(sizeof(int32_t));
  if (buffer.bytes() < bytes)
    buffer =
        RawBuffer(backend.allocator(backend.device_space()), bytes, "the micro-batch's tokens");
  int32_t* device = buffer.as<int32_t>();
  backend.copy_from_host(device, ids.inputs, T * int64_t(sizeof(int32_t)));
  backend.copy_from_host(device + T, ids.targets, T * int64_t(sizeof(int32_t)));
  return {device, device + T};
}

// Each layer writes its output into the next layer's input slot, the last into final_hidden;
// the strategy keeps what the backward needs, or drops it when there is no backward.
void forward_layers(Tensor final_hidden, ActivationStrategy& strategy, const Architecture& arch,
                    const ModelWeights& w, const LayerContext& ctx, int L, bool backward) {
  for (int l = 0; l < L; ++l) {
    Tensor y = l + 1 < L ? strategy.forward_slot(l + 1).x() : final_hidden;
    arch.forward(y, strategy.forward_slot(l), w.layers[size_t(l)], for_layer(ctx, l));
    if (backward)
      strategy.forward_done(l);
    else
      strategy.discard(l);
  }
}

// The final norm's transient tensors, [Tl, C] (inv_rms as the architecture shapes it): released
// together, in the reverse of their order of acquisition.
struct FinalNormActs {
  Tensor hidden;   // the last layer's output
  Tensor xn;       // its norm, the head's input
  Tensor inv_rms;  // f32 statistics for the norm's backward
  void release(ActivationAllocator& alloc) const {
    alloc.release(inv_rms);
    alloc.release(xn);
    alloc.release(hidden);
  }
};

}  // namespace

double Model::forward_backward(const int32_t* inputs, const int32_t* targets, int64_t batch,
                               int64_t seq, float grad_scale, ActivationStrategy& strategy,
                               ActivationAllocator& alloc) {
  MEMO_CHECK(use_ == ModelUse::kTraining,
             "forward_backward: the model was built for inference and holds no gradients");
  return run(inputs, targets, batch, seq, grad_scale, true, strategy, alloc);
}

double Model::forward_loss(const int32_t* inputs, const int32_t* targets, int64_t batch,
                           int64_t seq, ActivationStrategy& strategy, ActivationAllocator& alloc,
                           std::span<float> token_losses) {
  MEMO_CHECK(token_losses.empty() || (int64_t(token_losses.size()) == batch * seq && !cp_),
             "forward_loss: token losses for ", token_losses.size(), " of ", batch * seq, " tokens",
             cp_ ? " under context parallelism" : "");
  token_losses_ = token_losses;
  const double sum = run(inputs, targets, batch, seq, 0.0f, false, strategy, alloc);
  token_losses_ = {};
  return sum;
}

double Model::run(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq,
                  float grad_scale, bool backward, ActivationStrategy& strategy,
                  ActivationAllocator& alloc) {
  MEMO_CHECK(batch > 0 && seq > 0, "micro-batch of ", batch, " x ", seq, " tokens");
  MEMO_CHECK(!pipeline_,
             "a pipeline rank's model runs its chunks (pipeline_forward, "
             "pipeline_last, pipeline_backward), not the whole model");
  TokenIds ids{inputs, targets};
  if (backend_->has_values()) check_ids(ids, batch * seq, config_.vocab_size);
  if (loss_eot_ >= 0 && targets) {  // --eod-mask-loss: the eot inputs' predictions not counted
    loss_targets_.assign(targets, targets + batch * seq);
    for (int64_t i = 0; i < batch * seq; ++i)
      if (inputs[i] == loss_eot_) loss_targets_[size_t(i)] = kIgnoredTarget;
    ids.targets = loss_targets_.data();
  }
  const int64_t whole_seq = seq;
  // On a backend without values (a plan's shadow) the ids are placeholders, so this rank's
  // chunks of them and their local vocabulary ids are not copied out: each copy is O(seq) host
  // memory per trace, and a longest-sequence search traces at tens of millions of tokens. The
  // entry checks then read the first ids of the whole micro-batch's buffer, which holds more than
  // the rank's share, so every read stays in bounds.
  const bool ids_are_data = backend_->has_values();
  if (cp_ && ids_are_data)
    seq = take_context_parallel_chunks(*cp_, ids, cp_inputs_, cp_targets_, batch, seq);
  else if (cp_)
    seq = context_parallel_share(*cp_, seq);
  if (doc_eot_ >= 0) find_documents(inputs, batch, whole_seq);
  const int64_t T = batch * seq, C = config_.hidden_size;
  const int L = int(config_.num_hidden_layers);
  // under tensor parallelism this rank holds rows [r T/t, (r + 1) T/t) of the residual stream
  const int64_t t = tp_split_ ? tp_group_->size() : 1, Tl = T / t;
  if (T % t != 0)
    throw ConfigError(str("tensor parallel ", t, ": a micro-batch of ", T,
                          " tokens does not split into ", t, " equal parts of the sequence"));
  if (tp_split_ && ids_are_data) {
    const auto [v0, v1] = vocab_ids();
    ids.inputs = local_vocab_ids(tp_inputs_, ids.inputs, T, v0, v1);
    if (ids.targets) ids.targets = local_vocab_ids(tp_targets_, ids.targets, T, v0, v1);
  }
  const LayerContext ctx = layer_context(batch, seq, alloc);
  const ScopedMatmulWorkspace workspace(*backend_, alloc);
  // the kernels read device memory (the meta backend's checks read the host tokens)
  if (backend_->has_values() && !backend_->host_can_access(backend_->device_space()))
    ids = copy_ids_to_device(*backend_, device_tokens_, ids, T);
  const View<const int32_t> tokens(ids.inputs, {T});
  refresh_working_weights();
  const Layers layers(arch_, w_, ctx);

  // forward: embedding, layers, final norm, head and loss
  strategy.bind_layers(layers);
  strategy.begin_step(batch, seq);
  embed_forward(strategy.forward_slot(0).x(), tokens, batch, seq, alloc);
  FinalNormActs final_norm;
  final_norm.hidden = alloc.acquire("final.hidden", {Tl, C}, ActKind::kTransient, ctx.act);
  forward_layers(final_norm.hidden, strategy, arch_, w_, ctx, L, backward);
  final_norm.xn = alloc.acquire("final.xn", {Tl, C}, ActKind::kTransient, ctx.act);
  final_norm.inv_rms = alloc.acquire("final.inv_rms", arch_.final_norm_stats_shape(Tl),
                                     ActKind::kTransient, DType::kF32);
  arch_.final_norm_forward(final_norm.xn, final_norm.inv_rms, final_norm.hidden, w_, config_,
                           *backend_);
  Tensor dxf =
      backward ? alloc.acquire("final.dxn", {Tl, C}, ActKind::kTransient, ctx.act) : Tensor();
  double loss_sum = head_and_loss(dxf, final_norm.xn, ids.targets, T, grad_scale, backward, alloc);
  if (cp_) cp_->group->all_reduce_sum(std::span<double>(&loss_sum, 1));
  if (!backward) {
    final_norm.release(alloc);
    return loss_sum;
  }

  // backward: final norm, layers top to bottom, embedding
  Tensor dres =
      alloc.acquire("grad.hidden", {Tl, C}, ActKind::kTransient, ctx.act);  // dL/d(residual)
  backend_->fill(dres, 0.0f);
  arch_.final_norm_backward(dres, dw_, dxf, final_norm.hidden, final_norm.inv_rms, w_, *backend_);
  gradients_ready(size_t(L) + 1);  // the final norm and the head
  alloc.release(dxf);
  final_norm.release(alloc);
  for (int l = L - 1; l >= 0; --l) {
    const SavedActs& s = strategy.backward_ready(l);
    arch_.backward(dres, dw_.layers[size_t(l)], s, w_.layers[size_t(l)], for_layer(ctx, l));
    strategy.backward_done(l);
    gradients_ready(size_t(l) + 1);
  }
  embed_backward(dres, tokens, batch, seq, alloc);
  gradients_ready(0);
  alloc.release(dres);
  return loss_sum;
}

namespace {

// Note [Document masks]: the refusal of a rope_scaling whose frequencies follow the sequence's
// length (dynamic, longrope), which packed documents leave undefined; `what` says which flag met
// which. Empty where the scaling does not.
std::string length_scaling_refusal(const ModelConfig& c, const std::string& what) {
  if (!c.uses_rope() || !c.rope_scaling.depends_on_length()) return "";
  return str(what, rope_type_name(c.rope_scaling.type),
             ": its frequencies follow the sequence's length, which packed documents leave "
             "undefined; memo refuses the pair");
}

}  // namespace

void Model::set_document_mask(int32_t eot) {
  if (eot >= 0 && !backend_->masked_attention())
    throw ConfigError(str("--document-mask: the ", backend_->name(),
                          " backend's attention does not mask documents yet; run on the CPU"));
  if (const std::string refusal =
          length_scaling_refusal(config_, "--document-mask with rope_scaling ");
      eot >= 0 && !refusal.empty())
    throw ConfigError(refusal);
  MEMO_CHECK(eot < config_.vocab_size, "set_document_mask: eot ", eot, " outside the vocabulary ",
             config_.vocab_size);
  doc_eot_ = eot;
}

void Model::set_positions(const PositionOverrides& p, const std::string& where) {
  if (!p.any()) return;
  if (!config_.uses_rope())
    throw ConfigError(str(where, ": the model's positions are learned (no RoPE to change)"));
  ModelConfig c;
  try {
    c = p.applied_to(config_);
  } catch (const ConfigError& e) {
    throw ConfigError(str(where, ": ", e.what()));
  }
  if (const std::string refusal =
          length_scaling_refusal(c, str(where, " with --document-mask: rope_scaling "));
      doc_eot_ >= 0 && !refusal.empty())
    throw ConfigError(refusal);
  config_ = c;
  rope_.clear();
}

void Model::set_eod_loss_mask(int32_t eot) {
  MEMO_CHECK(eot < config_.vocab_size, "set_eod_loss_mask: eot ", eot, " outside the vocabulary ",
             config_.vocab_size);
  loss_eot_ = eot;
}

int64_t Model::counted_targets(const int32_t* inputs, const int32_t* targets, int64_t n) const {
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) counted += counts_target(inputs[i], targets[i]);
  return counted;
}

// Note [Document masks]: doc_start_ from the whole micro-batch's inputs (every rank has them),
// then each local row's position: under context parallelism row t is position
// chunk(slot) n + t % n of its sequence (Note [Context parallel layout]).
void Model::find_documents(const int32_t* inputs, int64_t batch, int64_t seq) {
  doc_start_.assign(size_t(batch * seq), 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0, start = 0; s < seq; ++s) {
      if (inputs && inputs[b * seq + s] == doc_eot_) start = s;
      doc_start_[size_t(b * seq + s)] = int32_t(start);
    }
  positions_.clear();
  auto add = [&](int64_t b, int64_t s0, int64_t n) {
    for (int64_t s = s0; s < s0 + n; ++s)
      positions_.push_back(int32_t(s - doc_start_[size_t(b * seq + s)]));
  };
  if (!cp_) {
    for (int64_t b = 0; b < batch; ++b) add(b, 0, seq);
    return;
  }
  const int64_t n = cp_->chunk_len();
  for (int sl = 0; sl < 2; ++sl)
    for (int64_t b = 0; b < batch; ++b) add(b, cp_->chunk(sl) * n, n);
}

// Checks the sequence against a learned position table, or a sliding window the backend cannot
// apply, before any layer runs.
LayerContext Model::layer_context(int64_t batch, int64_t seq, ActivationAllocator& alloc) {
  const ContextParallel* cp = cp_ ? &*cp_ : nullptr;
  const int64_t whole = cp ? cp->seq : seq;  // positions run over the whole sequence
  if (!config_.uses_rope()) {
    // wpe has a row per position: a longer sequence has no embedding for its tail (the table is
    // the config's n_positions rows, also on a pipeline rank that does not hold it)
    const int64_t rows = config_.max_position_embeddings;
    if (whole > rows)
      throw ConfigError(str("sequence of ", whole, " tokens is longer than n_positions = ", rows,
                            ", the learned position table; use --seq <= ", rows,
                            " or a config with more positions"));
    LayerContext ctx{
        &config_, batch,    seq, {}, {}, &alloc, backend_, parallel_, backend_->activation_dtype(),
        cp,       tp_group_};
    if (doc_eot_ >= 0) {
      ctx.doc_start = host_view(doc_start_);
      ctx.positions = host_view(positions_);
    }
    return ctx;
  }
  if (config_.sliding_window > 0 && whole > config_.sliding_window && !backend_->masked_attention())
    throw ConfigError(str(
        "sequence of ", whole, " tokens is longer than sliding_window = ", config_.sliding_window,
        ": the ", backend_->name(), " backend's attention does not window yet; use --seq <= ",
        config_.sliding_window, " or the CPU"));
  const auto [cos, sin] = rope_tables(whole);
  LayerContext ctx{
      &config_, batch,    seq, cos, sin, &alloc, backend_, parallel_, backend_->activation_dtype(),
      cp,       tp_group_};
  if (doc_eot_ >= 0) {
    ctx.doc_start = host_view(doc_start_);
    ctx.positions = host_view(positions_);
  }
  return ctx;
}

namespace {

// The rows of sequence b that hold positions [p0, p0 + len): under context parallelism, for each
// slot of the rank (Note [Context parallel layout]); otherwise the sequence.
template <class F>
void for_each_position_run(const std::optional<ContextParallel>& cp, int64_t batch, int64_t seq,
                           F&& run) {
  for (int64_t b = 0; b < batch; ++b) {
    if (!cp) {
      run(b * seq, 0, seq);
      continue;
    }
    const int64_t n = cp->chunk_len();
    for (int sl = 0; sl < 2; ++sl) run((sl * batch + b) * n, cp->chunk(sl) * n, n);
  }
}

}  // namespace

template <class F>
void Model::for_each_local_position_run(int64_t batch, int64_t seq, int64_t rows, F&& run) const {
  // this rank's rows [first, first + rows) of the micro-batch's tokens under tensor parallelism
  const int64_t first = tp_split_ ? int64_t(tp_group_->rank()) * rows : 0;
  if (doc_eot_ >= 0)  // positions restart at each document
    return for_each_position_run(
        host_view(positions_), first, first + rows,
        [&](int64_t row, int64_t pos, int64_t len) { run(row - first, pos, len); });
  for_each_position_run(cp_, batch, seq, [&](int64_t row, int64_t pos, int64_t len) {
    const int64_t a = std::max(row, first), b = std::min(row + len, first + rows);
    if (a < b) run(a - first, pos + (a - row), b - a);
  });
}

void Model::embed_forward(Tensor x, View<const int32_t> tokens, int64_t batch, int64_t seq,
                          ActivationAllocator& alloc) {
  if (tp_split_) {  // the rows of this rank's vocabulary, the others zero, summed over the group
    TpPartial partial(alloc, tp_group_, "tp.embed_out", x.rows(), x.cols(), x.dtype());
    backend_->embedding_forward(partial.sums_into(x), tokens, w_.embed);
    partial.reduce_scatter(x);
  } else {
    backend_->embedding_forward(x, tokens, w_.embed);
  }
  if (w_.pos.empty()) return;
  for_each_local_position_run(batch, seq, x.rows(), [&](int64_t row, int64_t pos, int64_t len) {
    backend_->add_into(x.slice_rows(row, row + len), w_.pos.slice_rows(pos, pos + len));
  });
}

void Model::embed_backward(ConstTensor dx, View<const int32_t> tokens, int64_t batch, int64_t seq,
                           ActivationAllocator& alloc) {
  if (tp_split_) {  // every token's gradient, for the rows of this rank's vocabulary
    const TpGather gathered(alloc, tp_group_, "tp.embed_din", dx, dx.dtype());
    backend_->embedding_backward(dw_.embed, gathered.rows(), tokens);
  } else {
    backend_->embedding_backward(dw_.embed, dx, tokens);
  }
  if (dw_.pos.empty()) return;
  // in sequence order: deterministic (under tensor parallelism this rank's rows' share, summed
  // over the group with the other whole tensors' gradients)
  for_each_local_position_run(batch, seq, dx.rows(), [&](int64_t row, int64_t pos, int64_t len) {
    backend_->add_into(dw_.pos.slice_rows(pos, pos + len), dx.slice_rows(row, row + len));
  });
}

// Note [Vocabulary-parallel loss]
// Under tensor parallelism rank r holds rows [r P, (r + 1) P) of the head, P = ceil(V / t) (the
// last rank's rows past V are padding, which no logit sees: Note [Tensor-parallel parameters]).
// The final norm's rows of the group are all-gathered, so every rank has all T tokens and
// computes their logits over its part of the vocabulary, chunk by chunk. Per token it finds the
// part's max m_r, the sum s_r of exp(logit - m_r) and the target's logit (0 where another rank
// holds it); the ranks exchange (m_r, s_r) (all-gather, 8 bytes a token) and sum the target logits
// (all-reduce), and each finishes the loss m + log sum_r s_r exp(m_r - m) - logit_target and the
// softmax gradient of its columns with the same numbers: every rank has the same loss. The gradient
// of the final norm's rows is the group's sum of each rank's partial product, reduce-scattered once
// after the last chunk; the head's gradient is each rank's own.
double Model::head_and_loss(Tensor dxf, ConstTensor xf, const int32_t* targets, int64_t tokens,
                            float grad_scale, bool backward, ActivationAllocator& alloc) {
  // this rank's rows under tensor parallelism, without the padding of Note [Tensor-parallel
  // parameters]: its logits, gradients and products never see it
  const int64_t V = vocab_rows();
  const Tensor head = w_.head.slice_rows(0, V);
  const Tensor dhead = backward ? dw_.head.slice_rows(0, V) : Tensor();
  Communicator* const tp = tp_split_ ? tp_group_ : nullptr;
  // Note [bf16 loss gradient]
  // Under bf16 storage the head's two backward products take dL/dlogits rounded to bf16, as
  // PyTorch's autocast does (the gradient of its bf16 logits is bf16): with bf16 x and head both
  // products are native bf16 ones (the backend's bf16 kernels, accumulating in f32), not f32 ones
  // over a widened copy of the whole head each chunk (on an H200 at 852M the f32 products ran on
  // the SIMT pipes, about a fifth of a 4K step: bench/cuda/performance_model.md). The loss and
  // the softmax stay f32. Where a vocabulary split over tensor-parallel ranks ends in padding
  // (Note [Tensor-parallel parameters]), every rank of the group keeps the f32 products: a padded
  // part's gradient is not one contiguous block to round.
  const int64_t parts = tp ? tp->size() : 1;
  const bool bf16_dlogits =
      backward && head.dtype() == DType::kBF16 && w_.head.rows() * parts == config_.vocab_size;
  // Chunk so one chunk's logits (and their bf16 gradient) take at most 64 MiB; a function of
  // (T, V) and the precision only, so every strategy and every run sums the head gradient in the
  // same order.
  constexpr int64_t kMaxLogitBytes = int64_t(1) << 26;
  const int64_t row_bytes = w_.head.rows() * (bf16_dlogits ? 6 : 4);
  const int64_t chunk = std::max<int64_t>(1, std::min(tokens, kMaxLogitBytes / row_bytes));
  const TpGather all_rows(alloc, tp, "tp.head_in", xf, xf.dtype());
  std::optional<TpPartial> partial;  // the gradient of every token's row, this rank's share
  if (backward) partial.emplace(alloc, tp, "tp.head_din", dxf.rows(), dxf.cols(), dxf.dtype());
  const Tensor dx_all = backward ? partial->sums_into(dxf) : Tensor();
  Tensor losses = alloc.acquire("head.losses", {tokens}, ActKind::kTransient, DType::kF32);
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const int64_t t1 = std::min(tokens, t0 + chunk), n = t1 - t0;
    // held at the part's padded width, so every rank of the group makes the same requests (and a
    // plan the same refusal); the padding's columns are never computed
    Tensor logits_buffer =
        alloc.acquire("head.logits", {n, w_.head.rows()}, ActKind::kTransient, DType::kF32);
    const Tensor logits = logits_buffer.slice_cols(0, V);
    ConstTensor x = all_rows.rows().slice_rows(t0, t1);
    const View<const int32_t> ys(targets + t0, {n});
    backend_->matmul(logits, x, head, false, true);
    if (!tp) {
      backend_->cross_entropy(losses.slice_rows(t0, t1), backward ? logits : Tensor(), logits, ys,
                              grad_scale);
    } else {
      Tensor stats = alloc.acquire("head.ce_stats", {2, n}, ActKind::kTransient, DType::kF32);
      Tensor target = alloc.acquire("head.ce_target", {n}, ActKind::kTransient, DType::kF32);
      Tensor all = alloc.acquire("tp.ce_stats", {2 * int64_t(tp->size()), n}, ActKind::kTransient,
                                 DType::kF32);
      backend_->vocab_parallel_ce_stats(stats, target, logits, ys);
      tp->all_gather(all, stats);
      tp->all_reduce_sum(target);
      backend_->vocab_parallel_ce(losses.slice_rows(t0, t1), backward ? logits : Tensor(), logits,
                                  ys, all, target, grad_scale);
      alloc.release(all);
      alloc.release(target);
      alloc.release(stats);
    }
    if (backward && bf16_dlogits) {  // Note [bf16 loss gradient]
      Tensor d16 = alloc.acquire("head.dlogits_bf16", {n, V}, ActKind::kTransient, DType::kBF16);
      backend_->convert(d16, logits);
      backend_->matmul(dhead, d16, x, true, false, 1.0f, 1.0f);
      backend_->matmul(dx_all.slice_rows(t0, t1), d16, head, false, false);
      alloc.release(d16);
    } else if (backward) {  // logits now holds dL/dlogits
      backend_->matmul(dhead, logits, x, true, false, 1.0f, 1.0f);
      backend_->matmul(dx_all.slice_rows(t0, t1), logits, head, false, false);
    }
    alloc.release(logits_buffer);
  }
  if (backward) partial->reduce_scatter(dxf);
  if (!token_losses_.empty() && backend_->has_values())
    backend_->copy_to_host(token_losses_.data(), losses.data(), tokens * int64_t(sizeof(float)));
  const double sum = backend_->sum(losses);  // in token order: deterministic
  alloc.release(losses);
  return sum;
}

ChunkPass::ChunkPass(ActivationStrategy& strategy) : strategy_(strategy) {}
ChunkPass::~ChunkPass() = default;

void Model::set_pipeline(const PipelinePart& part) {
  const int L = int(config_.num_hidden_layers);
  if (part.chunks.empty()) throw ConfigError("pipeline: a rank without chunks");
  int after = 0;
  for (const auto& [first, last] : part.chunks) {
    if (first < after || first >= last || last > L)
      throw ConfigError(str("pipeline: chunk of layers [", first, ", ", last, ") after layer ",
                            after, " of a model of ", L, " layers"));
    after = last;
  }
  if (part.first && part.chunks.front().first != 0)
    throw ConfigError(str("pipeline: the model's chunk 0 starts at layer ",
                          part.chunks.front().first, ", not 0"));
  if (part.last && part.chunks.back().second != L)
    throw ConfigError(str("pipeline: the model's last chunk ends at layer ",
                          part.chunks.back().second, ", not ", L));
  // a meta backend (a static plan's trace: Note [Meta backend]) runs any target's shapes
  if (backend_->has_values() && !backend_->host_can_access(backend_->device_space()))
    throw ConfigError(str("pipeline parallelism runs on the CPU for now, not on the ",
                          backend_->name(), " backend"));
  MEMO_CHECK(use_ == ModelUse::kTraining, "set_pipeline: a pipeline trains");
  const ParamLayout whole(config_, layout_.shard());  // this rank's parts under --tp
  layout_ = ParamLayout(whole, [&](const ParamInfo& p) {
    switch (p.role) {
      case ParamRole::kEmbedding:
        return part.first || (part.last && tied_);  // the last chunk's head when tied
      case ParamRole::kPositions:
        return part.first;
      case ParamRole::kLayer:
        return std::any_of(part.chunks.begin(), part.chunks.end(),
                           [&](const auto& c) { return p.layer >= c.first && p.layer < c.second; });
      case ParamRole::kNorm:
      case ParamRole::kNormBias:
      case ParamRole::kHead:
        return part.last;
    }
    return false;
  });
  pipeline_ = part;
  rope_.clear();
  allocate_params();
}

std::pair<int64_t, int64_t> Model::pipeline_chunk_params(int chunk) const {
  check_pipeline_use("pipeline_chunk_params");
  const int n = int(pipeline_->chunks.size());
  MEMO_CHECK(chunk >= 0 && chunk < n, "pipeline: chunk ", chunk, " of a rank with ", n);
  const auto [first, last] = pipeline_->chunks[size_t(chunk)];
  auto owner = [&](const ParamInfo& p) {  // this rank's chunk index of the tensor
    if (p.role == ParamRole::kLayer)
      for (int c = 0; c < n; ++c)
        if (p.layer >= pipeline_->chunks[size_t(c)].first &&
            p.layer < pipeline_->chunks[size_t(c)].second)
          return c;
    if (p.role == ParamRole::kEmbedding || p.role == ParamRole::kPositions)
      return pipeline_->first ? 0 : -1;  // a tied head copy: pipeline_head_copy_params
    return n - 1;                        // the final norm and the head
  };
  int64_t begin = layout_.total_numel(), end = 0;
  for (const ParamInfo& p : layout_.params())
    if (owner(p) == chunk) {
      begin = std::min(begin, p.offset);
      end = std::max(end, p.offset + p.numel);
    }
  for (const ParamInfo& p : layout_.params())
    MEMO_CHECK(owner(p) == chunk || p.offset + p.numel <= begin || p.offset >= end,
               "pipeline: ", p.name, " lies inside the gradient range of chunk [", first, ", ",
               last, ")");
  return {begin, std::max<int64_t>(end - begin, 0)};
}

std::pair<int64_t, int64_t> Model::pipeline_head_copy_params() const {
  check_pipeline_use("pipeline_head_copy_params");
  if (pipeline_->first || !pipeline_->last || !tied_) return {0, 0};
  for (const ParamInfo& p : layout_.params())
    if (p.role == ParamRole::kEmbedding) return {p.offset, p.numel};
  return {0, 0};
}

void Model::check_pipeline_use(const char* what) const {
  MEMO_CHECK(pipeline_, what, ": the model is not a pipeline rank's (set_pipeline)");
}

int64_t Model::pipeline_local_seq(int64_t seq) {
  if (!cp_) return seq;
  check_context_parallel_seq(seq, cp_->ranks());
  cp_->seq = seq;
  return seq / cp_->ranks();
}

int64_t Model::pipeline_rows(int64_t batch, int64_t seq) const {
  if (cp_) {
    check_context_parallel_seq(seq, cp_->ranks());
    seq /= cp_->ranks();
  }
  const int64_t tokens = batch * seq, t = tp_split_ ? tp_group_->size() : 1;
  if (tokens % t != 0)
    throw ConfigError(str("tensor parallel ", t, ": a micro-batch of ", tokens,
                          " tokens does not split into ", t, " equal parts of the sequence"));
  return tokens / t;
}

void Model::pipeline_layers_forward(ChunkPass& pass, int chunk, const int32_t* inputs,
                                    int64_t batch, int64_t seq, ConstTensor x_in, Tensor y,
                                    ActivationAllocator& alloc, bool backward) {
  check_pipeline_use("pipeline_forward");
  MEMO_CHECK(pass.chunk_ == -1, "a chunk pass runs one forward");
  MEMO_CHECK(chunk >= 0 && size_t(chunk) < pipeline_->chunks.size(), "pipeline: chunk ", chunk,
             " of a rank with ", pipeline_->chunks.size());
  MEMO_CHECK(batch > 0 && seq > 0, "micro-batch of ", batch, " x ", seq, " tokens");
  const auto [first, last] = pipeline_->chunks[size_t(chunk)];
  const bool embeds = pipeline_->first && chunk == 0;
  const int64_t T = batch * seq, C = config_.hidden_size, rows = pipeline_rows(batch, seq);
  MEMO_CHECK(y.rows() == rows && y.cols() == C, "pipeline: a chunk's output of ", y.shape(),
             " for ", rows, " rows of width ", C);
  // under context parallelism the layers run this rank's chunks of each sequence
  const int64_t local_seq = pipeline_local_seq(seq);
  if (embeds) {
    check_token_ids("embedding_forward", "token", View<const int32_t>(inputs, {T}),
                    config_.vocab_size);
    pass.inputs_.assign(inputs, inputs + T);
    if (cp_) {  // this rank's chunks of the ids, chunk-major, as run() takes them
      pass.inputs_.resize(size_t(batch * local_seq));
      context_parallel_tokens(pass.inputs_.data(), inputs, batch, *cp_);
    }
    if (tp_split_) {  // the ids of this rank's vocabulary rows, as run() takes them
      const auto [v0, v1] = vocab_ids();
      local_vocab_ids(tp_inputs_, pass.inputs_.data(), int64_t(pass.inputs_.size()), v0, v1);
      pass.inputs_ = tp_inputs_;
    }
  } else {
    MEMO_CHECK(x_in.rows() == rows && x_in.cols() == C, "pipeline: a chunk's input of ",
               x_in.shape(), " for ", rows, " rows of width ", C);
  }
  pass.chunk_ = chunk;
  pass.batch_ = batch;
  pass.seq_ = local_seq;
  pass.rows_ = rows;
  if (doc_eot_ >= 0) {  // every rank has the micro-batch's tokens
    find_documents(inputs, batch, seq);
    pass.doc_start_ = doc_start_;
    pass.positions_ = positions_;
  }
  pass.ctx_ = layer_context(batch, local_seq, alloc);
  if (doc_eot_ >= 0) {
    pass.ctx_.doc_start = host_view(pass.doc_start_);
    pass.ctx_.positions = host_view(pass.positions_);
  }
  const ScopedMatmulWorkspace workspace(*backend_, alloc);
  refresh_working_weights();
  pass.layers_ = std::make_unique<Layers>(arch_, w_, pass.ctx_);
  ActivationStrategy& strategy = pass.strategy_;
  // a chunk below the model's last waits for its backward while other micro-batches run
  const bool parked =
      backward && !(pipeline_->last && size_t(chunk) + 1 == pipeline_->chunks.size());
  strategy.set_layer_range(first, last, parked);
  strategy.bind_layers(*pass.layers_);
  strategy.begin_step(batch, local_seq);
  const Tensor x0 = strategy.forward_slot(first).x();
  if (embeds)
    embed_forward(x0, host_view(pass.inputs_), batch, local_seq, alloc);
  else
    backend_->copy(x0, x_in);
  for (int l = first; l < last; ++l) {
    const Tensor out = l + 1 < last ? strategy.forward_slot(l + 1).x() : y;
    arch_.forward(out, strategy.forward_slot(l), w_.layers[size_t(l)], for_layer(pass.ctx_, l));
    if (backward)
      strategy.forward_done(l);
    else
      strategy.discard(l);
  }
  if (parked) strategy.park();
}

void Model::pipeline_forward_only(int chunk, const int32_t* inputs, int64_t batch, int64_t seq,
                                  ConstTensor x_in, Tensor x_out, ActivationStrategy& strategy,
                                  ActivationAllocator& alloc) {
  check_pipeline_use("pipeline_forward_only");
  MEMO_CHECK(!(pipeline_->last && size_t(chunk) + 1 == pipeline_->chunks.size()),
             "pipeline_forward_only: the model's last chunk runs in pipeline_last_loss");
  ChunkPass pass(strategy);
  pipeline_layers_forward(pass, chunk, inputs, batch, seq, x_in, x_out, alloc, false);
}

double Model::pipeline_last_loss(const int32_t* inputs, const int32_t* targets, int64_t batch,
                                 int64_t seq, ConstTensor x, ActivationStrategy& strategy,
                                 ActivationAllocator& alloc) {
  ChunkPass pass(strategy);
  return pipeline_last_pass(pass, inputs, targets, batch, seq, 1.0f, x, Tensor(), alloc);
}

void Model::pipeline_forward(ChunkPass& pass, int chunk, const int32_t* inputs, int64_t batch,
                             int64_t seq, ConstTensor x_in, Tensor x_out,
                             ActivationAllocator& alloc) {
  check_pipeline_use("pipeline_forward");
  MEMO_CHECK(!(pipeline_->last && size_t(chunk) + 1 == pipeline_->chunks.size()),
             "pipeline_forward: the model's last chunk runs in pipeline_last");
  pipeline_layers_forward(pass, chunk, inputs, batch, seq, x_in, x_out, alloc);
}

void Model::pipeline_backward(ChunkPass& pass, Tensor dx, ActivationAllocator& alloc) {
  check_pipeline_use("pipeline_backward");
  MEMO_CHECK(pass.chunk_ >= 0 && pass.layers_, "pipeline_backward: the pass has no forward");
  MEMO_CHECK(pass.ctx_.alloc == &alloc, "pipeline_backward: another allocator than the forward's");
  const auto [first, last] = pipeline_->chunks[size_t(pass.chunk_)];
  const int64_t rows = pass.rows_;
  MEMO_CHECK(dx.rows() == rows && dx.cols() == config_.hidden_size, "pipeline: a gradient of ",
             dx.shape(), " for ", rows, " rows");
  const ScopedMatmulWorkspace workspace(*backend_, alloc);
  ActivationStrategy& strategy = pass.strategy_;
  for (int l = last - 1; l >= first; --l) {
    const SavedActs& s = strategy.backward_ready(l);
    arch_.backward(dx, dw_.layers[size_t(l)], s, w_.layers[size_t(l)], for_layer(pass.ctx_, l));
    strategy.backward_done(l);
  }
  if (pipeline_->first && pass.chunk_ == 0) {
    if (doc_eot_ >= 0) positions_ = pass.positions_;  // the learned positions' rows
    embed_backward(dx, host_view(pass.inputs_), pass.batch_, pass.seq_, alloc);
  }
  pass.chunk_ = -2;  // spent
}

double Model::pipeline_last(const int32_t* inputs, const int32_t* targets, int64_t batch,
                            int64_t seq, float grad_scale, Tensor x, ActivationStrategy& strategy,
                            ActivationAllocator& alloc) {
  ChunkPass pass(strategy);
  return pipeline_last_pass(pass, inputs, targets, batch, seq, grad_scale, x, x, alloc);
}

double Model::pipeline_last_pass(ChunkPass& pass, const int32_t* inputs, const int32_t* targets,
                                 int64_t batch, int64_t seq, float grad_scale, ConstTensor x,
                                 Tensor dx, ActivationAllocator& alloc) {
  check_pipeline_use("pipeline_last");
  MEMO_CHECK(pipeline_->last, "pipeline_last: this rank does not hold the model's last chunk");
  const bool backward = !dx.empty();
  const int64_t T = batch * seq, C = config_.hidden_size, rows = pipeline_rows(batch, seq);
  check_target_ids("cross_entropy", View<const int32_t>(targets, {T}), config_.vocab_size);
  if (loss_eot_ >= 0) {  // --eod-mask-loss: the eot inputs' predictions not counted, as in run
    loss_targets_.assign(targets, targets + T);
    for (int64_t i = 0; i < T; ++i)
      if (inputs[i] == loss_eot_) loss_targets_[size_t(i)] = kIgnoredTarget;
    targets = loss_targets_.data();
  }
  // the head's tokens: this rank's chunks under context parallelism, their targets in its
  // vocabulary rows under tensor parallelism (Note [Vocabulary-parallel loss]), as in run()
  const int64_t local_seq = pipeline_local_seq(seq), tokens = batch * local_seq;
  if (cp_) {
    cp_targets_.resize(size_t(tokens));
    context_parallel_tokens(cp_targets_.data(), targets, batch, *cp_);
    targets = cp_targets_.data();
  }
  if (tp_split_) {
    const auto [v0, v1] = vocab_ids();
    targets = local_vocab_ids(tp_targets_, targets, tokens, v0, v1);
  }
  const DType act = backend_->activation_dtype();
  FinalNormActs final_norm;
  final_norm.hidden = alloc.acquire("final.hidden", {rows, C}, ActKind::kTransient, act);
  pipeline_layers_forward(pass, int(pipeline_->chunks.size()) - 1, inputs, batch, seq, x,
                          final_norm.hidden, alloc, backward);
  double loss_sum = 0.0;
  {
    const ScopedMatmulWorkspace workspace(*backend_, alloc);
    final_norm.xn = alloc.acquire("final.xn", {rows, C}, ActKind::kTransient, act);
    final_norm.inv_rms = alloc.acquire("final.inv_rms", arch_.final_norm_stats_shape(rows),
                                       ActKind::kTransient, DType::kF32);
    arch_.final_norm_forward(final_norm.xn, final_norm.inv_rms, final_norm.hidden, w_, config_,
                             *backend_);
    const Tensor dxf =
        backward ? alloc.acquire("final.dxn", {rows, C}, ActKind::kTransient, act) : Tensor();
    loss_sum = head_and_loss(dxf, final_norm.xn, targets, tokens, grad_scale, backward, alloc);
    if (cp_) cp_->group->all_reduce_sum(std::span<double>(&loss_sum, 1));
    if (backward) {
      backend_->fill(dx, 0.0f);  // x, copied into the first layer's slot, becomes dL/d(residual)
      arch_.final_norm_backward(dx, dw_, dxf, final_norm.hidden, final_norm.inv_rms, w_, *backend_);
      alloc.release(dxf);
    }
    final_norm.release(alloc);
  }
  if (backward) pipeline_backward(pass, dx, alloc);
  return loss_sum;
}

}  // namespace memo
