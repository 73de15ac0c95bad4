// The one-process communicator: a group of size 1. Every collective is its single-rank case (sum
// over one rank: unchanged; gather of one: a copy), send to itself queues a copy that the next
// recv from itself takes, and split gives another group of one. It moves no bytes between ranks,
// so its counters stay at zero bytes. Copies go through the backend, so device buffers work.
#pragma once

#include <deque>
#include <vector>

#include "memo/backend/backend.h"
#include "memo/parallel/communicator.h"

namespace memo {

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(Backend& backend) : backend_(backend) {}
  const char* name() const override { return "self"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(Tensor x) override;
  void reduce_scatter_sum(Tensor out, ConstTensor in) override;
  void all_gather(Tensor out, ConstTensor in) override;
  void all_reduce_sum(std::span<double> x) override;
  void all_gather(std::span<double> out, std::span<const double> in) override;
  void broadcast(Tensor x, int root) override;
  void send(ConstTensor x, int peer) override;
  void recv(Tensor x, int peer) override;
  void send_recv(ConstTensor x, int to, Tensor y, int from) override;
  void barrier() override { count(0, 0); }
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  void check_peer(const char* op, int peer) const;
  Backend& backend_;
  std::deque<std::vector<char>> sent_;  // host copies of sends to self, in order
};

}  // namespace memo
