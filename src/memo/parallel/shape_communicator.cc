#include "memo/parallel/shape_communicator.h"

#include <algorithm>

#include "memo/core/error.h"

namespace memo {

ShapeCommunicator::ShapeCommunicator(int size, int rank) : size_(size), rank_(rank) {
  MEMO_CHECK(size >= 1 && 0 <= rank && rank < size, "ShapeCommunicator: rank ", rank, " of ", size);
}

void ShapeCommunicator::check_peer(const char* op, int peer) const {
  MEMO_CHECK(0 <= peer && peer < size_, op, ": rank ", peer, " is not in a group of ", size_);
}

void ShapeCommunicator::all_reduce_sum(Tensor x) {
  const int64_t moved = all_reduce_bytes(bytes(x), size_);
  count(moved, moved);
}

void ShapeCommunicator::reduce_scatter_sum(Tensor out, ConstTensor in) {
  MEMO_CHECK(in.numel() == out.numel() * size_, "reduce_scatter_sum: out ", out.shape(),
             " must hold 1/", size_, " of in ", in.shape());
  const int64_t moved = reduce_scatter_bytes(bytes(out), size_);
  count(moved, moved);
}

void ShapeCommunicator::all_gather(Tensor out, ConstTensor in) {
  MEMO_CHECK(out.numel() == in.numel() * size_, "all_gather: out ", out.shape(), " must hold ",
             size_, " x in ", in.shape());
  const int64_t moved = all_gather_bytes(bytes(in), size_);
  count(moved, moved);
}

// MpiCommunicator sums host statistics by gathering them (rank order).
void ShapeCommunicator::all_reduce_sum(std::span<double> x) {
  const int64_t moved = all_gather_bytes(int64_t(x.size() * sizeof(double)), size_);
  count(moved, moved);
}

void ShapeCommunicator::all_gather(std::span<double> out, std::span<const double> in) {
  MEMO_CHECK(out.size() == in.size() * size_t(size_), "all_gather: out of ", out.size(),
             " must hold ", size_, " x in of ", in.size());
  const int64_t moved = all_gather_bytes(int64_t(in.size() * sizeof(double)), size_);
  count(moved, moved);
  // host statistics are small: the group's ranks are modelled as this rank's copies
  for (size_t r = 0; r < size_t(size_); ++r)
    std::copy(in.begin(), in.end(), out.begin() + std::ptrdiff_t(r * in.size()));
}

void ShapeCommunicator::broadcast(Tensor x, int root) {
  check_peer("broadcast", root);
  count(rank_ == root ? bytes(x) * (size_ - 1) : 0, rank_ == root ? 0 : bytes(x));
}

void ShapeCommunicator::send(ConstTensor x, int peer) {
  check_peer("send", peer);
  count(bytes(x), 0);
}

void ShapeCommunicator::recv(Tensor x, int peer) {
  check_peer("recv", peer);
  count(0, bytes(x));
}

void ShapeCommunicator::send_recv(ConstTensor x, int to, Tensor y, int from) {
  check_peer("send_recv", to);
  check_peer("send_recv", from);
  count(bytes(x), bytes(y));
}

std::unique_ptr<Communicator> ShapeCommunicator::split(int, int) {
  throw ConfigError(
      "a shape-only trace's communicator cannot split: the other ranks' colours "
      "are unknown");
}

}  // namespace memo
