#include "memo/memory/planned_allocator.h"

#include <algorithm>

namespace memo {
namespace {

int64_t aligned(int64_t bytes) { return (bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes; }

const char* kind_name(ActKind kind) { return kind == ActKind::kSaved ? "saved" : "transient"; }

}  // namespace

PlannedAllocator::PlannedAllocator(ActivationPlan plan, RawAllocator& raw)
    : plan_(std::move(plan)), arena_(raw, plan_.arena_bytes, "the planned activation arena") {
  MEMO_CHECK(
      plan_.arena_bytes % kAlignBytes == 0 && plan_.offsets.size() == plan_.trace.requests.size(),
      "planned allocator: arena of ", plan_.arena_bytes, " bytes, ", plan_.offsets.size(),
      " offsets for ", plan_.trace.requests.size(), " requests");
}

Tensor PlannedAllocator::acquire(std::string_view name, Shape shape, ActKind kind, DType dtype) {
  const int64_t n = int64_t(plan_.trace.requests.size());
  if (next_ == n && live_.empty()) next_ = 0;  // the next micro-batch repeats the sequence
  if (on_acquire) on_acquire(next_);
  const int64_t bytes = shape.numel() * dtype_bytes(dtype);
  const auto got = [&] {
    return str("'", name, "' ", bytes, " B ", dtype_name(dtype), " (", kind_name(kind), ")");
  };
  const auto replan =
      "; the request sequence changed since it was traced (another --seq, --batch, "
      "thread count or code path): trace and plan again";
  if (next_ >= n)
    throw TraceMismatchError(str("activation request ", next_, " is beyond the ", n,
                                 " traced requests of a step (", live_.size(),
                                 " buffers still live): got ", got(), replan));
  const TracedRequest& want = plan_.trace.requests[size_t(next_)];
  if (want.name != name || want.bytes != bytes || want.kind != kind || want.dtype != dtype)
    throw TraceMismatchError(str("activation request ", next_,
                                 " does not match the plan: expected '", want.name, "' ",
                                 want.bytes, " B ", dtype_name(want.dtype), " (",
                                 kind_name(want.kind), "), got ", got(), replan));
  // Every buffer the plan may place over this one must be dead by now.
  if (!live_by_end_.empty() && live_by_end_.begin()->first <= next_) {
    const TracedRequest& late = plan_.trace.requests[live_by_end_.begin()->second];
    throw TraceMismatchError(str("activation '", late.name, "' (request ", late.begin,
                                 ") is still live at request ", next_, " '", name,
                                 "', but the plan freed it before request ", late.end, replan));
  }
  void* data = arena_.as<char>() + plan_.offsets[size_t(next_)];
  live_.emplace(data, size_t(next_));
  live_by_end_.emplace(want.end, size_t(next_));
  live_bytes_ += aligned(bytes);
  peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
  peak_top_bytes_ = std::max(peak_top_bytes_, plan_.offsets[size_t(next_)] + aligned(bytes));
  ++next_;
  return Tensor(data, shape, dtype, arena_.space());
}

void PlannedAllocator::release(const Tensor& t) {
  auto [first, last] = live_.equal_range(t.data());
  auto it = std::find_if(first, last, [&](const auto& e) {
    const TracedRequest& r = plan_.trace.requests[e.second];
    return r.bytes == t.numel() * dtype_bytes(r.dtype);
  });
  MEMO_CHECK(it != last, "planned allocator: release of a buffer it did not hand out, shape ",
             t.shape());
  const TracedRequest& r = plan_.trace.requests[it->second];
  live_bytes_ -= aligned(r.bytes);
  live_by_end_.erase({r.end, it->second});
  live_.erase(it);
}

int64_t PlannedAllocator::top_bytes() const {
  int64_t top = 0;
  for (const auto& [data, i] : live_)
    top = std::max(top, plan_.offsets[i] + aligned(plan_.trace.requests[i].bytes));
  return top;
}

}  // namespace memo
