// Shared by the model-vs-PyTorch tests (LLaMA and GPT-2): error measures of a memo tensor against
// the reference's, reading a reference tensor, and the whole comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/core/random.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/data/token_data.h"
#include "memo/io/checkpoint.h"
#include "memo/io/safetensors.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "memo/optim/adamw.h"
#include "test_util.h"

namespace memo::test {

// Max |a - b| over max |b|: one number per tensor, robust to entries near zero.
inline double rel_error(const float* a, const std::vector<float>& b) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    ref = std::max(ref, std::fabs(double(b[i])));
  }
  return ref > 0 ? diff / ref : diff;
}

// ||a - b||_2 / ||b||_2: the norm-wise relative error of a whole tensor.
inline double rel_error_l2(const float* a, const std::vector<float>& b) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    ref += double(b[i]) * double(b[i]);
  }
  return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

inline std::vector<float> read(const SafetensorsFile& f, const std::string& name) {
  int64_t n = 1;
  for (int64_t d : f.shape(name)) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  f.read_into(name, v.data(), f.shape(name));
  return v;
}

// Adds 0.1 N(0, 1) (seeded) to every tensor not drawn from a normal at init (biases at 0, norm
// weights at 1), so that a check reads their values, not only their init.
inline void perturb_biases_and_norms(Model& model, uint64_t seed) {
  for (size_t i = 0; i < model.layout().params().size(); ++i) {
    const ParamInfo& p = model.layout().params()[i];
    if (p.init == ParamInit::kNormal) continue;
    NormalStream rng(seed, i);
    for (int64_t j = 0; j < p.numel; ++j) model.params()[p.offset + j] += float(0.1 * rng.next());
  }
}

// Runs scripts/torch_reference.py (float64) and memo on the same weights and tokens for three
// AdamW steps and compares the loss of each step, every gradient of the first and every weight
// after the last. `torch_writes_weights` (GPT-2): the reference writes model.safetensors itself
// (F32, Hugging Face names, plus lm_head.weight) and memo loads it.
// The bounds of a comparison, relative (see each use below): fp32's by default.
struct TorchTolerance {
  double loss = 1e-5, grad = 1e-4, weights = 1e-5;
};

