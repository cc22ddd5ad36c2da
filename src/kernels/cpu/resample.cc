// Separable resampling kernels behind kernels/cpu/resample.h: one pass per table, parallel over
// output rows; f32 tables on the last two axes in a single pass (Note [Resizing the last two axes
// at once]); the adjoint runs the passes backwards as scatter-adds; nearest of other dtypes is a
// byte gather.
#include "kernels/cpu/resample.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/cpu/isa.h"
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

// Note [Resizing the last two axes at once]
// An image resize (EfficientFormerV2's 2x bilinear upsample of 1024 planes of 7x7, GhostNetV2's
// 2x nearest upsample of its attention maps, a segmentation head's) ran as one pass per axis: the
// height into a new tensor, then the width into another with a scalar gather per element, then a
// copy into the step's output (0.25 ms for 200K bilinear outputs on one thread, as much as the 1x1
// convolution after it; nearest, a byte gather, 0.83 ns an element). When the tables sit on the
// last two axes and none extrapolates, one pass does, writing the output once:
//   - the width's table is regrouped in blocks of 16 output columns, per tap a vector of input
//     columns and one of weights. Upsampling, a block's taps read at most 16 consecutive columns:
//     those are loaded once as a vector (the height's taps blended there, in registers) and each
//     tap is a permute of it and a multiply-add. A block that spans more (downsampling) gathers
//     from the height's blend of the whole row, kept in a scratch row.
//   - the taps are summed in table order, as the two-pass path does, so results match it; nearest
//     is one tap of weight 1, a copy (x * 1 is x, -0 and NaN included), and its permute is not
//     multiplied at all. An output row whose height taps are the row above's (nearest upsampling)
//     is a copy of that row where the same call wrote it: GhostNetV2's 72 x 28x28 -> 56x56, one
//     thread, 0.063 -> 0.054 ms in the engine (ONNX Runtime's integer-factor path is still faster
//     alone, bench/resize_vs_ort.py).
// The output is the step's own, written in place.
struct Last2Tables {
  Last2PlanF32 sizes;  // its pointers are filled by plan()
  std::vector<int64_t> h_index, w_lo, w_span;
  std::vector<float> h_weight, w_weight;
  std::vector<int32_t> w_index;
  std::vector<uint8_t> h_repeat;

  Last2PlanF32 plan() const {
    Last2PlanF32 p = sizes;
    p.h_index = h_index.data(), p.h_weight = h_weight.data(), p.h_repeat = h_repeat.empty() ? nullptr : h_repeat.data();
    p.w_lo = w_lo.data(), p.w_span = w_span.data(), p.w_index = w_index.data(), p.w_weight = w_weight.data();
    return p;
  }
};

const ResampleAxis* table_on(const std::vector<ResampleAxis>& axes, int64_t axis) {
  for (const ResampleAxis& t : axes)
    if (t.axis == axis) return &t;
  return nullptr;
}

Last2Tables last2_tables(const Shape& xs, const std::vector<ResampleAxis>& axes) {
  const int64_t rank = static_cast<int64_t>(xs.size());
  Last2Tables t;
  Last2PlanF32& p = t.sizes;
  p.in_w = xs.back(), p.in_h = rank >= 2 ? xs[xs.size() - 2] : 1;
  p.out_w = p.in_w, p.out_h = p.in_h;
  if (const ResampleAxis* h = rank >= 2 ? table_on(axes, rank - 2) : nullptr) {
    p.out_h = h->out_len, p.h_taps = h->taps;
    t.h_index = h->index;
    t.h_weight.assign(h->weight.begin(), h->weight.end());
    std::vector<uint8_t> repeat(static_cast<size_t>(p.out_h), 0);
    bool any = false;
    for (int64_t oy = 1; oy < p.out_h; ++oy) {
      const auto at = [&](int64_t row, int64_t k) { return static_cast<size_t>(row * p.h_taps + k); };
      bool same = true;
      for (int64_t k = 0; k < p.h_taps; ++k)
        same = same && t.h_index[at(oy, k)] == t.h_index[at(oy - 1, k)] &&
               t.h_weight[at(oy, k)] == t.h_weight[at(oy - 1, k)];
      repeat[static_cast<size_t>(oy)] = same;
      any = any || same;
    }
    if (any) t.h_repeat = std::move(repeat);
  }
  if (const ResampleAxis* w = table_on(axes, rank - 1)) {
    p.out_w = w->out_len, p.w_taps = w->taps, p.w_blocks = (w->out_len + 15) / 16;
    p.w_copy = w->taps == 1 && std::all_of(w->weight.begin(), w->weight.end(), [](double v) { return v == 1.0; });
    t.w_index.assign(static_cast<size_t>(p.w_blocks * p.w_taps * 16), 0);
    t.w_weight.assign(t.w_index.size(), 0.0f);
    for (int64_t b = 0; b < p.w_blocks; ++b) {
      const int64_t j0 = 16 * b, j1 = std::min(j0 + 16, w->out_len);
      int64_t lo = w->in_len, hi = -1;
      for (int64_t k = j0 * w->taps; k < j1 * w->taps; ++k)
        lo = std::min(lo, w->index[static_cast<size_t>(k)]), hi = std::max(hi, w->index[static_cast<size_t>(k)]);
      const bool near = hi - lo < 16;
      p.w_wide = p.w_wide || !near;
      t.w_lo.push_back(lo), t.w_span.push_back(hi - lo + 1);
      if (!near)  // lanes past out_w read column lo (weight 0)
        std::fill_n(t.w_index.begin() + b * w->taps * 16, w->taps * 16, static_cast<int32_t>(lo));
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t k = 0; k < w->taps; ++k) {
          const size_t from = static_cast<size_t>(j * w->taps + k);
          const size_t to = static_cast<size_t>((b * w->taps + k) * 16 + (j - j0));
          t.w_index[to] = static_cast<int32_t>(near ? w->index[from] - lo : w->index[from]);
          t.w_weight[to] = static_cast<float>(w->weight[from]);
        }
    }
  }
  return t;
}

