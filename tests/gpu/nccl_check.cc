// The NCCL communicator (nccl/nccl_communicator.h) on real GPUs: scripts/gpu-check.sh runs it
// under `mpirun -np N` with N up to the GPUs lent (one today). Built where NCCL is found; never
// run by CTest (this project's CI machines have no GPU). Every collective is checked against what
// each rank can compute itself, on device buffers filled with rank-dependent values.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

#include "memo/mpi/mpi_communicator.h"
#include "memo/nccl/nccl_communicator.h"

namespace memo {
namespace {

NcclCommunicator* g_nccl = nullptr;

float value(int rank, int64_t i) { return float(rank + 1) * 0.5f + float(i % 7); }

// A device buffer with host copies in and out.
struct DeviceFloats {
  explicit DeviceFloats(int64_t n) : n(n) {
    EXPECT_EQ(cudaMalloc(&p, size_t(n) * sizeof(float)), cudaSuccess);
  }
  ~DeviceFloats() { cudaFree(p); }
  void set(const std::vector<float>& h) {
    ASSERT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<float> get() const {
    std::vector<float> h(static_cast<size_t>(n));
    EXPECT_EQ(cudaMemcpy(h.data(), p, h.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return h;
  }
  Tensor view() const { return Tensor(View<float>(p, {n}), MemSpace::kDevice); }
  float* p = nullptr;
  int64_t n;
};

std::vector<float> values(int rank, int64_t n, int64_t offset = 0) {
  std::vector<float> h(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) h[size_t(i)] = value(rank, offset + i);
  return h;
}

TEST(Nccl, all_reduce_reduce_scatter_and_all_gather) {
  NcclCommunicator& c = *g_nccl;
  const int64_t n = 1 << 20, P = c.size();
  DeviceFloats x(n);
  x.set(values(c.rank(), n));
  c.all_reduce_sum(x.view());
  const std::vector<float> got = x.get();
  for (int64_t i = 0; i < n; ++i) {
    double want = 0.0;
    for (int r = 0; r < P; ++r) want += value(r, i);
    ASSERT_NEAR(got[size_t(i)], want, 1e-5 * std::abs(want)) << i;
  }
  DeviceFloats in(n * P), out(n), gathered(n * P);
  in.set(values(c.rank(), n * P));
  c.reduce_scatter_sum(out.view(), in.view());
  const std::vector<float> mine = out.get();
  for (int64_t i = 0; i < n; ++i) {
    double want = 0.0;
    for (int r = 0; r < P; ++r) want += value(r, c.rank() * n + i);
    ASSERT_NEAR(mine[size_t(i)], want, 1e-5 * std::abs(want)) << i;
  }
  out.set(values(c.rank(), n));
  c.all_gather(gathered.view(), out.view());
  const std::vector<float> all = gathered.get();
  for (int r = 0; r < P; ++r)
    for (int64_t i = 0; i < n; i += 997) ASSERT_EQ(all[size_t(r * n + i)], value(r, i));
}

TEST(Nccl, broadcast_ring_split_doubles_and_barrier) {
  NcclCommunicator& c = *g_nccl;
  const int64_t n = 4096;
  DeviceFloats x(n), y(n);
  x.set(values(c.rank(), n));
  c.broadcast(x.view(), c.size() - 1);
  EXPECT_EQ(x.get(), values(c.size() - 1, n));
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  x.set(values(c.rank(), n));
  c.send_recv(x.view(), next, y.view(), prev);
  EXPECT_EQ(y.get(), values(prev, n));
  double stats[2] = {0.25 * (c.rank() + 1), 1e16};
  c.all_reduce_sum(std::span<double>(stats, 2));
  double want = 0.0;
  for (int r = 0; r < c.size(); ++r) want += 0.25 * (r + 1);
  EXPECT_EQ(stats[0], want);
  EXPECT_EQ(stats[1], 1e16 * c.size());
  std::unique_ptr<Communicator> half = c.split(c.rank() % 2, c.rank());
  EXPECT_EQ(half->size(), (c.size() + 1 - c.rank() % 2) / 2);
  x.set(std::vector<float>(size_t(n), 1.0f));
  half->all_reduce_sum(x.view());
  EXPECT_EQ(x.get()[0], float(half->size()));
  c.barrier();
  c.reset_counters();
  c.all_reduce_sum(x.view());
  EXPECT_EQ(c.counters().bytes_sent, all_reduce_bytes(n * 4, c.size()));
}

}  // namespace
}  // namespace memo

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // under mpirun: one rank per process and GPU; otherwise one process on GPU 0, without MPI
  std::unique_ptr<memo::MpiCommunicator> world;
  std::unique_ptr<memo::NcclCommunicator> nccl;
  try {
    if (memo::MpiCommunicator::launched_by_mpirun()) world = memo::MpiCommunicator::world();
    int gpus = 0;
    cudaGetDeviceCount(&gpus);
    nccl = world ? memo::NcclCommunicator::over(*world, memo::local_gpu(world.get(), gpus))
                 : memo::NcclCommunicator::single();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_check: rank %d: %s\n", world ? world->rank() : 0, e.what());
    return 2;
  }
  memo::g_nccl = nccl.get();
  std::printf("nccl_check: rank %d of %d on GPU %d\n", nccl->rank(), nccl->size(), nccl->device());
  const int failed = RUN_ALL_TESTS();
  int any = failed;
  if (world) MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  nccl.reset();
  return any;
}
