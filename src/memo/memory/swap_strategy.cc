#include "memo/memory/swap_strategy.h"

#include <algorithm>
#include <limits>

namespace memo {

// Note [Rounding buffers]
// Device storage for skeletal tensors, held from begin_step to the end of the micro-batch:
//   rounding_[0], rounding_[1]: every field but x of one layer; layer l uses rounding_[l % 2].
//   x_ring_[0..2]: layer inputs; layer l's x lives in x_ring_[l % 3].
// Why x has its own ring of three: the model asks for forward_slot(l+1) *before* running layer l,
// because layer l writes its output straight into slot(l+1).x. Were x in the rounding buffer of
// layer l+1 (the one of layer l-1), layer l could not start before l-1's offload finished, and
// nothing would overlap. In the ring, slot l+1's x displaces x_{l-2}, whose offload was queued one
// whole layer (l-1) earlier.
//
// Every wait below is "the compute stream waits on the event" (backend/stream.h): no host block
// on a device that can order streams (on the CPU the compute stream is the host thread). Copies
// queued on D2H and H2D first wait on an event of the compute stream, so they never read a buffer
// a kernel is still writing.
// Forward (L layers; the top two, L-2 and L-1, never leave the device but in a parked micro-batch;
// a pipeline chunk's layers [first, last) likewise, with first for 0 and last for L below):
//   forward_slot(l), 1st call: wait offload_done_[l-3] (x_{l-3} leaves x_ring_[l % 3])
//   forward_slot(l), 2nd call: wait offload_done_[l-2] (rounding_[l % 2] is free); layer l runs
//   forward_done(l), l < L-2:  D2H waits for layer l's kernels, then queues x, attn, lse whole
//                              and rows [0, offload_rows) of each per-token field; record
//                              offload_done_[l]
// Backward, top down:
//   backward_ready(l), l < L-2: wait prefetch_done_[l]; rebuild rows [offload_rows, T) of the
//                               per-token fields (recompute_tokens, no attention)
//   backward_done(l):           rounding_[l % 2] and x_ring_[l % 3] are free once layer l's
//                               backward kernels finish: H2D waits for them, then queues the
//                               prefetch of layer l-2 into rounding_[l % 2] and x_ring_[(l-2) % 3]
//                               (it held x_{l+1}, whose backward is done); record
//                               prefetch_done_[l-2]
// So the prefetch of layer l-2 overlaps the backward of layer l-1.
// Every offload has been waited on by the end of the forward (layer l+2's second slot call), and
// H2D waits on the offload's event too, so a prefetch never reads a host block still being written.
// With SwapOptions::poison_released each buffer is filled with NaN when it is handed back, which
// turns a missing wait or an unrebuilt row into a NaN loss.

// Note [Parked micro-batches]
// Under a pipeline schedule a stage runs the forwards of several micro-batches before their
// backwards (1F1B: P - r on rank r; Note [Pipeline schedules] in parallel/pipeline.h), each with
// its own strategy. Were each to keep its rounding buffers, ring and top two layers on the device,
// the first stage would hold P micro-batches' worth where the last holds one. A micro-batch set
// parked (set_layer_range) instead:
//   forward:  every layer goes to the host as it finishes, the top two included (offload_end_ is
//             end_, not end_ - 2);
//   park():   the compute stream waits for the offloads of the top three layers (the others were
//             waited on by later slot calls), then every device buffer goes back to the allocator,
//             for the other micro-batches' passes;
//   backward_ready(end_ - 1), the first after park: the buffers are acquired again and the top two
//             layers prefetched into them; from there the backward runs as above (the rows past
//             offload_rows rebuilt by recompute_tokens, the top two's included).
// So a stage holds one micro-batch's buffers at a time whatever its place in the pipeline, at the
// price of the top two layers' copies both ways, which the first backward waits on. The values
// are the ones the layers wrote: bits do not change (tested with poisoned buffers).

namespace {

constexpr int64_t kHostAlignBytes = 64;

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Bytes of a field that travel: all of it, or the first `rows` token rows of a per-token field
// ([T] or [T, W]; of each of its row groups).
int64_t moved_bytes(const SkeletalField& f, const Shape& shape, int64_t rows) {
  const int64_t elements =
      f.per_token ? f.row_groups * rows * (shape.ndim == 1 ? 1 : shape[1]) : shape.numel();
  return elements * dtype_bytes(f.dtype);
}

// Copies what travels of field f between its device tensor and a host block: one copy, or one per
// row group (rows [k R/g, k R/g + rows) of each), in order.
template <class Copy>
void for_each_moved_run(const SkeletalField& f, const Tensor& t, int64_t rows, Copy&& copy) {
  const int64_t bytes = moved_bytes(f, t.shape(), rows);
  if (!f.per_token || f.row_groups == 1) return copy(int64_t(0), t.data(), bytes);
  const int64_t group_rows = t.shape()[0] / f.row_groups;
  const int64_t row_bytes = bytes / (f.row_groups * std::max<int64_t>(rows, 1));
  for (int64_t k = 0; k < f.row_groups; ++k)
    copy(k * rows * row_bytes, t.slice_rows(k * group_rows, k * group_rows + rows).data(),
         rows * row_bytes);
}

}  // namespace

SwapStrategy::SwapStrategy(const SkeletalLayout& layout, ActivationAllocator& alloc,
                           const SwapOptions& options)
    : layout_(layout),
      alloc_(alloc),
      options_(options),
      L_(layout.num_layers),
      slots_(size_t(L_)),
      forward_calls_(size_t(L_), 0),
      offloaded_(size_t(L_), false),
      offload_done_(size_t(L_)),
      prefetch_done_(size_t(L_)),
      layer_forward_s_(size_t(L_), 0.0) {}

SwapStrategy::~SwapStrategy() {
  if (d2h_) d2h_->synchronize();
  if (h2d_) h2d_->synchronize();
  if (step_live_) release_step_buffers();
}

void SwapStrategy::bind_backend(Backend& backend) {
  if (backend_ == &backend) return;
  MEMO_CHECK(backend_ == nullptr, name(), ": bound to the ", backend_->name(),
             " backend, now asked to run on the ", backend.name(), " backend");
  backend_ = &backend;
  host_ = options_.host_space ? options_.host_space
                              : &own_host_.emplace("host", options_.host_memory_bytes,
                                                   backend.allocator(MemSpace::kPinnedHost));
  d2h_ = backend.make_copy_stream("d2h", options_.copy);
  h2d_ = backend.make_copy_stream("h2d", options_.copy);
}

int64_t swap_host_layer_bytes(const SkeletalLayout& layout, int64_t batch, int64_t seq,
                              int64_t rows) {
  int64_t bytes = 0;
  for (const SkeletalField& f : layout.fields)
    bytes += round_up(moved_bytes(f, f.shape(batch, seq), rows), kHostAlignBytes);
  // MemorySpace rounds each block to 64 bytes, which the field rounding already is.
  return bytes;
}

int64_t SwapStrategy::planned_host_bytes(int64_t batch, int64_t seq, int64_t rows) const {
  return std::max(0, offloaded_layers()) * swap_host_layer_bytes(layout_, batch, seq, rows);
}

void SwapStrategy::begin_step(int64_t batch, int64_t seq) {
  MEMO_CHECK(backend_, name(), ": begin_step before bind_layers named the backend");
  if (step_live_) {  // the last micro-batch stopped early (an exception): start clean
    d2h_->synchronize();
    h2d_->synchronize();
    release_step_buffers();
  }
  parked_ = false;  // a parked micro-batch abandoned before its backward (an exception)
  first_ = range_first_;
  end_ = range_last_ < 0 ? L_ : range_last_;
  offload_end_ = range_parked_ ? end_ : end_ - 2;
  MEMO_CHECK(first_ >= 0 && first_ < end_ && end_ <= L_, name(), ": layers [", first_, ", ", end_,
             ") of ", L_);
  batch_ = batch;
  seq_ = seq;
  const int64_t T = layout_.token_rows(batch, seq);
  offload_rows_ = choose_offload_rows(batch, seq);
  offload_rows_ = layers_->agree_offload_rows(offload_rows_);
  const int64_t g = backend_->reproducible_rows();
  MEMO_CHECK(offload_rows_ >= 0 && offload_rows_ <= T &&
                 (offload_rows_ == T || g == 0 || offload_rows_ % g == 0),
             name(), ": offload rows ", offload_rows_, " of ", T, " tokens (need a multiple of ", g,
             " or all)");
  std::fill(forward_calls_.begin(), forward_calls_.end(), 0);
  std::fill(offloaded_.begin(), offloaded_.end(), false);
  for (int l = 0; l < L_; ++l) {
    offload_done_[size_t(l)] = Event();
    prefetch_done_[size_t(l)] = Event();
  }
  acquire_step_buffers();
}

void SwapStrategy::bind_layers(const LayerRunner& layers) {
  layers_ = &layers;
  bind_backend(layers.backend());
}

void SwapStrategy::acquire_step_buffers() {
  for (Tensor& x : x_ring_)
    x = alloc_.acquire(layout_.fields[0].name, layout_.shape(0, batch_, seq_), ActKind::kSaved,
                       layout_.fields[0].dtype);
  for (SavedActs& r : rounding_)
    for (int i = 1; i < layout_.num_fields(); ++i)  // every field but x
      r[i] = alloc_.acquire(layout_.fields[size_t(i)].name, layout_.shape(i, batch_, seq_),
                            ActKind::kSaved, layout_.fields[size_t(i)].dtype);
  for (int l = 0; l < L_; ++l) {
    slots_[size_t(l)] = rounding_[l % 2];
    slots_[size_t(l)].x() = x_ring_[l % 3];
  }
  step_live_ = true;
}

void SwapStrategy::release_step_buffers() {
  for (int r = 1; r >= 0; --r)
    for (int i = layout_.num_fields() - 1; i >= 1; --i) {  // every field but x
      alloc_.release(rounding_[r][i]);
      rounding_[r][i] = Tensor();
    }
  for (int i = 2; i >= 0; --i) {
    alloc_.release(x_ring_[i]);
    x_ring_[i] = Tensor();
  }
  for (SavedActs& s : slots_) s = SavedActs();
  step_live_ = false;
}

void SwapStrategy::poison_step_buffers() {
  poison(rounding_[0], false);
  poison(rounding_[1], false);
  if (options_.poison_released)
    for (const Tensor& x : x_ring_) backend_->fill(x, std::numeric_limits<float>::quiet_NaN());
}

void SwapStrategy::poison(const SavedActs& s, bool x_too) {
  if (!options_.poison_released) return;
  for (int i = x_too ? 0 : 1; i < layout_.num_fields(); ++i)
    backend_->fill(s[i], std::numeric_limits<float>::quiet_NaN());
}

const SavedActs& SwapStrategy::forward_slot(int layer) {
  MEMO_CHECK(step_live_ && layer >= 0 && layer < L_, name(), ": forward_slot(", layer,
             ") outside a micro-batch of ", L_, " layers");
  int& calls = forward_calls_[size_t(layer)];
  MEMO_CHECK(calls < 2, name(), ": forward_slot(", layer, ") called ", calls + 1,
             " times (expected: once for its x, once before the layer runs)");
  SavedActs& s = slots_[size_t(layer)];
  if (calls++ == 0) {
    if (layer - 3 >= first_) backend_->compute_stream().wait(offload_done_[size_t(layer - 3)]);
    if (options_.poison_released) backend_->fill(s.x(), std::numeric_limits<float>::quiet_NaN());
  } else {
    if (layer - 2 >= first_) backend_->compute_stream().wait(offload_done_[size_t(layer - 2)]);
    poison(s, false);
    // The warm-up micro-batch times each layer's forward: on a device whose kernels run
    // asynchronously the host clock needs the compute stream drained at both ends (a no-op on the
    // CPU, whose compute stream is the calling thread).
    if (!profile_.valid) backend_->compute_stream().synchronize();
    layer_start_ = std::chrono::steady_clock::now();
  }
  return s;
}

void SwapStrategy::forward_done(int layer) {
  if (!profile_.valid) backend_->compute_stream().synchronize();
  layer_forward_s_[size_t(layer)] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - layer_start_).count();
  if (layer < offload_end_) queue_offload(layer);
  if (layer == end_ - 1 && !profile_.valid) {
    d2h_->synchronize();  // so the bandwidth covers whole copies
    const int64_t bytes = d2h_->copied_bytes() - d2h_bytes_before_;
    const double busy = d2h_->busy_s() - d2h_busy_before_;
    if (cold_passes_++ == 0) {  // Note [A warm profile]
      d2h_bytes_before_ += bytes;
      d2h_busy_before_ += busy;
      return;
    }
    double sum = 0.0;
    for (int l = first_; l < end_; ++l) sum += layer_forward_s_[size_t(l)];
    profile_.layer_forward_s = sum / double(end_ - first_);
    if (busy > 0.0) profile_.d2h_bytes_per_s = double(bytes) / busy;
    profile_.valid = true;
  }
}

