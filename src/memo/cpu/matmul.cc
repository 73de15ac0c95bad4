// memo::cpu::matmul: a thin wrapper over the BLAS chosen at build time (MEMO_BLAS in
// CMakeLists.txt, measured in bench/matmul_bench.cc). The only place memo calls sgemm; it checks
// shapes and strides on entry and passes row-major views straight through (no copies). Also names
// the library in use and warns when it runs a kernel slower than this CPU allows. With oneDNN,
// products of bf16 operands run through its matmul primitive (Note [bf16 products on the CPU]).

#include <omp.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "memo/backend/checks.h"
#include "memo/backend/view_checks.h"
#include "memo/cpu/kernels.h"

#if defined(MEMO_BLAS_OPENBLAS)
#include <cblas.h>
#elif defined(MEMO_BLAS_DNNL)
#include <dnnl.h>
#else
#error "define MEMO_BLAS_OPENBLAS or MEMO_BLAS_DNNL (CMake option MEMO_BLAS)"
#endif

namespace memo::cpu {
namespace {

// BLAS wants a leading dimension >= max(1, cols) even for one-row views, whose ld() may be
// anything.
template <class V>
int64_t blas_ld(const V& v) {
  return v.rows() <= 1 ? std::max<int64_t>(v.cols(), 1) : v.ld();
}

// The SIMD level of this CPU and of a BLAS kernel: 0 below AVX2, 1 AVX2 + FMA, 2 AVX-512.
int cpu_simd_level() {
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) return 2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
  return 0;
}

#if defined(MEMO_BLAS_OPENBLAS)
// OpenBLAS kernels ("corename") by the SIMD level their sgemm uses; anything else (Prescott,
// Nehalem, Sandybridge, Bulldozer, ...) is below AVX2 + FMA.
int openblas_core_level(const std::string& core) {
  for (const char* name : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (core == name) return 2;
  for (const char* name : {"Haswell", "Zen", "Excavator"})
    if (core == name) return 1;
  return 0;
}
#else
// dnnl_cpu_isa_t values are bit sets: a level is reached when all its bits are present.
int dnnl_isa_level(dnnl_cpu_isa_t isa) {
  auto has = [isa](dnnl_cpu_isa_t level) { return (int(isa) & int(level)) == int(level); };
  return has(dnnl_cpu_isa_avx512_core) ? 2 : has(dnnl_cpu_isa_avx2) ? 1 : 0;
}
#endif

constexpr const char* kLevelName[] = {"below AVX2", "AVX2+FMA", "AVX-512"};

#if defined(MEMO_BLAS_DNNL)
const char* isa_cap() {
  const char* want = std::getenv("MEMO_CPU_ISA");
  return want != nullptr && *want != '\0' ? want : nullptr;
}

// MEMO_CPU_ISA caps the instruction set oneDNN dispatches to (its sgemm and its bf16 products),
// so the fallbacks of a newer CPU can be run and tested on it: amx, avx512_bf16, avx512 or avx2.
// oneDNN takes a cap only before its first kernel, so every entry point here applies it first.
void apply_isa_cap() {
  static const bool applied = [] {
    const char* want = isa_cap();
    if (want == nullptr) return false;
    struct Cap {
      const char* name;
      dnnl_cpu_isa_t isa;
    };
    constexpr Cap kCaps[] = {{"amx", dnnl_cpu_isa_avx512_core_amx},
                             {"avx512_bf16", dnnl_cpu_isa_avx512_core_bf16},
                             {"avx512", dnnl_cpu_isa_avx512_core},
                             {"avx2", dnnl_cpu_isa_avx2}};
    for (const Cap& cap : kCaps)
      if (std::strcmp(want, cap.name) == 0) {
        const dnnl_status_t status = dnnl_set_max_cpu_isa(cap.isa);
        MEMO_CHECK(status == dnnl_success, "MEMO_CPU_ISA=", want,
                   ": oneDNN did not take the cap (status ", int(status),
                   "): it must be set before the first product");
        return true;
      }
    throw Error(str("MEMO_CPU_ISA=", want, ": expected amx, avx512_bf16, avx512 or avx2"));
  }();
  (void)applied;
}

bool isa_has(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t level) {
  return (int(isa) & int(level)) == int(level);
}

void dnnl_ok(dnnl_status_t status, const char* what) {
  MEMO_CHECK(status == dnnl_success, "matmul: oneDNN ", what, " failed with status ", int(status));
}

// Note [bf16 products on the CPU]
// Products of two bf16 operands (c f32 or bf16) run through oneDNN's matmul primitive, which
// accumulates in f32 and rounds a bf16 c once, after alpha and beta * c (the output scale and the
// sum post-op); on a CPU with AMX or AVX512-BF16 it runs bf16 kernels (brgemm), elsewhere
// bf16_products_native() is false and Bf16StorageBackend widens the operands to f32 instead, as
// before. Strided operands pass as strides, transposes as swapped strides, so nothing is copied.
// A primitive is fixed by its shapes, strides, dtypes, alpha and beta, and oneDNN's kernels for
// one primitive and thread count sum in one order, so a call repeats its bits; the token panels
// (Note [Token panels]) then make a rebuilt row range repeat the forward's bits, as in f32. The
// primitives, their descriptors and memory objects are kept per thread and shape (creating them
// costs several microseconds, a panel's product at AMX rates about twenty).
struct Bf16Product {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr;
};

dnnl_engine_t cpu_engine() {
  static const dnnl_engine_t engine = [] {
    dnnl_engine_t e = nullptr;
    dnnl_ok(dnnl_engine_create(&e, dnnl_cpu, 0), "engine creation");
    return e;
  }();
  return engine;
}

// The key: M, N, K, the three row strides, the transposes, c's dtype, alpha's and beta's bits.
using ProductKey = std::array<int64_t, 10>;

// A 2-D bf16 (or f32) descriptor with row stride ld, or its transpose's (column stride ld).
dnnl_memory_desc_t strided_md(int64_t rows, int64_t cols, int64_t ld, bool transposed,
                              dnnl_data_type_t type, const char* what) {
  dnnl_memory_desc_t md;
  const int64_t dims[2] = {rows, cols}, strides[2] = {transposed ? 1 : ld, transposed ? ld : 1};
  dnnl_ok(dnnl_memory_desc_init_by_strides(&md, 2, dims, type, strides), what);
  return md;
}

// The primitive descriptor of c = alpha a . b + beta c (alpha an output scale, beta a sum
// post-op).
dnnl_primitive_desc_t matmul_descriptor(const dnnl_memory_desc_t& a, const dnnl_memory_desc_t& b,
                                        const dnnl_memory_desc_t& c, float alpha, float beta) {
  dnnl_matmul_desc_t desc;
  dnnl_ok(dnnl_matmul_desc_init(&desc, &a, &b, nullptr, &c), "matmul descriptor");
  dnnl_primitive_attr_t attr = nullptr;
  dnnl_post_ops_t post_ops = nullptr;
  dnnl_ok(dnnl_primitive_attr_create(&attr), "attribute creation");
  if (alpha != 1.0f) dnnl_ok(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "alpha");
  if (beta != 0.0f) {
    dnnl_ok(dnnl_post_ops_create(&post_ops), "post-op creation");
    dnnl_ok(dnnl_post_ops_append_sum(post_ops, beta), "beta");
    dnnl_ok(dnnl_primitive_attr_set_post_ops(attr, post_ops), "post-ops");
  }
  dnnl_primitive_desc_t pd = nullptr;
  const dnnl_status_t made = dnnl_primitive_desc_create(&pd, &desc, attr, cpu_engine(), nullptr);
  if (post_ops) dnnl_post_ops_destroy(post_ops);
  dnnl_primitive_attr_destroy(attr);
  dnnl_ok(made, "bf16 matmul descriptor");
  return pd;
}

// A thread's cache of products by key; past kMaxProducts shapes (a long generation's growing
// cache, many sequence lengths) it starts afresh rather than grow without bound.
template <class Key, class Product, Product (*kMake)(const Key&), void (*kDestroy)(Product&)>
class ProductCache {
 public:
  ProductCache() = default;
  ProductCache(const ProductCache&) = delete;
  ProductCache& operator=(const ProductCache&) = delete;
  ~ProductCache() { clear(); }
  const Product& get(const Key& key) {
    auto it = products_.find(key);
    if (it != products_.end()) return it->second;
    if (products_.size() >= kMaxProducts) clear();
    return products_.emplace(key, kMake(key)).first->second;
  }

 private:
  static constexpr size_t kMaxProducts = 512;
  void clear() {
    for (auto& [key, p] : products_) kDestroy(p);
    products_.clear();
  }
  std::map<Key, Product> products_;
};

Bf16Product make_bf16_product(const ProductKey& key) {
  const auto [M, N, K, lda, ldb, ldc, trans_a, trans_b, c_bf16, scales] = key;
  float alpha, beta;
  const uint64_t bits = uint64_t(scales);
  const uint32_t alpha_bits = uint32_t(bits >> 32), beta_bits = uint32_t(bits);
  std::memcpy(&alpha, &alpha_bits, 4);
  std::memcpy(&beta, &beta_bits, 4);
  const dnnl_memory_desc_t a = strided_md(M, K, lda, trans_a, dnnl_bf16, "a's descriptor");
  const dnnl_memory_desc_t b = strided_md(K, N, ldb, trans_b, dnnl_bf16, "b's descriptor");
  const dnnl_memory_desc_t c =
      strided_md(M, N, ldc, false, c_bf16 ? dnnl_bf16 : dnnl_f32, "c's descriptor");
  const dnnl_primitive_desc_t pd = matmul_descriptor(a, b, c, alpha, beta);
  Bf16Product p;
  dnnl_ok(dnnl_primitive_create(&p.primitive, pd), "bf16 matmul primitive");
  dnnl_primitive_desc_destroy(pd);
  dnnl_ok(dnnl_memory_create(&p.a, &a, cpu_engine(), DNNL_MEMORY_NONE), "a's memory");
  dnnl_ok(dnnl_memory_create(&p.b, &b, cpu_engine(), DNNL_MEMORY_NONE), "b's memory");
  dnnl_ok(dnnl_memory_create(&p.c, &c, cpu_engine(), DNNL_MEMORY_NONE), "c's memory");
  return p;
}

void destroy_bf16_product(Bf16Product& p) {
  for (dnnl_memory_t m : {p.a, p.b, p.c}) dnnl_memory_destroy(m);
  dnnl_primitive_destroy(p.primitive);
}
using Bf16Products = ProductCache<ProductKey, Bf16Product, make_bf16_product, destroy_bf16_product>;

// Note [Packed weights for token panels]
// oneDNN's AMX and AVX512-BF16 kernels read b in a blocked layout of their own; given b as rows or
// columns, every call first copies it into that layout. A token-panel product makes one call per
// 128 rows with the same b, so that copy was repeated for every panel: at 128 rows it cost 20-45%
// of the product (bench/RESULTS.md). matmul_bf16_token_panels therefore lays b out once per call,
// with oneDNN's reorder into the layout the panel's primitive asks for (format "any"), and runs
// every panel on it. The laid-out copy takes one buffer per thread of at most kPackedBytes: a
// wider b (past 32 Mi elements, e.g. 4096 x 8192) goes in column blocks that fit it (narrow blocks
// cost more than the copy saves: 512 + 176 columns of a 688-wide b ran at 0.4x). A panel's
// primitive is fixed by its rows, block columns, K, strides, dtypes and beta, so a row's bits
// still depend only on its panel (Note [Token panels]): a rebuilt range makes the same calls.
constexpr int64_t kPackedBytes = int64_t(64) << 20;
// The columns of b laid out at a time: all of them where they fit kPackedBytes, else a multiple
// of 64 that does.
int64_t packed_columns(int64_t N, int64_t K) {
  if (N * K * 2 <= kPackedBytes) return N;
  return std::max<int64_t>(64, kPackedBytes / (2 * K) / 64 * 64);
}

struct PackedProduct {
  dnnl_primitive_t primitive = nullptr, reorder = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, packed = nullptr, c = nullptr;
  size_t packed_bytes = 0;
};

// The key: panel rows, block columns, K, the three row strides, b's transpose, c's dtype, beta's
// bits.
using PackedKey = std::array<int64_t, 9>;

PackedProduct make_packed_product(const PackedKey& key) {
  const auto [M, N, K, lda, ldb, ldc, trans_b, c_bf16, beta_bits] = key;
  float beta;
  const uint32_t bits = uint32_t(beta_bits);
  std::memcpy(&beta, &bits, 4);
  const dnnl_memory_desc_t a = strided_md(M, K, lda, false, dnnl_bf16, "a's descriptor");
  const dnnl_memory_desc_t b = strided_md(K, N, ldb, trans_b, dnnl_bf16, "b's descriptor");
  const dnnl_memory_desc_t c =
      strided_md(M, N, ldc, false, c_bf16 ? dnnl_bf16 : dnnl_f32, "c's descriptor");
  dnnl_memory_desc_t any;
  const int64_t b_dims[2] = {K, N};
  dnnl_ok(dnnl_memory_desc_init_by_tag(&any, 2, b_dims, dnnl_bf16, dnnl_format_tag_any),
          "packed b's descriptor");
  const dnnl_primitive_desc_t pd = matmul_descriptor(a, any, c, 1.0f, beta);
  const dnnl_memory_desc_t* packed = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  PackedProduct p;
  dnnl_ok(dnnl_primitive_create(&p.primitive, pd), "bf16 matmul primitive");
  dnnl_primitive_desc_t rpd = nullptr;
  dnnl_ok(dnnl_reorder_primitive_desc_create(&rpd, &b, cpu_engine(), packed, cpu_engine(), nullptr),
          "b's reorder descriptor");
  dnnl_ok(dnnl_primitive_create(&p.reorder, rpd), "b's reorder");
  dnnl_primitive_desc_destroy(rpd);
  p.packed_bytes = dnnl_memory_desc_get_size(packed);
  dnnl_ok(dnnl_memory_create(&p.a, &a, cpu_engine(), DNNL_MEMORY_NONE), "a's memory");
  dnnl_ok(dnnl_memory_create(&p.b, &b, cpu_engine(), DNNL_MEMORY_NONE), "b's memory");
  dnnl_ok(dnnl_memory_create(&p.packed, packed, cpu_engine(), DNNL_MEMORY_NONE), "packed memory");
  dnnl_ok(dnnl_memory_create(&p.c, &c, cpu_engine(), DNNL_MEMORY_NONE), "c's memory");
  dnnl_primitive_desc_destroy(pd);
  return p;
}

void destroy_packed_product(PackedProduct& p) {
  for (dnnl_memory_t m : {p.a, p.b, p.packed, p.c}) dnnl_memory_destroy(m);
  dnnl_primitive_destroy(p.reorder);
  dnnl_primitive_destroy(p.primitive);
}
using PackedProducts =
    ProductCache<PackedKey, PackedProduct, make_packed_product, destroy_packed_product>;

// The one buffer of a thread that its laid-out b take turns in.
class PackedBuffer {
 public:
  PackedBuffer() = default;
  PackedBuffer(const PackedBuffer&) = delete;
  PackedBuffer& operator=(const PackedBuffer&) = delete;
  ~PackedBuffer() { std::free(data_); }
  void* get(size_t bytes) {
    if (bytes > bytes_) {
      std::free(data_);
      data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
      MEMO_CHECK(data_ != nullptr, "matmul_bf16_token_panels: no memory for ", bytes,
                 " bytes of laid-out weights");
      bytes_ = bytes;
    }
    return data_;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

dnnl_stream_t this_threads_stream() {
  thread_local const dnnl_stream_t stream = [] {
    dnnl_stream_t s = nullptr;
    dnnl_ok(dnnl_stream_create(&s, cpu_engine(), dnnl_stream_default_flags), "stream creation");
    return s;
  }();
  return stream;
}

// c = a @ op(b) + beta c by token panels on b laid out once per column block (Note [Packed
// weights for token panels]); a and c bf16 or c f32, shapes checked by the caller.
void run_packed_panels(memo::Tensor c, memo::ConstTensor a, memo::ConstTensor b, bool trans_b,
                       float beta) {
  uint32_t beta_bits;
  std::memcpy(&beta_bits, &beta, 4);
  const int64_t T = c.rows(), N = c.cols(), K = a.cols();
  const auto* abits = static_cast<const uint16_t*>(a.data());
  const auto* bbits = static_cast<const uint16_t*>(b.data());
  auto* cbytes = static_cast<char*>(c.data());
  const int64_t c_elem = c.dtype() == DType::kBF16 ? 2 : 4;
  thread_local PackedProducts products;
  thread_local PackedBuffer packed_buffer;
  const dnnl_stream_t stream = this_threads_stream();
  const int64_t columns = packed_columns(N, K);
  for (int64_t n0 = 0; n0 < N; n0 += columns) {
    const int64_t nb = std::min(columns, N - n0);
    const uint16_t* block = bbits + (trans_b ? n0 * blas_ld(b) : n0);
    // The panel shape b is laid out for now, by key (a cache refill could reuse an address).
    PackedKey laid_out{};
    for (int64_t r0 = 0; r0 < T; r0 += kTokenPanelRows) {
      const int64_t rows = std::min(kTokenPanelRows, T - r0);
      const PackedKey key{rows,       nb,         K,       blas_ld(a),
                          blas_ld(b), blas_ld(c), trans_b, c.dtype() == DType::kBF16,
                          beta_bits};
      const PackedProduct& p = products.get(key);
      void* buffer = packed_buffer.get(p.packed_bytes);
      if (laid_out != key) {
        dnnl_ok(dnnl_memory_set_data_handle(p.b, const_cast<uint16_t*>(block)), "b's handle");
        dnnl_ok(dnnl_memory_set_data_handle(p.packed, buffer), "packed b's handle");
        const dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, p.b}, {DNNL_ARG_TO, p.packed}};
        dnnl_ok(dnnl_primitive_execute(p.reorder, stream, 2, args), "b's reorder");
        laid_out = key;
      }
      dnnl_ok(dnnl_memory_set_data_handle(p.a, const_cast<uint16_t*>(abits + r0 * blas_ld(a))),
              "a's handle");
      dnnl_ok(dnnl_memory_set_data_handle(p.c, cbytes + (r0 * blas_ld(c) + n0) * c_elem),
              "c's handle");
      const dnnl_exec_arg_t args[3] = {
          {DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.packed}, {DNNL_ARG_DST, p.c}};
      dnnl_ok(dnnl_primitive_execute(p.primitive, stream, 3, args), "bf16 matmul");
    }
  }
  dnnl_ok(dnnl_stream_wait(stream), "stream wait");
}

void run_bf16_product(memo::Tensor c, memo::ConstTensor a, memo::ConstTensor b, bool trans_a,
                      bool trans_b, float alpha, float beta, int64_t M, int64_t N, int64_t K) {
  uint32_t alpha_bits, beta_bits;
  std::memcpy(&alpha_bits, &alpha, 4);
  std::memcpy(&beta_bits, &beta, 4);
  const ProductKey key{M,
                       N,
                       K,
                       blas_ld(a),
                       blas_ld(b),
                       blas_ld(c),
                       trans_a,
                       trans_b,
                       c.dtype() == DType::kBF16,
                       int64_t((uint64_t(alpha_bits) << 32) | beta_bits)};
  thread_local Bf16Products products;
  const Bf16Product& p = products.get(key);
  dnnl_ok(dnnl_memory_set_data_handle(p.a, const_cast<void*>(a.data())), "a's handle");
  dnnl_ok(dnnl_memory_set_data_handle(p.b, const_cast<void*>(b.data())), "b's handle");
  dnnl_ok(dnnl_memory_set_data_handle(p.c, c.data()), "c's handle");
  const dnnl_stream_t stream = this_threads_stream();
  const dnnl_exec_arg_t args[3] = {
      {DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}};
  dnnl_ok(dnnl_primitive_execute(p.primitive, stream, 3, args), "bf16 matmul");
  dnnl_ok(dnnl_stream_wait(stream), "stream wait");
}
#endif

}  // namespace

void matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b, float alpha,
            float beta) {
  check_matmul(c, a, b, trans_a, trans_b, alpha, beta);
  const int64_t M = c.rows(), N = c.cols();
  const int64_t K = trans_a ? a.rows() : a.cols();
  MEMO_CHECK(std::max({M, N, K, blas_ld(a), blas_ld(b), blas_ld(c)}) <= INT_MAX,
             "matmul: dimensions beyond the 32-bit BLAS interface: c ", c.shape(), " a ", a.shape(),
             " b ", b.shape());
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: c = beta c (dnnl_sgemm rejects K = 0); beta = 0 clears NaNs too
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c(i, j) = beta == 0.0f ? 0.0f : beta * c(i, j);
    return;
  }
