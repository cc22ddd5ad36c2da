// Elementwise iteration over strided, broadcast operands: the loop every pointwise kernel uses.
//
// Operand 0 is the output; inputs are broadcast to its shape (stride 0). Dimensions that are
// contiguous with each other in every operand are merged, so a contiguous or simply broadcast
// tensor becomes one long inner loop the compiler vectorizes. Work is split over kiln's thread
// pool in chunks of at least kGrain elements.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

inline constexpr int64_t kGrain = 32768;

// Strides of `t` (in bytes) when broadcast to `shape`.
std::vector<int64_t> broadcast_byte_strides(const Tensor& t, const Shape& shape);

template <int N>
struct LoopPlan {
  Shape shape;                                 // merged dims, outermost first
  std::array<std::vector<int64_t>, N> strides;  // bytes, per operand, per merged dim
  std::array<char*, N> base;
};

template <int N>
LoopPlan<N> plan_loop(std::span<const Tensor> ops) {
  LoopPlan<N> p;
  const Shape& shape = ops[0].shape();
  std::array<std::vector<int64_t>, N> st;
  for (int k = 0; k < N; ++k) {
    st[k] = broadcast_byte_strides(ops[k], shape);
    p.base[k] = static_cast<char*>(ops[k].data_ptr());
  }
  // Drop size-1 dims, then merge dims that are contiguous with the next in every operand.
  Shape dims;
  std::array<std::vector<int64_t>, N> ds;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!dims.empty()) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k)
        if (ds[k].back() != st[k][d] * shape[d]) { mergeable = false; break; }
      if (mergeable) {
        dims.back() *= shape[d];
        for (int k = 0; k < N; ++k) ds[k].back() = st[k][d];
        continue;
      }
    }
    dims.push_back(shape[d]);
    for (int k = 0; k < N; ++k) ds[k].push_back(st[k][d]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (int k = 0; k < N; ++k) ds[k].push_back(0);
  }
  p.shape = std::move(dims);
  p.strides = std::move(ds);
  return p;
}

// Calls fn(ptrs, inner_strides, n) over runs of the innermost merged dim of plan p. ptrs[k]
// points at the run's first element of operand k; inner_strides[k] is its byte stride within the
// run.
template <int N, class Fn>
void for_each_run(const LoopPlan<N>& p, Fn&& fn, int64_t grain = kGrain) {
  const int64_t total = numel_of(p.shape);
  if (total == 0) return;
  const int nd = static_cast<int>(p.shape.size());
  const int64_t inner = p.shape[nd - 1];
  std::array<int64_t, N> inner_st;
  for (int k = 0; k < N; ++k) inner_st[k] = p.strides[k][nd - 1];

  parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
    // Multi-index of `begin`.
    std::vector<int64_t> idx(nd, 0);
    int64_t rem = begin;
    for (int d = nd - 1; d >= 0; --d) {
      idx[d] = rem % p.shape[d];
      rem /= p.shape[d];
    }
    std::array<char*, N> ptr;
    for (int k = 0; k < N; ++k) {
      ptr[k] = p.base[k];
      for (int d = 0; d < nd; ++d) ptr[k] += idx[d] * p.strides[k][d];
    }
    int64_t pos = begin;
    while (pos < end) {
      int64_t n = std::min(inner - idx[nd - 1], end - pos);
      fn(ptr.data(), inner_st.data(), n);
      pos += n;
      // Advance the multi-index by n (which ends a run or the chunk).
      idx[nd - 1] += n;
      for (int k = 0; k < N; ++k) ptr[k] += n * inner_st[k];
      for (int d = nd - 1; d > 0 && idx[d] == p.shape[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
        for (int k = 0; k < N; ++k) ptr[k] += p.strides[k][d - 1] - p.shape[d] * p.strides[k][d];
      }
    }
  });
}

// The same over the plan of `ops` (operand 0 the output).
template <int N, class Fn>
void for_each_run(std::span<const Tensor> ops, Fn&& fn, int64_t grain = kGrain) {
  for_each_run<N>(plan_loop<N>(ops), fn, grain);
}

