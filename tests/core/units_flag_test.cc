// The size parser: binary and decimal units, fractions, case, and errors that name the flag, the
// text and the accepted forms.
#include <gtest/gtest.h>

#include "memo/core/error.h"
#include "memo/core/units.h"
#include "test_util.h"

namespace memo {
namespace {

TEST(ParseBytesFlag, accepts_binary_and_decimal_units) {
  EXPECT_EQ(parse_bytes("4096", "--x"), 4096);
  EXPECT_EQ(parse_bytes("12B", "--x"), 12);
  EXPECT_EQ(parse_bytes("1.5GiB", "--x"), int64_t(1536) << 20);
  EXPECT_EQ(parse_bytes("512MiB", "--x"), int64_t(512) << 20);
  EXPECT_EQ(parse_bytes("2KiB", "--x"), 2048);
  EXPECT_EQ(parse_bytes("1TiB", "--x"), int64_t(1) << 40);
  EXPECT_EQ(parse_bytes("2GB", "--x"), 2000000000);
  EXPECT_EQ(parse_bytes("3kb", "--x"), 3000);
  EXPECT_EQ(parse_bytes("1gib", "--x"), int64_t(1) << 30);
  EXPECT_EQ(parse_bytes("0.5 MiB", "--x"), int64_t(1) << 19);
}

TEST(ParseBytesFlag, bad_text_names_flag_value_and_accepted_units) {
  for (const char* bad : {"", "GiB", "1.5GX", "-1GiB", "1..2GiB", "1e3", "2 GiBs"}) {
    const std::string msg =
        test::error_message<ConfigError>([&] { parse_bytes(bad, "--host-memory"); });
    EXPECT_NE(msg.find("--host-memory '" + std::string(bad) + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GiB"), std::string::npos) << msg;
  }
}

TEST(ParseDuration, hours_minutes_seconds_and_bare_seconds) {
  EXPECT_EQ(parse_duration("3h50m", "--x"), 3 * 3600 + 50 * 60);
  EXPECT_EQ(parse_duration("90m", "--x"), 5400);
  EXPECT_EQ(parse_duration("45s", "--x"), 45);
  EXPECT_EQ(parse_duration("1h30m15s", "--x"), 5415);
  EXPECT_EQ(parse_duration("2.5", "--x"), 2.5);
  EXPECT_EQ(parse_duration("1H", "--x"), 3600);
}

TEST(ParseDuration, bad_text_names_flag_and_value) {
  for (const char* bad : {"", "h", "0", "0s", "-5m", "3h20", "20m3h", "5m5m", "5d", "1.2.3s"}) {
    const std::string msg =
        test::error_message<ConfigError>([&] { parse_duration(bad, "--time-limit"); });
    EXPECT_NE(msg.find("--time-limit '" + std::string(bad) + "'"), std::string::npos) << msg;
  }
  // a well-formed zero is told so, not how to write a duration
  EXPECT_NE(test::error_message<ConfigError>([&] {
              parse_duration("0s", "--time-limit");
            }).find("is no time at all: give a duration above 0"),
            std::string::npos);
}

}  // namespace
}  // namespace memo
