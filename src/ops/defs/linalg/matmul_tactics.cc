// Extra CPU tactics for gemm, matmul, fused_gemm, conv2d and fused_conv2d (f32) that engines
// choose between at compile time (Note [Tactics] in include/kiln/runtime.h):
//   "prepacked"  the weight (input 1) packed once into the GEMM micro-kernel layout and reused
//                (conv: the filters as the NCHW conv's GEMM A, per group; depthwise: default kernel)
//   "direct"     conv: the direct convolution (no im2col matrix, Note [Direct convolution] in
//                kernels/cpu/conv_direct.cc) with its filters packed once; the heuristic choice
//                without autotuning where it applies
//   "direct_columns", "direct_pixels"
//                conv: the same with its tiling fixed (output columns, or output pixels as the
//                register tile's rows: Note [Pixels as rows]) instead of chosen by which wastes
//                less of its tiles. Which runs faster depends on more than the waste (a shallow K
//                makes the pixel tiles' transposed store count; on a Zen 3, 64 -> 256 1x1 at 56x56
//                on 2 threads: 105 GFLOP/s by columns, 75 by pixels, which the waste prefers), so
//                autotuning times both.
//   "openblas"   cblas_sgemm (when kiln was configured with OpenBLAS: KILN_HAS_OPENBLAS)
// The ops' own kernels stay first, so eager calls and untuned engines run them unchanged.
//
// Note [Prepacked tactics]
// A prepacked kernel looks the weight up in a process-wide cache keyed by its storage (held weakly:
// an entry dies with the tensor), data pointer, k x n view, strides, storage version and the
// active ISA, and packs it on a miss. Engine constants live as long as the engine, so each is
// packed once per loaded engine (on its first run), not per run; the tuner times the tactic after
// a warm-up run, i.e. without the packing. The cache cannot see writes that skip the storage
// version (an executor's arena), so the tuner offers "prepacked" only where input 1 is an engine
// constant (runtime/tactics.cc: candidate_tactics).
#include <algorithm>
#include <atomic>
#include <optional>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/conv_nchwc.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/loops.h"
#include "kiln/core/allocator.h"
#include "kiln/core/thread_pool.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/op_def.h"
#include "ops/defs/conv/conv_common.h"
#include "ops/defs/register_all.h"
#include "ops/tactics.h"

#if KILN_HAS_OPENBLAS
#include <cblas.h>
#endif