// Note [A warm profile]
// The strategy's first forward pass is the first to touch the activation arena's and the host
// pool's pages, and on a GPU the first to load its kernels: on a 2-core EPYC (2026-12-06) its
// layers took about ten times as long as in later passes, and the cost model, seeing slow layers
// that hide slow copies, chose an alpha far too high. The profile times the second forward pass,
// and its copies' bandwidth from the copy stream's totals since the first ended; memo's warm-up
// runs two micro-batches when the cost model needs one (TrainStep::warmup), their gradients
// dropped. An offload run's profile, which only reports, is its second micro-batch's.

ActivationStrategy::CopyTime SwapStrategy::copy_time() const {
  if (!backend_ || !d2h_ || !h2d_) return {};
  return {d2h_->busy_s() + h2d_->busy_s(), backend_->compute_stream().waited_s()};
}

void SwapStrategy::ensure_host_storage() {
  const int64_t shape[4] = {batch_, seq_, offload_rows_, first_};
  if (std::equal(shape, shape + 4, host_shape_) &&
      int(host_layers_.size()) >= offload_end_ - first_)
    return;
  host_layers_.clear();  // free before allocating, so the peak is one shape's bytes
  int64_t offset = 0;
  for (int i = 0; i < layout_.num_fields(); ++i) {
    host_offset_[i] = offset;
    offset += round_up(
        moved_bytes(layout_.fields[size_t(i)], layout_.shape(i, batch_, seq_), offload_rows_),
        kHostAlignBytes);
  }
  for (int l = first_; l < offload_end_; ++l)
    host_layers_.push_back(host_->allocate(str("the offload of layer ", l), offset));
  std::copy(shape, shape + 4, host_shape_);
}

