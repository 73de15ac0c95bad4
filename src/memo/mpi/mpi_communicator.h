// The communicator between CPU processes: Open MPI (Debian's libopenmpi-dev). A job started by
// `mpirun -np N memo ...` has one rank per process; without mpirun memo never initialises MPI
// (no start-up cost) and runs on a SelfCommunicator. Buffers are host memory (the CPU backend's
// device space). See Note [Deterministic reductions] and Note [Collective timeouts] in
// mpi_communicator.cc.
#pragma once

#include <mpi.h>

#include <deque>
#include <memory>
#include <vector>

#include "memo/parallel/communicator.h"

namespace memo {

// Seconds a collective waits for its peers before it takes the job down (Note [Collective
// timeouts]); MEMO_COMM_TIMEOUT (seconds) in the environment overrides it.
inline constexpr double kDefaultCommTimeoutS = 300.0;

class MpiCommunicator final : public Communicator {
 public:
  // Whether this process was started by mpirun (Open MPI's or a PMIx launcher's variables).
  static bool launched_by_mpirun();
  // MPI_COMM_WORLD of a job started by mpirun: initialises MPI (finalised when the returned
  // object is destroyed). Throws Error when called twice or without mpirun.
  static std::unique_ptr<MpiCommunicator> world();
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  const char* name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(Tensor x) override;
  void start_all_reduce_sum(Tensor x) override;
  void progress() override;
  void finish_reductions() override;
  void reduce_scatter_sum(Tensor out, ConstTensor in) override;
  void all_gather(Tensor out, ConstTensor in) override;
  void all_reduce_sum(std::span<double> x) override;
  void all_gather(std::span<double> out, std::span<const double> in) override;
  void broadcast(Tensor x, int root) override;
  void send(ConstTensor x, int peer) override;
  void recv(Tensor x, int peer) override;
  void send_recv(ConstTensor x, int to, Tensor y, int from) override;
  int64_t post_send(ConstTensor x, int peer, int tag) override;
  void wait_send(int64_t ticket) override;
  void recv_tagged(Tensor x, int peer, int tag) override;
  void wait_sends() override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  double timeout_s() const { return timeout_s_; }
  // This process's rank among the job's processes on its node (MPI_COMM_TYPE_SHARED), for any
  // launcher: what picks its GPU (cli/runtime.h). 0 for a group made by split.
  int local_rank() const { return local_rank_; }

 private:
  MpiCommunicator(MPI_Comm comm, bool owns_comm, bool finalizes);
  // Waits for `request` to complete, polling; past the timeout prints one line naming `op` and
  // this rank and aborts the job (MPI_Abort: every rank exits).
  void wait(MPI_Request& request, const char* op);
  // x = sum over ranks in rank order, x contiguous and at most kMaxChunk floats.
  void all_reduce_chunk(float* x, int64_t n);
  // A started reduction (Note [Overlapped reductions]): chunk by chunk, each an exchange of
  // slices (Ialltoallv), their sum in rank order, and a gather of the sums (Iallgatherv).
  struct Pending {
    float* x = nullptr;
    int64_t n = 0, begin = 0;  // floats, and the start of the chunk in flight
    int phase = 0;             // 0: chunk not posted, 1: exchanging slices, 2: gathering sums
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<int> counts, displs, recv_counts, recv_displs;
    std::vector<float> scratch;
  };
  // Advances the oldest started reduction as far as it goes without waiting (blocking: waiting
  // for each step); true once it is complete. Only the oldest is ever in flight, so every rank
  // posts the same collectives in the same order whatever its timing.
  bool advance(Pending& p, bool blocking);
  void check_peer(const char* op, int peer) const;

  MPI_Comm comm_;
  bool owns_comm_;
  bool finalizes_;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  double timeout_s_ = kDefaultCommTimeoutS;
  std::vector<float> scratch_;   // the peers' slices of a reduction, [size() * slice]
  std::vector<bf16> scratch16_;  // the same for a bf16 reduce-scatter
  std::deque<Pending> pending_;  // started reductions, oldest first
  struct Posted {                // a posted send (Note [Pipeline sends])
    MPI_Request request = MPI_REQUEST_NULL;
    int64_t bytes = 0;
    int64_t ticket = 0;
  };
  // MPI_Test on a request; an MPI error stops the job as wait's do
  bool test(MPI_Request& request, const char* op);
  std::vector<Posted> posted_;
};

// When this process is one rank of an MPI job of more than one, ends the whole job with `code`
// after the caller has reported its error: a rank that stops alone would leave the others waiting
// in their next collective. Returns when MPI is not running.
void abort_job_if_parallel(int code);

// The GPU of this process among the `gpus` it sees: its node-local rank modulo gpus under MPI
// (any launcher), GPU 0 without (world null). The one rule for the backend and NCCL alike.
inline int local_gpu(const MpiCommunicator* world, int gpus) {
  return world && gpus > 0 ? world->local_rank() % gpus : 0;
}

}  // namespace memo
