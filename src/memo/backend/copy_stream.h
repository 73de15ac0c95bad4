// Copy streams and events of the CPU backend. A CopyStream is one worker thread that executes the
// copies queued on it in order (the device-to-host and host-to-device streams of DESIGN.md section
// 2; the compute stream is the calling thread). An Event, recorded on a stream, completes when
// every copy queued before it has finished; the compute thread waits on it before it reuses a
// buffer a copy reads or writes. Not here: what to copy when (memory/swap_strategy.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace memo {

struct CopyStreamOptions {
  // Throttle: a copy of n bytes takes at least n / bandwidth seconds (the stream sleeps the rest),
  // to model a PCIe link on a machine whose memcpy is faster. 0: unthrottled.
  double bandwidth_bytes_per_s = 0.0;
  // Test only: sleep a random time in [0, max_random_delay_s) before each copy, drawn from a
  // generator seeded with random_delay_seed, so that a missing wait shows up as a wrong result.
  double max_random_delay_s = 0.0;
  uint64_t random_delay_seed = 0;
};

namespace detail {
struct EventState {
  std::atomic<bool> done{false};
};
}  // namespace detail

// Move-only handle on one recorded point of a stream. A default Event is complete (nothing to wait
// for), so "the copy of a layer that was never offloaded" needs no special case.
class Event {
 public:
  Event() = default;
  Event(Event&&) noexcept = default;
  Event& operator=(Event&&) noexcept = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  bool done() const { return !state_ || state_->done.load(std::memory_order_acquire); }
  void wait() const;  // blocks until done(); the copies before it are visible afterwards

 private:
  friend class CopyStream;
  std::shared_ptr<detail::EventState> state_;
};

class CopyStream {
 public:
  CopyStream(std::string name, const CopyStreamOptions& options);
  ~CopyStream();  // finishes every queued copy, then joins the worker
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  const std::string& name() const { return name_; }
  // Queues dst[0, bytes) = src[0, bytes). Both ranges must stay valid and untouched by other
  // threads until an event recorded after this copy completes.
  void copy(void* dst, const void* src, int64_t bytes);
  Event record();      // completes once every copy queued so far has finished
  void synchronize();  // record().wait()

  // Measured on the worker: bytes copied and seconds spent copying (throttle sleeps included,
  // random delays excluded), so copied_bytes / busy_s is the stream's effective bandwidth.
  int64_t copied_bytes() const { return copied_bytes_.load(); }
  double busy_s() const { return busy_s_.load(); }

 private:
  struct Task {
    void* dst;
    const void* src;
    int64_t bytes;
    std::shared_ptr<detail::EventState> event;  // set: an event marker, no copy
  };
  void run();

  std::string name_;
  CopyStreamOptions options_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mutex_
  bool stop_ = false;       // guarded by mutex_
  std::atomic<int64_t> copied_bytes_{0};
  std::atomic<double> busy_s_{0.0};
  std::thread worker_;  // last: starts after every member above exists
};

}  // namespace memo