inline void check_against_torch(const ModelConfig& config, int64_t seq, int64_t batch,
                                bool torch_writes_weights = false, Backend& backend = cpu_backend(),
                                TorchTolerance tol = {}) {
  test::TempDir dir;
  Model model(config, backend);
  model.init(42);
  // Biases and norm weights off their init (0 and 1), so that every bias takes part in the
  // forward and no tensor's final value is Adam's steps alone (see GPT-2's key bias below).
  perturb_biases_and_norms(model, 7);
  CheckpointData data;
  data.config = config;
  for (const ParamInfo& p : model.layout().params())
    data.model.push_back({p.name, p.shape, model.params() + p.offset});
  save_checkpoint(dir.path() / "ckpt", data);
  std::vector<int32_t> tokens(size_t(batch * seq + 1));
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = int32_t(mix(99, i) % uint64_t(config.vocab_size));
  write_llmc_tokens(dir / "tokens.bin", tokens);
  std::vector<int32_t> inputs, targets;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      inputs.push_back(tokens[size_t(b * seq + s)]);
      targets.push_back(tokens[size_t(b * seq + s + 1)]);
    }
  // lr 1e-3, a usual AdamW rate for LLMs. eps 1e-6 rather than 1e-8: Adam's first update is
  // lr g / (|g| + eps), which flips sign for gradient entries at the fp32 rounding level of the
  // gradient; eps damps those.
  const double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-6, wd = 0.1;
  const int steps = 3;
  const std::string cmd =
      "/usr/bin/python3 " + test::source_dir() + "/scripts/torch_reference.py" + " --checkpoint " +
      dir.str("ckpt") + " --tokens " + dir.str("tokens.bin") + " --seq " + std::to_string(seq) +
      " --batch " + std::to_string(batch) + " --steps " + std::to_string(steps) + " --lr " +
      std::to_string(lr) + " --beta1 0.9 --beta2 0.95" + " --eps " + std::to_string(eps) +
      " --weight-decay 0.1 --out " + dir.str("ref.safetensors") +
      (torch_writes_weights ? " --write-gpt2-init 7" : "");
  const test::CommandResult r = test::run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  if (torch_writes_weights) {  // memo reads what PyTorch wrote, by the Hugging Face names
    LoadedCheckpoint ckpt = load_checkpoint(dir.path() / "ckpt");
    ASSERT_TRUE(ckpt.model.contains("lm_head.weight"));
    for (const ParamInfo& p : model.layout().params())
      ckpt.model.read_into(p.name, model.params() + p.offset, p.shape);
  }
  SafetensorsFile ref(dir / "ref.safetensors");
  const std::vector<float> ref_loss = read(ref, "loss");

  CachingAllocator alloc;
  KeepStrategy keep(model.skeletal(), alloc);
  // decay on every tensor: the reference uses one torch.optim.AdamW parameter group
  AdamW opt(model.layout(), AdamWOptions{beta1, beta2, eps, wd},
            std::vector<bool>(model.layout().params().size(), true), model.backend());
  const float scale = 1.0f / float(batch * seq);
  for (int step = 0; step < steps; ++step) {
    model.zero_grads();
    const double loss =
        model.forward_backward(inputs.data(), targets.data(), batch, seq, scale, keep, alloc) /
        double(batch * seq);
    // 1e-5 relative: fp32 sums over 48-wide rows and 61-way softmaxes stay near 1e-6
    EXPECT_NEAR(loss, ref_loss[size_t(step)], tol.loss * std::fabs(ref_loss[size_t(step)]))
        << "step " << step;
    if (step == 0) {
      for (const ParamInfo& p : model.layout().params()) {
        // 1e-4 relative to the tensor's largest entry: fp32 accumulation through two layers
        EXPECT_LT(rel_error(model.grads() + p.offset, read(ref, "grad." + p.name)), tol.grad)
            << p.name;
      }
    }
    opt.step(model.params_tensor(), model.grads_tensor(), lr);
  }
  EXPECT_EQ(alloc.live_bytes(), 0);
  // Norm-wise: Adam divides each gradient entry by its own magnitude, so an entry whose gradient
  // is small moves by ~lr whatever its size, and its fp32 rounding (about 1e-6 of the largest
  // gradient entry) becomes a visible relative error of that one weight; across the whole tensor
  // the error stays at the fp32 level.
  const int64_t C = config.hidden_size;
  for (const ParamInfo& p : model.layout().params()) {
    const std::vector<float> want = read(ref, "final." + p.name);
    const float* got = model.params() + p.offset;
    if (p.name.find("attn.c_attn.bias") == std::string::npos) {
      EXPECT_LT(rel_error_l2(got, want), tol.weights) << p.name;
      continue;
    }
    // The key bias has a zero gradient in exact arithmetic (adding b_k to every key shifts a
    // query's scores by the same q.b_k, which the softmax ignores), so both sides hold rounding
    // noise there, and Adam turns noise into steps of about lr with arbitrary signs. Its entries
    // may differ by up to 2 lr per step; the q and v blocks must match as every other tensor does.
    for (int block : {0, 2}) {
      const std::vector<float> w(want.begin() + block * C, want.begin() + (block + 1) * C);
      EXPECT_LT(rel_error_l2(got + block * C, w), tol.weights) << p.name << " block " << block;
    }
    for (int64_t i = C; i < 2 * C; ++i)
      EXPECT_LE(std::fabs(double(got[i]) - double(want[size_t(i)])), 2.0 * lr * steps)
          << p.name << " key entry " << i - C;
  }
}

}  // namespace memo::test
