// The communicator between GPUs: NVIDIA's NCCL (issue #11), one rank per process and GPU, its
// unique id broadcast over the job's MPI world. Buffers are device memory of this rank's GPU.
// Every call enqueues on the communicator's own CUDA stream and returns once the collective is
// done, polling with the MPI communicator's timeout (Note [Collective timeouts] in
// parallel/mpi_communicator.cc): past it, or on any CUDA or NCCL error while waiting, the
// communicator is aborted and the call throws, which ends the job. Creating it
// (ncclCommInitRank) and split (ncclCommSplit) block without a timeout: a rank that fails before
// them leaves its peers waiting until mpirun ends the job. Built only where the CUDA toolkit with
// NCCL is found (CMakeLists.txt); not yet run on a GPU (none was lent while it was written):
// scripts/gpu-check.sh runs its check.
//
// Its stream is a blocking one (it starts after work queued on CUDA's legacy default stream) and
// follows the CUDA backend's compute stream once told to (follow); the host waits for it.
// Differences from MpiCommunicator: all_reduce_sum and reduce_scatter_sum of float tensors add in
// NCCL's order (fixed for a given topology and NCCL version, not rank order); the host statistics
// (the double spans) are gathered and summed on the host in rank order, as MPI's are.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <memory>

#include "memo/mpi/mpi_communicator.h"
#include "memo/parallel/communicator.h"

namespace memo {

class NcclCommunicator final : public Communicator {
 public:
  // The job's GPUs as one group: rank r of `world` on this process's GPU `device` (the one its
  // backend runs on: cli/runtime.h picks it), the unique id made by rank 0 and broadcast over
  // `world`. Collective over world.
  static std::unique_ptr<NcclCommunicator> over(MpiCommunicator& world, int device);
  // A group of one on GPU `device`, without MPI (a process not started by mpirun).
  static std::unique_ptr<NcclCommunicator> single(int device = 0);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // Orders every later collective after the work queued so far on `compute` (the CUDA backend's
  // compute stream: its kernels write the gradients the collectives read). The host's wait for
  // each collective (finish) orders the compute stream's later work after it. Groups made by
  // split follow the same stream.
  void follow(cudaStream_t compute);

  const char* name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }
  void all_reduce_sum(Tensor x) override;
  // Enqueued on the collectives' stream after the compute stream's work so far; the GPU runs it
  // beside the backward's later kernels. finish_reductions() polls the stream (Note [Overlapped
  // reductions]); so does every other collective, the stream being in order.
  void start_all_reduce_sum(Tensor x) override;
  void finish_reductions() override;
  void reduce_scatter_sum(Tensor out, ConstTensor in) override;
  void all_gather(Tensor out, ConstTensor in) override;
  void all_reduce_sum(std::span<double> x) override;
  void all_gather(std::span<double> out, std::span<const double> in) override;
  void broadcast(Tensor x, int root) override;
  void send(ConstTensor x, int peer) override;
  void recv(Tensor x, int peer) override;
  void send_recv(ConstTensor x, int to, Tensor y, int from) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  NcclCommunicator(ncclComm_t comm, int device, double timeout_s);
  // Waits for the stream, polling NCCL's asynchronous error; past the timeout aborts the
  // communicator and throws Error naming `op`.
  void finish(const char* op);
  // finish(op), then counts the bytes and the seconds since `t0` (the call's start).
  void finish(const char* op, std::chrono::steady_clock::time_point t0, int64_t sent,
              int64_t received);
  // ncclCommAbort once; every later call refuses (check_alive) and the destructor skips it.
  void abort();
  void check_alive(const char* op) const;
  // check_alive, then the wait on the followed stream: the start of every collective.
  void begin(const char* op);
  void check_peer(const char* op, int peer) const;
  // A device scratch of at least `bytes` (the double statistics travel through it).
  void* scratch(size_t bytes);

  ncclComm_t comm_;
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  cudaStream_t follow_ = nullptr;
};

}  // namespace memo
