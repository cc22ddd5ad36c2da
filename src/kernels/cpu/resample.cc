// Separable resampling kernels behind kernels/cpu/resample.h: one pass per table, parallel over
// output rows; the adjoint runs the passes backwards as scatter-adds; nearest is a byte gather.
#include "kernels/cpu/resample.h"

#include <algorithm>
#include <cstring>

#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

namespace {

int64_t prod(const Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end; ++d) n *= s[d];
  return n;
}

int64_t grain_for(int64_t work_per_item) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(work_per_item, 1)); }

// One forward pass along t.axis: [outer, in_len, inner] -> [outer, out_len, inner].
template <class C>
Tensor resample_pass(const Tensor& cur, const ResampleAxis& t, double outside_value) {
  const Shape& s = cur.shape();
  const size_t a = static_cast<size_t>(t.axis);
  Shape os = s;
  os[a] = t.out_len;
  Tensor out = empty(os, TensorOptions(cur.dtype()));
  const int64_t outer = prod(s, 0, a), inner = prod(s, a + 1, s.size());
  if (out.numel() == 0) return out;
  const C* src = static_cast<const C*>(cur.data_ptr());
  C* dst = static_cast<C*>(out.data_ptr());
  std::vector<C> w(t.weight.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<C>(t.weight[i]);
  const C fill = static_cast<C>(outside_value);
  if (inner == 1) {
    // The last axis: a gather-and-weigh per output element, parallel over rows.
    parallel_for(0, outer, grain_for(t.out_len * t.taps), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        const C* row = src + o * t.in_len;
        C* d = dst + o * t.out_len;
        for (int64_t j = 0; j < t.out_len; ++j) {
          if (!t.outside.empty() && t.outside[static_cast<size_t>(j)]) {
            d[j] = fill;
            continue;
          }
          const int64_t* idx = t.index.data() + j * t.taps;
          const C* wj = w.data() + j * t.taps;
          C acc = wj[0] * row[idx[0]];
          for (int64_t k = 1; k < t.taps; ++k) acc += wj[k] * row[idx[k]];
          d[j] = acc;
        }
      }
    });
    return out;
  }
  parallel_for(0, outer * t.out_len, grain_for(inner * t.taps), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r / t.out_len, j = r % t.out_len;
      C* d = dst + r * inner;
      if (!t.outside.empty() && t.outside[static_cast<size_t>(j)]) {
        std::fill(d, d + inner, fill);
        continue;
      }
      const C* base = src + o * t.in_len * inner;
      const int64_t* idx = t.index.data() + j * t.taps;
      const C* wj = w.data() + j * t.taps;
      const C* s0 = base + idx[0] * inner;
      for (int64_t i = 0; i < inner; ++i) d[i] = wj[0] * s0[i];
      for (int64_t k = 1; k < t.taps; ++k) {
        const C* sk = base + idx[k] * inner;
        const C wk = wj[k];
        for (int64_t i = 0; i < inner; ++i) d[i] += wk * sk[i];
      }
    }
  });
  return out;
}

// The adjoint of one pass: [outer, out_len, inner] -> [outer, in_len, inner] (f64).
Tensor adjoint_pass(const Tensor& g, const Shape& in_shape, const ResampleAxis& t) {
  Tensor out = zeros(in_shape, TensorOptions(DType::f64));
  const size_t a = static_cast<size_t>(t.axis);
  const int64_t outer = prod(in_shape, 0, a), inner = prod(in_shape, a + 1, in_shape.size());
  if (out.numel() == 0 || g.numel() == 0) return out;
  const double* src = static_cast<const double*>(g.data_ptr());
  double* dst = static_cast<double*>(out.data_ptr());
  // Each outer block scatters into its own slice, so blocks run in parallel.
  parallel_for(0, outer, grain_for(t.out_len * inner * t.taps), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      double* base = dst + o * t.in_len * inner;
      for (int64_t j = 0; j < t.out_len; ++j) {
        if (!t.outside.empty() && t.outside[static_cast<size_t>(j)]) continue;
        const double* s = src + (o * t.out_len + j) * inner;
        for (int64_t k = 0; k < t.taps; ++k) {
          double* d = base + t.index[static_cast<size_t>(j * t.taps + k)] * inner;
          const double w = t.weight[static_cast<size_t>(j * t.taps + k)];
          for (int64_t i = 0; i < inner; ++i) d[i] += w * s[i];
        }
      }
    }
  });
  return out;
}

