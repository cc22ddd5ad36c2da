// Row iteration shared by the reduce, scan and norm families: a tensor's dims are split into
// outer dims, whose elements ("rows") run in parallel on the thread pool, and inner dims, walked
// in row-major order within a row as runs of the innermost merged dim. Several operands of the
// same logical shape walk together (their byte strides may differ, or be 0 for an output that a
// reduction collapses), so the same loop serves sum (x -> out), cumsum (x, out) and layer_norm.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kiln/core/tensor.h"
#include "kiln/core/thread_pool.h"

namespace kiln::defs {

template <int N>
struct RowPlan {
  Shape outer_shape;                                  // kept dims, in order (row-major rows)
  std::array<std::vector<int64_t>, N> outer_strides;  // bytes
  Shape inner_shape;                                  // size-1 dims dropped, contiguous dims merged
  std::array<std::vector<int64_t>, N> inner_strides;  // bytes
  std::array<char*, N> base{};
  int64_t outer = 1;  // number of rows
  int64_t inner = 1;  // elements per row
};

// Byte strides of `t`.
inline std::vector<int64_t> byte_strides(const Tensor& t) {
  std::vector<int64_t> s(t.strides().begin(), t.strides().end());
  for (int64_t& v : s) v *= static_cast<int64_t>(t.element_size());
  return s;
}

// Byte strides that let the output `out` of a reduction over `axes` (sorted, normalized against
// `rank`) be walked with the input's shape: 0 along reduced dims.
inline std::vector<int64_t> reduced_out_strides(const Tensor& out, int64_t rank, const std::vector<int64_t>& axes,
                                                bool keepdim) {
  std::vector<int64_t> os = byte_strides(out), s(static_cast<size_t>(rank), 0);
  size_t j = 0;
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), d);
    if (reduced) {
      if (keepdim) ++j;
      continue;
    }
    s[static_cast<size_t>(d)] = os[j++];
  }
  return s;
}

// `inner_axes` sorted and normalized. strides[k] are operand k's byte strides over `shape`.
template <int N>
RowPlan<N> make_row_plan(const Shape& shape, const std::array<std::vector<int64_t>, N>& strides,
                         const std::array<char*, N>& base, const std::vector<int64_t>& inner_axes) {
  RowPlan<N> p;
  p.base = base;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool inner = std::binary_search(inner_axes.begin(), inner_axes.end(), static_cast<int64_t>(d));
    if (!inner) {
      p.outer_shape.push_back(shape[d]);
      for (int k = 0; k < N; ++k) p.outer_strides[k].push_back(strides[k][d]);
      p.outer *= shape[d];
      continue;
    }
    p.inner *= shape[d];
    if (shape[d] == 1) continue;
    if (!p.inner_shape.empty()) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k)
        if (p.inner_strides[k].back() != strides[k][d] * shape[d]) mergeable = false;
      if (mergeable) {
        p.inner_shape.back() *= shape[d];
        for (int k = 0; k < N; ++k) p.inner_strides[k].back() = strides[k][d];
        continue;
      }
    }
    p.inner_shape.push_back(shape[d]);
    for (int k = 0; k < N; ++k) p.inner_strides[k].push_back(strides[k][d]);
  }
  return p;
}

// Calls fn(row, ptrs) for every row (row = linear index over outer_shape); ptrs[k] is operand k's
// address of the row's first element. Rows run in parallel, about kGrain elements per task.
template <int N, class Fn>
void for_each_row(const RowPlan<N>& p, Fn&& fn) {
  if (p.outer == 0) return;
  const int64_t grain = std::max<int64_t>(1, kernels::cpu::kGrain / std::max<int64_t>(1, p.inner));
  const int nd = static_cast<int>(p.outer_shape.size());
  parallel_for(0, p.outer, grain, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(static_cast<size_t>(nd), 0);
    int64_t rem = begin;
    for (int d = nd - 1; d >= 0; --d) {
      idx[static_cast<size_t>(d)] = rem % p.outer_shape[static_cast<size_t>(d)];
      rem /= p.outer_shape[static_cast<size_t>(d)];
    }
    std::array<char*, N> ptr = p.base;
    for (int k = 0; k < N; ++k)
      for (int d = 0; d < nd; ++d) ptr[k] += idx[static_cast<size_t>(d)] * p.outer_strides[k][static_cast<size_t>(d)];
    for (int64_t row = begin; row < end; ++row) {
      fn(row, ptr.data());
      for (int d = nd - 1; d >= 0; --d) {
        size_t ud = static_cast<size_t>(d);
        for (int k = 0; k < N; ++k) ptr[k] += p.outer_strides[k][ud];
        if (++idx[ud] < p.outer_shape[ud]) break;
        for (int k = 0; k < N; ++k) ptr[k] -= p.outer_shape[ud] * p.outer_strides[k][ud];
        idx[ud] = 0;
      }
    }
  });
}

// Calls fn(ptrs, strides, n) for each run of the innermost merged inner dim of the row starting at
// `row`, in row-major order; strides[k] is operand k's byte stride within the run.
template <int N, class Fn>
void for_each_inner_run(const RowPlan<N>& p, char* const* row, Fn&& fn) {
  if (p.inner == 0) return;
  std::array<char*, N> ptr;
  for (int k = 0; k < N; ++k) ptr[k] = row[k];
  std::array<int64_t, N> st{};
  const int nd = static_cast<int>(p.inner_shape.size());
  if (nd == 0) {
    fn(ptr.data(), st.data(), int64_t{1});
    return;
  }
  const size_t last = static_cast<size_t>(nd - 1);
  for (int k = 0; k < N; ++k) st[k] = p.inner_strides[k][last];
  const int64_t n = p.inner_shape[last];
  std::vector<int64_t> idx(last, 0);
  while (true) {
    fn(ptr.data(), st.data(), n);
    int d = nd - 2;
    for (; d >= 0; --d) {
      size_t ud = static_cast<size_t>(d);
      for (int k = 0; k < N; ++k) ptr[k] += p.inner_strides[k][ud];
      if (++idx[ud] < p.inner_shape[ud]) break;
      for (int k = 0; k < N; ++k) ptr[k] -= p.inner_shape[ud] * p.inner_strides[k][ud];
      idx[ud] = 0;
    }
    if (d < 0) return;
  }
}

// Reads element i of a run of T values as double.
template <class T>
inline double load_f64(const char* p, int64_t stride, int64_t i) {
  return static_cast<double>(static_cast<compute_t<T>>(*reinterpret_cast<const T*>(p + i * stride)));
}

// The values of a small tensor (parameters such as weights) in row-major order as double.
std::vector<double> values_f64(const Tensor& t);

}  // namespace kiln::defs
