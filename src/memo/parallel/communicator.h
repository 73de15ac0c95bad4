// The communicator seam: every collective memo's layouts need (DESIGN.md section 4, `parallel`),
// as one interface. SelfCommunicator (one process, below) is the implementation today; MPI
// between CPU processes and NCCL between GPUs implement the same calls (issue #11). Buffers are
// contiguous f32 views in the memory space of the backend the communicator was made for; every
// call is collective (each rank of the group makes it, in the same order) and returns when this
// rank's part is done. The sums of all_reduce and reduce_scatter add the ranks' values in rank
// order, so a result does not depend on timing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "memo/core/tensor.h"

namespace memo {

// Bytes this rank sent and received and calls made, per collective kind; the trainer logs them
// per step and `memo plan --gpus` predicts the same counts.
struct CommCounters {
  int64_t calls = 0;
  int64_t bytes_sent = 0;      // what left this rank
  int64_t bytes_received = 0;  // what arrived at this rank
  double seconds = 0.0;        // wall time inside the calls, waiting for peers included
};

// Bytes one rank sends (and receives) in a collective over P ranks of `bytes` per rank (the
// buffer each holds: x of all_reduce, out of reduce_scatter, in of all_gather): what
// MpiCommunicator counts and what a shape-only trace (ShapeCommunicator) predicts.
inline int64_t all_reduce_bytes(int64_t bytes, int P) { return 2 * bytes * (P - 1) / P; }
inline int64_t reduce_scatter_bytes(int64_t bytes, int P) { return bytes * (P - 1); }
inline int64_t all_gather_bytes(int64_t bytes, int P) { return bytes * (P - 1); }

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* name() const = 0;  // "self", "mpi", "nccl"
  virtual int rank() const = 0;          // in [0, size())
  virtual int size() const = 0;

  // x = sum over ranks of x (in place).
  virtual void all_reduce_sum(Tensor x) = 0;
  // Note [Overlapped reductions]
  // all_reduce_sum of x, started now and finished by finish_reductions(): the gradient reduction
  // overlapped with the backward (train/step.h). x must not be read or written until then. Started
  // reductions complete in the order they were started, with the same bits as all_reduce_sum of
  // each; progress() advances them without blocking (the backward calls it between layers), and
  // every other collective of this communicator first finishes them. Counted like all_reduce_sum;
  // the seconds are those spent inside these calls, so the time a step waits for the reduction
  // is what the log shows. The default runs each reduction at once (one process, a shape-only
  // trace).
  virtual void start_all_reduce_sum(Tensor x) { all_reduce_sum(x); }
  virtual void progress() {}
  virtual void finish_reductions() {}
  // out = rank()-th of size() equal slices of (sum over ranks of in). in: [size() * n], out: [n].
  virtual void reduce_scatter_sum(Tensor out, ConstTensor in) = 0;
  // out = the ranks' in, concatenated in rank order. in: [n], out: [size() * n].
  virtual void all_gather(Tensor out, ConstTensor in) = 0;
  // Host statistics in double (a step's loss sum, the noise-scale norms): x = the sum over ranks in
  // rank order; out = the ranks' in, concatenated in rank order (in: [n], out: [size() * n]).
  virtual void all_reduce_sum(std::span<double> x) = 0;
  virtual void all_gather(std::span<double> out, std::span<const double> in) = 0;
  // x = root's x on every rank.
  virtual void broadcast(Tensor x, int root) = 0;
  // Point to point, matched in call order per (sender, receiver) pair. send returns once x may be
  // reused, which for a large message can mean once the peer receives it: a ring pass, where every
  // rank sends and receives at once, is send_recv.
  virtual void send(ConstTensor x, int peer) = 0;
  virtual void recv(Tensor x, int peer) = 0;
  // Sends x to rank `to` while receiving y from rank `from` (x and y distinct): one step of a ring.
  virtual void send_recv(ConstTensor x, int to, Tensor y, int from) = 0;
  // Note [Pipeline sends]
  // A pipeline's ranks send activations one way and gradients the other at times no schedule
  // lines up, so their sends must not wait for the receiver: post_send starts a send of x to
  // `peer` and returns at once with a ticket (1, 2, ... in post order); x must stay unchanged
  // until wait_send(ticket) or wait_sends() (every posted send) returns. A pipeline waits on a
  // send only once the schedule says the peer has received it (Note [Pipeline send completion]
  // in parallel/pipeline.h), so the wait is short; a send that hangs times out as a receive does.
  // recv_tagged receives the next message from `peer` with `tag`. Messages of one (sender,
  // receiver, tag) arrive in the order posted; those of different tags may be received in any
  // order, so each stream of a schedule (the activations into one chunk, the gradients into
  // another) has its own tag. Counted like send and recv. The defaults send and receive at once, in
  // order (one process, a shape-only trace).
  virtual int64_t post_send(ConstTensor x, int peer, int tag) {
    send(x, peer);
    return ++sends_posted_;
  }
  virtual void wait_send(int64_t ticket) {}
  virtual void recv_tagged(Tensor x, int peer, int tag) { recv(x, peer); }
  virtual void wait_sends() {}
  virtual void barrier() = 0;
  // The ranks with the same color form a group, ordered by (key, rank): how the data-, tensor-
  // and context-parallel groups of a layout are made (collective over this communicator).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  const CommCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }
  // Puts back counters taken earlier: what ran between (validation) leaves the step's alone.
  void restore_counters(const CommCounters& counters) { counters_ = counters; }

 protected:
  void count(int64_t sent, int64_t received, double seconds = 0.0) {
    ++counters_.calls;
    counters_.bytes_sent += sent;
    counters_.bytes_received += received;
    counters_.seconds += seconds;
  }
  void count_seconds(double seconds) { counters_.seconds += seconds; }
  int64_t sends_posted_ = 0;  // post_send's last ticket

 private:
  CommCounters counters_;
};

}  // namespace memo