void last2_rows__scalar(const Last2PlanF32& p, const float* x, float* y, float* tmp, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* plane = x + (r / p.out_h) * p.in_h * p.in_w;
    const int64_t oy = r % p.out_h;
    float* out = y + r * p.out_w;
    const float* row = plane + oy * p.in_w;
    if (p.h_taps > 0) {
      float* blend = p.w_blocks > 0 ? tmp : out;
      const int64_t* idx = p.h_index + oy * p.h_taps;
      const float* w = p.h_weight + oy * p.h_taps;
      const float* s0 = plane + idx[0] * p.in_w;
      for (int64_t i = 0; i < p.in_w; ++i) blend[i] = w[0] * s0[i];
      for (int64_t k = 1; k < p.h_taps; ++k) {
        const float* sk = plane + idx[k] * p.in_w;
        for (int64_t i = 0; i < p.in_w; ++i) blend[i] += w[k] * sk[i];
      }
      row = blend;
    }
    for (int64_t b = 0; b < p.w_blocks; ++b) {
      const float* base = row + (p.w_span[b] <= 16 ? p.w_lo[b] : 0);
      const int32_t* idx = p.w_index + b * p.w_taps * 16;
      const float* w = p.w_weight + b * p.w_taps * 16;
      for (int64_t l = 0; l < std::min<int64_t>(16, p.out_w - 16 * b); ++l) {
        float acc = w[l] * base[idx[l]];
        for (int64_t k = 1; k < p.w_taps; ++k) acc += w[16 * k + l] * base[idx[16 * k + l]];
        out[16 * b + l] = acc;
      }
    }
  }
}

}  // namespace

bool resample_last2_f32_applies(const Shape& x, const std::vector<ResampleAxis>& axes) {
  const int64_t rank = static_cast<int64_t>(x.size());
  if (axes.empty() || rank == 0) return false;
  for (const ResampleAxis& t : axes) {
    if (t.axis < rank - 2 || t.axis >= rank || t.taps < 1) return false;
    if (t.in_len > std::numeric_limits<int32_t>::max()) return false;  // the gathers' indices are 32-bit
    if (std::any_of(t.outside.begin(), t.outside.end(), [](uint8_t o) { return o != 0; })) return false;
  }
  return true;
}

void resample_last2_f32(const Tensor& x, const std::vector<ResampleAxis>& axes, const Tensor& y) {
  KILN_ASSERT(x.is_contiguous() && y.is_contiguous() && x.dtype() == DType::f32 && y.dtype() == DType::f32,
              "resample_last2_f32 needs contiguous f32 tensors");
  KILN_ASSERT(resample_last2_f32_applies(x.shape(), axes), "resample_last2_f32: tables off the last two axes");
  const Last2Tables t = last2_tables(x.shape(), axes);
  const Last2PlanF32 p = t.plan();
  KILN_ASSERT(y.numel() == x.numel() / std::max<int64_t>(p.in_h * p.in_w, 1) * p.out_h * p.out_w,
              "resample_last2_f32: output size does not match the tables");
  if (y.numel() == 0) return;
  const int64_t rows = y.numel() / p.out_w;
  const Last2RowsF32 kernel = active_isa() == Isa::avx512 ? last2_rows_f32_avx512() : last2_rows__scalar;
  const float* xp = static_cast<const float*>(x.data_ptr());
  float* yp = static_cast<float*>(y.data_ptr());
  const int64_t work = std::max<int64_t>(p.h_taps, 1) * (p.in_w + p.out_w) + p.w_taps * p.out_w;
  parallel_for(0, rows, grain_for(work), [&](int64_t r0, int64_t r1) {
    // Rounded up to whole vectors (the row kernels may store the last one whole).
    std::vector<float> tmp(p.h_taps > 0 && p.w_blocks > 0 ? static_cast<size_t>((p.in_w + 15) / 16 * 16) : 0);
    kernel(p, xp, yp, tmp.data(), r0, r1);
  });
}

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
