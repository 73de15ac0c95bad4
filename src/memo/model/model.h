// The decoder-only model: embedding (GPT-2: plus learned positions), L layers and the final norm of
// its architecture (model/architecture.h), LM head (tied or untied) and softmax cross-entropy,
// with its parameters and gradients in two flat buffers (model/params.h). forward_backward runs one
// micro-batch and accumulates gradients; the optimiser step, clipping and accumulation over
// micro-batches belong to the trainer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "memo/backend/allocator.h"
#include "memo/backend/backend.h"
#include "memo/backend/checks.h"
#include "memo/backend/raw_allocator.h"
#include "memo/memory/strategy.h"
#include "memo/model/architecture.h"
#include "memo/model/config.h"
#include "memo/model/context_parallel.h"
#include "memo/model/parallel.h"
#include "memo/model/params.h"

namespace memo {

// What a model is for: training holds gradients beside the parameters; inference (memo eval,
// memo generate) does not, and has half the memory.
enum class ModelUse { kTraining, kInference };

// Note [Pipeline parts]
// Under pipeline parallelism (Note [Pipeline chunks] in parallel/pipeline.h) a rank's model holds
// its chunks' tensors only: each chunk's layers, the embedding (and learned positions) where it
// runs chunk 0, the final norm and the head where it runs the last chunk, and with tied embeddings
// the embedding there too, as the head. The two copies of a tied embedding then have two
// gradients, the lookups' on the first rank and the head's on the last, which the caller sums
// before the update (Megatron-LM's embedding group) so both copies stay equal. Every tensor keeps
// its init stream (ParamInfo::index), so a pipeline starts from one process's weights. One
// micro-batch runs chunk by chunk: pipeline_forward through each chunk but the last, then
// pipeline_last (the last chunk's forward, loss and backward back to back, as every schedule runs
// them: Note [Pipeline schedules]), then pipeline_backward through the others in reverse. A
// ChunkPass carries one micro-batch's chunk from its forward to its backward, with its own
// activation strategy, so a rank holds as many micro-batches in flight as the schedule has.
// Each kernel sees the data of the one-process run in the same order, so losses and gradients are
// the one-process run's bit for bit (the summed tied embedding to rounding), with document masks
// and the eod loss mask too. Under tensor parallelism (set_parallel, before set_pipeline) a rank
// holds its parts of its chunks' tensors and passes its sequence-parallel rows of the hidden
// states to the same tensor-parallel rank of the next stage; under context parallelism
// (set_context_parallel, before set_pipeline) it runs its chunks of each sequence, and passes
// their rows, as without a pipeline.
struct PipelinePart {
  std::vector<std::pair<int, int>> chunks;  // layers [first, last) of this rank's chunks, in order
  bool first = true;  // its first chunk is the model's chunk 0 (the embedding)
  bool last = true;   // its last chunk is the model's last (the final norm, head and loss)
};

// One micro-batch's pass through one pipeline chunk (Note [Pipeline parts]): what its forward
// leaves for its backward beside the strategy's saved activations. The strategy is borrowed and
// must outlive the pass; a pass runs one forward and one backward.
class ChunkPass {
 public:
  explicit ChunkPass(ActivationStrategy& strategy);
  ~ChunkPass();
  ChunkPass(const ChunkPass&) = delete;
  ChunkPass& operator=(const ChunkPass&) = delete;

