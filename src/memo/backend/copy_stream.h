// The CPU backend's streams. A CopyStream is one worker thread that executes the copies queued on
// it in order (the device-to-host and host-to-device streams of DESIGN.md section 2); the compute
// stream is the calling thread (HostStream). Not here: what to copy when (memory/swap_strategy.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "memo/backend/stream.h"

namespace memo {

class CopyStream final : public Stream {
 public:
  CopyStream(std::string name, const StreamOptions& options);
  ~CopyStream() override;  // finishes every queued copy, then joins the worker
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  const std::string& name() const override { return name_; }
  void copy(void* dst, const void* src, int64_t bytes) override;
  Event record() override;
  // The worker waits for `event` before the next task; the calling thread goes on.
  void wait(const Event& event) override;
  int64_t copied_bytes() const override { return copied_bytes_.load(); }
  double busy_s() const override { return busy_s_.load(); }

 private:
  struct Task {
    void* dst;
    const void* src;
    int64_t bytes;
    std::shared_ptr<const EventState> signal;  // set: complete this event, no copy
    std::shared_ptr<const EventState> wait;    // set: wait for this event, no copy
  };
  void run();

  std::string name_;
  StreamOptions options_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mutex_
  bool stop_ = false;       // guarded by mutex_
  std::atomic<int64_t> copied_bytes_{0};
  std::atomic<double> busy_s_{0.0};
  std::thread worker_;  // last: starts after every member above exists
};

// The CPU compute stream: work runs on the calling thread when it is queued, so every event it
// records is already complete, and waiting on another stream's event blocks the host (the host
// is this stream). Copies are plain memcpy.
class HostStream final : public Stream {
 public:
  explicit HostStream(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  void copy(void* dst, const void* src, int64_t bytes) override;
  Event record() override { return Event(); }
  void wait(const Event& event) override;  // blocks the host, timed
  int64_t copied_bytes() const override { return copied_bytes_; }
  double busy_s() const override { return busy_s_; }
  double waited_s() const override { return waited_s_; }

 private:
  std::string name_;
  int64_t copied_bytes_ = 0;
  double busy_s_ = 0.0;
  double waited_s_ = 0.0;
};

// A stream that moves nothing and whose events are complete: the meta backend's.
class NullStream final : public Stream {
 public:
  explicit NullStream(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  void copy(void*, const void*, int64_t) override {}
  Event record() override { return Event(); }
  void wait(const Event&) override {}
  int64_t copied_bytes() const override { return 0; }
  double busy_s() const override { return 0.0; }

 private:
  std::string name_;
};

}  // namespace memo
