// The caching-allocator simulation. See dynamic_sim.h for what of PyTorch it models.
#include "memo/memory/plan/dynamic_sim.h"

#include <algorithm>
#include <tuple>

namespace memo::plan {
namespace {

constexpr Bytes kMiB = 1024 * 1024;
constexpr Bytes kMinBlockSize = 512;       // every request rounds up to this granularity
constexpr Bytes kSmallSize = 1 * kMiB;     // largest request served by the small pool
constexpr Bytes kSmallBuffer = 2 * kMiB;   // small-pool segment size
constexpr Bytes kLargeBuffer = 20 * kMiB;  // segment size for requests under kMinLargeAlloc
constexpr Bytes kMinLargeAlloc = 10 * kMiB;
constexpr Bytes kRoundLarge = 2 * kMiB;  // larger requests round their segment up to this

Bytes round_up(Bytes x, Bytes to) { return (x + to - 1) / to * to; }
Bytes round_size(Bytes size) {
  return size < kMinBlockSize ? kMinBlockSize : round_up(size, kMinBlockSize);
}
Bytes segment_size(Bytes size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return round_up(size, kRoundLarge);
}

}  // namespace

DynamicAllocatorSim::DynamicAllocatorSim(Bytes capacity) : capacity_(capacity) {}

DynamicAllocatorSim::Handle DynamicAllocatorSim::find_free(bool small, Bytes size) const {
  const Pool& p = small ? small_pool_ : large_pool_;
  const auto it = p.lower_bound({size, -1});
  return it == p.end() ? -1 : it->second;
}

DynamicAllocatorSim::Handle DynamicAllocatorSim::create_segment(bool small, Bytes segment_bytes) {
  Block b;
  b.segment = segments_++;
  b.address = next_address_;
  b.size = segment_bytes;
  b.small = small;
  b.free = true;
  next_address_ += segment_bytes;
  blocks_.push_back(b);
  reserved_bytes_ += segment_bytes;
  ++stats_.segments_created;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, reserved_bytes_);
  const Handle h = Handle(blocks_.size()) - 1;
  pool(small).insert({segment_bytes, h});
  return h;
}

void DynamicAllocatorSim::release_free_segments() {
  for (Handle h = 0; h < Handle(blocks_.size()); ++h) {
    Block& b = blocks_[h];
    if (b.dead || !b.free || b.prev >= 0 || b.next >= 0) continue;  // not a whole free segment
    pool(b.small).erase({b.size, h});
    reserved_bytes_ -= b.size;
    b.dead = true;
    ++stats_.segments_released;
  }
}

DynamicAllocatorSim::Handle DynamicAllocatorSim::allocate(Bytes requested) {
  const Bytes size = round_size(requested);
  const bool small = size <= kSmallSize;
  Handle h = find_free(small, size);
  if (h < 0) {
    const Bytes seg = segment_size(size);
    if (capacity_ > 0 && reserved_bytes_ + seg > capacity_) {
      release_free_segments();
      if (reserved_bytes_ + seg > capacity_) ++stats_.oom_requests;
    }
    h = create_segment(small, seg);
  }
  pool(small).erase({blocks_[h].size, h});
  const Bytes remaining = blocks_[h].size - size;
  if (small ? remaining >= kMinBlockSize : remaining > kSmallSize) {
    Block rest = blocks_[h];  // the tail stays cached as a free block of the same segment
    rest.address += size;
    rest.size = remaining;
    rest.prev = h;
    const Handle r = Handle(blocks_.size());
    if (rest.next >= 0) blocks_[rest.next].prev = r;
    blocks_.push_back(rest);
    blocks_[h].next = r;
    blocks_[h].size = size;
    pool(small).insert({remaining, r});
  }
  Block& b = blocks_[h];
  b.free = false;
  b.requested = requested;
  allocated_bytes_ += b.size;
  requested_bytes_ += requested;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, allocated_bytes_);
  stats_.peak_requested_bytes = std::max(stats_.peak_requested_bytes, requested_bytes_);
  return h;
}

void DynamicAllocatorSim::merge_into(Handle keep, Handle gone) {
  // keep is the lower neighbour of gone; both free; gone leaves its pool and the segment's list.
  Block& k = blocks_[keep];
  Block& g = blocks_[gone];
  pool(g.small).erase({g.size, gone});
  k.size += g.size;
  k.next = g.next;
  if (g.next >= 0) blocks_[g.next].prev = keep;
  g.dead = true;
}

void DynamicAllocatorSim::release(Handle h) {
  MEMO_CHECK(h >= 0 && h < Handle(blocks_.size()) && !blocks_[h].free && !blocks_[h].dead,
             "DynamicAllocatorSim::release: handle ", h, " is not a live allocation");
  allocated_bytes_ -= blocks_[h].size;
  requested_bytes_ -= blocks_[h].requested;
  blocks_[h].free = true;
  const Handle next = blocks_[h].next;
  if (next >= 0 && blocks_[next].free) merge_into(h, next);
  const Handle prev = blocks_[h].prev;
  if (prev >= 0 && blocks_[prev].free) {
    pool(blocks_[prev].small).erase({blocks_[prev].size, prev});
    merge_into(prev, h);
    h = prev;
  }
  pool(blocks_[h].small).insert({blocks_[h].size, h});
}

DynamicSimStats simulate_dynamic(const Problem& problem) {
  check_problem(problem);
  // (step, 0 = free / 1 = allocate, buffer index): frees first at a step, then by index.
  std::vector<std::tuple<Step, int, std::size_t>> events;
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    events.emplace_back(problem.buffers[i].begin, 1, i);
    events.emplace_back(problem.buffers[i].end, 0, i);
  }
  std::sort(events.begin(), events.end());
  DynamicAllocatorSim sim(problem.capacity);
  std::vector<DynamicAllocatorSim::Handle> handle(problem.buffers.size(), -1);
  for (const auto& [step, allocate, i] : events) {
    if (allocate)
      handle[i] = sim.allocate(problem.buffers[i].size);
    else
      sim.release(handle[i]);
  }
  return sim.stats();
}

}  // namespace memo::plan