 private:
  friend class Model;
  ActivationStrategy& strategy_;
  int chunk_ = -1;               // this rank's index of the chunk; -1 before the forward
  int64_t batch_ = 0, seq_ = 0;  // seq_: this rank's share under context parallelism
  int64_t rows_ = 0;             // of the hidden states it takes and gives
  LayerContext ctx_{};
  std::unique_ptr<LayerRunner> layers_;
  std::vector<int32_t> inputs_;  // chunk 0: the token ids, for the embedding's backward
  // document masks: the micro-batch's document starts and positions (Note [Document masks]),
  // its own while other micro-batches run between its forward and its backward
  std::vector<int32_t> doc_start_, positions_;
};

class Model {
 public:
  // Parameters and gradients (zeroed) in the backend's device space; every kernel runs on it.
  // With the meta backend both are address ranges without memory (Note [Meta backend] in
  // meta/meta_backend.h): a 65B model traced on a laptop. The backend must outlive the
  // model.
  Model(const ModelConfig& config, Backend& backend, ModelUse use = ModelUse::kTraining);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  const Architecture& architecture() const { return arch_; }
  // The layers' skeletal set, for the activation strategy a run uses (memory/strategy.h).
  const SkeletalLayout& skeletal() const { return skeletal_; }
  const ParamLayout& layout() const { return layout_; }
  // The flat parameter and gradient buffers, f32 in the backend's device space (with padding,
  // zero in both). params() and grads() are their raw pointers, for copies and host-side tools:
  // host code reads through them only where backend().host_can_access(device space).
  // Handing out the parameters marks the bf16 working copy stale (Note [Mixed precision]): its
  // holder may write them.
  Tensor params_tensor() const {
    working_stale_ = true;
    return params_;
  }
  Tensor grads_tensor() const { return grads_; }
  float* params() {
    working_stale_ = true;
    return static_cast<float*>(params_.data());
  }
  float* grads() { return static_cast<float*>(grads_.data()); }
  int64_t params_numel() const { return layout_.total_numel(); }  // with padding (zero in both)
  bool has_values() const { return backend_->has_values(); }      // false: the meta backend
  Backend& backend() const { return *backend_; }
  // The weights the layers compute with: the parameters themselves, or under mixed precision
  // their bf16 working copy, brought up to date with the f32 master weights first.
  const ModelWeights& weights() const {
    refresh_working_weights();
    return w_;
  }
  const ModelWeights& grad_weights() const { return dw_; }

  // Note [Mixed precision]
  // When the backend's activations are bf16 (Backend::activation_dtype; Note [bf16 storage by
  // conversion] in backend/bf16_storage.h), the model keeps Megatron-LM's split: the parameters
  // (params_tensor) stay the f32 master weights that the optimiser updates, init draws and
  // checkpoints hold; the gradients stay f32 (products of bf16 operands accumulate into them in
  // f32); and the layers, the embedding and the head compute with a bf16 working copy of every
  // parameter, norms included. The copy is refreshed (one rounding to nearest even) at the next
  // forward after anything took the parameters (params(), params_tensor()), so every step sees
  // the weights its optimiser step left, and a resumed run the ones it loaded.
  bool mixed_precision() const { return !working_.empty(); }
  // Bytes of the bf16 working copy (0 without mixed precision): device memory beside the
  // parameters, gradients and optimiser state.
  int64_t working_weights_bytes() const { return working_storage_.bytes(); }

  // Tensor + sequence parallelism over tp_group (t = parallel.tp ranks; c must be 1: context
  // parallelism is set_context_parallel). Called before init or loading: the parameters become
  // this rank's parts (Note [Tensor-parallel parameters] in model/params.h) and the gradients
  // restart at zero. The layers run on the rank's rows and heads (Note [Tensor-parallel
  // activations] in model/parallel.h); forward_backward still takes the whole micro-batch's
  // tokens, and returns its whole loss on every rank of the group. Throws ConfigError when the
  // heads, key-value heads, MLP units or vocabulary do not split into t parts. With the meta
  // backend and a ShapeCommunicator: one rank of a plan (Note [Per-GPU shapes]).
  void set_parallel(const Parallel& parallel, Communicator* tp_group = nullptr);
  const Parallel& parallel() const { return parallel_; }
  // Context parallelism over `group` (Note [Context parallel layout] in model/context_parallel.h):
  // forward_backward and forward_loss still take the whole micro-batch's tokens, run this rank's
  // chunks of them, and return the loss sum over the whole micro-batch (summed over the group);
  // the gradients are this rank's share, which the caller sums over the group. Null or a group of
  // one: off. Every rank of the group must make the same calls.
  void set_context_parallel(Communicator* group);
  Communicator* context_parallel_group() const { return cp_ ? cp_->group : nullptr; }