void SwapStrategy::queue_offload(int layer) {
  ensure_host_storage();
  const SavedActs& s = slots_[size_t(layer)];
  char* host = reinterpret_cast<char*>(host_layers_[size_t(layer - first_)].data());
  d2h_->wait(backend_->compute_stream().record());  // layer l's kernels have written s
  for (int i = 0; i < layout_.num_fields(); ++i)
    for_each_moved_run(layout_.fields[size_t(i)], s[i], offload_rows_,
                       [&](int64_t offset, void* device, int64_t bytes) {
                         d2h_->copy(host + host_offset_[i] + offset, device, bytes);
                       });
  offload_done_[size_t(layer)] = d2h_->record();
  offloaded_[size_t(layer)] = true;
}

void SwapStrategy::queue_prefetch(int layer) {
  MEMO_CHECK(offloaded_[size_t(layer)], name(), ": prefetch of layer ", layer,
             " that was never offloaded");
  const SavedActs& s = slots_[size_t(layer)];
  const char* host = reinterpret_cast<const char*>(host_layers_[size_t(layer - first_)].data());
  h2d_->wait(offload_done_[size_t(layer)]);         // the host block is complete
  h2d_->wait(backend_->compute_stream().record());  // the backward that used the buffers is done
  for (int i = 0; i < layout_.num_fields(); ++i)
    for_each_moved_run(layout_.fields[size_t(i)], s[i], offload_rows_,
                       [&](int64_t offset, void* device, int64_t bytes) {
                         h2d_->copy(device, host + host_offset_[i] + offset, bytes);
                       });
  prefetch_done_[size_t(layer)] = h2d_->record();
}

