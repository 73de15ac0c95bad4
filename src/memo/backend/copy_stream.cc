#include "memo/backend/copy_stream.h"

#include "memo/core/shape_only.h"

#include <chrono>
#include <cstring>
#include <random>

#include "memo/core/error.h"

namespace memo {

using Clock = std::chrono::steady_clock;

void Event::wait() const {
  if (!state_) return;
  state_->done.wait(false, std::memory_order_acquire);
}

CopyStream::CopyStream(std::string name, const CopyStreamOptions& options)
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
  if (bytes == 0 || shapes_only()) return;  // Note [Shape-only mode]: no data to move
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({dst, src, bytes, nullptr});
  }
  cv_.notify_one();
}

Event CopyStream::record() {
  Event e;
  e.state_ = std::make_shared<detail::EventState>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({nullptr, nullptr, 0, e.state_});
  }
  cv_.notify_one();
  return e;
}

void CopyStream::synchronize() { record().wait(); }

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
    if (task.event) {
      task.event->done.store(true, std::memory_order_release);
      task.event->done.notify_all();
      continue;
    }
    if (options_.max_random_delay_s > 0.0)
      std::this_thread::sleep_for(std::chrono::duration<double>(delay_s(rng)));
    const auto t0 = Clock::now();
    std::memcpy(task.dst, task.src, size_t(task.bytes));
    if (options_.bandwidth_bytes_per_s > 0.0) {
      const auto min_end =
          t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                   double(task.bytes) / options_.bandwidth_bytes_per_s));
      std::this_thread::sleep_until(min_end);
    }
    busy_s_.fetch_add(std::chrono::duration<double>(Clock::now() - t0).count());
    copied_bytes_.fetch_add(task.bytes);
  }
}

}  // namespace memo