  // Document masks (Note [Document masks] in model/architecture.h): with eot >= 0 a document
  // starts at each token `eot` of a sequence (memo tokenize starts each document with its
  // end-of-text token), and at the sequence's start; attention stays within a document and
  // positions restart at 0 at its first token. -1: off (the default). Throws ConfigError where
  // the backend's attention cannot mask (Backend::masked_attention) or the RoPE frequencies follow
  // the sequence's length (dynamic, longrope), which packed documents leave undefined.
  void set_document_mask(int32_t eot);
  int32_t document_mask() const { return doc_eot_; }
  // --eod-mask-loss (Megatron-LM's name): with eot >= 0 the loss does not count the prediction
  // made from each input token `eot` (the first token of a packed document predicting its
  // second from nothing before it); -1: every prediction counts (the default). The targets
  // given may also hold kIgnoredTarget (backend/checks.h): those are not counted either.
  void set_eod_loss_mask(int32_t eot);
  // The positions changed in place (a length stage's --stage-rope: Note [Length stages] in
  // train/step_schedule.h): config() and the RoPE tables from the next micro-batch on take the
  // overrides. ConfigError (naming `where`) for a model without RoPE, a config the overrides make
  // invalid, or, under document masks, a scaling that follows the sequence's length.
  void set_positions(const PositionOverrides& p, const std::string& where);
  int32_t eod_loss_mask() const { return loss_eot_; }
  // Whether the loss counts target t of a micro-batch, and how many of its n it counts: what the
  // caller divides the loss sum by for the mean (train/step.h sets grad_scale from it).
  bool counts_target(int32_t input, int32_t target) const {
    return target != kIgnoredTarget && (loss_eot_ < 0 || input != loss_eot_);
  }
  int64_t counted_targets(const int32_t* inputs, const int32_t* targets, int64_t n) const;

  // Pipeline parallelism (Note [Pipeline parts]): called before init or loading, the parameters
  // become the part's tensors (this rank's parts of them after set_parallel) and the gradients
  // restart at zero. ConfigError when the chunks are not increasing layer ranges of the model.
  void set_pipeline(const PipelinePart& part);
  const std::optional<PipelinePart>& pipeline() const { return pipeline_; }
  // Where this rank's chunk `chunk` (its index among the rank's) writes its gradient: {offset,
  // numel} of the flat buffer, its layers' tensors with the embedding (and learned positions) on
  // the model's chunk 0 and the final norm and untied head on its last. One range in the
  // layout's order; Error when another chunk's tensor lies inside it. A tied embedding's head
  // copy on the last rank (not also the first) is no chunk's: pipeline_head_copy_params.
  std::pair<int64_t, int64_t> pipeline_chunk_params(int chunk) const;
  // {offset, numel} of that head copy, written by the model's last chunk ({0, 0} where there is
  // none).
  std::pair<int64_t, int64_t> pipeline_head_copy_params() const;
  // The rows of the hidden states one micro-batch of batch x seq tokens passes between stages:
  // this rank's chunks of each sequence under context parallelism (Note [Context parallel
  // layout]), of those its 1 / t under tensor parallelism (Note [Tensor-parallel activations] in
  // model/parallel.h), all of them otherwise. ConfigError when they do not split.
  int64_t pipeline_rows(int64_t batch, int64_t seq) const;
  // The head is the embedding (no lm_head tensor): under a pipeline the first and the last rank
  // each hold it (Note [Pipeline parts]).
  bool tied_embeddings() const { return tied_; }
  // Chunk `chunk` of this rank's part (not its model's last) for one micro-batch of batch x seq
  // tokens: from the embedding of `inputs` ([batch * seq] host ids) on the model's chunk 0, else
  // from x_in ([T, C], the previous chunk's output); its output into x_out ([T, C]). Under tensor
  // or context parallelism each [T, C] of these chunk calls is this rank's
  // [pipeline_rows(batch, seq), C]; the ids stay the whole micro-batch's.
  void pipeline_forward(ChunkPass& pass, int chunk, const int32_t* inputs, int64_t batch,
                        int64_t seq, ConstTensor x_in, Tensor x_out, ActivationAllocator& alloc);
  // The pass's backward: dx holds the gradient of the chunk's output ([T, C]) and on return that
  // of its input (on the model's chunk 0 the embedding's gradient is accumulated instead, and dx
  // is scratch). Gradients accumulate (+=).
  void pipeline_backward(ChunkPass& pass, Tensor dx, ActivationAllocator& alloc);
  // The model's last chunk (this rank's last): forward from x ([T, C], the previous chunk's
  // output; on a part that is also chunk 0, from the embedding of `inputs`), the loss of
  // `targets`, and the backward, gradients scaled by grad_scale as forward_backward's; x then holds
  // the gradient of the chunk's input. Returns the sum of the token losses.
  double pipeline_last(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq,
                       float grad_scale, Tensor x, ActivationStrategy& strategy,
                       ActivationAllocator& alloc);
  // Forward only (validation): chunk `chunk` (not the model's last) from x_in or the embedding
  // into x_out, each layer's saved tensors discarded as soon as the next has run; and the model's
  // last chunk from x (or the embedding) to the sum of the token losses of `targets`.
  void pipeline_forward_only(int chunk, const int32_t* inputs, int64_t batch, int64_t seq,
                             ConstTensor x_in, Tensor x_out, ActivationStrategy& strategy,
                             ActivationAllocator& alloc);
  double pipeline_last_loss(const int32_t* inputs, const int32_t* targets, int64_t batch,
                            int64_t seq, ConstTensor x, ActivationStrategy& strategy,
                            ActivationAllocator& alloc);

