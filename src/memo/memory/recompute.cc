#include "memo/memory/recompute.h"

namespace memo {

RecomputeStrategy::RecomputeStrategy(const SkeletalLayout& layout, ActivationAllocator& alloc)
    : layout_(layout),
      alloc_(alloc),
      slots_(size_t(layout.num_layers)),
      x_live_(size_t(layout.num_layers), false) {}

RecomputeStrategy::~RecomputeStrategy() {
  for (int l = int(slots_.size()) - 1; l >= 0; --l)
    if (x_live_[size_t(l)]) release_x(l);
  if (work_live_) release_work();
}

std::string RecomputeStrategy::summary() const {
  return str("recompute: ", layout_.num_layers,
             " layer inputs stay on the device; each layer's forward is re-run "
             "before its backward");
}

void RecomputeStrategy::begin_step(int64_t batch, int64_t seq) {
  for (int l = int(slots_.size()) - 1; l >= 0; --l)  // after an early stop: start clean
    if (x_live_[size_t(l)]) release_x(l);
  if (work_live_) release_work();
  first_ = range_first_;
  end_ = range_last_ < 0 ? int(slots_.size()) : range_last_;
  MEMO_CHECK(first_ >= 0 && first_ < end_ && end_ <= int(slots_.size()), "recompute: layers [",
             first_, ", ", end_, ") of ", slots_.size());
  batch_ = batch;
  seq_ = seq;
  parked_run_ = range_parked_;
  parked_ = false;
  acquire_work();
}

void RecomputeStrategy::acquire_work() {
  for (int i = 1; i < layout_.num_fields(); ++i)  // every field but x
    work_[i] = alloc_.acquire(layout_.fields[size_t(i)].name, layout_.shape(i, batch_, seq_),
                              ActKind::kSaved, layout_.fields[size_t(i)].dtype);
  work_live_ = true;
}

void RecomputeStrategy::park() {
  MEMO_CHECK(parked_run_ && work_live_, "recompute: park() after a micro-batch not set parked");
  release_work();
  parked_ = true;
}

void RecomputeStrategy::bind_layers(const LayerRunner& layers) { layers_ = &layers; }

const SavedActs& RecomputeStrategy::forward_slot(int layer) {
  MEMO_CHECK(work_live_, "recompute: forward_slot(", layer, ") before begin_step");
  SavedActs& s = slots_.at(size_t(layer));
  if (!x_live_[size_t(layer)]) {
    s = work_;
    s.x() = alloc_.acquire(layout_.fields[0].name, layout_.shape(0, batch_, seq_), ActKind::kSaved,
                           layout_.fields[0].dtype);
    x_live_[size_t(layer)] = true;
  }
  return s;
}

const SavedActs& RecomputeStrategy::backward_ready(int layer) {
  MEMO_CHECK(x_live_.at(size_t(layer)), "recompute: layer ", layer, " backward before its forward");
  if (parked_) {  // a new work slot: every live layer's fields point into it
    MEMO_CHECK(layer + 1 == end_, "recompute: a parked micro-batch's backward starts at layer ",
               layer, ", not at its top layer ", end_ - 1);
    acquire_work();
    for (int l = first_; l < end_; ++l) {
      const Tensor x = slots_[size_t(l)].x();
      slots_[size_t(l)] = work_;
      slots_[size_t(l)].x() = x;
    }
    parked_ = false;
  }
  const SavedActs& s = slots_[size_t(layer)];
  // the top layer's fields are still its forward's, unless the micro-batch was parked
  if (layer + 1 < end_ || parked_run_) {
    MEMO_CHECK(layers_, "recompute: no layers bound to re-run layer ", layer, " with");
    ScopedAct y(alloc_, "recompute.y", layout_.shape(0, batch_, seq_),
                layout_.fields[0].dtype);  // the layer output: x's shape and dtype
    layers_->forward(layer, *y, s);
  }
  return s;
}

void RecomputeStrategy::backward_done(int layer) {
  release_x(layer);
  if (layer == first_) release_work();
}

void RecomputeStrategy::discard(int layer) {
  release_x(layer);
  if (layer + 1 == end_) release_work();
}

void RecomputeStrategy::release_x(int layer) {
  MEMO_CHECK(x_live_[size_t(layer)], "recompute: layer ", layer, " released twice");
  alloc_.release(slots_[size_t(layer)].x());
  slots_[size_t(layer)] = SavedActs();
  x_live_[size_t(layer)] = false;
}

void RecomputeStrategy::release_work() {
  for (int i = layout_.num_fields() - 1; i >= 1; --i) {  // every field but x
    alloc_.release(work_[i]);
    work_[i] = Tensor();
  }
  work_live_ = false;
}

}  // namespace memo
