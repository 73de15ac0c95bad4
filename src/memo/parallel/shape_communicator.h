// The communicator of a shape-only trace (Note [Meta backend]): rank `rank` of a group of `size`
// ranks that do not exist. Every call returns at once, touches no buffer (they are address ranges
// without memory) and counts the bytes an MpiCommunicator of that group would send and receive,
// so a trace predicts a rank's communication as it predicts its memory. `memo plan` traces
// context parallelism with one (model/context_parallel.h); the host statistics it would sum stay
// as they are. split is refused: the other ranks' colours are unknown. Tensors count at their own
// dtype's bytes (a GPU plan's ring carries bf16 activations).
#pragma once

#include "memo/parallel/communicator.h"

namespace memo {

class ShapeCommunicator final : public Communicator {
 public:
  explicit ShapeCommunicator(int size, int rank = 0);
  const char* name() const override { return "shape"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
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
  static int64_t bytes(ConstTensor t) { return t.bytes(); }
  int size_, rank_;
};

}  // namespace memo