  // Hugging Face's initialisation (model/params.h), drawn on the host; a no-op without values.
  void init(uint64_t seed);
  void zero_grads();
  // True when the parameters and layers split over tensor_parallel_group() (t > 1).
  bool tensor_parallel() const { return tp_split_; }
  Communicator* tensor_parallel_group() const { return tp_group_; }
  // Under tensor parallelism: sums the gradients of the tensors every rank holds whole (the
  // norms', from each rank's tokens) over the group: all of them, or those inside `part` of the
  // gradient buffer. A no-op otherwise.
  void reduce_tensor_parallel_grads();
  void reduce_tensor_parallel_grads(ConstTensor part);
  // Called during forward_backward's backward with each part of the gradient buffer as the
  // micro-batch's backward is done with it: the final norm and the untied head, then each layer's
  // tensors from the top, then the embedding (and learned positions). Together the parts cover
  // the buffer. The gradient reduction overlapped with the backward (train/step.h) starts there.
  // Empty: none.
  using GradientsReady = std::function<void(Tensor part)>;
  void set_gradients_ready(GradientsReady ready) { grads_ready_ = std::move(ready); }
  // The squared norm of the whole model's gradient: the group's parts, and each whole tensor once,
  // under tensor parallelism (the same on every rank); backend().sum_squares(grads) otherwise.
  double grad_sum_squares();
  // Under tensor parallelism: the squared norm of the gradients of the tensors every rank holds
  // whole, as this rank's buffer has them. 0 otherwise.
  double whole_tensors_sum_squares();

  // One micro-batch of `batch` sequences of `seq` tokens: inputs and targets are [batch * seq] in
  // host memory (copied to the device first when the host cannot address it).
  // Gradients accumulate (+=) scaled by grad_scale (1 / tokens per optimiser step gives the mean).
  // Returns the sum of the token losses.
  double forward_backward(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq,
                          float grad_scale, ActivationStrategy& strategy,
                          ActivationAllocator& alloc);
  // Forward only; returns the sum of the token losses. token_losses, when not empty: each
  // target's loss ([batch * seq] in host memory, row-major as the targets); not under context
  // parallelism (a rank holds only its chunks' losses).
  double forward_loss(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq,
                      ActivationStrategy& strategy, ActivationAllocator& alloc,
                      std::span<float> token_losses = {});

 private:
  double run(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq,
             float grad_scale, bool backward, ActivationStrategy& strategy,
             ActivationAllocator& alloc);
  // Head and loss over token chunks so the [T, V] logits never exist whole. Fills dxf (if
  // backward) and returns the loss sum.
  double head_and_loss(Tensor dxf, ConstTensor xf, const int32_t* targets, int64_t tokens,
                       float grad_scale, bool backward, ActivationAllocator& alloc);
  // cos and sin, [seq, D/2] each, in the device space; cached per seq when the backend has values
  // (the meta backend's are address ranges, replaced at each new seq).
  std::pair<ConstTensor, ConstTensor> rope_tables(int64_t seq);
  // The layers' context (rope tables when rotary) for batch x seq tokens of this rank (under
  // context parallelism seq is the rank's share and the rope tables are of the whole sequence).
  LayerContext layer_context(int64_t batch, int64_t seq, ActivationAllocator& alloc);
  // x = wte[tokens] (+ wpe[position] with learned positions), and the gradients of both. Under
  // tensor parallelism x is this rank's rows of the group's sum of partial lookups.
  void embed_forward(Tensor x, View<const int32_t> tokens, int64_t batch, int64_t seq,
                     ActivationAllocator& alloc);
  void embed_backward(ConstTensor dx, View<const int32_t> tokens, int64_t batch, int64_t seq,
                      ActivationAllocator& alloc);
  // run(row, position, length) for the runs of consecutive positions in this rank's `rows` token
  // rows (all of them without tensor parallelism), rows counted from its first.
  template <class F>
  void for_each_local_position_run(int64_t batch, int64_t seq, int64_t rows, F&& run) const;