namespace kiln {
namespace {

using kernels::cpu::PackedGemmB;

struct PackEntry {
  std::weak_ptr<StorageImpl> storage;
  const void* data = nullptr;
  uint64_t version = 0;
  int isa = 0;
  std::vector<int64_t> layout;  // what was packed: sizes and strides
  std::shared_ptr<const void> packed;
};

std::mutex g_pack_mu;
std::vector<PackEntry> g_packs;

// The packed form of weight `w` viewed as `layout`, made by `pack()` on a miss (Note [Prepacked
// tactics]). Packing runs under the lock: concurrent first runs pack once.
template <class P, class PackFn>
std::shared_ptr<const P> cached_pack(const Tensor& w, std::vector<int64_t> layout, PackFn pack) {
  const int isa = static_cast<int>(kernels::cpu::active_isa());
  const Storage& st = w.storage();
  std::lock_guard<std::mutex> lock(g_pack_mu);
  // A hit is found by its data pointer first: locking every entry's weak pointer on the way (two
  // atomic operations each), and sweeping out the dead ones on every call, cost a microsecond or
  // two per convolution once an engine had 50 packed weights. The sweep runs on a miss.
  for (const PackEntry& e : g_packs)
    if (e.data == w.data_ptr() && e.isa == isa && e.layout == layout && e.version == st->version() &&
        e.storage.lock() == st)
      return std::static_pointer_cast<const P>(e.packed);
  std::erase_if(g_packs, [](const PackEntry& e) { return e.storage.expired(); });
  std::shared_ptr<const P> packed = pack();
  g_packs.push_back(PackEntry{st, w.data_ptr(), st->version(), isa, std::move(layout), packed});
  return packed;
}

std::shared_ptr<const PackedGemmB> packed_weight(const Tensor& b, int64_t k, int64_t n, int64_t rs, int64_t cs) {
  return cached_pack<PackedGemmB>(b, {0, k, n, rs, cs}, [&] {
    return std::make_shared<const PackedGemmB>(
        kernels::cpu::pack_gemm_b_f32(k, n, static_cast<const float*>(b.data_ptr()), rs, cs));
  });
}

// Conv filters [K, C/g, R, S] (contiguous) packed as the NCHW conv's GEMM A, per group.
std::shared_ptr<const float> packed_conv_weight(const Tensor& w, const kernels::cpu::Conv2dParams& p) {
  return cached_packed_weight_f32(w, {1, p.k, p.c, p.r, p.s, p.groups}, kernels::cpu::conv2d_packed_weight_f32_floats(p),
                                  [&](float* buf) {
                                    kernels::cpu::pack_conv2d_weight_f32(p, static_cast<const float*>(w.data_ptr()), buf);
                                  });
}

// Conv filters packed for the direct convolution (Note [Direct convolution] in
// kernels/cpu/conv_direct.cc): per group and K slice, tap-major micro-panels.
std::shared_ptr<const float> packed_direct_conv_weight(const Tensor& w, const kernels::cpu::Conv2dParams& p) {
  const kernels::cpu::DirectConvLayout layout = kernels::cpu::conv2d_direct_layout(p);
  return cached_packed_weight_f32(
      w, {2, p.k, p.c, p.r, p.s, p.groups, layout.tile_rows, layout.pixel_rows ? 1 : 0},
      kernels::cpu::conv2d_direct_packed_weight_f32_floats(p),
      [&](float* buf) { kernels::cpu::pack_conv2d_direct_weight_f32(p, static_cast<const float*>(w.data_ptr()), buf); });
}

std::atomic<int64_t> g_fallbacks{0};

// The op's first CPU kernel for f32 (its default tactic), for shapes a tactic does not cover.
void run_default(const KernelCall& k) {
  g_fallbacks.fetch_add(1, std::memory_order_relaxed);
  const KernelEntry* e = k.op.find_kernel(DeviceType::cpu, DType::f32);
  KILN_ASSERT(e != nullptr, k.op.name(), ": no f32 CPU kernel");
  e->fn(k);
}

// Whether a and b may share memory: the byte ranges their elements span overlap. Not just the same
// storage: an engine's values are all views of one arena, and a tactic that refused every output
// in the arena of its input would never run inside an engine.
bool aliases(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.storage() != b.storage() || a.numel() == 0 || b.numel() == 0) return false;
  auto span = [](const Tensor& t) {
    int64_t lo = 0, hi = 0;
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t ext = (t.shape()[static_cast<size_t>(d)] - 1) * t.strides()[static_cast<size_t>(d)];
      (ext < 0 ? lo : hi) += ext;
    }
    const int64_t es = static_cast<int64_t>(dtype_size(t.dtype()));
    const auto base = reinterpret_cast<intptr_t>(t.data_ptr());
    return std::make_pair(base + lo * es, base + (hi + 1) * es);
  };
  const auto [a0, a1] = span(a);
  const auto [b0, b1] = span(b);
  return a0 < b1 && b0 < a1;
}

// gemm operands as (m, n, k) with element strides of op(a) and op(b).
struct GemmArgs {
  int64_t m, n, k, a_rs, a_cs, b_rs, b_cs;
  float alpha;
};
GemmArgs gemm_args(const KernelCall& k) {
  const Tensor& a = k.in(0);
  const Tensor& b = k.in(1);
  const bool ta = k.attrs.get_bool("trans_a"), tb = k.attrs.get_bool("trans_b");
  return GemmArgs{k.out(0).shape()[0],
                  k.out(0).shape()[1],
                  ta ? a.shape()[0] : a.shape()[1],
                  ta ? a.strides()[1] : a.strides()[0],
                  ta ? a.strides()[0] : a.strides()[1],
                  tb ? b.strides()[1] : b.strides()[0],
                  tb ? b.strides()[0] : b.strides()[1],
                  static_cast<float>(k.attrs.get_float("alpha"))};
}