#if defined(MEMO_BLAS_OPENBLAS)
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, int(M), int(N), int(K), alpha, a.data(),
              int(blas_ld(a)), b.data(), int(blas_ld(b)), beta, c.data(), int(blas_ld(c)));
#else
  apply_isa_cap();
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, a.data(), blas_ld(a),
                 b.data(), blas_ld(b), beta, c.data(), blas_ld(c));
  MEMO_CHECK(status == dnnl_success, "matmul: dnnl_sgemm failed with status ", int(status),
             " for c ", c.shape(), " a ", a.shape(), " b ", b.shape());
#endif
}

// Note [Token panels]
// The BLAS does not promise that a row of c = a @ b^T has the same bits whatever other rows share
// the call: OpenBLAS 0.3.21 (Zen kernel, 1 or 2 threads) gives a different last bit for about half
// of the rows of a [T - r0, 688] product against the same rows of the [T, 688] product, for every
// r0 tried, 64 and 128 included (its thread split and edge kernels depend on the call's shape).
// The memo strategy rebuilds a token range of q, k, v, h, gate and up before the backward and must
// reproduce the forward bit for bit (DESIGN.md section 6), so those products are always computed
// one panel of kTokenPanelRows rows at a time, panels counted from row 0. A rebuilt range that
// starts on a panel boundary then makes exactly the calls the forward made for those rows. 128
// rows: smaller panels (16 to 64) ran the small model's products 2 to 10x slower on this 2-core
// machine (thread start-up per call); 128 was within noise of one call (bench numbers are noisy).
void matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta) {
  MEMO_CHECK(c.ndim() == 2 && a.ndim() == 2 && c.rows() == a.rows(), "matmul_token_panels: c ",
             c.shape(), " a ", a.shape(), " (need the same token rows)");
  for (int64_t r0 = 0; r0 < c.rows(); r0 += kTokenPanelRows) {
    const int64_t r1 = std::min(c.rows(), r0 + kTokenPanelRows);
    matmul(c.slice_rows(r0, r1), a.slice_rows(r0, r1), b, false, true, 1.0f, beta);
  }
}

