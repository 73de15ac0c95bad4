// A group of processes whose tensors live in device memory, moved through host memory by a host
// communicator (the launcher's MPI world): what a CUDA job's pipeline groups go over.
//
// Note [Host-staged groups]
// Every call copies its tensors to host buffers (Backend::copy_to_host, ordered after the work
// the backend has queued), makes the same call of the host communicator on them, and copies
// what arrived back (copy_from_host), so its results, bit for bit, its order and its byte
// counts are the host communicator's. A pipeline needs sends that return before the peer
// receives and messages matched by tag (Note [Pipeline sends]); MPI has both, NCCL neither, so
// the pipeline's groups of a job whose collectives go over NCCL go over this instead, on the
// same MPI transport that carries a CPU job's pipeline. post_send copies x to a host buffer of its
// own, which lives until wait_send returns, so x may change once post_send has returned. The
// cost: each hidden state crosses the host link twice (a [T, C] bf16 state of 4K tokens x 4096 is
// 32 MiB, about 1 ms each way at 50 GB/s), where NCCL would move it device to device. Not yet run
// on a GPU: the CPU tests run it over a CPU backend, where the copies are host copies.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "memo/backend/backend.h"
#include "memo/parallel/communicator.h"

namespace memo {

class HostStagedCommunicator final : public Communicator {
 public:
  // host: the group as the host communicator sees it (tensors in host memory); backend: whose
  // memory the tensors of every call are in.
  HostStagedCommunicator(std::unique_ptr<Communicator> host, Backend& backend);
  ~HostStagedCommunicator() override;
  HostStagedCommunicator(const HostStagedCommunicator&) = delete;
  HostStagedCommunicator& operator=(const HostStagedCommunicator&) = delete;

  const char* name() const override { return "host-staged"; }
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  void all_reduce_sum(Tensor x) override;
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
  // The host communicator's split, staged the same way.
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  // A host copy of a tensor's bytes, as a tensor of the same shape and dtype in host memory.
  struct Staged {
    std::vector<std::byte> bytes;
    Tensor tensor;
  };
  Staged stage_out(ConstTensor x, const char* op);  // x's values
  Staged stage_for(ConstTensor x, const char* op);  // room for x's values
  void stage_in(Tensor x, const Staged& s);         // x = s's values
  // Runs f (calls of host_) and counts what they counted as one call of this communicator.
  template <class F>
  void counted(F&& f);

  struct Posted {
    int64_t host_ticket = 0;
    Staged staged;
  };
  // by this communicator's ticket, until waited on; declared before host_, so that host_ (which
  // waits for its sends in flight as it goes) is destroyed first
  std::map<int64_t, Posted> posted_;
  std::unique_ptr<Communicator> host_;
  Backend& backend_;
};

}  // namespace memo