// matmul(a, b) with a 2-D b folds to one (m x k) @ (k x n) product: a's rows made contiguous first
// where they are not (Note [Gathering rows before a shared B] in matmul.cc).
bool matmul_folds(const KernelCall& k) {
  const Tensor& a = k.in(0);
  const Tensor& b = k.in(1);
  return b.dim() == 2 && a.dim() >= 2 && k.out(0).is_contiguous() && !aliases(k.out(0), a) && !aliases(k.out(0), b) &&
         a.numel() > 0 && b.numel() > 0;
}

// ---- prepacked -------------------------------------------------------------------------------------

void gemm_prepacked_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  const Tensor c = k.inputs.size() > 2 ? k.in(2) : Tensor();
  const double beta = k.attrs.get_float("beta");
  GemmArgs g = gemm_args(k);
  if (!out.is_contiguous() || out.numel() == 0 || g.k == 0 || aliases(out, k.in(0)) || aliases(out, k.in(1))) {
    run_default(k);
    return;
  }
  const bool use_c = c.defined() && beta != 0.0;
  if (use_c) kernels::cpu::copy_into(out, c);  // broadcasts C to M x N
  auto packed = packed_weight(k.in(1), g.k, g.n, g.b_rs, g.b_cs);
  kernels::cpu::gemm_f32_prepacked(g.m, g.alpha, static_cast<const float*>(k.in(0).data_ptr()), g.a_rs, g.a_cs, *packed,
                                   use_c ? static_cast<float>(beta) : 0.0f, static_cast<float*>(out.data_ptr()), g.n);
}

void matmul_prepacked_kernel(const KernelCall& k) {
  if (!matmul_folds(k)) {
    run_default(k);
    return;
  }
  const Tensor a = k.in(0).contiguous();
  const Tensor& b = k.in(1);
  const int64_t kk = b.shape()[0], n = b.shape()[1], m = a.numel() / kk;
  auto packed = packed_weight(b, kk, n, b.strides()[0], b.strides()[1]);
  kernels::cpu::gemm_f32_prepacked(m, 1.0f, static_cast<const float*>(a.data_ptr()), kk, 1, *packed, 0.0f,
                                   static_cast<float*>(k.out(0).data_ptr()), n);
}

}  // namespace

kernels::cpu::GemmActivation parse_activation(const std::string& s) {
  using kernels::cpu::GemmActivation;
  if (s == "relu") return GemmActivation::relu;
  if (s == "relu6") return GemmActivation::relu6;
  if (s == "sigmoid") return GemmActivation::sigmoid;
  if (s == "tanh") return GemmActivation::tanh;
  if (s == "silu") return GemmActivation::silu;
  if (s == "hardswish") return GemmActivation::hardswish;
  if (s == "gelu") return GemmActivation::gelu;
  if (s == "gelu_tanh") return GemmActivation::gelu_tanh;
  KILN_CHECK(s == "none", "fused_gemm: unknown activation '", s, "'");
  return GemmActivation::none;
}