const char* blas_name() {
  static const std::string name = [] {
#if defined(MEMO_BLAS_OPENBLAS)
    return str("OpenBLAS ", openblas_get_corename(), ", ", openblas_get_num_threads(), " threads (",
               openblas_get_config(), ")");
#else
    apply_isa_cap();
    const dnnl_version_t* v = dnnl_version();
    return str("oneDNN ", v->major, ".", v->minor, ".", v->patch, " sgemm, ",
               kLevelName[dnnl_isa_level(dnnl_get_effective_cpu_isa())], " kernels, ",
               omp_get_max_threads(), " OpenMP threads");
#endif
  }();
  return name.c_str();
}

std::string blas_warning() {
  const int cpu_level = cpu_simd_level();
#if defined(MEMO_BLAS_OPENBLAS)
  const std::string core = openblas_get_corename();
  const int core_level = openblas_core_level(core);
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const std::string remedy = forced ? str(" (OPENBLAS_CORETYPE=", forced, " is set: unset it)")
                                    : std::string(" (set OPENBLAS_CORETYPE=Haswell or newer)");
  // A kernel above the CPU's level (only possible when forced) dies with SIGILL in its first
  // sgemm, so this must be printed before any matmul runs.
  if (core_level > cpu_level)
    return str("OpenBLAS runs its ", core, " kernel (", kLevelName[core_level], ") on a CPU with ",
               kLevelName[cpu_level], ": the first matmul will die of an illegal instruction",
               remedy);
  if (core_level < cpu_level)
    return str("OpenBLAS runs its ", core, " kernel (", kLevelName[core_level], ") on a CPU with ",
               kLevelName[cpu_level], "; matmul runs 1.3x to 5x slower (bench/RESULTS.md)", remedy);
  // The pthread build of OpenBLAS keeps its own pool, sized by OPENBLAS_NUM_THREADS, apart from
  // the OpenMP threads of the other kernels.
  if (openblas_get_num_threads() < omp_get_max_threads())
    return str("OpenBLAS uses ", openblas_get_num_threads(),
               " thread(s) but the other kernels use ", omp_get_max_threads(),
               "; matmul is slower than it could be (unset or raise "
               "OPENBLAS_NUM_THREADS)");
#else
  apply_isa_cap();
  const int isa_level = dnnl_isa_level(dnnl_get_effective_cpu_isa());
  if (isa_level < cpu_level)
    return str("oneDNN runs ", kLevelName[isa_level], " kernels on a CPU with ",
               kLevelName[cpu_level], "; matmul may be several times slower (",
               isa_cap() ? str("MEMO_CPU_ISA=", isa_cap(), " caps it")
                         : std::string("is ONEDNN_MAX_CPU_ISA set? unset it"),
               ")");
#endif
  return "";
}

