// The MPI communicator's tests, run by CTest under `mpirun -np 2` and `-np 4` (CMakeLists.txt):
// every rank runs every test; a rank's failure fails the job. The sums are checked against the
// rank-order sum each rank can compute itself (every rank's values are a function of its rank), so
// the checks are bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "memo/backend/caching_allocator.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/memory/strategy.h"
#include "memo/model/architecture.h"
#include "memo/model/context_parallel.h"
#include "memo/model/model.h"
#include "memo/model/params.h"
#include "memo/mpi/mpi_communicator.h"
#include "memo/parallel/host_staged_communicator.h"

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
    w.all_reduce_sum(View<float>(x.data(), {n}));
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(x[size_t(i)], rank_order_sum(w.size(), i)) << "n " << n << " i " << i;
  }
}

// Note [Overlapped reductions]: reductions started one after another, advanced between other
// work and finished together (or by the next other collective) give all_reduce_sum's bits, in
// rank order; a part of one element and an empty one included.
TEST(MpiCommunicator, started_reductions_finish_with_all_reduce_sums_bits) {
  MpiCommunicator& w = *g_world;
  const int p = w.size();
  std::vector<std::vector<float>> xs;
  for (int64_t n : {int64_t(1), int64_t(0), int64_t(1000), int64_t(4097), int64_t(77)}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = value(w.rank(), i);
    xs.push_back(std::move(x));
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<float>> ys = xs;
    for (std::vector<float>& y : ys) {
      w.start_all_reduce_sum(View<float>(y.data(), {int64_t(y.size())}));
      w.progress();
    }
    if (round == 0) {
      w.finish_reductions();
    } else {  // another collective finishes them first
      double one = 1.0;
      w.all_reduce_sum(std::span<double>(&one, 1));
      EXPECT_EQ(one, double(p));
    }
    for (const std::vector<float>& y : ys)
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(y[i], rank_order_sum(p, int64_t(i))) << "round " << round << " element " << i;
  }
}

TEST(MpiCommunicator, reduce_scatter_and_all_gather) {
  MpiCommunicator& w = *g_world;
  const int64_t n = 37, P = w.size();
  std::vector<float> in(static_cast<size_t>(n * P)), out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n * P; ++i) in[size_t(i)] = value(w.rank(), i);
  w.reduce_scatter_sum(View<float>(out.data(), {n}), View<const float>(in.data(), {n * P}));
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(out[size_t(i)], rank_order_sum(w.size(), w.rank() * n + i)) << i;
  std::vector<float> gathered(size_t(n * P));
  w.all_gather(View<float>(gathered.data(), {n * P}), View<const float>(out.data(), {n}));
  for (int64_t i = 0; i < n * P; ++i) ASSERT_EQ(gathered[size_t(i)], rank_order_sum(w.size(), i));
}

// bf16 (mixed precision's activations under --tp): moved as bf16, summed in f32 in rank order,
// rounded once.
TEST(MpiCommunicator, bf16_sums_in_f32_in_rank_order_and_rounds_once) {
  MpiCommunicator& w = *g_world;
  const int64_t n = 37, P = w.size();
  auto bf16_value = [](int64_t rank, int64_t i) { return float_to_bf16(value(int(rank), i)); };
  auto want = [&](int64_t i) {
    float sum = bf16_to_float(bf16_value(0, i));
    for (int64_t r = 1; r < P; ++r) sum += bf16_to_float(bf16_value(r, i));
    return float_to_bf16(sum).bits;
  };
  std::vector<bf16> in(static_cast<size_t>(n * P)), out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n * P; ++i) in[size_t(i)] = bf16_value(w.rank(), i);
  w.reduce_scatter_sum(View<bf16>(out.data(), {n}), View<const bf16>(in.data(), {n * P}));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[size_t(i)].bits, want(w.rank() * n + i)) << i;
  w.all_reduce_sum(View<bf16>(in.data(), {n * P}));
  for (int64_t i = 0; i < n * P; ++i) ASSERT_EQ(in[size_t(i)].bits, want(i)) << i;
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
  w.broadcast(View<float>(x.data(), {5}), w.size() - 1);
  for (float v : x) EXPECT_EQ(v, float(w.size() - 1));
  const int next = (w.rank() + 1) % w.size(), prev = (w.rank() + w.size() - 1) % w.size();
  std::vector<float> mine(3, float(w.rank())), got(3, -1.0f);
  if (w.rank() % 2 == 0) {  // even ranks send first, odd ranks receive first: no deadlock
    w.send(View<const float>(mine.data(), {3}), next);
    w.recv(View<float>(got.data(), {3}), prev);
  } else {
    w.recv(View<float>(got.data(), {3}), prev);
    w.send(View<const float>(mine.data(), {3}), next);
  }
  for (float v : got) EXPECT_EQ(v, float(prev));
}