namespace {

void fused_gemm_prepacked_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  GemmArgs g = gemm_args(k);
  if (k.in(0).dim() > 2) {
    // a [..., M, K]: its leading dims are rows (Note [Fused GEMM over a sequence] in fused.cc).
    if (!k.in(0).is_contiguous() || out.numel() == 0) {
      run_default(k);
      return;
    }
    g.n = out.shape().back();
    g.m = out.numel() / g.n;
    g.k = k.in(0).shape().back();
    g.a_rs = g.k;
    g.a_cs = 1;
  }
  if (!out.is_contiguous() || out.numel() == 0 || g.k == 0 || aliases(out, k.in(0)) || aliases(out, k.in(1))) {
    run_default(k);
    return;
  }
  Tensor bias = k.inputs.size() > 2 && k.in(2).defined() ? k.in(2).contiguous() : Tensor();
  Tensor res = k.inputs.size() > 3 && k.in(3).defined() ? k.in(3).contiguous() : Tensor();
  kernels::cpu::GemmEpilogue ep;
  if (bias.defined()) {
    ep.bias_kind = kernels::cpu::GemmBias::per_col;
    ep.bias = static_cast<const float*>(bias.data_ptr());
  }
  ep.activation = parse_activation(k.attrs.get_string("activation"));
  ep.residual = res.defined() ? static_cast<const float*>(res.data_ptr()) : nullptr;
  ep.ldr = g.n;
  ep.residual_before_activation = k.attrs.get_bool("residual_before_activation");
  auto packed = packed_weight(k.in(1), g.k, g.n, g.b_rs, g.b_cs);
  kernels::cpu::gemm_f32_prepacked(g.m, g.alpha, static_cast<const float*>(k.in(0).data_ptr()), g.a_rs, g.a_cs, *packed,
                                   0.0f, static_cast<float*>(out.data_ptr()), g.n, ep);
}

// ---- prepacked convolution ---------------------------------------------------------------------------

// Conv2dParams from a conv2d / fused_conv2d call; false where the prepacked path does not apply
// (depthwise filters run their own direct kernel, non-contiguous filters cannot be keyed).
bool conv_params(const KernelCall& k, const char* name, kernels::cpu::Conv2dParams& p) {
  const Tensor& x = k.in(0);
  const Tensor& w = k.in(1);
  const Tensor& out = k.out(0);
  if (!w.is_contiguous() || !out.is_contiguous() || out.numel() == 0 || aliases(out, x) || aliases(out, w)) return false;
  p = defs::conv2d_params(name, x.shape(), w.shape(), out.shape(), k.attrs);
  const bool depthwise = p.groups > 1 && p.c / p.groups == 1;
  return !depthwise && p.c / p.groups * p.r * p.s > 0;
}

using kernels::cpu::DirectConvTiling;

// The im2col GEMM ("prepacked") or the direct convolution ("direct", "direct_columns",
// "direct_pixels") with filters packed once.
template <bool Direct, DirectConvTiling Tiling = DirectConvTiling::automatic>
void conv_prepacked(const KernelCall& k, const char* name, const kernels::cpu::Conv2dEpilogue& ep) {
  kernels::cpu::Conv2dParams p;
  const bool ok = conv_params(k, name, p);
  p.tiling = Tiling;
  if (!ok || (Direct && !kernels::cpu::conv2d_direct_supported(p))) {
    run_default(k);
    return;
  }
  Tensor x = k.in(0).contiguous();
  Tensor bias = k.inputs.size() > 2 && k.in(2).defined() ? k.in(2).contiguous() : Tensor();
  const float* xp = static_cast<const float*>(x.data_ptr());
  const float* bp = bias.defined() ? static_cast<const float*>(bias.data_ptr()) : nullptr;
  float* yp = static_cast<float*>(k.out(0).data_ptr());
  if constexpr (Direct) {
    auto packed = packed_direct_conv_weight(k.in(1), p);
    kernels::cpu::conv2d_direct_f32(p, xp, nullptr, packed.get(), bp, yp, ep);
  } else {
    auto packed = packed_conv_weight(k.in(1), p);
    kernels::cpu::conv2d_nchw_f32_prepacked(p, xp, packed.get(), bp, yp, ep);
  }
}

template <bool Direct, DirectConvTiling Tiling = DirectConvTiling::automatic>
void conv2d_prepacked_kernel(const KernelCall& k) {
  conv_prepacked<Direct, Tiling>(k, "conv2d", {});
}

