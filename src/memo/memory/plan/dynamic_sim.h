// A simulation of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), the
// dynamic baseline memo's static plans are compared against: replay a Problem's requests in time
// order and report the peak reserved bytes (segments taken from the device) and allocated bytes.
// It moves no memory; it only does the allocator's bookkeeping.
//
// Modelled (PyTorch defaults): requests rounded up to 512 B (min 512 B); a small pool (requests
// <= 1 MiB, carved from 2 MiB segments) and a large pool (larger requests; segments of 20 MiB for
// requests under 10 MiB, else the request rounded up to 2 MiB); best fit = the smallest cached
// free block of the pool that fits, ties to the lower address; splitting a block when the rest is
// >= 512 B (small pool) or > 1 MiB (large pool), an unsplit remainder counting as allocated;
// merging a freed block with free neighbours of the SAME segment only (never across segments);
// new segments only when no cached block fits; on exceeding `capacity`, freeing every wholly free
// segment (empty_cache) and retrying once.
// Not modelled: streams and record_stream, events, max_split_size_mb, expandable_segments,
// roundup_power2_divisions, garbage_collection_threshold, per-process memory fraction, graphs
// pools, and device-driver granularity. A request that still does not fit is counted in
// oom_requests and granted anyway (a new segment), so the replay continues and reports the
// reserve the sequence would need.
#pragma once

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "memo/memory/plan/problem.h"

namespace memo::plan {

struct DynamicSimStats {
  Bytes peak_reserved_bytes{};   // max sum of segment sizes (PyTorch "reserved")
  Bytes peak_allocated_bytes{};  // max sum of handed-out block sizes (PyTorch "allocated")
  Bytes peak_requested_bytes{};  // max sum of requested sizes (before any rounding)
  std::int64_t segments_created{};
  std::int64_t segments_released{};  // by empty_cache on exceeding capacity
  std::int64_t oom_requests{};       // requests that did not fit capacity even after empty_cache
};

class DynamicAllocatorSim {
 public:
  using Handle = std::int64_t;
  explicit DynamicAllocatorSim(Bytes capacity = 0);  // capacity 0: unlimited

  Handle allocate(Bytes size);
  void release(Handle handle);

  Bytes reserved_bytes() const { return reserved_bytes_; }
  Bytes allocated_bytes() const { return allocated_bytes_; }
  const DynamicSimStats& stats() const { return stats_; }

 private:
  struct Block {
    std::int64_t segment{};
    Bytes address{};  // pseudo address: segment base + offset; orders ties as PyTorch's pointers
    Bytes size{};
    Bytes requested{};
    bool small{};
    bool free{};
    bool dead{};                // merged into a neighbour or released with its segment
    Handle prev{-1}, next{-1};  // neighbours in the same segment
  };
  using Pool = std::set<std::pair<Bytes, Handle>>;  // (size, block) ordered by size, then address

  Pool& pool(bool small) { return small ? small_pool_ : large_pool_; }
  Handle find_free(bool small, Bytes size) const;
  Handle create_segment(bool small, Bytes segment_bytes);
  void release_free_segments();
  void merge_into(Handle keep, Handle gone);

  Bytes capacity_;
  Bytes reserved_bytes_ = 0, allocated_bytes_ = 0, requested_bytes_ = 0;
  Bytes next_address_ = 0;
  std::int64_t segments_ = 0;
  std::vector<Block> blocks_;
  Pool small_pool_, large_pool_;
  DynamicSimStats stats_;
};

// Replays problem.buffers (allocate at begin, release at end; frees before allocations at one
// step, ties by buffer index) against a DynamicAllocatorSim of problem.capacity.
DynamicSimStats simulate_dynamic(const Problem& problem);

}  // namespace memo::plan