void check_isa_cap() {
#if defined(MEMO_BLAS_DNNL)
  apply_isa_cap();
#else
  const char* want = std::getenv("MEMO_CPU_ISA");
  if (want != nullptr && *want != '\0')
    throw Error(str("MEMO_CPU_ISA=", want, ": it caps oneDNN, and this build uses OpenBLAS"));
#endif
}

namespace {
void check_bf16_product(const char* name, const memo::Tensor& c, const memo::ConstTensor& a,
                        const memo::ConstTensor& b) {
  MEMO_CHECK(a.dtype() == DType::kBF16 && b.dtype() == DType::kBF16 &&
                 (c.dtype() == DType::kF32 || c.dtype() == DType::kBF16),
             name, ": c ", dtype_name(c.dtype()), " = a ", dtype_name(a.dtype()), " @ b ",
             dtype_name(b.dtype()), " (need bf16 operands, c f32 or bf16)");
  MEMO_CHECK(bf16_products_native(), name, ": ", bf16_products_name());
}
}  // namespace

void matmul_bf16(memo::Tensor c, memo::ConstTensor a, memo::ConstTensor b, bool trans_a,
                 bool trans_b, float alpha, float beta) {
  check_matmul(c, a, b, trans_a, trans_b, alpha, beta);
  check_bf16_product("matmul_bf16", c, a, b);
  const int64_t M = c.rows(), N = c.cols();
  const int64_t K = trans_a ? a.rows() : a.cols();
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: c = beta c; beta = 0 clears NaNs too
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        if (c.dtype() == DType::kBF16) {
          bf16& x = c.as<bf16>()(i, j);
          x = float_to_bf16(beta == 0.0f ? 0.0f : beta * bf16_to_float(x));
        } else {
          float& x = c.as<float>()(i, j);
          x = beta == 0.0f ? 0.0f : beta * x;
        }
      }
    return;
  }