template <class E>
void gather_elements(const Tensor& x, const Tensor& y, const std::vector<ResampleAxis>& axes, const Tensor& fill) {
  const Shape& xs = x.shape();
  const Shape& ys = y.shape();
  const size_t rank = ys.size();
  // Per dim: the source index of each output position (-1: outside).
  std::vector<std::vector<int64_t>> src(rank);
  for (size_t d = 0; d < rank; ++d) {
    src[d].resize(static_cast<size_t>(ys[d]));
    for (int64_t j = 0; j < ys[d]; ++j) src[d][static_cast<size_t>(j)] = j;
  }
  for (const ResampleAxis& t : axes)
    for (int64_t j = 0; j < t.out_len; ++j)
      src[static_cast<size_t>(t.axis)][static_cast<size_t>(j)] =
          !t.outside.empty() && t.outside[static_cast<size_t>(j)] ? -1 : t.index[static_cast<size_t>(j * t.taps)];
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * xs[d];
  const E* xp = static_cast<const E*>(x.data_ptr());
  E* yp = static_cast<E*>(y.data_ptr());
  E fv;
  std::memcpy(&fv, fill.data_ptr(), sizeof(E));
  if (rank == 0) {
    yp[0] = xp[0];
    return;
  }
  const int64_t last = ys[rank - 1], rows = y.numel() / std::max<int64_t>(last, 1);
  const std::vector<int64_t>& lsrc = src[rank - 1];
  parallel_for(0, rows, grain_for(last), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t rem = r, off = 0;
      bool outside = false;
      for (size_t d = rank - 1; d-- > 0;) {
        const int64_t j = rem % ys[d];
        rem /= ys[d];
        const int64_t s = src[d][static_cast<size_t>(j)];
        outside |= s < 0;
        off += s * stride[d];
      }
      E* out = yp + r * last;
      if (outside) {
        std::fill(out, out + last, fv);
        continue;
      }
      for (int64_t j = 0; j < last; ++j) {
        const int64_t s = lsrc[static_cast<size_t>(j)];
        out[j] = s < 0 ? fv : xp[off + s];
      }
    }
  });
}

}  // namespace

Tensor resample_separable(const Tensor& x, const std::vector<ResampleAxis>& axes, double outside_value) {
  KILN_ASSERT(x.is_contiguous() && (x.dtype() == DType::f32 || x.dtype() == DType::f64),
              "resample_separable needs a contiguous f32/f64 tensor, got ", dtype_name(x.dtype()));
  Tensor cur = x;
  for (const ResampleAxis& t : axes) {
    KILN_ASSERT(t.in_len == cur.shape()[static_cast<size_t>(t.axis)], "resample table does not match its axis");
    cur = x.dtype() == DType::f32 ? resample_pass<float>(cur, t, outside_value)
                                  : resample_pass<double>(cur, t, outside_value);
  }
  return cur;
}

Tensor resample_separable_adjoint(const Tensor& g, const Shape& in_shape, const std::vector<ResampleAxis>& axes) {
  KILN_ASSERT(g.is_contiguous() && g.dtype() == DType::f64, "resample adjoint needs a contiguous f64 gradient");
  std::vector<Shape> shapes{in_shape};
  for (const ResampleAxis& t : axes) {
    Shape s = shapes.back();
    s[static_cast<size_t>(t.axis)] = t.out_len;
    shapes.push_back(s);
  }
  KILN_ASSERT(shapes.back() == g.shape(), "resample adjoint: gradient shape does not match the tables");
  Tensor cur = g;
  for (size_t k = axes.size(); k-- > 0;) cur = adjoint_pass(cur, shapes[k], axes[k]);
  return cur;
}

void resample_gather(const Tensor& x, const Tensor& y, const std::vector<ResampleAxis>& axes, const Tensor& fill) {
  KILN_ASSERT(x.is_contiguous() && y.is_contiguous() && x.dtype() == y.dtype() && fill.dtype() == y.dtype(),
              "resample_gather: layouts or dtypes do not match");
  if (y.numel() == 0) return;
  switch (x.element_size()) {
    case 1: gather_elements<uint8_t>(x, y, axes, fill); return;
    case 2: gather_elements<uint16_t>(x, y, axes, fill); return;
    case 4: gather_elements<uint32_t>(x, y, axes, fill); return;
    case 8: gather_elements<uint64_t>(x, y, axes, fill); return;
    default: KILN_ASSERT(false, "resample_gather: element size ", x.element_size());
  }
}

}  // namespace kiln::kernels::cpu
