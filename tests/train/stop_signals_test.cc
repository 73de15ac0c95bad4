// Note [Stopping a run]: the signal flag, the second signal's immediate exit, the handlers put
// back, and --exit-signal's names.
#include "memo/train/stop_signals.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "memo/core/error.h"
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