void SwapStrategy::park() {
  MEMO_CHECK(step_live_ && offload_end_ == end_ && forward_calls_[size_t(end_ - 1)] == 2, name(),
             ": park() after a micro-batch that was not set parked or whose forward is not done");
  for (int l = std::max(first_, end_ - 3); l < end_; ++l)  // the offloads nobody waited on yet
    backend_->compute_stream().wait(offload_done_[size_t(l)]);
  poison_step_buffers();
  release_step_buffers();
  parked_ = true;
}

const SavedActs& SwapStrategy::backward_ready(int layer) {
  if (parked_) {
    MEMO_CHECK(layer == end_ - 1, name(), ": a parked micro-batch's backward starts at layer ",
               layer, ", not at its top layer ", end_ - 1);
    acquire_step_buffers();
    poison_step_buffers();  // another micro-batch's values: the prefetch must overwrite them all
    queue_prefetch(layer);
    if (layer - 1 >= first_) queue_prefetch(layer - 1);
    parked_ = false;
  }
  MEMO_CHECK(step_live_ && forward_calls_[size_t(layer)] == 2, name(), ": backward of layer ",
             layer, " before its forward");
  const SavedActs& s = slots_[size_t(layer)];
  if (layer < offload_end_) {
    backend_->compute_stream().wait(prefetch_done_[size_t(layer)]);
    MEMO_CHECK(layers_, name(), ": no layers bound to rebuild layer ", layer, " with");
    layers_->recompute_tokens(layer, s, offload_rows_, layout_.token_rows(batch_, seq_));
  }
  return s;
}

void SwapStrategy::backward_done(int layer) {
  poison(slots_[size_t(layer)], true);
  if (layer - 2 >= first_) queue_prefetch(layer - 2);
  if (layer == first_)
    release_step_buffers();  // nothing is in flight: layer 0's prefetch was
                             // waited
}

void SwapStrategy::discard(int layer) {
  if (layer == end_ - 1) {
    d2h_->synchronize();
    release_step_buffers();
  }
}

}  // namespace memo
