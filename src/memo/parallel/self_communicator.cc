#include "memo/parallel/self_communicator.h"

#include <algorithm>

#include "memo/core/error.h"

namespace memo {

void SelfCommunicator::check_peer(const char* op, int peer) const {
  MEMO_CHECK(peer == 0, op, ": peer ", peer, " is outside a group of 1 rank");
}

void SelfCommunicator::all_reduce_sum(Tensor x) {
  MEMO_CHECK(x.contiguous(), "all_reduce_sum: view ", x.shape(), " must be contiguous");
  count(0, 0);
}

void SelfCommunicator::reduce_scatter_sum(Tensor out, ConstTensor in) {
  MEMO_CHECK(out.contiguous() && in.contiguous() && in.numel() == out.numel(),
             "reduce_scatter_sum: out ", out.shape(), " must hold 1/1 of in ", in.shape());
  backend_.copy(out.reshape({out.numel()}), in.reshape({in.numel()}));
  count(0, 0);
}

void SelfCommunicator::all_gather(Tensor out, ConstTensor in) {
  MEMO_CHECK(
      out.contiguous() && in.contiguous() && in.numel() == out.numel() && out.dtype() == in.dtype(),
      "all_gather: out ", out.shape(), " ", dtype_name(out.dtype()), " must hold 1 x in ",
      in.shape(), " ", dtype_name(in.dtype()));
  backend_.convert(out, in);  // one dtype: a copy of any dtype memo moves
  count(0, 0);
}

void SelfCommunicator::all_reduce_sum(std::span<double>) { count(0, 0); }

void SelfCommunicator::all_gather(std::span<double> out, std::span<const double> in) {
  MEMO_CHECK(out.size() == in.size(), "all_gather: out of ", out.size(), " must hold 1 x in of ",
             in.size());
  std::copy(in.begin(), in.end(), out.begin());
  count(0, 0);
}

void SelfCommunicator::broadcast(Tensor x, int root) {
  check_peer("broadcast", root);
  MEMO_CHECK(x.contiguous(), "broadcast: view ", x.shape(), " must be contiguous");
  count(0, 0);
}

void SelfCommunicator::send(ConstTensor x, int peer) {
  check_peer("send", peer);
  MEMO_CHECK(x.contiguous(), "send: view ", x.shape(), " must be contiguous");
  std::vector<char> copy(size_t(x.bytes()));
  backend_.copy_to_host(copy.data(), x.data(), x.bytes());
  sent_.push_back(std::move(copy));
  count(0, 0);
}

void SelfCommunicator::recv(Tensor x, int peer) {
  check_peer("recv", peer);
  MEMO_CHECK(!sent_.empty(),
             "recv from rank 0 (self) with no send before it: it would never return");
  MEMO_CHECK(x.contiguous() && int64_t(sent_.front().size()) == x.bytes(), "recv: view ", x.shape(),
             " of ", x.bytes(), " bytes does not match the ", sent_.front().size(), " bytes sent");
  backend_.copy_from_host(x.data(), sent_.front().data(), x.bytes());
  sent_.pop_front();
  count(0, 0);
}

void SelfCommunicator::send_recv(ConstTensor x, int to, Tensor y, int from) {
  send(x, to);
  recv(y, from);
}

std::unique_ptr<Communicator> SelfCommunicator::split(int, int) {
  count(0, 0);
  return std::make_unique<SelfCommunicator>(backend_);
}

}  // namespace memo
