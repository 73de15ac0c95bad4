// `memo plan` end to end, and `memo train --device-memory`: the planned arena changes no loss,
// and a run that does not fit is refused before step 1 with numbers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "memo/cpu/cpu_backend.h"
#include "memo/cuda/cuda_sizes.h"
#include "memo/io/atomic_file.h"
#include "svg_check.h"
#include "test_util.h"

namespace memo {
namespace {

// Whether a bf16 run here widens anything: the CPU's products or attention are not native (Note
// [bf16 elementwise on the CPU]: its row and elementwise kernels are, on every CPU).
bool cpu_widens_bf16() {
  return !cpu_backend().bf16_products() || !cpu_backend().bf16_attention() ||
         !cpu_backend().bf16_elementwise();
}

const char* kTinyConfig = R"({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": false})";

class PlanCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir / "config.json") << kTinyConfig;
    std::string text;
    while (text.size() < 20000) text += "In the beginning God created the heaven and the earth. ";
    std::ofstream(dir / "data.txt") << text;
  }
  std::string plan_cmd(const std::string& extra) const {
    return test::memo_bin() + " plan --config " + dir.str("config.json") + " --seq 64 --batch 2 " +
           extra;
  }
  std::string train_cmd(const std::string& out, const std::string& extra) const {
    return test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
           dir.str("data.txt") + " --seq 32 --batch 4 --micro-batch 2 --steps 4 --warmup 1 --out " +
           dir.str(out) + " --log " + dir.str(out + ".jsonl") + " " + extra;
  }
  std::map<int64_t, nlohmann::json> log(const std::string& name) const {
    std::map<int64_t, nlohmann::json> out;
    std::ifstream in(dir / (name + ".jsonl"));
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      out[j.at("step").get<int64_t>()] = j;
    }
    return out;
  }
  test::TempDir dir;
};

// A pipeline on GPUs (its sends staged through host memory: Note [Host-staged groups]) plans each
// stage's whole step with the CUDA backend's kernel sizes: under keep the first of 4 stages holds
// the activations of 4 micro-batches in flight, the last of one.
TEST_F(PlanCommand, a_gpu_pipeline_plans_each_stage_with_the_cuda_sizes) {
  std::ofstream(dir / "four.json") << R"({"hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512})";
  const std::string cmd = test::memo_bin() + " plan --config " + dir.str("four.json") +
                          " --seq 64 --batch 1 --pp 4 --micro-batches 8 --activations keep --json";
  const test::CommandResult cuda = test::run_command(cmd + " --device cuda --precision bf16");
  ASSERT_EQ(cuda.exit_code, 0) << cuda.output;
  const test::CommandResult cpu = test::run_command(cmd + " --precision bf16");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  const nlohmann::json g = nlohmann::json::parse(cuda.output),
                       c = nlohmann::json::parse(cpu.output);
  ASSERT_EQ(g.at("stages").size(), 4u);
  auto arena = [](const nlohmann::json& j, int p) {
    return j.at("stages")[size_t(p)].at("plan_peak_bytes").get<int64_t>();
  };
  EXPECT_GT(arena(g, 0), arena(g, 3));
  EXPECT_NE(arena(g, 0), arena(c, 0));  // the CUDA kernels' scratch, not the CPU's
}

