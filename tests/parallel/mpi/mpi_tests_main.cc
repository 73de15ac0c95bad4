// The MPI communicator's tests, run by CTest under `mpirun -np 2` and `-np 4` (CMakeLists.txt):
// every rank runs every test; a rank's failure fails the job. The sums are checked against the
// rank-order sum each rank can compute itself (every rank's values are a function of its rank), so
// the checks are bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "memo/parallel/mpi_communicator.h"

namespace memo {
namespace {

MpiCommunicator* g_world = nullptr;

// Rank r's value i: a float whose sum over ranks depends on the order of the additions.
float value(int rank, int64_t i) {
  return float(std::ldexp(1.0, (rank * 7 + int(i)) % 40 - 20)) * (i % 3 == 0 ? -1.0f : 1.0f) +
         float(rank) * 0.1f;
}

float rank_order_sum(int ranks, int64_t i) {
  float sum = value(0, i);
  for (int r = 1; r < ranks; ++r) sum += value(r, i);
  return sum;
}

TEST(MpiCommunicator, all_reduce_sums_in_rank_order_bitwise) {
  MpiCommunicator& w = *g_world;
  for (int64_t n : {int64_t(1), int64_t(3), int64_t(1000), int64_t(100003)}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = value(w.rank(), i);
    w.all_reduce_sum(Tensor(x.data(), {n}));
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(x[size_t(i)], rank_order_sum(w.size(), i)) << "n " << n << " i " << i;
  }
}

TEST(MpiCommunicator, reduce_scatter_and_all_gather) {
  MpiCommunicator& w = *g_world;
  const int64_t n = 37, P = w.size();
  std::vector<float> in(static_cast<size_t>(n * P)), out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n * P; ++i) in[size_t(i)] = value(w.rank(), i);
  w.reduce_scatter_sum(Tensor(out.data(), {n}), ConstTensor(in.data(), {n * P}));
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(out[size_t(i)], rank_order_sum(w.size(), w.rank() * n + i)) << i;
  std::vector<float> gathered(size_t(n * P));
  w.all_gather(Tensor(gathered.data(), {n * P}), ConstTensor(out.data(), {n}));
  for (int64_t i = 0; i < n * P; ++i) ASSERT_EQ(gathered[size_t(i)], rank_order_sum(w.size(), i));
}

TEST(MpiCommunicator, doubles_reduce_and_gather_in_rank_order) {
  MpiCommunicator& w = *g_world;
  double x[2] = {0.1 * (w.rank() + 1), 1e16 * (w.rank() % 2 ? -1 : 1)};
  w.all_reduce_sum(std::span<double>(x, 2));
  double want0 = 0.1, want1 = 1e16;
  for (int r = 1; r < w.size(); ++r) {
    want0 += 0.1 * (r + 1);
    want1 += 1e16 * (r % 2 ? -1 : 1);
  }
  EXPECT_EQ(x[0], want0);
  EXPECT_EQ(x[1], want1);
  const double mine[1] = {double(w.rank()) + 0.5};
  std::vector<double> all(size_t(w.size()));
  w.all_gather(std::span<double>(all), std::span<const double>(mine, 1));
  for (int r = 0; r < w.size(); ++r) EXPECT_EQ(all[size_t(r)], r + 0.5);
}

TEST(MpiCommunicator, broadcast_and_a_ring_of_sends) {
  MpiCommunicator& w = *g_world;
  std::vector<float> x(5, float(w.rank()));
  w.broadcast(Tensor(x.data(), {5}), w.size() - 1);
  for (float v : x) EXPECT_EQ(v, float(w.size() - 1));
  const int next = (w.rank() + 1) % w.size(), prev = (w.rank() + w.size() - 1) % w.size();
  std::vector<float> mine(3, float(w.rank())), got(3, -1.0f);
  if (w.rank() % 2 == 0) {  // even ranks send first, odd ranks receive first: no deadlock
    w.send(ConstTensor(mine.data(), {3}), next);
    w.recv(Tensor(got.data(), {3}), prev);
  } else {
    w.recv(Tensor(got.data(), {3}), prev);
    w.send(ConstTensor(mine.data(), {3}), next);
  }
  for (float v : got) EXPECT_EQ(v, float(prev));
}

TEST(MpiCommunicator, split_makes_groups_by_color_ordered_by_key) {
  MpiCommunicator& w = *g_world;
  const int color = w.rank() % 2;
  std::unique_ptr<Communicator> group = w.split(color, -w.rank());  // reversed order
  const int members = (w.size() + 1 - color) / 2;
  EXPECT_EQ(group->size(), members);
  float x = float(w.rank());
  group->all_reduce_sum(Tensor(&x, {1}));
  float want = 0.0f;
  for (int r = w.size() - 1; r >= 0; --r)  // rank order in the group: highest world rank first
    if (r % 2 == color) want += float(r);
  EXPECT_EQ(x, want);
  group->barrier();
}

TEST(MpiCommunicator, counters_record_the_bytes_sent) {
  MpiCommunicator& w = *g_world;
  w.reset_counters();
  std::vector<float> x(1000, 1.0f);
  w.all_reduce_sum(Tensor(x.data(), {1000}));
  EXPECT_EQ(w.counters().calls, 1);
  EXPECT_EQ(w.counters().bytes_sent, 2 * 4000 * (w.size() - 1) / w.size());
  EXPECT_GE(w.counters().seconds, 0.0);
}

}  // namespace
}  // namespace memo

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<memo::MpiCommunicator> world = memo::MpiCommunicator::world();
  memo::g_world = world.get();
  const int failed = RUN_ALL_TESTS();
  int any = failed;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