template <bool Direct, DirectConvTiling Tiling = DirectConvTiling::automatic>
void fused_conv2d_prepacked_kernel(const KernelCall& k) {
  Tensor res = k.inputs.size() > 3 && k.in(3).defined() ? k.in(3).contiguous() : Tensor();
  kernels::cpu::Conv2dEpilogue ep;
  ep.activation = parse_activation(k.attrs.get_string("activation"));
  ep.residual = res.defined() ? static_cast<const float*>(res.data_ptr()) : nullptr;
  ep.residual_before_activation = k.attrs.get_bool("residual_before_activation");
  conv_prepacked<Direct, Tiling>(k, "fused_conv2d", ep);  // res outlives the call
}

// ---- openblas --------------------------------------------------------------------------------------
#if KILN_HAS_OPENBLAS

// A row-major operand for cblas: (transposed?, leading dimension), or nullopt when its strides fit
// neither layout.
std::optional<std::pair<CBLAS_TRANSPOSE, int64_t>> blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if (cs == 1 && rs >= std::max<int64_t>(1, cols)) return std::make_pair(CblasNoTrans, rs);
  if (rs == 1 && cs >= std::max<int64_t>(1, rows)) return std::make_pair(CblasTrans, cs);
  if (rows == 1 && cs == 1) return std::make_pair(CblasNoTrans, std::max<int64_t>(1, cols));
  if (cols == 1 && rs == 1) return std::make_pair(CblasTrans, std::max<int64_t>(1, rows));
  return std::nullopt;
}

// Note [No skinny products through OpenBLAS]
// OpenBLAS multiplies a product of a few rows (a classifier at batch 1) in its single-threaded
// small-matrix kernel, reading B across its rows. Timed on its own it looks fast, and the tuner
// chose it: MobileNetV3-Small's 576 x 1000 classifier at batch 1, 0.031 ms against kiln's
// prepacked 0.037 on a Zen 4. In the engine it then took 0.26-0.29 ms (perf: all in
// sgemm_small_kernel_tt) against 0.059-0.083 ms for the prepacked tactic in the same engine, and
// flushing the caches before each timed run did not make the tuner see it (bench/RESULTS.md,
// 2026-12-04). kiln's GEMM streams such a B in place or prepacked (Note [Packed GEMM] in
// gemm_packed.cc), so the "openblas" tactic hands skinny products (at most kGemmSkinnyRows rows)
// to the op's own kernel, which the tuner then times as what it is.
bool skinny(int64_t m) { return m <= kernels::cpu::kGemmSkinnyRows; }

void blas_threads() {
  static std::atomic<int> current{0};
  const int want = get_num_threads();
  if (current.exchange(want) != want) openblas_set_num_threads(want);
}

void gemm_openblas_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  const Tensor c = k.inputs.size() > 2 ? k.in(2) : Tensor();
  const double beta = k.attrs.get_float("beta");
  GemmArgs g = gemm_args(k);
  auto la = blas_layout(g.m, g.k, g.a_rs, g.a_cs), lb = blas_layout(g.k, g.n, g.b_rs, g.b_cs);
  if (!out.is_contiguous() || out.numel() == 0 || g.k == 0 || skinny(g.m) || !la || !lb ||
      aliases(out, k.in(0)) || aliases(out, k.in(1))) {
    run_default(k);
    return;
  }
  const bool use_c = c.defined() && beta != 0.0;
  if (use_c) kernels::cpu::copy_into(out, c);
  blas_threads();
  cblas_sgemm(CblasRowMajor, la->first, lb->first, static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k),
              g.alpha, static_cast<const float*>(k.in(0).data_ptr()), static_cast<int>(la->second),
              static_cast<const float*>(k.in(1).data_ptr()), static_cast<int>(lb->second),
              use_c ? static_cast<float>(beta) : 0.0f, static_cast<float*>(out.data_ptr()), static_cast<int>(g.n));
}