// Note [Transposed operands]
// An input that is a permuted view (x + y.transpose(1, 2), the copy that makes a transposed view
// contiguous) runs across the output's inner dim a row apart: element after element from another
// cache line, through the strided loop at ~3 cycles an element. SqueezeBERT's grouped 1x1
// convolutions copied each [8, 128, 768] input transposed so (0.32 ms of a 0.98 ms layer), and its
// residual adds took 0.35 ms each. Where an input has the stride of one element along another
// (merged) dim d, the loop goes instead in tiles of up to kTransposeRows along d by
// kTransposeCols along the inner dim, the input read a tile at a time with 4x4 register
// transposes (whole cache lines from both sides): the copy 0.68 -> 0.09 ms on one thread.

// dst[i * ldd + j] = src[i + j * lds] for i < rows, j < cols (element counts), elements of es bytes
// (1, 2, 4 or 8).
void transpose_tile(const char* src, int64_t lds, char* dst, int64_t ldd, int64_t rows, int64_t cols, int64_t es);

inline constexpr int64_t kTransposeRows = 16, kTransposeCols = 128;

// The input of plan p that is transposed against the output (operand, and the dim where it is
// contiguous), per Note [Transposed operands]; operand -1 where none is, or the tiles would be
// thin. es: each operand's element size.
struct TransposedOperand {
  int operand = -1, dim = -1;
};
template <int N>
TransposedOperand find_transposed_operand(const LoopPlan<N>& p, const std::array<int64_t, N>& es) {
  const size_t nd = p.shape.size();
  if (nd < 2 || p.strides[0][nd - 1] != es[0] || p.shape[nd - 1] < 8) return {};
  for (int k = 1; k < N; ++k) {
    const int64_t inner = p.strides[k][nd - 1];
    if (inner == 0 || inner == es[k]) continue;
    for (size_t d = nd - 1; d-- > 0;)
      if (p.strides[k][d] == es[k] && p.shape[d] >= 8) return {k, static_cast<int>(d)};
  }
  return {};
}

// Calls tile(ptrs, rows, cols) over tiles covering plan p: each operand's pointer at the tile's
// first element, rows along t.dim (at most kTransposeRows), cols along the inner dim (at most
// kTransposeCols), split over the pool.
template <int N, class Tile>
void for_each_transposed_tile(const LoopPlan<N>& p, TransposedOperand t, Tile&& tile) {
  const int nd = static_cast<int>(p.shape.size()), d = t.dim;
  const int64_t rows_total = p.shape[d], cols_total = p.shape[nd - 1];
  const int64_t row_tiles = (rows_total + kTransposeRows - 1) / kTransposeRows;
  const int64_t col_tiles = (cols_total + kTransposeCols - 1) / kTransposeCols;
  const int64_t outer = numel_of(p.shape) / (rows_total * cols_total);
  const int64_t grain = std::max<int64_t>(1, kGrain / (kTransposeRows * kTransposeCols));
  parallel_for(0, outer * row_tiles * col_tiles, grain, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t ct = u % col_tiles, rt = u / col_tiles % row_tiles;
      int64_t o = u / col_tiles / row_tiles;
      std::array<char*, N> ptr = p.base;
      for (int e = nd - 2; e >= 0; --e) {
        if (e == d) continue;
        const int64_t i = o % p.shape[e];
        o /= p.shape[e];
        for (int k = 0; k < N; ++k) ptr[k] += i * p.strides[k][e];
      }
      const int64_t r0 = rt * kTransposeRows, c0 = ct * kTransposeCols;
      for (int k = 0; k < N; ++k) ptr[k] += r0 * p.strides[k][d] + c0 * p.strides[k][nd - 1];
      tile(ptr, std::min(kTransposeRows, rows_total - r0), std::min(kTransposeCols, cols_total - c0));
    }
  });
}