TEST_F(PlanCommand, json_has_the_budget_plan_and_solver_fields) {
  const test::CommandResult r = test::run_command(plan_cmd("--device-memory 1GiB --json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  for (const char* key :
       {"fits", "alpha", "device_need_bytes", "device_budget_bytes", "plan_peak_bytes",
        "lower_bound_bytes", "gap_percent", "solve_seconds", "need", "levels"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_TRUE(j["alpha"].is_null());
  EXPECT_EQ(j["device_budget_bytes"].get<int64_t>(), int64_t(1) << 30);
  const int64_t peak = j["plan_peak_bytes"], bound = j["lower_bound_bytes"];
  EXPECT_GE(peak, bound);
  EXPECT_GT(bound, 0);
  EXPECT_NEAR(j["gap_percent"].get<double>(), 100.0 * double(peak - bound) / double(bound), 1e-9);
  EXPECT_EQ(j["need"]["activation_arena_bytes"].get<int64_t>(), peak);
  ASSERT_EQ(j["levels"].size(), 3u);
  EXPECT_EQ(j["levels"][2]["peak_bytes"].get<int64_t>(), peak);
}

TEST_F(PlanCommand, over_budget_json_says_what_fits) {
  const test::CommandResult r = test::run_command(plan_cmd("--device-memory 256KiB --json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_FALSE(j["fits"].get<bool>());
  EXPECT_GT(j["shortfall_bytes"].get<int64_t>(), 0);
  EXPECT_NE(j["message"].get<std::string>().find("budget is 256.00 KiB (262144 B)"),
            std::string::npos)
      << j["message"];
}

// CBC reaches its limit here whatever it is (its plan is the heuristic's, 614.5 KiB, at 3 s and at
// 20 s alike), so the limit is the test's time. Not 1 s: there, under ASan on a loaded 2-core
// machine, CBC once crashed in its preprocessing's postProcess (a CBC bug, left open).
TEST_F(PlanCommand, text_report_and_timeline_svg) {
  const test::CommandResult r = test::run_command(plan_cmd(
      "--device-memory 1.5GiB --solver mip --mip-seconds 4 --timeline " + dir.str("t.svg")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* part :
       {"activation arena", "alpha                  n/a (keep)", "plan peak", "lower bound", "gap",
        "level 1 forward", "level 1 backward", "level 2 iteration", "fits: yes"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  const std::string svg = read_file(dir / "t.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  const test::SvgSummary t = test::check_svg(svg);
  ASSERT_TRUE(t.ok) << t.error;
  // one strategy: its live bytes (thick) and its planned arena's top (thin) over the step
  EXPECT_EQ(t.elements.at("polyline"), 2);
  auto has_text = [&](const std::string& part) {
    for (const std::string& s : t.texts)
      if (s.find(part) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has_text("budget 1.50 GiB"));
  EXPECT_TRUE(has_text("keep plan peak"));
}

// A model larger than the machine plans on its shadow (a 70B LLaMA's weights alone are 262 GiB
// in f32; the plan once allocated them on the CPU and failed).
TEST_F(PlanCommand, a_model_larger_than_the_machine_plans_without_its_weights) {
  write_text(dir / "70b.json",
             R"({"architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 8192,
                 "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
                 "num_key_value_heads": 8, "vocab_size": 128256, "rms_norm_eps": 1e-05,
                 "max_position_embeddings": 8192, "tie_word_embeddings": false})");
  const test::CommandResult r = test::run_command(test::memo_bin() + " plan --config " +
                                                  dir.str("70b.json") + " --seq 128 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  // 70.6e9 parameters: f32 weights and gradients and AdamW's two moments, 16 bytes each
  EXPECT_GT(j.at("device_need_bytes").get<double>(), 16 * 70e9) << j.dump();
}

TEST_F(PlanCommand, bad_flags_fail_with_one_line) {
  for (const char* extra : {"--activations memo2", "--device-memory 3furlongs", "--solver gurobi",
                            "--pp 0", "--virtual-stages -1", "--pp-layers 1,1"}) {
    const test::CommandResult r = test::run_command(plan_cmd(extra));
    EXPECT_NE(r.exit_code, 0) << extra;
    EXPECT_NE(r.output.find("memo: error: "), std::string::npos) << r.output;
  }
  // a micro-batch past 2^32 tokens (once std::bad_alloc, or a check failure past 2^62)
  test::expect_clean_failure(plan_cmd("--batch 4611686018427387904"),
                             "--batch 4611686018427387904 x --seq 64 tokens: memo plans "
                             "micro-batches of at most 2^32 (4294967296) tokens");
  test::expect_clean_failure(plan_cmd("--batch 67108865"), "memo plans micro-batches of at most");
  // context parallelism over more ranks than an int doubles to
  test::expect_clean_failure(plan_cmd("--cp 2147483647"),
                             "does not split into 4294967294 equal chunks");
}

TEST_F(PlanCommand, train_with_device_memory_gives_the_same_losses_and_reports_the_arena) {
  ASSERT_EQ(test::run_command(train_cmd("a", "")).exit_code, 0);
  const test::CommandResult r = test::run_command(train_cmd("b", "--device-memory 64MiB"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("memo: device plan: needs"), std::string::npos) << r.output;
  const auto a = log("a"), b = log("b");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (const auto& [step, j] : a) EXPECT_EQ(j["loss"].dump(), b.at(step)["loss"].dump()) << step;
  // the log's memory figures are the arena's: measured peak within the planned peak
  const nlohmann::json plan =
      nlohmann::json::parse(test::run_command(test::memo_bin() + " plan --config " +
                                              dir.str("config.json") + " --seq 32 --batch 2 --json")
                                .output);
  for (const auto& [step, j] : b) {
    EXPECT_EQ(j["reserved_bytes"].get<int64_t>(), plan["plan_peak_bytes"].get<int64_t>());
    EXPECT_LE(j["peak_bytes"].get<int64_t>(), j["reserved_bytes"].get<int64_t>());
  }
}

// `memo plan --precision bf16` is the plan of `memo train --precision bf16`: the run reserves its
// arena, and the need counts the bf16 working weights (2 bytes a parameter) beside the f32 ones.
TEST_F(PlanCommand, a_bf16_plan_is_the_bf16_runs_arena_and_counts_the_working_weights) {
  const test::CommandResult r =
      test::run_command(train_cmd("bf16", "--device-memory 64MiB --precision bf16"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string plan_base =
      test::memo_bin() + " plan --config " + dir.str("config.json") + " --seq 32 --batch 2 --json";
  const nlohmann::json f32 = nlohmann::json::parse(test::run_command(plan_base).output);
  const nlohmann::json bf16 =
      nlohmann::json::parse(test::run_command(plan_base + " --precision bf16").output);
  for (const auto& [step, j] : log("bf16"))
    EXPECT_EQ(j["reserved_bytes"].get<int64_t>(), bf16["plan_peak_bytes"].get<int64_t>()) << step;
  // bf16 activations take half the bytes: the plan is smaller than fp32's with the f32 attention
  // kernel's scratch (the bf16 tiles' per-thread layouts and cached query sides are larger, and at
  // this tiny width most of the plan)
  const nlohmann::json bf16_f32_attention = nlohmann::json::parse(
      test::run_command("env MEMO_CPU_BF16_ATTENTION=0 " + plan_base + " --precision bf16").output);
  EXPECT_LT(bf16_f32_attention["plan_peak_bytes"].get<int64_t>(),
            f32["plan_peak_bytes"].get<int64_t>());
  const int64_t weights = f32["need"]["weight_bytes"].get<int64_t>();
  EXPECT_EQ(f32["need"]["working_weight_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(bf16["need"]["working_weight_bytes"].get<int64_t>(), weights / 2);
  EXPECT_EQ(f32["need"]["conversion_scratch_bytes"].get<int64_t>(), 0);
  // widened copies only where a kernel is not native here (a CPU without bf16 products or
  // attention; tests/memory/budget_test.cc counts them on a widening backend), on one rank of a
  // --tp 2 job too
  const nlohmann::json tp =
      nlohmann::json::parse(test::run_command(plan_base + " --precision bf16 --tp 2").output);
  for (const nlohmann::json* j : {&bf16, &tp})
    EXPECT_EQ((*j)["need"]["conversion_scratch_bytes"].get<int64_t>() > 0, cpu_widens_bf16());
}

// `memo plan --device cuda` plans a CUDA run here, without a GPU: traced with the CUDA backend's
// sizes (cuda/cuda_sizes.h: its cuBLASLt workspace is a buffer of the plan, its chunked
// attention's scratch) and, in bf16, its native kernels, which widen nothing (the head's backward
// takes the loss gradient in bf16: Note [bf16 loss gradient]).
TEST_F(PlanCommand, a_cuda_plan_takes_the_cuda_backends_sizes_and_native_bf16_kernels) {
  const std::string base =
      test::memo_bin() + " plan --config " + dir.str("config.json") + " --seq 32 --batch 2 --json";
  auto plan = [&](const std::string& extra) {
    const test::CommandResult r = test::run_command(base + " " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
  };
  const nlohmann::json cpu = plan(""), cuda = plan("--device cuda --precision fp32"),
                       cpu16 = plan("--precision bf16"),
                       cuda16 = plan("--device cuda --precision bf16");
  // --device cuda defaults to bf16, as memo train --device cuda does
  EXPECT_EQ(plan("--device cuda")["need"], cuda16["need"]);
  EXPECT_EQ(cuda["need"]["conversion_scratch_bytes"], 0);
  EXPECT_LT(cpu["plan_peak_bytes"].get<int64_t>(), cuda_matmul_workspace_bytes());
  EXPECT_GE(cuda["plan_peak_bytes"].get<int64_t>(), cuda_matmul_workspace_bytes());
  EXPECT_EQ(cuda16["need"]["working_weight_bytes"], cpu16["need"]["working_weight_bytes"]);
  EXPECT_EQ(cuda16["need"]["conversion_scratch_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(cpu16["need"]["conversion_scratch_bytes"].get<int64_t>() > 0, cpu_widens_bf16());
  const test::CommandResult bad = test::run_command(base + " --device gpu");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("memo: error: "), std::string::npos) << bad.output;
  const test::CommandResult cluster = test::run_command(
      test::memo_bin() + " plan --model llama-7b --seq 4096 --gpus 8 --gpu h200 --hardware-dir " +
      test::source_dir() + "/hardware --device cuda");
  EXPECT_NE(cluster.exit_code, 0);
  EXPECT_NE(cluster.output.find("--device applies to --config plans"), std::string::npos)
      << cluster.output;
  // the other flags of a --config plan are refused by name too, never dropped
  const std::string on_gpus = test::memo_bin() +
                              " plan --model llama-7b --seq 4096 --gpu h200 --hardware-dir " +
                              test::source_dir() + "/hardware ";
  for (const char* flag : {"--device-memory 10GiB", "--solver mip", "--mip-seconds 5",
                           "--timeline t.svg", "--precision fp32"}) {
    const std::string name = std::string(flag).substr(0, std::string(flag).find(' '));
    test::expect_clean_failure(on_gpus + flag,
                               name + " applies to --config plans (a run on this machine)");
  }
  test::expect_clean_failure(on_gpus + "--gpus -2", "--gpus");
}

// Note [Tensor-parallel activations]: under --tp a rank rebuilds only whole panels of its rows,
// so at a length whose rank rows are not whole panels memo sends them all, as offload does; the
// plan counts that, and its advice is a length whose rows are whole panels, where alpha 0 fits.
TEST_F(PlanCommand, memo_under_tp_counts_every_row_of_rows_that_are_not_whole_panels) {
  std::string deep = kTinyConfig;
  deep.replace(deep.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 4");
  std::ofstream(dir / "deep.json") << deep;
  auto host = [&](int64_t seq, const std::string& activations) {
    const test::CommandResult r = test::run_command(
        test::memo_bin() + " plan --config " + dir.str("deep.json") + " --batch 2 --tp 2 --seq " +
        std::to_string(seq) + " --host-memory 400KiB --json --activations " + activations);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
  };
  const nlohmann::json odd = host(301, "memo --alpha 0"), all = host(301, "offload");
  EXPECT_EQ(odd.at("host_need_bytes"), all.at("host_need_bytes"));
  const std::string said = odd.at("host_message").get<std::string>();
  EXPECT_NE(said.find("(all its 301 token rows a rank: under --tp they must be whole 128-row "
                      "panels to be rebuilt)"),
            std::string::npos)
      << said;
  EXPECT_EQ(said.find("a lower --alpha"), std::string::npos) << said;
  const size_t at = said.find("or --seq ");
  ASSERT_NE(at, std::string::npos) << said;
  const int64_t advised = std::stoll(said.substr(at + 9));
  EXPECT_EQ(advised % 256, 0) << said;
  const nlohmann::json whole = host(advised, "memo --alpha 0");
  EXPECT_TRUE(whole.at("host_fits").get<bool>()) << whole.dump();
  EXPECT_LT(whole.at("host_need_bytes").get<int64_t>(),
            host(advised, "offload").at("host_need_bytes").get<int64_t>());
}

TEST_F(PlanCommand, train_over_budget_is_refused_before_step_1) {
  const test::CommandResult r = test::run_command(train_cmd("c", "--device-memory 256KiB"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  for (const char* part : {"memo: error: device memory: needs", "budget is", "(short", "fits"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  EXPECT_EQ(r.output.find("step 1/"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "c"));
  EXPECT_FALSE(std::filesystem::exists(dir / "c.jsonl"));
}

// Note [Length stages]: a run of 32-token then 64-token sequences (256 tokens a step, 64 a
// micro-batch) runs each stage in the arena `memo plan` makes at its length and micro-batch (both
// with one OpenMP thread: attention's scratch grows with them), logs its stage and length; resumed
// at the boundary and mid-stage it continues bit for bit; and a stage that would not fit stops the
// run before step 1, named.
TEST_F(PlanCommand, length_stages_run_in_memo_plans_arenas_and_resume_bit_for_bit) {
  const std::string run = "OMP_NUM_THREADS=1 " + test::memo_bin() + " train --data " +
                          dir.str("data.txt") + " --activations keep --device-memory 64MiB";
  const std::string fresh = run + " --config " + dir.str("config.json") +
                            " --seq-schedule 32:2,64:3 --batch 8 --micro-batch 2 --warmup 1" +
                            " --save-every 1 --keep-last 0";
  const test::CommandResult r =
      test::run_command(fresh + " --out " + dir.str("s") + " --log " + dir.str("s.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("memo: stage 2 of 2 from step 3: seq 64"), std::string::npos) << r.output;
  const auto s = log("s");
  ASSERT_EQ(s.size(), 5u);
  for (const auto& [seq, micro, steps] :
       {std::tuple<int64_t, int64_t, std::vector<int64_t>>{32, 2, {1, 2}}, {64, 1, {3, 4, 5}}}) {
    const nlohmann::json plan = nlohmann::json::parse(
        test::run_command("OMP_NUM_THREADS=1 " + test::memo_bin() + " plan --config " +
                          dir.str("config.json") + " --seq " + std::to_string(seq) + " --batch " +
                          std::to_string(micro) +
                          " --activations keep --device-memory 64MiB --json")
            .output);
    for (int64_t step : steps) {
      const nlohmann::json& j = s.at(step);
      EXPECT_EQ(j["seq"], seq) << step;
      EXPECT_EQ(j["stage"], seq == 32 ? 1 : 2) << step;
      EXPECT_EQ(j["batch"], 256 / seq) << step;
      EXPECT_EQ(j["reserved_bytes"], plan["plan_peak_bytes"]) << step;
      EXPECT_EQ(j["peak_bytes"], plan["lower_bound_bytes"]) << step;
    }
  }
  for (int64_t from : {2, 3}) {  // the last step of stage 1, then mid-stage 2
    const std::string name = "r" + std::to_string(from);
    std::filesystem::create_directories(dir / name);
    std::filesystem::copy(dir / "s" / ("step-0000000" + std::to_string(from)),
                          dir / name / ("step-0000000" + std::to_string(from)),
                          std::filesystem::copy_options::recursive);
    const test::CommandResult rr =
        test::run_command(run + " --resume " + dir.str(name) + " --out " + dir.str(name) +
                          " --log " + dir.str(name + ".jsonl"));
    ASSERT_EQ(rr.exit_code, 0) << rr.output;
    if (from == 3) {  // the start-up lines give the stage it resumes in, not the first stage's
      EXPECT_NE(rr.output.find("4 x 64 tokens per step (4 micro-batches)"), std::string::npos)
          << rr.output;
      EXPECT_NE(rr.output.find("; in stage 2 of 2 (seq 64, RoPE theta"), std::string::npos)
          << rr.output;
    }
    const auto resumed = log(name);
    ASSERT_EQ(resumed.size(), size_t(5 - from)) << name;
    for (const auto& [step, j] : resumed) {
      EXPECT_EQ(j["loss"].dump(), s.at(step)["loss"].dump()) << name << " step " << step;
      EXPECT_EQ(j["grad_norm"].dump(), s.at(step)["grad_norm"].dump()) << name << " " << step;
    }
  }
  // 2 MiB holds a step of 32-token sequences but not one of a 512-token one
  const test::CommandResult over = test::run_command(
      test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
      dir.str("data.txt") + " --seq-schedule 32:2,512:1 --batch 16 --micro-batch 2 " +
      "--device-memory 2MiB --out " + dir.str("o"));
  EXPECT_EQ(over.exit_code, 1) << over.output;
  EXPECT_NE(over.output.find("memo: error: --seq-schedule stage 2 (seq 512): device memory: needs"),
            std::string::npos)
      << over.output;
  EXPECT_EQ(over.output.find("step 1/"), std::string::npos) << over.output;
  // the length it advises is the stage's (--seq is no flag beside --seq-schedule)
  EXPECT_EQ(over.output.find("--seq "), std::string::npos) << over.output;
  EXPECT_NE(over.output.find(" in this stage fits"), std::string::npos) << over.output;
  const test::CommandResult one = test::run_command(
      test::memo_bin() + " train --config " + dir.str("config.json") + " --data " +
      dir.str("data.txt") + " --seq 32 --steps 1 --batch 16 --micro-batch 2 " +
      "--device-memory 2MiB --no-checkpoint");
  EXPECT_EQ(one.exit_code, 0) << one.output;
}

// --stage-rope: stage 2's RoPE base and YaRN scaling take effect at its first step (stage 1's
// steps keep the bits of a run without it, stage 2's do not), its checkpoints' config.json carry
// them, a run resumed in stage 2 continues bit for bit, and a bad item is refused by name.
TEST_F(PlanCommand, a_stage_rope_changes_the_positions_from_its_stage_on) {
  const std::string run = test::memo_bin() + " train --data " + dir.str("data.txt");
  const std::string fresh = run + " --config " + dir.str("config.json") +
                            " --seq-schedule 32:2,64:2 --batch 8 --micro-batch 4 --warmup 1";
  const std::string rope =
      " --stage-rope '2:{\"rope_theta\": 40000, \"rope_scaling\": {\"rope_type\": \"yarn\", "
      "\"factor\": 2, \"original_max_position_embeddings\": 256}}'";
  ASSERT_EQ(test::run_command(fresh + " --no-checkpoint --log " + dir.str("plain.jsonl")).exit_code,
            0);
  const test::CommandResult r =
      test::run_command(fresh + rope + " --save-every 1 --keep-last 0" + " --out " + dir.str("y") +
                        " --log " + dir.str("y.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(
      r.output.find("seq 64, 4 sequences per step in micro-batches of 2, RoPE theta 40000 yarn"),
      std::string::npos)
      << r.output;
  const auto plain = log("plain"), y = log("y");
  for (int64_t step : {1, 2}) EXPECT_EQ(y.at(step)["loss"].dump(), plain.at(step)["loss"].dump());
  EXPECT_NE(y.at(3)["loss"].dump(), plain.at(3)["loss"].dump());
  const auto config = [&](int64_t step) {
    return nlohmann::json::parse(
        test::file_bytes(dir / "y" / ("step-0000000" + std::to_string(step)) / "config.json"));
  };
  EXPECT_EQ(config(2)["rope_theta"], 10000.0);
  EXPECT_TRUE(config(2)["rope_scaling"].is_null());
  EXPECT_EQ(config(3)["rope_theta"], 40000.0);
  EXPECT_EQ(config(3)["rope_scaling"]["rope_type"], "yarn");
  std::filesystem::create_directories(dir / "z");
  std::filesystem::copy(dir / "y" / "step-00000003", dir / "z" / "step-00000003",
                        std::filesystem::copy_options::recursive);
  const test::CommandResult z =
      test::run_command(run + " --resume " + dir.str("z") + " --log " + dir.str("z.jsonl"));
  ASSERT_EQ(z.exit_code, 0) << z.output;
  EXPECT_EQ(log("z").at(4)["loss"].dump(), y.at(4)["loss"].dump());
  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {" --stage-rope '3:{\"rope_theta\": 1}'",
            "--stage-rope 3:{\"rope_theta\": 1}: stage 3 of a schedule of 2 stages"},
           {" --stage-rope '2:{\"rope_thta\": 1}'",
            "--stage-rope 2: 'rope_thta' is not a position field"},
           {" --stage-rope '2:{\"max_position_embeddings\": 48}'",
            "--seq-schedule: stage 2's seq 64 exceeds max_position_embeddings = 48 (with "
            "--stage-rope)"},
           {" --stage-rope 2:5", "--stage-rope 2:5: write STAGE:JSON"},
           // refused before stage 1 trains, not when stage 2 begins
           {" --document-mask --eot-id 10 --stage-rope '2:{\"rope_scaling\": {\"rope_type\": "
            "\"dynamic\", \"factor\": 2}}'",
            "--stage-rope 2 with --document-mask: rope_scaling dynamic"}}) {
    const test::CommandResult bad = test::run_command(fresh + flags + " --out " + dir.str("bad"));
    EXPECT_EQ(bad.exit_code, 1) << flags << "\n" << bad.output;
    EXPECT_NE(bad.output.find(message), std::string::npos) << flags << "\n" << bad.output;
    EXPECT_FALSE(std::filesystem::exists(dir / "bad")) << flags;
    EXPECT_EQ(bad.output.find("step 1/"), std::string::npos) << flags << "\n" << bad.output;
  }
  // a model loaded with --init-from takes a --stage-rope from stage 1 on
  const test::CommandResult init = test::run_command(
      run + " --init-from " + dir.str("y/step-00000002") +
      " --seq-schedule 32:1,64:1 --batch 8 --micro-batch 4 --no-checkpoint --stage-rope "
      "'1:{\"rope_theta\": 20000}'");
  ASSERT_EQ(init.exit_code, 0) << init.output;
  EXPECT_NE(init.output.find("RoPE theta 20000"), std::string::npos) << init.output;
}

}  // namespace
}  // namespace memo

namespace memo {
namespace {

// `memo plan` for hardware we do not have: every strategy side by side, one JSON object.
std::string cluster_cmd(const std::string& extra) {
  return test::memo_bin() +
         " plan --model llama-7b --seq 1048576 --gpus 8 --gpu a800-80gb --tp 8 " +
         "--hardware-dir " + test::source_dir() + "/hardware " + extra;
}

TEST(PlanCluster, compare_json_has_every_strategy_with_the_plan_fields) {
  const test::CommandResult r =
      test::run_command(cluster_cmd("--host-memory 2TiB --compare --json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j.at("strategies").size(), 4u);
  std::map<std::string, nlohmann::json> by;
  for (const nlohmann::json& s : j.at("strategies")) {
    for (const char* field : {"fits", "alpha", "device_need_bytes", "host_need_bytes",
                              "step_seconds", "mfu", "mfu_causal", "mfu_noncausal", "max_seq"})
      EXPECT_TRUE(s.contains(field)) << field;
    by[s.at("strategy").get<std::string>()] = s;
  }
  EXPECT_FALSE(by.at("keep").at("fits").get<bool>());
  EXPECT_TRUE(by.at("memo").at("fits").get<bool>());
  EXPECT_TRUE(by.at("keep").at("alpha").is_null());
  EXPECT_NEAR(by.at("memo").at("alpha").get<double>(), 0.4635, 1e-3);
  EXPECT_EQ(by.at("memo").at("alpha_bound"), "host memory");
  EXPECT_GT(by.at("memo").at("max_seq").get<int64_t>(), 1048576);
  EXPECT_LT(by.at("keep").at("max_seq").get<int64_t>(), 1048576);
}

TEST(PlanCluster, text_prints_the_table_and_both_mfu_formulas) {
  const test::CommandResult r = test::run_command(cluster_cmd("--host-memory 2TiB"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* want :
       {"rounding buffers", "MFU, causal", "MFU, non-causal", "A = 2 H D (S + 1)", "A = 4 H D S",
        "longest seq that fits", "keep does not fit: device"})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
}

TEST(PlanCluster, one_strategy_prints_one_object) {
  const test::CommandResult r =
      test::run_command(cluster_cmd("--host-memory 256GiB --activations memo --json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("strategy"), "memo");
  EXPECT_FALSE(j.at("fits").get<bool>());
  EXPECT_NE(j.at("why_not").get<std::string>().find("even at alpha = 0"), std::string::npos);
}

// memo plan --layouts (Note [Layout comparison]): every layout of the GPUs, in JSON with each
// strategy's plan, as text one line a layout; the flags of one layout are refused beside it.
TEST(PlanCluster, layouts_list_every_split_of_the_gpus) {
  const std::string cmd = test::memo_bin() +
                          " plan --model llama-7b --seq 32768 --gpus 8 --gpu a800-80gb "
                          "--host-memory 1TiB --layouts --hardware-dir " +
                          test::source_dir() + "/hardware";
  const test::CommandResult r = test::run_command(cmd + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j.at("layouts").size(), 30u);  // 20 splits, 10 pipelines planned interleaved too
  EXPECT_EQ(j.at("refused_layouts"), 0);
  int interleaved = 0;
  for (const nlohmann::json& l : j.at("layouts")) {
    EXPECT_EQ(l.at("tp").get<int>() * l.at("cp").get<int>() * l.at("pp").get<int>() *
                  l.at("dp").get<int>(),
              8);
    EXPECT_EQ(l.at("strategies").size(), 4u);
    if (l.at("virtual_stages").get<int>() == 2) {
      ++interleaved;
      EXPECT_GT(l.at("pp").get<int>(), 1);
    }
  }
  EXPECT_EQ(interleaved, 10);
  EXPECT_FALSE(j.at("layouts")[0].at("best").is_null());
  const test::CommandResult text = test::run_command(cmd);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("every layout, fastest first"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("  tp  cp   pp  dp  fastest that fits"), std::string::npos);
  EXPECT_NE(text.output.find(" 8x2"), std::string::npos) << text.output;
  const test::CommandResult one = test::run_command(cluster_cmd("--layouts"));  // with --tp 8
  EXPECT_NE(one.exit_code, 0);
  EXPECT_NE(one.output.find("memo: error: --layouts plans every --tp, --cp and --pp of --gpus"),
            std::string::npos)
      << one.output;
  const test::CommandResult here =
      test::run_command(test::memo_bin() + " plan --config x.json --seq 64 --layouts");
  EXPECT_NE(here.output.find("memo: error: --layouts compares the layouts of --gpus"),
            std::string::npos)
      << here.output;
}

TEST(PlanCluster, bad_input_fails_with_one_line) {
  for (const std::string& extra :
       {std::string("--gpu b100-1tb"), std::string("--tp 3"),
        std::string("--host-memory 2furlongs"), std::string("--activations memo --compare"),
        std::string("--config x.json")}) {
    const test::CommandResult r = test::run_command(cluster_cmd(extra));
    EXPECT_NE(r.exit_code, 0) << extra;
    EXPECT_NE(r.output.find("memo: error: "), std::string::npos) << extra << ": " << r.output;
  }
  const test::CommandResult r = test::run_command(cluster_cmd("--gpu b100-1tb"));
  EXPECT_NE(r.output.find("a800-80gb"), std::string::npos) << r.output;  // names the shipped ones
  // 2^32 tokens a micro-batch at most (past 2^34 the byte counts once overflowed)
  test::expect_clean_failure(cluster_cmd("--batch 4097"),
                             "--batch 4097 x --seq 1048576 tokens: memo plans micro-batches");
  test::expect_clean_failure(cluster_cmd("--seq 17179869184"), "memo plans micro-batches");
  const test::CommandResult m =
      test::run_command(test::memo_bin() +
                        " plan --model gpt-3b --gpus 8 --gpu a800-80gb --seq 8192 --hardware-dir " +
                        test::source_dir() + "/hardware");
  EXPECT_NE(m.output.find("neither a preset"), std::string::npos) << m.output;
}

}  // namespace
}  // namespace memo

namespace memo {
namespace {

TEST(PlanCluster, a_users_own_gpu_file_plans_like_a_shipped_one) {
  test::TempDir dir;
  std::ofstream(dir / "my-gpu.json") << R"({"name": "Half an A800", "peak_bf16_flops": 156e12,
    "memory_bytes": 40000000000, "host_link_bytes_per_s": 16e9, "nvlink_bytes_per_s": 200e9,
    "source": "a test: the A800 figures halved"})";
  const test::CommandResult r =
      test::run_command(test::memo_bin() +
                        " plan --model 7b --seq 65536 --gpus 8 --tp 8 --host-memory 1TiB --json "
                        "--activations memo --gpu " +
                        dir.str("my-gpu.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("device_capacity_bytes").get<int64_t>(), 40000000000);
  EXPECT_TRUE(j.at("fits").get<bool>());
  std::ofstream(dir / "bad-gpu.json") << R"({"name": "x", "peak_bf16_flops": -1})";
  const test::CommandResult bad =
      test::run_command(test::memo_bin() + " plan --model 7b --seq 65536 --gpus 8 --tp 8 --gpu " +
                        dir.str("bad-gpu.json"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("memo: error: "), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace memo