void matmul_openblas_kernel(const KernelCall& k) {
  const Tensor& b = k.in(1);
  std::optional<std::pair<CBLAS_TRANSPOSE, int64_t>> lb;
  if (matmul_folds(k)) lb = blas_layout(b.shape()[0], b.shape()[1], b.strides()[0], b.strides()[1]);
  if (!lb || skinny(k.in(0).numel() / b.shape()[0])) {
    run_default(k);
    return;
  }
  const Tensor a = k.in(0).contiguous();
  const int64_t kk = b.shape()[0], n = b.shape()[1], m = a.numel() / kk;
  blas_threads();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, lb->first, static_cast<int>(m), static_cast<int>(n), static_cast<int>(kk),
              1.0f, static_cast<const float*>(a.data_ptr()), static_cast<int>(kk),
              static_cast<const float*>(b.data_ptr()), static_cast<int>(lb->second), 0.0f,
              static_cast<float*>(k.out(0).data_ptr()), static_cast<int>(n));
}

#endif

}  // namespace

std::shared_ptr<const float> cached_packed_weight_f32(const Tensor& w, std::vector<int64_t> layout, size_t floats,
                                                      const std::function<void(float*)>& pack) {
  return cached_pack<float>(w, std::move(layout), [&] {
    // From the CPU allocator: large filters on huge pages, which the kernels' prefetches into L2
    // walk without a page walk every 4 KiB (Note [Filters fetched ahead] in conv_nchwc.cc).
    const size_t bytes = std::max<size_t>(floats, 1) * sizeof(float);
    Allocator& cpu = allocator_for(Device::cpu());
    float* buf = static_cast<float*>(cpu.allocate(bytes));
    std::shared_ptr<float> owned(buf, [&cpu, bytes](float* q) { cpu.deallocate(q, bytes); });
    pack(buf);
    return std::shared_ptr<const float>(std::move(owned));
  });
}

bool tactic_packs_weight(const std::string& tactic) {
  return tactic == "prepacked" || tactic == "direct" || tactic == "direct_columns" || tactic == "direct_pixels";
}

bool tactic_fits(const OpDef& op, const std::string& tactic, const Attrs& attrs, const Shape& weight, size_t x_rank) {
  const std::string& name = op.name();
  // Note [Panels as tactics] in conv_nchwc.cc: the panel width matters where K leaves a narrower
  // last panel; a depthwise layer has no panels.
  // A grouped layer's panels split each block group's output blocks (Note [Grouped blocks]).
  if (name == "fused_conv2d_nchwc" && (tactic == "panels3" || tactic == "panels4")) {
    if (weight.size() != 4) return false;
    const int64_t groups = attrs.get_int("groups");
    const int64_t span = groups == 1 ? 1 : kernels::cpu::nchwc_group_span(weight[1] * groups, weight[0], groups);
    return span != 0 && (weight[0] + 15) / 16 / (groups / span) % 4 != 0;
  }
  // Note [Winograd tiles] in conv_nchwc.cc: 3x3 filters of stride 1 and dilation 1, one group,
  // blocked input (not a stem's), where a panel's transformed filters stay in L2.
  if (name == "fused_conv2d_nchwc" && (tactic == "winograd" || tactic == "winograd4"))
    return x_rank == 5 && nchwc_winograd_offered(weight, attrs, tactic == "winograd" ? 2 : 4);
  if (!tactic_packs_weight(tactic) || (name != "conv2d" && name != "fused_conv2d")) return true;
  // Depthwise (one input channel per group): conv_params sends it to the default kernel.
  return !(weight.size() == 4 && attrs.get_int("groups") > 1 && weight[1] == 1);
}

int64_t packed_weight_bytes(const OpDef& op, const std::string& tactic, const Attrs& attrs, const Shape& weight,
                            size_t x_rank) {
  // Every kernel of the blocked convolution packs its filters (winograd, winograd4: transformed).
  if (op.name() == "fused_conv2d_nchwc" && weight.size() == 4) {
    const int tile = tactic == "winograd" ? 2 : tactic == "winograd4" ? 4 : 0;
    return defs::conv_nchwc_packed_bytes(x_rank, weight, attrs, tile);
  }
  if (!tactic_packs_weight(tactic)) return 0;
  // The GEMM's and the NCHW direct kernels' copies hold the weight's values in another order: its
  // size, their padding to the micro-kernels' panel widths aside.
  int64_t n = 1;
  for (int64_t d : weight) n *= d;
  return n * static_cast<int64_t>(sizeof(float));
}