  Backend* backend_;
  ModelConfig config_;
  const Architecture& arch_;
  SkeletalLayout skeletal_;
  ParamLayout layout_;
  RawBuffer params_storage_;  // [total_numel] f32, device space
  RawBuffer grads_storage_;   // [total_numel] f32, device space
  Tensor params_;             // views of the two buffers
  Tensor grads_;
  RawBuffer working_storage_;  // [total_numel] bf16 under mixed precision, device space
  Tensor working_;             // its view; empty without mixed precision
  mutable bool working_stale_ = true;
  void refresh_working_weights() const;  // working_ = bf16(params_) when stale
  ModelWeights w_;                       // the layers' weights: params_ or working_
  ModelWeights dw_;
  ModelUse use_;
  void allocate_params();  // params_ and grads_ (training) for layout_, zeroed; the weights bound
  // The vocabulary rows of this rank's part of the embedding and head, without padding.
  int64_t vocab_rows() const;
  // [first, end) of the vocabulary's ids those rows hold (all of them without tensor parallelism).
  std::pair<int64_t, int64_t> vocab_ids() const;
  // The parts set_gradients_ready hands out: [0] the embedding's, [1 + l] layer l's, [L + 1] the
  // final norm's and head's ([begin, end) elements).
  std::vector<std::pair<int64_t, int64_t>> grad_parts_;
  GradientsReady grads_ready_;
  void gradients_ready(size_t part);
  Parallel parallel_;
  Communicator* tp_group_ = nullptr;  // t ranks when parallel_.tp > 1
  bool tp_split_ = false;             // the parameters and layers split over tp_group_ (t > 1)
  std::vector<int32_t> tp_inputs_, tp_targets_;  // ids relative to this rank's vocabulary rows
  std::optional<ContextParallel> cp_;            // set: context parallel over cp_->group
  std::optional<PipelinePart> pipeline_;         // set_pipeline
  bool tied_ = false;                            // tied_embeddings(), from the whole layout
  void check_pipeline_use(const char* what) const;
  // seq, or this rank's share of it under context parallelism (recorded in cp_)
  int64_t pipeline_local_seq(int64_t seq);
  // The pass's layers [first, last) forward: x0, the first layer's input slot, is written by
  // `input`; the last layer's output goes to y.
  void pipeline_layers_forward(ChunkPass& pass, int chunk, const int32_t* inputs, int64_t batch,
                               int64_t seq, ConstTensor x_in, Tensor y, ActivationAllocator& alloc,
                               bool backward = true);
  // The model's last chunk from x: its forward and loss, and with dx (which may be x's buffer)
  // its backward, the gradient of its input into dx; a forward only without.
  double pipeline_last_pass(ChunkPass& pass, const int32_t* inputs, const int32_t* targets,
                            int64_t batch, int64_t seq, float grad_scale, ConstTensor x, Tensor dx,
                            ActivationAllocator& alloc);
  std::vector<int32_t> cp_inputs_, cp_targets_;  // this rank's chunks of the micro-batch
  std::map<int64_t, std::pair<RawBuffer, RawBuffer>> rope_;  // seq -> cos, sin ([seq, D/2] f32)
  int32_t doc_eot_ = -1;                                     // set_document_mask
  int32_t loss_eot_ = -1;                                    // set_eod_loss_mask
  std::vector<int32_t> loss_targets_;  // with loss_eot_: the targets with the masked ones ignored
  std::span<float> token_losses_;      // forward_loss's, during its run
  // With document masks, of the micro-batch being run: each whole sequence's tokens' document
  // starts ([batch x whole seq]), and each of this rank's rows' positions ([T], chunk-major
  // under context parallelism).
  std::vector<int32_t> doc_start_, positions_;
  void find_documents(const int32_t* inputs, int64_t batch, int64_t seq);
  // The micro-batch's inputs and targets in the device space, when the host cannot address it
  // (grown to the largest micro-batch; unused otherwise).
  RawBuffer device_tokens_;
};

}  // namespace memo