// for_each_run's contract over plan p with the transposed input's runs read from a contiguous
// copy of each tile (stride es), or false (nothing run) where no input is transposed.
template <int N, class Fn>
bool for_each_transposed_run(const LoopPlan<N>& p, const std::array<int64_t, N>& es, Fn&& fn) {
  const TransposedOperand t = find_transposed_operand<N>(p, es);
  if (t.operand < 0) return false;
  const int nd = static_cast<int>(p.shape.size()), k = t.operand;
  std::array<int64_t, N> inner;
  for (int j = 0; j < N; ++j) inner[j] = p.strides[j][nd - 1];
  inner[k] = es[k];
  for_each_transposed_tile<N>(p, t, [&](const std::array<char*, N>& at, int64_t rows, int64_t cols) {
    alignas(64) char buf[kTransposeRows * kTransposeCols * 8];
    transpose_tile(at[k], p.strides[k][nd - 1] / es[k], buf, cols, rows, cols, es[k]);
    for (int64_t r = 0; r < rows; ++r) {
      std::array<char*, N> ptr;
      for (int j = 0; j < N; ++j) ptr[j] = at[j] + r * p.strides[j][t.dim];
      ptr[k] = buf + r * cols * es[k];
      fn(ptr.data(), inner.data(), cols);
    }
  });
  return true;
}