// Every rank sends and receives at once, 4 MiB each way: past Open MPI's eager limit, where a
// ring of blocking sends would wait for receives that are never posted.
TEST(MpiCommunicator, send_recv_passes_a_large_block_round_the_ring) {
  MpiCommunicator& w = *g_world;
  const int next = (w.rank() + 1) % w.size(), prev = (w.rank() + w.size() - 1) % w.size();
  const int64_t n = int64_t(1) << 20;
  std::vector<float> mine(static_cast<size_t>(n)), got(static_cast<size_t>(n), -1.0f);
  for (int64_t i = 0; i < n; ++i) mine[size_t(i)] = value(w.rank(), i);
  w.reset_counters();
  w.send_recv(View<const float>(mine.data(), {n}), next, View<float>(got.data(), {n}), prev);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)], value(prev, i)) << i;
  EXPECT_EQ(w.counters().bytes_sent, 4 * n);
  EXPECT_EQ(w.counters().bytes_received, 4 * n);
}

// Ring attention (model/context_parallel.h) on this rank's chunks gives what one process's causal
// attention over the whole sequences gives on the same rows: o, lse, dq, dk, dv; and with document
// masks (Note [Document masks]: the ring passes each chunk pair the whole sequences' document
// starts) what one process's attention with those starts as key_start gives. The softmax sums the
// same terms grouped by key block, so agreement is to fp32 rounding: measured up to ~1e-6
// (relative to 1 + |value|) for these sizes; 2e-5 still catches one wrongly visible block (~1e-2).
TEST(RingAttention, matches_one_process_attention_on_every_rank) {
  MpiCommunicator& w = *g_world;
  Backend& be = cpu_backend();
  const int64_t C = w.size(), B = 2, H = 4, Hkv = 2, D = 16, QD = H * D, KD = Hkv * D;
  const ModelConfig config;  // no sliding window
  for (const bool documents : {false, true})
    for (const int64_t n : {int64_t(24), int64_t(80)}) {  // 80: a full and a partial 64-row tile
      const int64_t S = 2 * C * n, T = B * S, Tl = T / C;
      // documents: sequence 0 starts ones at S/3 + 1 and S - n/2 (inside the last chunk), sequence
      // 1 at 5 and 2n (a chunk boundary), so some chunk pairs see nothing and some rows part
      std::vector<int32_t> doc_start;
      if (documents)
        for (int64_t b = 0; b < B; ++b) {
          const int64_t cut1 = b == 0 ? S / 3 + 1 : 5, cut2 = b == 0 ? S - n / 2 : 2 * n;
          for (int64_t p = 0; p < S; ++p)
            doc_start.push_back(int32_t(p >= cut2 ? cut2 : p >= cut1 ? cut1 : 0));
        }
      const View<const int32_t> starts(doc_start.data(), {int64_t(doc_start.size())});
      const AttnMask mask = documents ? AttnMask::causal_from(starts) : AttnMask::kCausal;
      std::mt19937 rng(7);  // the same tensors on every rank
      std::normal_distribution<float> normal(0.0f, 1.0f);
      auto random = [&](int64_t numel) {
        std::vector<float> x(static_cast<size_t>(numel));
        for (float& e : x) e = normal(rng);
        return x;
      };
      std::vector<float> q = random(T * QD), k = random(T * KD), v = random(T * KD),
                         dout = random(T * QD);
      // one process
      std::vector<float> o(size_t(T * QD)), lse(size_t(B * H * S)), dq(q.size()), dk(k.size()),
          dv(v.size());
      std::vector<float> scratch(
          size_t(std::max(be.attention_forward_scratch_numel(S, D, H, Hkv),
                          be.attention_backward_scratch_numel(S, D, H, Hkv))));
      const View<float> sc(scratch.data(), {int64_t(scratch.size())});
      be.attention_forward(View<float>(o.data(), {T, QD}), View<float>(lse.data(), {B, H, S}),
                           View<const float>(q.data(), {T, QD}),
                           View<const float>(k.data(), {T, KD}),
                           View<const float>(v.data(), {T, KD}), B, H, Hkv, sc, mask);
      be.attention_backward(
          View<float>(dq.data(), {T, QD}), View<float>(dk.data(), {T, KD}),
          View<float>(dv.data(), {T, KD}), View<const float>(dout.data(), {T, QD}),
          View<const float>(q.data(), {T, QD}), View<const float>(k.data(), {T, KD}),
          View<const float>(v.data(), {T, KD}), View<const float>(o.data(), {T, QD}),
          View<const float>(lse.data(), {B, H, S}), B, H, Hkv, sc, mask);
      // this rank's rows, chunk-major (Note [Context parallel layout])
      const ContextParallel cp{&w, S};
      auto full_row = [&](int64_t local) {
        const int64_t sl = local / (B * n), b = local / n % B, t = local % n;
        return b * S + cp.chunk(int(sl)) * n + t;
      };
      auto local_rows = [&](const std::vector<float>& full, int64_t width) {
        std::vector<float> out(size_t(Tl * width));
        for (int64_t r = 0; r < Tl; ++r)
          std::copy_n(&full[size_t(full_row(r) * width)], width, &out[size_t(r * width)]);
        return out;
      };
      std::vector<float> ql = local_rows(q, QD), kl = local_rows(k, KD), vl = local_rows(v, KD),
                         doutl = local_rows(dout, QD);
      std::vector<float> ol(ql.size()), lsel(size_t(B * H * 2 * n)), dql(ql.size()), dkl(kl.size()),
          dvl(vl.size());
      CachingAllocator alloc;
      LayerContext ctx{&config, B, 2 * n, {}, {}, &alloc, &be, Parallel{}, DType::kF32, &cp};
      ctx.doc_start = starts;
      ring_attention_forward(
          View<float>(ol.data(), {Tl, QD}), View<float>(lsel.data(), {B, H, 2 * n}),
          View<const float>(ql.data(), {Tl, QD}), View<const float>(kl.data(), {Tl, KD}),
          View<const float>(vl.data(), {Tl, KD}), H, Hkv, ctx);
      ring_attention_backward(
          View<float>(dql.data(), {Tl, QD}), View<float>(dkl.data(), {Tl, KD}),
          View<float>(dvl.data(), {Tl, KD}), View<const float>(doutl.data(), {Tl, QD}),
          View<const float>(ql.data(), {Tl, QD}), View<const float>(kl.data(), {Tl, KD}),
          View<const float>(vl.data(), {Tl, KD}), View<const float>(ol.data(), {Tl, QD}),
          View<const float>(lsel.data(), {B, H, 2 * n}), H, Hkv, ctx);
      double worst = 0.0;
      auto compare = [&](const std::vector<float>& got, const std::vector<float>& full,
                         int64_t width, const char* what) {
        for (int64_t r = 0; r < Tl; ++r)
          for (int64_t c = 0; c < width; ++c) {
            const double want = full[size_t(full_row(r) * width + c)];
            const double err = std::abs(got[size_t(r * width + c)] - want) / (1.0 + std::abs(want));
            worst = std::max(worst, err);
            ASSERT_LT(err, 2e-5) << what << " row " << r << " col " << c << " n " << n;
          }
      };
      compare(ol, o, QD, "o");
      compare(dql, dq, QD, "dq");
      compare(dkl, dk, KD, "dk");
      compare(dvl, dv, KD, "dv");
      for (int64_t sb = 0; sb < 2 * B; ++sb)  // lse as [2B, H, n]: (slot, b) chunks
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < n; ++t) {
            const int64_t b = sb % B, pos = cp.chunk(int(sb / B)) * n + t;
            ASSERT_NEAR(lsel[size_t((sb * H + h) * n + t)], lse[size_t((b * H + h) * S + pos)],
                        2e-5)
                << "lse";
          }
      if (w.rank() == 0)
        std::printf("ring attention, n %lld%s: worst error %.2e\n", (long long)n,
                    documents ? ", documents" : "", worst);
    }
}

