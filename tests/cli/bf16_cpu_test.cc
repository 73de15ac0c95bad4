// memo train --precision bf16 on the CPU, as a user runs it: the start-up line names the bf16
// products the run uses (AMX or AVX512-BF16 through oneDNN, Note [bf16 products on the CPU]) or
// says there are none; MEMO_CPU_ISA runs this CPU's fallbacks (avx512: bf16 by conversion to f32;
// avx2: oneDNN's AVX2 sgemm as well) with losses within bf16 rounding of the native run's, and a
// bad value is one line naming it before anything runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "cli_test_util.h"
#include "memo/cpu/kernels.h"
#include "test_util.h"

namespace memo {
namespace {

class Bf16Cpu : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_text(dir / "config.json", test::kTinyLlamaConfig);
    test::write_text(dir / "data.txt", test::corpus(20000));
  }
  // memo train with MEMO_CPU_ISA=isa (none when empty)
  test::CommandResult train(const std::string& isa, const std::string& name,
                            const std::string& extra = "--precision bf16") const {
    return test::run_command(
        (isa.empty() ? std::string("env -u MEMO_CPU_ISA ") : "env MEMO_CPU_ISA=" + isa + " ") +
        test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
        dir.str("data.txt") + " --seq 32 --batch 4 --micro-batch 2 --steps 3 --val-batches 1" +
        " --out " + dir.str(name) + " --log " + dir.str(name + ".jsonl") + " " + extra);
  }
  test::TempDir dir;
};

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The first loss of two bf16 runs that round the same values and sum in different orders: both are
// within Note [Mixed precision]'s 2^-9 of fp32's first loss, so of each other within 2^-8.
void expect_close_first_losses(const std::string& a, const std::string& b) {
  const double x = std::stod(test::losses(a).at(1)), y = std::stod(test::losses(b).at(1));
  EXPECT_LT(std::abs(x - y) / x, std::ldexp(1.0, -8)) << x << " vs " << y;
}

TEST_F(Bf16Cpu, the_start_up_line_names_the_bf16_products_and_fallbacks_agree) {
  // The first run under this process's own cap, if it has one, as cpu::bf16_products_name() is
  // this process's.
  const char* outer = std::getenv("MEMO_CPU_ISA");
  const test::CommandResult native = train(outer != nullptr ? outer : "", "native");
  ASSERT_EQ(native.exit_code, 0) << native.output;
  EXPECT_TRUE(contains(native.output, cpu::bf16_products_name())) << native.output;
  EXPECT_EQ(contains(native.output, "; native bf16 products"), cpu::bf16_products_native())
      << native.output;

  const test::CommandResult f32 = train("avx512", "avx512");
  ASSERT_EQ(f32.exit_code, 0) << f32.output;
  EXPECT_TRUE(contains(f32.output, "no bf16 products under MEMO_CPU_ISA=avx512")) << f32.output;
  EXPECT_TRUE(contains(f32.output, "warning: cpu has no native bf16 products")) << f32.output;
  expect_close_first_losses(dir.str("native.jsonl"), dir.str("avx512.jsonl"));

  const test::CommandResult avx2 = train("avx2", "avx2");
  ASSERT_EQ(avx2.exit_code, 0) << avx2.output;
  EXPECT_TRUE(contains(avx2.output, "AVX2+FMA kernels")) << avx2.output;
  expect_close_first_losses(dir.str("native.jsonl"), dir.str("avx2.jsonl"));
}

// An fp32 run under MEMO_CPU_ISA=avx2 takes oneDNN's AVX2 sgemm and says why it is slower.
TEST_F(Bf16Cpu, an_fp32_run_under_a_cap_says_so) {
  const test::CommandResult r = train("avx2", "fp32", "--precision fp32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "AVX2+FMA kernels")) << r.output;
  if (__builtin_cpu_supports("avx512f")) {
    EXPECT_TRUE(contains(r.output, "MEMO_CPU_ISA=avx2 caps it")) << r.output;
  }
}

TEST_F(Bf16Cpu, a_bad_cap_is_one_line_before_anything_runs) {
  test::expect_clean_failure("env MEMO_CPU_ISA=avx9 " + test::memo_bin() + " train --config " +
                                 dir.str("config.json") + " --data " + dir.str("data.txt") +
                                 " --seq 32 --batch 4 --steps 1 --out " + dir.str("bad"),
                             "MEMO_CPU_ISA=avx9: expected amx, avx512_bf16, avx512 or avx2");
  test::expect_clean_failure("env MEMO_CPU_BF16_ATTENTION=yes " + test::memo_bin() +
                                 " train --config " + dir.str("config.json") + " --data " +
                                 dir.str("data.txt") + " --seq 32 --batch 4 --steps 1 --out " +
                                 dir.str("bad"),
                             "MEMO_CPU_BF16_ATTENTION=yes: expected 1 (on) or 0 (off)");
}

// bf16 attention (Note [bf16 attention on the CPU]) is on by default where it is measured faster
// (cpu::bf16_attention_by_default); MEMO_CPU_BF16_ATTENTION turns it on or off, the start-up line
// says which, and the first losses agree within bf16 rounding.
TEST_F(Bf16Cpu, bf16_attention_follows_the_cpu_or_the_environment) {
  if (!cpu::bf16_attention_native()) GTEST_SKIP() << cpu::bf16_attention_name();
  for (const char* on : {"1", "0"}) {
    const std::string name = std::string("attention") + on;
    const test::CommandResult r = test::run_command(
        std::string("env MEMO_CPU_BF16_ATTENTION=") + on + " " + test::memo_bin() +
        " train --config " + dir.str("config.json") + " --data " + dir.str("data.txt") +
        " --seq 32 --batch 4 --steps 3" + " --val-batches 1 --precision bf16 --out " +
        dir.str(name) + " --log " + dir.str(name + ".jsonl"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(contains(r.output, "native bf16 products, attention, elementwise;"), on[0] == '1')
        << r.output;
    EXPECT_EQ(contains(r.output, cpu::bf16_attention_name()), on[0] == '1') << r.output;
  }
  expect_close_first_losses(dir.str("attention1.jsonl"), dir.str("attention0.jsonl"));
  EXPECT_NE(test::losses(dir.str("attention1.jsonl")), test::losses(dir.str("attention0.jsonl")));
}

}  // namespace
}  // namespace memo
