// Byte sizes and durations from the command line; words for the commands memo prints.
#include "memo/core/units.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "memo/core/error.h"

namespace memo {
namespace {

TEST(Units, parse_bytes_accepts_binary_and_decimal_units) {
  EXPECT_EQ(parse_bytes("4096"), 4096);
  EXPECT_EQ(parse_bytes("12B"), 12);
  EXPECT_EQ(parse_bytes("1.5GiB"), int64_t(3) << 29);
  EXPECT_EQ(parse_bytes("1.5 gib"), int64_t(3) << 29);
  EXPECT_EQ(parse_bytes("512MiB"), int64_t(512) << 20);
  EXPECT_EQ(parse_bytes("2G"), int64_t(2) << 30);
  EXPECT_EQ(parse_bytes("80GB"), int64_t(80'000'000'000));
  EXPECT_EQ(parse_bytes("1TiB"), int64_t(1) << 40);
  EXPECT_EQ(parse_bytes("0.5KiB"), 512);
}

TEST(Units, parse_bytes_rejects_garbage_naming_the_text_and_the_forms) {
  for (const char* bad :
       {"", "-1GiB", "GiB", "1.5 furlongs", "1..5G", "1e3", "99999999999TiB", "0.5B"}) {
    try {
      parse_bytes(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("1.5GiB"), std::string::npos) << msg;
    }
  }
}

TEST(Units, format_bytes_picks_a_binary_unit) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(int64_t(3) << 30), "3.00 GiB");
}

// A printed command pastes back as it was: /bin/sh reads each word back byte for byte.
TEST(Units, shell_word_survives_a_shell) {
  EXPECT_EQ(shell_word("runs/a-1/step-00000010"), "runs/a-1/step-00000010");
  EXPECT_EQ(shell_word("my runs/a"), "'my runs/a'");
  EXPECT_EQ(shell_word(""), "''");
  for (const std::string word : {"my runs/a", "it's", "$HOME/x", "a\\b", "*", "x;rm -rf y",
                                 "tab\there", "\"q\"", "~user", "`id`", "é/ü", "''"}) {
    FILE* pipe = popen(("printf '%s' " + shell_word(word)).c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string back;
    char buf[256];
    for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) back.append(buf, n);
    EXPECT_EQ(pclose(pipe), 0) << word;
    EXPECT_EQ(back, word) << shell_word(word);
  }
}

}  // namespace
}  // namespace memo
