// N-d pooling kernels behind kernels/cpu/pool_nd.h. Each axis' windows are tabulated once (the
// input positions a window covers, and its divisor count); a window is the product of its axes'
// taps, walked with an odometer. Parallel over planes.
#include "kernels/cpu/pool_nd.h"

#include <cmath>
#include <limits>

#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

namespace {

struct AxisWindows {
  std::vector<std::vector<int64_t>> taps;  // per output position: input positions inside the input
  std::vector<int64_t> count;              // per output position: taps counted by the divisor
};

std::vector<AxisWindows> tabulate(const PoolNdParams& p) {
  std::vector<AxisWindows> axes(p.in.size());
  for (size_t d = 0; d < p.in.size(); ++d) {
    AxisWindows& a = axes[d];
    for (int64_t o = 0; o < p.out[d]; ++o) {
      std::vector<int64_t> t;
      int64_t counted = 0;
      for (int64_t k = 0; k < p.kernel[d]; ++k) {
        const int64_t i = o * p.stride[d] - p.pad_begin[d] + k * p.dilation[d];
        if (i >= 0 && i < p.in[d]) t.push_back(i);
        if (p.count_include_pad ? i >= -p.pad_begin[d] && i < p.in[d] + p.pad_end[d] : i >= 0 && i < p.in[d]) ++counted;
      }
      a.taps.push_back(std::move(t));
      a.count.push_back(counted);
    }
  }
  return axes;
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

// Calls fn(out_linear, window) for every output position of one plane, where window(visit) calls
// visit(in_linear) for each in-bounds tap in row-major window order.
template <class Fn>
void for_each_window(const PoolNdParams& p, const std::vector<AxisWindows>& axes, Fn&& fn) {
  const size_t k = p.in.size();
  std::vector<int64_t> in_stride(k, 1);
  for (size_t d = k; d-- > 1;) in_stride[d - 1] = in_stride[d] * p.in[d];
  std::vector<int64_t> o(k, 0);
  const int64_t total = numel(p.out);
  std::vector<const std::vector<int64_t>*> lists(k);
  std::vector<size_t> t(k);
  for (int64_t lin = 0; lin < total; ++lin) {
    bool empty = false;
    for (size_t d = 0; d < k; ++d) {
      lists[d] = &axes[d].taps[static_cast<size_t>(o[d])];
      empty |= lists[d]->empty();
    }
    auto window = [&](auto&& visit) {
      if (empty) return;
      std::fill(t.begin(), t.end(), 0);
      while (true) {
        int64_t off = 0;
        for (size_t d = 0; d < k; ++d) off += (*lists[d])[t[d]] * in_stride[d];
        visit(off);
        size_t d = k;
        while (d > 0 && ++t[d - 1] == lists[d - 1]->size()) t[--d] = 0;
        if (d == 0) break;
      }
    };
    fn(lin, o, window);
    for (size_t d = k; d-- > 0;) {
      if (++o[d] < p.out[d]) break;
      o[d] = 0;
    }
  }
}

int64_t plane_grain(const PoolNdParams& p) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, numel(p.out) * numel(Shape(p.kernel.begin(), p.kernel.end()))));
}

template <class T>
void max_planes(const PoolNdParams& p, const std::vector<AxisWindows>& axes, const T* x, T* y, int64_t* ind) {
  using C = compute_t<T>;
  const int64_t in_n = numel(p.in), out_n = numel(p.out);
  parallel_for(0, p.planes, plane_grain(p), [&](int64_t a, int64_t b) {
    for (int64_t pl = a; pl < b; ++pl) {
      const T* xp = x + pl * in_n;
      for_each_window(p, axes, [&](int64_t lin, const std::vector<int64_t>&, auto&& window) {
        C m = std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest();
        int64_t best = -1;
        bool nan = false;
        window([&](int64_t off) {
          if (nan) return;
          const C v = static_cast<C>(xp[off]);
          if (best < 0 || v > m || v != v) {
            m = v;
            best = off;
            nan = v != v;
          }
        });
        y[pl * out_n + lin] = static_cast<T>(m);
        if (ind) ind[pl * out_n + lin] = best < 0 ? -1 : pl * in_n + best;
      });
    }
  });
}

