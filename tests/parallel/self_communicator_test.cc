// The one-process communicator: each collective is its one-rank case, send/recv to itself pair
// up in order, and misuse (a peer outside the group, a recv with nothing sent, mismatched sizes)
// is an error rather than a hang.
#include "memo/parallel/self_communicator.h"

#include <gtest/gtest.h>

#include <vector>

#include "memo/core/error.h"
#include "memo/cpu/cpu_backend.h"
#include "test_util.h"

namespace memo {
namespace {

TEST(SelfCommunicator, collectives_are_their_one_rank_case) {
  SelfCommunicator comm(cpu_backend());
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.rank(), 0);
  std::vector<float> x = {1.5f, -2.0f, 3.25f}, out(3, 0.0f);
  comm.all_reduce_sum(View<float>(x.data(), {3}));
  EXPECT_EQ(x, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  comm.all_gather(View<float>(out.data(), {3}), View<const float>(x.data(), {3}));
  EXPECT_EQ(out, x);
  std::fill(out.begin(), out.end(), 0.0f);
  comm.reduce_scatter_sum(View<float>(out.data(), {3}), View<const float>(x.data(), {3}));
  EXPECT_EQ(out, x);
  comm.broadcast(View<float>(x.data(), {3}), 0);
  comm.barrier();
  EXPECT_EQ(comm.counters().calls, 5);
  EXPECT_EQ(comm.counters().bytes_sent, 0);
  EXPECT_EQ(comm.split(0, 0)->size(), 1);
}

TEST(SelfCommunicator, sends_to_itself_arrive_in_order) {
  SelfCommunicator comm(cpu_backend());
  std::vector<float> a = {1, 2}, b = {3, 4, 5}, got2(2), got3(3);
  comm.send(View<const float>(a.data(), {2}), 0);
  comm.send(View<const float>(b.data(), {3}), 0);
  a[0] = 99;  // the send took a copy
  comm.recv(View<float>(got2.data(), {2}), 0);
  comm.recv(View<float>(got3.data(), {3}), 0);
  EXPECT_EQ(got2, (std::vector<float>{1, 2}));
  EXPECT_EQ(got3, b);
}

TEST(SelfCommunicator, misuse_is_an_error_not_a_hang) {
  SelfCommunicator comm(cpu_backend());
  std::vector<float> x(4), y(3);
  EXPECT_NE(test::error_message<Error>([&] {
              comm.recv(View<float>(x.data(), {4}), 0);
            }).find("no send before it"),
            std::string::npos);
  EXPECT_NE(test::error_message<Error>([&] {
              comm.send(View<const float>(x.data(), {4}), 1);
            }).find("peer 1 is outside a group of 1 rank"),
            std::string::npos);
  comm.send(View<const float>(x.data(), {4}), 0);
  EXPECT_THROW(comm.recv(View<float>(y.data(), {3}), 0), Error);
  EXPECT_THROW(comm.all_gather(View<float>(y.data(), {3}), View<const float>(x.data(), {4})),
               Error);
}

}  // namespace
}  // namespace memo
