#include "memo/memory/recompute.h"

namespace memo {

RecomputeStrategy::RecomputeStrategy(const ModelConfig& config, ActivationAllocator& alloc)
    : config_(config),
      alloc_(alloc),
      slots_(size_t(config.num_hidden_layers)),
      x_live_(size_t(config.num_hidden_layers), false) {}

RecomputeStrategy::~RecomputeStrategy() {
  for (int l = int(slots_.size()) - 1; l >= 0; --l)
    if (x_live_[size_t(l)]) release_x(l);
  if (work_live_) release_work();
}

std::string RecomputeStrategy::summary() const {
  return str("recompute: ", config_.num_hidden_layers,
             " layer inputs stay on the device; each layer's forward is re-run "
             "before its backward");
}

void RecomputeStrategy::begin_step(int64_t batch, int64_t seq) {
  for (int l = int(slots_.size()) - 1; l >= 0; --l)  // after an early stop: start clean
    if (x_live_[size_t(l)]) release_x(l);
  if (work_live_) release_work();
  batch_ = batch;
  seq_ = seq;
  for (const SavedField& f : saved_fields(config_))
    if (f.member != &SavedActs::x)
      work_.*f.member =
          alloc_.acquire(f.name, saved_shape(f, config_, batch, seq), ActKind::kSaved);
  work_live_ = true;
}

void RecomputeStrategy::set_rebuild_inputs(const ModelWeights& weights, const LayerContext& ctx) {
  weights_ = &weights;
  ctx_ = &ctx;
}

const SavedActs& RecomputeStrategy::forward_slot(int layer) {
  MEMO_CHECK(work_live_, "recompute: forward_slot(", layer, ") before begin_step");
  SavedActs& s = slots_.at(size_t(layer));
  if (!x_live_[size_t(layer)]) {
    s = work_;
    s.x = alloc_.acquire("x", saved_shape(saved_fields(config_)[0], config_, batch_, seq_),
                         ActKind::kSaved);
    x_live_[size_t(layer)] = true;
  }
  return s;
}

const SavedActs& RecomputeStrategy::backward_ready(int layer) {
  MEMO_CHECK(x_live_.at(size_t(layer)), "recompute: layer ", layer, " backward before its forward");
  const SavedActs& s = slots_[size_t(layer)];
  if (layer + 1 < int(slots_.size())) {
    MEMO_CHECK(weights_ && ctx_, "recompute: no weights to re-run layer ", layer, " with");
    ScopedAct y(alloc_, "recompute.y", {batch_ * seq_, config_.hidden_size});
    layer_forward(*y, s, weights_->layers[size_t(layer)], *ctx_);
  }
  return s;
}

void RecomputeStrategy::backward_done(int layer) {
  release_x(layer);
  if (layer == 0) release_work();
}

void RecomputeStrategy::discard(int layer) {
  release_x(layer);
  if (layer + 1 == int(slots_.size())) release_work();
}

void RecomputeStrategy::release_x(int layer) {
  MEMO_CHECK(x_live_[size_t(layer)], "recompute: layer ", layer, " released twice");
  alloc_.release(slots_[size_t(layer)].x);
  slots_[size_t(layer)] = SavedActs();
  x_live_[size_t(layer)] = false;
}

void RecomputeStrategy::release_work() {
  const std::span<const SavedField> fields = saved_fields(config_);
  for (int i = int(fields.size()) - 1; i >= 0; --i)
    if (fields[i].member != &SavedActs::x) {
      alloc_.release(work_.*fields[i].member);
      work_.*fields[i].member = Tensor();
    }
  work_live_ = false;
}

}  // namespace memo
