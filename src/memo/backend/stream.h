// Streams and events: the ordering vocabulary every backend speaks (DESIGN.md section 4).
// A Stream executes the work queued on it in order; an Event, recorded on a stream, completes
// once everything queued before it has finished. Two kinds of wait, never confused:
//   stream.wait(event)   later work on `stream` starts after `event` completes; the host does not
//                        block (cudaStreamWaitEvent on CUDA; on a CPU copy stream the worker
//                        thread waits);
//   event.synchronize()  the host blocks until `event` completes (cudaEventSynchronize).
// On the CPU backend the compute stream is the calling thread itself (kernels run when called),
// so compute.wait(event) is necessarily a host wait there; copy streams are worker threads
// (backend/copy_stream.h). The meta backend's streams do nothing and its events are complete.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace memo {

// The backend-specific state behind an Event.
class EventState {
 public:
  virtual ~EventState() = default;
  virtual bool done() const = 0;
  virtual void synchronize() const = 0;  // host blocks until done()
};

// Move-only handle on one recorded point of a stream. A default Event is complete (nothing to
// wait for), so "the copy of a layer that was never offloaded" needs no special case.
class Event {
 public:
  Event() = default;
  explicit Event(std::shared_ptr<const EventState> state) : state_(std::move(state)) {}
  Event(Event&&) noexcept = default;
  Event& operator=(Event&&) noexcept = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  bool done() const { return !state_ || state_->done(); }
  // The host waits; everything queued before the event is visible afterwards.
  void synchronize() const {
    if (state_) state_->synchronize();
  }
  const std::shared_ptr<const EventState>& state() const { return state_; }

 private:
  std::shared_ptr<const EventState> state_;
};

struct StreamOptions {
  // Throttle: a copy of n bytes takes at least n / bandwidth seconds (the stream sleeps the rest),
  // to model a PCIe link on a machine whose memcpy is faster. 0: unthrottled.
  double bandwidth_bytes_per_s = 0.0;
  // Test only: sleep a random time in [0, max_random_delay_s) before each copy, drawn from a
  // generator seeded with random_delay_seed, so that a missing wait shows up as a wrong result.
  double max_random_delay_s = 0.0;
  uint64_t random_delay_seed = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual const std::string& name() const = 0;
  // Queues dst[0, bytes) = src[0, bytes). Both ranges must stay valid and untouched by other
  // streams until an event recorded after this copy completes.
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  // An event that completes once everything queued so far has finished.
  virtual Event record() = 0;
  // Work queued after this call starts only once `event` has completed (no host block where the
  // backend can avoid it; see the file comment).
  virtual void wait(const Event& event) = 0;
  // The host waits for everything queued so far.
  void synchronize() { record().synchronize(); }

  // Bytes copied and seconds spent copying so far (throttle sleeps included, random delays
  // excluded), so copied_bytes / busy_s is the stream's effective bandwidth.
  virtual int64_t copied_bytes() const = 0;
  virtual double busy_s() const = 0;
  // Seconds this stream has stood still in wait() for other streams' events so far: on the
  // compute stream, the part of the copies' time that compute did not hide. 0 where not measured.
  virtual double waited_s() const { return 0.0; }
};

}  // namespace memo
