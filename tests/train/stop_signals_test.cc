// Note [Stopping a run]: the signal flag, the second signal's immediate exit, the handlers put
// back, and --exit-signal's names.
#include "memo/train/stop_signals.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "memo/core/error.h"
#include "memo/cpu/kernels.h"
#include "test_util.h"

namespace memo {
namespace {

TEST(StopSignals, a_signal_is_a_request_and_the_handlers_are_put_back) {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGUSR2, &ignore, &before), 0);
  {
    const StopSignals signals({SIGUSR2, SIGHUP});
    EXPECT_EQ(StopSignals::received(), 0);
    raise(SIGUSR2);
    EXPECT_EQ(StopSignals::received(), SIGUSR2);
  }
  EXPECT_EQ(StopSignals::received(), 0);  // forgotten with the handlers
  raise(SIGUSR2);                         // ignored again, as before
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGUSR2, &before, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  const StopSignals none({});
  EXPECT_EQ(StopSignals::received(), 0);
}

TEST(StopSignalsDeathTest, a_second_signal_ends_the_process_at_once) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // OpenMP has threads running
  EXPECT_EXIT(
      {
        const StopSignals signals({SIGUSR1});
        raise(SIGUSR1);
        raise(SIGUSR1);
      },
      ::testing::ExitedWithCode(128 + SIGUSR1), "");
}

// Note [A signal in oneDNN's sgemm]: a stop signal sent at a random moment of a run of sgemms,
// many times. Handled on the thread's own stack, the signal frame lands on oneDNN's heap buffer
// within a few rounds and the process dies of heap corruption or a segfault (a do-nothing
// handler did the same in a C program calling only dnnl_sgemm); on the alternate stack, with the
// OpenMP workers blocking the signal, every round stops cleanly and the products stay exact.
TEST(StopSignals, a_signal_during_sgemm_leaves_the_heap_and_the_products_intact) {
  const int64_t M = 512, N = 256, K = 688;
  std::vector<float> a(size_t(M * K), 1.0f), b(size_t(K * N), 1.0f), c(size_t(M * N));
  std::mt19937 rng(7);
  for (int round = 0; round < 60; ++round) {
    const StopSignals signals({SIGUSR1});
    const int delay_us = int(rng() % 3000);
    std::thread sender([delay_us] {
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      kill(getpid(), SIGUSR1);
    });
    std::fill(c.begin(), c.end(), 0.0f);
    do {  // at least one pair of products a round, even when the signal comes before the first
      for (const bool ta : {false, true})
        cpu::matmul(View<float>(c.data(), {M, N}),
                    ta ? View<const float>(a.data(), {K, M}) : View<const float>(a.data(), {M, K}),
                    View<const float>(b.data(), {K, N}), ta, false);
    } while (StopSignals::received() == 0);
    sender.join();
    ASSERT_EQ(StopSignals::received(), SIGUSR1);
    for (float x : c) ASSERT_EQ(x, float(K)) << "round " << round;
  }
}

TEST(StopSignals, exit_signal_names) {
  EXPECT_EQ(parse_exit_signals("TERM,INT,USR1"), (std::vector<int>{SIGTERM, SIGINT, SIGUSR1}));
  EXPECT_EQ(parse_exit_signals("sigusr2"), (std::vector<int>{SIGUSR2}));
  EXPECT_EQ(parse_exit_signals("Hup"), (std::vector<int>{SIGHUP}));
  EXPECT_TRUE(parse_exit_signals("none").empty());
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  for (const char* bad : {"", "KILL", "TERM,", "TERM,,INT", "15"}) {
    const std::string msg = test::error_message<ConfigError>([&] { parse_exit_signals(bad); });
    EXPECT_NE(msg.find("--exit-signal '" + std::string(bad) + "'"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace memo