bool prepack_weight(const OpDef& op, const std::string& tactic, const Tensor& w, const Attrs& attrs) {
  if (!tactic_packs_weight(tactic) || !w.defined() || w.dtype() != DType::f32 || w.numel() == 0) return false;
  const std::string& name = op.name();
  if ((name == "gemm" || name == "fused_gemm") && w.dim() == 2) {
    const bool tb = attrs.get_bool("trans_b");
    const int64_t k = tb ? w.shape()[1] : w.shape()[0], n = tb ? w.shape()[0] : w.shape()[1];
    packed_weight(w, k, n, tb ? w.strides()[1] : w.strides()[0], tb ? w.strides()[0] : w.strides()[1]);
    return true;
  }
  if (name == "matmul" && w.dim() == 2) {
    packed_weight(w, w.shape()[0], w.shape()[1], w.strides()[0], w.strides()[1]);
    return true;
  }
  if ((name == "conv2d" || name == "fused_conv2d") && w.dim() == 4 && w.is_contiguous()) {
    const kernels::cpu::Conv2dParams p = defs::filter_params(w.shape(), attrs.get_int("groups"));
    if (p.groups > 1 && w.shape()[1] == 1) return false;  // depthwise: the default kernel
    // The direct layout depends on the image size too (its register tile), which the weight alone
    // does not tell: those filters are packed on the step's first run instead.
    if (tactic != "prepacked") return false;
    packed_conv_weight(w, p);
    return true;
  }
  return false;
}

int64_t tactic_fallback_count() { return g_fallbacks.load(std::memory_order_relaxed); }

int64_t prepacked_weight_count() {
  std::lock_guard<std::mutex> lock(g_pack_mu);
  int64_t n = 0;
  for (const PackEntry& e : g_packs) n += e.storage.expired() ? 0 : 1;
  return n;
}

void register_tactic_kernels(OpRegistry& r) {
  const DTypeSet f32{DType::f32};
  r.extend("gemm").kernel(DeviceType::cpu, f32, gemm_prepacked_kernel, "prepacked");
  r.extend("matmul").kernel(DeviceType::cpu, f32, matmul_prepacked_kernel, "prepacked");
  r.extend("fused_gemm").kernel(DeviceType::cpu, f32, fused_gemm_prepacked_kernel, "prepacked");
  r.extend("conv2d").kernel(DeviceType::cpu, f32, conv2d_prepacked_kernel<false>, "prepacked");
  r.extend("fused_conv2d").kernel(DeviceType::cpu, f32, fused_conv2d_prepacked_kernel<false>, "prepacked");
  r.extend("conv2d").kernel(DeviceType::cpu, f32, conv2d_prepacked_kernel<true>, "direct");
  r.extend("fused_conv2d").kernel(DeviceType::cpu, f32, fused_conv2d_prepacked_kernel<true>, "direct");
  constexpr DirectConvTiling columns = DirectConvTiling::columns, pixels = DirectConvTiling::pixels;
  r.extend("conv2d").kernel(DeviceType::cpu, f32, conv2d_prepacked_kernel<true, columns>, "direct_columns");
  r.extend("fused_conv2d").kernel(DeviceType::cpu, f32, fused_conv2d_prepacked_kernel<true, columns>, "direct_columns");
  r.extend("conv2d").kernel(DeviceType::cpu, f32, conv2d_prepacked_kernel<true, pixels>, "direct_pixels");
  r.extend("fused_conv2d").kernel(DeviceType::cpu, f32, fused_conv2d_prepacked_kernel<true, pixels>, "direct_pixels");
#if KILN_HAS_OPENBLAS
  r.extend("gemm").kernel(DeviceType::cpu, f32, gemm_openblas_kernel, "openblas");
  r.extend("matmul").kernel(DeviceType::cpu, f32, matmul_openblas_kernel, "openblas");
#endif
}

}  // namespace kiln