// Tensor + sequence parallelism, context parallelism and both (Notes [Tensor-parallel
// activations], [Context parallel layout]) over the job's ranks: one micro-batch's loss and every
// gradient, each rank's part of it (the whole tensor for norms, biases of row-parallel products
// and positions), after the context-parallel group's sum and the tensor-parallel group's sum of
// the whole tensors, against one process's on the same weights and tokens. A rank sums its part
// of each product's inner dimension, or its chunks' share of the sequence, and the collectives add
// the parts, so a gradient differs from one process's by fp32 rounding of its terms: measured up
// to 2.3e-6 of the tensor's largest entry on these sizes (the loss 2.6e-8 relative). 2e-5 of it
// still catches a wrong split, offset, position or missing reduction (>= 1e-2). LLaMA with GQA
// (2 or 1 key-value heads per tensor-parallel rank) and a vocabulary that splits into padded parts
// under 4 ranks; GPT-2 with learned positions.
TEST(ParallelModel, every_gradient_part_matches_one_process) {
  MpiCommunicator& w = *g_world;
  const int ranks = w.size(), r = w.rank();
  ModelConfig llama;
  llama.hidden_size = 64;
  llama.intermediate_size = 128;
  llama.num_hidden_layers = 2;
  llama.num_attention_heads = 8;
  llama.num_key_value_heads = 4;
  llama.vocab_size = 250;
  llama.max_position_embeddings = 256;
  llama.initializer_range = 0.2;
  ModelConfig gpt2 = llama;
  gpt2.arch = Arch::kGpt2;
  gpt2.num_key_value_heads = gpt2.num_attention_heads;
  gpt2.position_embedding = PositionEmbedding::kLearned;
  gpt2.tie_word_embeddings = true;
  struct Layout {
    int tp, cp;
  };
  std::vector<Layout> layouts = {{ranks, 1}, {1, ranks}};
  if (ranks == 4) layouts.push_back({2, 2});
  for (const Layout& layout : layouts) {
    // tensor-parallel rank r % T, context-parallel rank r / T (memo train's layout)
    std::unique_ptr<Communicator> tp = w.split(r / layout.tp, r % layout.tp);
    std::unique_ptr<Communicator> cp = w.split(r % layout.tp, r / layout.tp);
    for (const ModelConfig& config : {llama, gpt2}) {
      SCOPED_TRACE(::testing::Message() << (config.is_gpt2() ? "gpt2" : "llama") << " tp "
                                        << layout.tp << " cp " << layout.cp);
      const int64_t B = 2, S = 96, T = B * S;
      std::mt19937 rng(11);  // the same tokens on every rank
      std::vector<int32_t> in(static_cast<size_t>(T)), target(in.size());
      for (size_t i = 0; i < in.size(); ++i) {
        in[i] = int32_t(rng() % uint32_t(config.vocab_size));
        target[i] = int32_t(rng() % uint32_t(config.vocab_size));
      }
      Model one(config, cpu_backend()), mine(config, cpu_backend());
      mine.set_parallel(Parallel{layout.tp, 1}, tp.get());
      mine.set_context_parallel(cp.get());
      one.init(3);
      mine.init(3);
      CachingAllocator a1, a2;
      KeepStrategy k1(one.skeletal(), a1), k2(mine.skeletal(), a2);
      const float scale = 1.0f / float(T);
      const double want = one.forward_backward(in.data(), target.data(), B, S, scale, k1, a1);
      const double got = mine.forward_backward(in.data(), target.data(), B, S, scale, k2, a2);
      cp->all_reduce_sum(mine.grads_tensor());
      mine.reduce_tensor_parallel_grads();
      EXPECT_NEAR(got, want, 1e-5 * std::abs(want));
      const float* whole = one.grads();
      const float* part = mine.grads();
      for (size_t i = 0; i < mine.layout().params().size(); ++i) {
        const ParamInfo& p = mine.layout().params()[i];
        const ParamInfo& q = one.layout().params()[i];
        std::vector<float> expect(static_cast<size_t>(p.numel));
        extract_shard(p, mine.layout().shard(), whole + q.offset, expect.data());
        float top = 0.0f, err = 0.0f;
        for (int64_t j = 0; j < p.numel; ++j) {
          top = std::max(top, std::abs(expect[size_t(j)]));
          err = std::max(err, std::abs(part[p.offset + j] - expect[size_t(j)]));
        }
        EXPECT_GT(top, 0.0f) << p.name;
        EXPECT_LE(err, 2e-5f * top) << p.name << " on rank " << r;
      }
      EXPECT_NEAR(mine.grad_sum_squares(), one.grad_sum_squares(), 1e-5 * one.grad_sum_squares());
    }
  }
}