#if defined(MEMO_BLAS_DNNL)
  run_bf16_product(c, a, b, trans_a, trans_b, alpha, beta, M, N, K);
#endif
}

void matmul_bf16_token_panels(memo::Tensor c, memo::ConstTensor a, memo::ConstTensor b,
                              bool trans_b, float beta) {
  MEMO_CHECK(c.ndim() == 2 && a.ndim() == 2 && c.rows() == a.rows(), "matmul_bf16_token_panels: c ",
             c.shape(), " a ", a.shape(), " (need the same token rows)");
  check_matmul(c, a, b, false, trans_b, 1.0f, beta);
  check_bf16_product("matmul_bf16_token_panels", c, a, b);
  if (c.rows() == 0 || c.cols() == 0 || a.cols() == 0) {  // nothing to lay out: matmul_bf16's cases
    for (int64_t r0 = 0; r0 < c.rows(); r0 += kTokenPanelRows) {
      const int64_t r1 = std::min(c.rows(), r0 + kTokenPanelRows);
      matmul_bf16(c.slice_rows(r0, r1), a.slice_rows(r0, r1), b, false, trans_b, 1.0f, beta);
    }
    return;
  }
#if defined(MEMO_BLAS_DNNL)
  run_packed_panels(c, a, b, trans_b, beta);
#endif
}