template <class C>
void avg_or_lp_planes(const PoolNdParams& p, const C* x, C* y, bool lp) {
  auto axes = tabulate(p);
  const int64_t in_n = numel(p.in), out_n = numel(p.out);
  const C pw = static_cast<C>(p.p);
  parallel_for(0, p.planes, plane_grain(p), [&](int64_t a, int64_t b) {
    for (int64_t pl = a; pl < b; ++pl) {
      const C* xp = x + pl * in_n;
      for_each_window(p, axes, [&](int64_t lin, const std::vector<int64_t>& o, auto&& window) {
        C sum = 0;
        if (lp) {
          window([&](int64_t off) { sum += std::pow(std::fabs(xp[off]), pw); });
          y[pl * out_n + lin] = std::pow(sum, C(1) / pw);
        } else {
          window([&](int64_t off) { sum += xp[off]; });
          int64_t count = 1;
          for (size_t d = 0; d < o.size(); ++d) count *= axes[d].count[static_cast<size_t>(o[d])];
          y[pl * out_n + lin] = sum / static_cast<C>(count);
        }
      });
    }
  });
}

}  // namespace

void max_pool_nd(const PoolNdParams& p, const Tensor& x, const Tensor& y, const Tensor& indices) {
  auto axes = tabulate(p);
  int64_t* ind = indices.defined() ? static_cast<int64_t*>(indices.data_ptr()) : nullptr;
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_planes<T>(p, axes, static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), ind);
  };
  switch (x.dtype()) {
    case DType::f32: return run(TypeTag<float>{});
    case DType::f64: return run(TypeTag<double>{});
    case DType::f16: return run(TypeTag<Half>{});
    case DType::bf16: return run(TypeTag<BFloat16>{});
    case DType::i8: return run(TypeTag<int8_t>{});
    case DType::u8: return run(TypeTag<uint8_t>{});
    case DType::i32: return run(TypeTag<int32_t>{});
    case DType::i64: return run(TypeTag<int64_t>{});
    default: KILN_ASSERT(false, "max_pool_nd: dtype ", dtype_name(x.dtype()));
  }
}

void avg_pool_nd(const PoolNdParams& p, const Tensor& x, const Tensor& y) {
  if (x.dtype() == DType::f32) avg_or_lp_planes<float>(p, x.data<float>(), y.data<float>(), false);
  else avg_or_lp_planes<double>(p, x.data<double>(), y.data<double>(), false);
}

void lp_pool_nd(const PoolNdParams& p, const Tensor& x, const Tensor& y) {
  if (x.dtype() == DType::f32) avg_or_lp_planes<float>(p, x.data<float>(), y.data<float>(), true);
  else avg_or_lp_planes<double>(p, x.data<double>(), y.data<double>(), true);
}

Tensor avg_pool_nd_adjoint(const PoolNdParams& p, const Tensor& g) {
  auto axes = tabulate(p);
  Shape xs{p.planes};
  xs.insert(xs.end(), p.in.begin(), p.in.end());
  Tensor dx = zeros(xs, TensorOptions(DType::f64));
  const double* gp = g.data<double>();
  double* dp = dx.data<double>();
  const int64_t in_n = numel(p.in), out_n = numel(p.out);
  parallel_for(0, p.planes, plane_grain(p), [&](int64_t a, int64_t b) {
    for (int64_t pl = a; pl < b; ++pl) {
      double* dpl = dp + pl * in_n;
      for_each_window(p, axes, [&](int64_t lin, const std::vector<int64_t>& o, auto&& window) {
        int64_t count = 1;
        for (size_t d = 0; d < o.size(); ++d) count *= axes[d].count[static_cast<size_t>(o[d])];
        const double share = gp[pl * out_n + lin] / static_cast<double>(count);
        window([&](int64_t off) { dpl[off] += share; });
      });
    }
  });
  return dx;
}

}  // namespace kiln::kernels::cpu
