#include "memo/backend/copy_stream.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "memo/core/error.h"

namespace memo {
namespace {

using Clock = std::chrono::steady_clock;

// An event of a CopyStream: set by the worker when it reaches the marker.
class FlagEvent final : public EventState {
 public:
  bool done() const override { return done_.load(std::memory_order_acquire); }
  void synchronize() const override { done_.wait(false, std::memory_order_acquire); }
  void set() const {
    done_.store(true, std::memory_order_release);
    done_.notify_all();
  }

 private:
  mutable std::atomic<bool> done_{false};
};

}  // namespace

CopyStream::CopyStream(std::string name, const StreamOptions& options)
    : name_(std::move(name)), options_(options) {
  MEMO_CHECK(options.bandwidth_bytes_per_s >= 0.0 && options.max_random_delay_s >= 0.0,
             "copy stream ", name_, ": bandwidth ", options.bandwidth_bytes_per_s,
             " B/s and random delay ", options.max_random_delay_s, " s must be >= 0");
  worker_ = std::thread([this] { run(); });
}

CopyStream::~CopyStream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_one();
  worker_.join();
}

void CopyStream::copy(void* dst, const void* src, int64_t bytes) {
  MEMO_CHECK(bytes >= 0 && (bytes == 0 || (dst && src)), "copy stream ", name_, ": copy of ", bytes,
             " bytes from ", src, " to ", dst);
  if (bytes == 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({dst, src, bytes, nullptr, nullptr});
  }
  cv_.notify_one();
}

Event CopyStream::record() {
  auto state = std::make_shared<FlagEvent>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({nullptr, nullptr, 0, state, nullptr});
  }
  cv_.notify_one();
  return Event(std::move(state));
}

void CopyStream::wait(const Event& event) {
  if (event.done()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({nullptr, nullptr, 0, nullptr, event.state()});
  }
  cv_.notify_one();
}

// The worker drains the queue even after stop_ is set, so no queued copy is ever dropped.
void CopyStream::run() {
  std::mt19937_64 rng(options_.random_delay_seed);
  std::uniform_real_distribution<double> delay_s(0.0, options_.max_random_delay_s);
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    if (task.signal) {
      static_cast<const FlagEvent&>(*task.signal).set();
      continue;
    }
    if (task.wait) {
      task.wait->synchronize();
      continue;
    }
    if (options_.max_random_delay_s > 0.0)
      std::this_thread::sleep_for(std::chrono::duration<double>(delay_s(rng)));
    const auto t0 = Clock::now();
    std::memcpy(task.dst, task.src, size_t(task.bytes));
    if (options_.bandwidth_bytes_per_s > 0.0) {
      // capped at a day before the cast: past ~292 years of nanoseconds it would overflow
      const double s = std::min(double(task.bytes) / options_.bandwidth_bytes_per_s, 86400.0);
      std::this_thread::sleep_until(
          t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)));
    }
    busy_s_.fetch_add(std::chrono::duration<double>(Clock::now() - t0).count());
    copied_bytes_.fetch_add(task.bytes);
  }
}

void HostStream::wait(const Event& event) {
  if (event.done()) return;
  const auto t0 = Clock::now();
  event.synchronize();
  waited_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

void HostStream::copy(void* dst, const void* src, int64_t bytes) {
  MEMO_CHECK(bytes >= 0 && (bytes == 0 || (dst && src)), "stream ", name_, ": copy of ", bytes,
             " bytes from ", src, " to ", dst);
  if (bytes == 0) return;
  const auto t0 = Clock::now();
  std::memcpy(dst, src, size_t(bytes));
  busy_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
  copied_bytes_ += bytes;
}

}  // namespace memo