TEST(MpiCommunicator, split_makes_groups_by_color_ordered_by_key) {
  MpiCommunicator& w = *g_world;
  const int color = w.rank() % 2;
  std::unique_ptr<Communicator> group = w.split(color, -w.rank());  // reversed order
  const int members = (w.size() + 1 - color) / 2;
  EXPECT_EQ(group->size(), members);
  float x = float(w.rank());
  group->all_reduce_sum(View<float>(&x, {1}));
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
  w.all_reduce_sum(View<float>(x.data(), {1000}));
  EXPECT_EQ(w.counters().calls, 1);
  EXPECT_EQ(w.counters().bytes_sent, 2 * 4000 * (w.size() - 1) / w.size());
  EXPECT_GE(w.counters().seconds, 0.0);
}

// Note [Host-staged groups]: a staged group gives the bits and the byte counts of its host
// communicator for every call (f32 and bf16), and a posted send has its own copy: the sender
// overwrites x at once, and messages of two tags received in the other order arrive whole.
TEST(HostStagedCommunicator, every_call_gives_the_host_communicators_bits_and_counts) {
  MpiCommunicator& w = *g_world;
  std::unique_ptr<Communicator> host = w.split(0, w.rank());
  Communicator* raw = host.get();
  HostStagedCommunicator g(std::move(host), cpu_backend());
  const int P = g.size(), me = g.rank();
  EXPECT_EQ(P, w.size());
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  const int64_t n = 1001;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = value(me, i);
  g.all_reduce_sum(View<float>(x.data(), {n}));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[size_t(i)], rank_order_sum(P, i)) << i;
  std::vector<bf16> h(static_cast<size_t>(n * P)), part(static_cast<size_t>(n));
  for (int64_t i = 0; i < n * P; ++i) h[size_t(i)] = float_to_bf16(value(me, i));
  g.reduce_scatter_sum(View<bf16>(part.data(), {n}), View<const bf16>(h.data(), {n * P}));
  for (int64_t i = 0; i < n; ++i) {
    float sum = bf16_to_float(float_to_bf16(value(0, me * n + i)));
    for (int r = 1; r < P; ++r) sum += bf16_to_float(float_to_bf16(value(r, me * n + i)));
    ASSERT_EQ(part[size_t(i)].bits, float_to_bf16(sum).bits) << i;
  }
  std::vector<float> mine(3, float(me)), all(size_t(3 * P), -1.0f);
  g.all_gather(View<float>(all.data(), {3 * P}), View<const float>(mine.data(), {3}));
  for (int r = 0; r < P; ++r) EXPECT_EQ(all[size_t(3 * r + 2)], float(r));
  g.broadcast(View<float>(mine.data(), {3}), P - 1);
  EXPECT_EQ(mine[0], float(P - 1));
  std::vector<float> got(static_cast<size_t>(n), -1.0f);
  g.send_recv(View<const float>(x.data(), {n}), next, View<float>(got.data(), {n}), prev);
  EXPECT_EQ(got, x);  // every rank holds the same sums
  // posted sends of tags 1 then 2, received 2 then 1, the sent buffers overwritten at once (a is
  // 4 MiB, past Open MPI's eager limit: without its own copy the receiver would read the -2s)
  const int64_t big = int64_t(1) << 20;
  std::vector<float> a(static_cast<size_t>(big)), b(7);
  for (int64_t i = 0; i < big; ++i) a[size_t(i)] = value(me, i);
  std::fill(b.begin(), b.end(), float(me) + 0.5f);
  const int64_t ta = g.post_send(View<const float>(a.data(), {big}), next, 1);
  const int64_t tb = g.post_send(View<const float>(b.data(), {7}), next, 2);
  std::fill(a.begin(), a.end(), -2.0f);
  std::fill(b.begin(), b.end(), -2.0f);
  std::vector<float> ga(static_cast<size_t>(big)), gb(7);
  g.recv_tagged(View<float>(gb.data(), {7}), prev, 2);
  g.recv_tagged(View<float>(ga.data(), {big}), prev, 1);
  for (int64_t i = 0; i < big; ++i) ASSERT_EQ(ga[size_t(i)], value(prev, i)) << i;
  for (float v : gb) EXPECT_EQ(v, float(prev) + 0.5f);
  g.wait_send(tb);
  g.wait_send(ta);
  g.wait_sends();
  // the staged group counted what its host communicator counted, call for call
  EXPECT_EQ(g.counters().calls, raw->counters().calls);
  EXPECT_EQ(g.counters().bytes_sent, raw->counters().bytes_sent);
  EXPECT_EQ(g.counters().bytes_received, raw->counters().bytes_received);
  EXPECT_GT(g.counters().bytes_sent, 0);
  std::unique_ptr<Communicator> pairs = g.split(me / 2, me);
  EXPECT_STREQ(pairs->name(), "host-staged");
  float one = 1.0f;
  pairs->all_reduce_sum(View<float>(&one, {1}));
  EXPECT_EQ(one, float(pairs->size()));
  g.barrier();
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