bool bf16_products_native() {
#if defined(MEMO_BLAS_DNNL)
  apply_isa_cap();
  static const bool native = isa_has(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_bf16);
  return native;
#else
  return false;
#endif
}

const char* bf16_products_name() {
  static const std::string name = []() -> std::string {
#if defined(MEMO_BLAS_DNNL)
    if (!bf16_products_native())
      return isa_cap() ? str("no bf16 products under MEMO_CPU_ISA=", isa_cap())
                       : std::string(
                             "no bf16 products on this CPU (oneDNN has bf16 kernels for "
                             "AVX512-BF16 and AMX)");
    // the implementation oneDNN picks for a panel-sized product, e.g. brg:avx512_core_amx_bf16
    dnnl_memory_desc_t a, b, c;
    const int64_t dims[2] = {kTokenPanelRows, kTokenPanelRows}, strides[2] = {kTokenPanelRows, 1};
    dnnl_ok(dnnl_memory_desc_init_by_strides(&a, 2, dims, dnnl_bf16, strides), "a's descriptor");
    dnnl_ok(dnnl_memory_desc_init_by_strides(&b, 2, dims, dnnl_bf16, strides), "b's descriptor");
    dnnl_ok(dnnl_memory_desc_init_by_strides(&c, 2, dims, dnnl_f32, strides), "c's descriptor");
    dnnl_matmul_desc_t desc;
    dnnl_ok(dnnl_matmul_desc_init(&desc, &a, &b, nullptr, &c), "matmul descriptor");
    dnnl_primitive_desc_t pd = nullptr;
    dnnl_ok(dnnl_primitive_desc_create(&pd, &desc, nullptr, cpu_engine(), nullptr),
            "bf16 matmul descriptor");
    const char* impl = "";
    dnnl_ok(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl), "query");
    const std::string kernel = impl;
    dnnl_primitive_desc_destroy(pd);
    const bool amx = isa_has(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_amx);
    return str("bf16 products on ", amx ? "AMX" : "AVX512-BF16", " (oneDNN ", kernel, ")");
#else
    return "no bf16 products with OpenBLAS (build with MEMO_BLAS=dnnl)";
#endif
  }();
  return name.c_str();
}

}  // namespace memo::cpu