// out = f(in) elementwise. f maps compute_t<In> to compute_t<Out>. Inputs broadcast to out.
template <class Out, class In, class F>
void unary_loop(const Tensor& out, const Tensor& in, F f) {
  const Tensor ops[2] = {out, in};
  const LoopPlan<2> plan = plan_loop<2>(ops);
  auto run = [&](char** p, const int64_t* s, int64_t n) {
    auto* o = reinterpret_cast<Out*>(p[0]);
    auto* a = reinterpret_cast<const In*>(p[1]);
    if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
      for (int64_t i = 0; i < n; ++i) o[i] = convert<Out>(f(static_cast<compute_t<In>>(a[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        auto* oi = reinterpret_cast<Out*>(p[0] + i * s[0]);
        auto* ai = reinterpret_cast<const In*>(p[1] + i * s[1]);
        *oi = convert<Out>(f(static_cast<compute_t<In>>(*ai)));
      }
    }
  };
  // Note [Transposed operands]
  if (for_each_transposed_run<2>(plan, {sizeof(Out), sizeof(In)}, run)) return;
  for_each_run<2>(plan, run);
}

// One run of binary_loop (for_each_run<3>'s ptrs and byte strides, operands out, a, b): the
// contiguous and broadcast-value patterns as plain loops the compiler vectorizes, others strided.
// Inlined into each run loop, as binary_loop's body was.
template <class Out, class In, class F>
[[gnu::always_inline]] inline void binary_run(char** p, const int64_t* s, int64_t n, F& f) {
  auto* o = reinterpret_cast<Out*>(p[0]);
  auto* x = reinterpret_cast<const In*>(p[1]);
  auto* y = reinterpret_cast<const In*>(p[2]);
  using C = compute_t<In>;
  if (s[0] == sizeof(Out) && s[1] == sizeof(In) && s[2] == sizeof(In)) {
    for (int64_t i = 0; i < n; ++i) o[i] = convert<Out>(f(static_cast<C>(x[i]), static_cast<C>(y[i])));
  } else if (s[0] == sizeof(Out) && s[1] == sizeof(In) && s[2] == 0) {
    const C yv = static_cast<C>(*y);
    for (int64_t i = 0; i < n; ++i) o[i] = convert<Out>(f(static_cast<C>(x[i]), yv));
  } else if (s[0] == sizeof(Out) && s[1] == 0 && s[2] == sizeof(In)) {
    const C xv = static_cast<C>(*x);
    for (int64_t i = 0; i < n; ++i) o[i] = convert<Out>(f(xv, static_cast<C>(y[i])));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      auto* oi = reinterpret_cast<Out*>(p[0] + i * s[0]);
      auto* xi = reinterpret_cast<const In*>(p[1] + i * s[1]);
      auto* yi = reinterpret_cast<const In*>(p[2] + i * s[2]);
      *oi = convert<Out>(f(static_cast<C>(*xi), static_cast<C>(*yi)));
    }
  }
}

// Note [Short rows over a broadcast]
// A channel-blocked activation times its per-channel scale ([N, C/16, H, W, 16] * [N, C/16, 1, 1,
// 16], a squeeze-excite in a blocked region) merges to [N * C/16, H * W, 16] with the scale's
// stride 0 over the middle dim: runs of 16 elements, each paying the run loop's bookkeeping and a
// loop of unknown length. MobileNetV3's blocked scales took 2-3x the time of the same product in
// NCHW (one long run against a broadcast value). So where the inner dim is short and one operand
// repeats one row over the dim outside it while the output and the other operand are contiguous
// across both, each (middle x inner) tile goes whole to tile(o, x, y, mid, inner, x_full): x_full,
// x is the tile and y the row; otherwise the reverse. False (nothing run) where the plan is not so.
// With bands > 1 each tile's middle dim goes in that many bands, outermost: one image's blocked
// planes split by rows, as its convolutions split them (Note [One image split by rows] in
// conv_nchwc_depthwise.cc), instead of by blocks.
template <class Out, class In, class Tile>
bool for_each_broadcast_tile(const LoopPlan<3>& p, Tile&& tile, int64_t bands = 1) {
  const size_t nd = p.shape.size();
  if (nd < 2 || p.shape[nd - 1] > 64 || numel_of(p.shape) == 0) return false;
  const int64_t inner = p.shape[nd - 1], mid = p.shape[nd - 2];
  const int64_t so = sizeof(Out), si = sizeof(In);
  auto dense = [&](size_t k, int64_t size) {
    return p.strides[k][nd - 1] == size && p.strides[k][nd - 2] == inner * size;
  };
  auto row = [&](size_t k) { return p.strides[k][nd - 1] == si && p.strides[k][nd - 2] == 0; };
  const bool x_full = dense(1, si) && row(2), y_full = row(1) && dense(2, si);
  if (!dense(0, so) || (!x_full && !y_full)) return false;
  int64_t outer = 1;
  for (size_t d = 0; d + 2 < nd; ++d) outer *= p.shape[d];
  // (Bands only where the tiles would have split between threads anyway.)
  if (outer * mid * inner <= kGrain) bands = 1;
  bands = std::clamp<int64_t>(bands, 1, mid);
  const int64_t band = (mid + bands - 1) / bands;
  bands = (mid + band - 1) / band;
  const int64_t grain = bands > 1 ? 1 : std::max<int64_t>(1, kGrain / (mid * inner));
  parallel_for(0, bands * outer, grain, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t t = u % outer, m0 = u / outer * band, rows = std::min(band, mid - m0);
      std::array<char*, 3> ptr = p.base;
      for (size_t d = nd - 2, rem = static_cast<size_t>(t); d-- > 0;) {
        const auto i = static_cast<int64_t>(rem % static_cast<size_t>(p.shape[d]));
        rem /= static_cast<size_t>(p.shape[d]);
        for (size_t k = 0; k < 3; ++k) ptr[k] += i * p.strides[k][d];
      }
      ptr[0] += m0 * inner * so;
      ptr[x_full ? 1 : 2] += m0 * inner * si;
      tile(reinterpret_cast<Out*>(ptr[0]), reinterpret_cast<const In*>(ptr[1]), reinterpret_cast<const In*>(ptr[2]),
           rows, inner, x_full);
    }
  });
  return true;
}

// out = f(a, b) elementwise with broadcasting; a and b have the same element type In.
template <class Out, class In, class F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  const Tensor ops[3] = {out, a, b};
  const LoopPlan<3> p = plan_loop<3>(ops);
  using C = compute_t<In>;
  auto tile = [&](Out* o, const In* x, const In* y, int64_t mid, int64_t inner, bool x_full) {
    for (int64_t j = 0; j < mid; ++j, o += inner, (x_full ? x : y) += inner)
      for (int64_t i = 0; i < inner; ++i) o[i] = convert<Out>(f(static_cast<C>(x[i]), static_cast<C>(y[i])));
  };
  if (for_each_broadcast_tile<Out, In>(p, tile)) return;
  auto run = [&](char** ptr, const int64_t* s, int64_t n) { binary_run<Out, In>(ptr, s, n, f); };
  // Note [Transposed operands]
  if (for_each_transposed_run<3>(p, {sizeof(Out), sizeof(In), sizeof(In)}, run)) return;
  for_each_run<3>(p, run);
}

// Copies (and converts) src into dst elementwise; src broadcasts to dst's shape.
void copy_into(const Tensor& dst, const Tensor& src);

}  // namespace kiln::kernels::cpu
