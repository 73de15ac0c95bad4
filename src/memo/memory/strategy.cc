#include "memo/memory/strategy.h"

namespace memo {

KeepStrategy::~KeepStrategy() {
  for (int l = 0; l < int(slots_.size()); ++l)
    if (live_[size_t(l)]) release(l);
}

void KeepStrategy::begin_step(int64_t batch, int64_t seq) {
  batch_ = batch;
  seq_ = seq;
}

const SavedActs& KeepStrategy::forward_slot(int layer) {
  SavedActs& s = slots_.at(size_t(layer));
  if (!live_[size_t(layer)]) {
    for (int i = 0; i < layout_.num_fields(); ++i)
      s[i] = alloc_.acquire(layout_.fields[size_t(i)].name, layout_.shape(i, batch_, seq_),
                            ActKind::kSaved, layout_.fields[size_t(i)].dtype);
    live_[size_t(layer)] = true;
  }
  return s;
}

const SavedActs& KeepStrategy::backward_ready(int layer) {
  MEMO_CHECK(live_.at(size_t(layer)), "keep: layer ", layer, " backward before its forward");
  return slots_[size_t(layer)];
}

void KeepStrategy::release(int layer) {
  SavedActs& s = slots_.at(size_t(layer));
  MEMO_CHECK(live_[size_t(layer)], "keep: layer ", layer, " released twice");
  // Reverse order of acquisition, so a stack-like allocator sees LIFO releases.
  for (int i = layout_.num_fields() - 1; i >= 0; --i) {
    alloc_.release(s[i]);
    s[i] = Tensor();
  }
  live_[size_t(layer)] = false;
}

}  // namespace memo
