// N-d pooling kernels behind kernels/cpu/pool_nd.h. Each axis' windows are tabulated once as
// ranges of input positions (Note [Pool windows as ranges]); a window is the product of its axes'
// ranges, walked with nested loops. Parallel over planes.
#include "kernels/cpu/pool_nd.h"

#include <cmath>
#include <limits>

#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

namespace {

// Note [Pool windows as ranges]
// Along one axis the window of output o has taps at o * stride - pad_begin + t * dilation; those
// inside the input are consecutive in t, so each window is (first input index, number of taps)
// plus the divisor count. Up to 3 spatial dims are walked as 3 (leading dims of size 1 pad the
// rest), with plain nested loops.
struct AxisWindows {
  std::vector<int64_t> first, n, count;
  int64_t dil = 1;
};

struct Windows3 {
  AxisWindows axis[3];
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
};

Windows3 tabulate(const PoolNdParams& p) {
  const size_t k = p.in.size();
  KILN_ASSERT(k >= 1 && k <= 3, "pool_nd: ", k, " spatial dims");
  Windows3 w;
  for (size_t a = 0; a < 3; ++a) {
    AxisWindows& ax = w.axis[a];
    if (a < 3 - k) {  // padding dim of size 1
      ax.first = {0}, ax.n = {1}, ax.count = {1};
      continue;
    }
    const size_t d = a - (3 - k);
    w.in[a] = p.in[d], w.out[a] = p.out[d], ax.dil = p.dilation[d];
    for (int64_t o = 0; o < p.out[d]; ++o) {
      int64_t first = -1, n = 0, counted = 0;
      for (int64_t t = 0; t < p.kernel[d]; ++t) {
        const int64_t i = o * p.stride[d] - p.pad_begin[d] + t * p.dilation[d];
        if (i >= 0 && i < p.in[d]) {
          if (first < 0) first = i;
          ++n;
        }
        if (p.count_include_pad ? i >= -p.pad_begin[d] && i < p.in[d] + p.pad_end[d] : i >= 0 && i < p.in[d]) ++counted;
      }
      ax.first.push_back(std::max<int64_t>(first, 0));
      ax.n.push_back(n);
      ax.count.push_back(counted);
    }
  }
  return w;
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

// Calls fn(out_linear, divisor, window) for every output position of a plane; window(visit)
// calls visit(in_linear) for each tap inside the input in row-major window order.
template <class Fn>
void for_each_window(const Windows3& w, Fn&& fn) {
  const AxisWindows &A = w.axis[0], &B = w.axis[1], &C = w.axis[2];
  const int64_t s0 = w.in[1] * w.in[2], s1 = w.in[2];
  int64_t lin = 0;
  for (int64_t o0 = 0; o0 < w.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < w.out[1]; ++o1)
      for (int64_t o2 = 0; o2 < w.out[2]; ++o2, ++lin) {
        const int64_t f0 = A.first[size_t(o0)], n0 = A.n[size_t(o0)];
        const int64_t f1 = B.first[size_t(o1)], n1 = B.n[size_t(o1)];
        const int64_t f2 = C.first[size_t(o2)], n2 = C.n[size_t(o2)];
        const int64_t divisor = A.count[size_t(o0)] * B.count[size_t(o1)] * C.count[size_t(o2)];
        fn(lin, divisor, [&](auto&& visit) {
          for (int64_t a = 0; a < n0; ++a) {
            const int64_t r0 = (f0 + a * A.dil) * s0;
            for (int64_t b = 0; b < n1; ++b) {
              const int64_t r1 = r0 + (f1 + b * B.dil) * s1;
              for (int64_t c = 0; c < n2; ++c) visit(r1 + f2 + c * C.dil);
            }
          }
        });
      }
}

int64_t plane_grain(const PoolNdParams& p) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, numel(p.out) * numel(Shape(p.kernel.begin(), p.kernel.end()))));
}

template <class T>
void max_planes(const PoolNdParams& p, const Windows3& w, const T* x, T* y, int64_t* ind) {
  using C = compute_t<T>;
  const int64_t in_n = numel(p.in), out_n = numel(p.out);
  parallel_for(0, p.planes, plane_grain(p), [&](int64_t a, int64_t b) {
    for (int64_t pl = a; pl < b; ++pl) {
      const T* xp = x + pl * in_n;
      for_each_window(w, [&](int64_t lin, int64_t, auto&& window) {
        C m = std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest();
        int64_t best = -1;
        bool nan = false;
        window([&](int64_t off) {
          const C v = static_cast<C>(xp[off]);
          if (!nan && (best < 0 || v > m || v != v)) {
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
  const Windows3 w = tabulate(p);
  const int64_t in_n = numel(p.in), out_n = numel(p.out);
  const C pw = static_cast<C>(p.p);
  parallel_for(0, p.planes, plane_grain(p), [&](int64_t a, int64_t b) {
    for (int64_t pl = a; pl < b; ++pl) {
      const C* xp = x + pl * in_n;
      C* yp = y + pl * out_n;
      if (lp) {
        for_each_window(w, [&](int64_t lin, int64_t, auto&& window) {
          C sum = 0;
          if (pw == C(2)) window([&](int64_t off) { sum += xp[off] * xp[off]; });
          else if (pw == C(1)) window([&](int64_t off) { sum += std::fabs(xp[off]); });
          else window([&](int64_t off) { sum += std::pow(std::fabs(xp[off]), pw); });
          yp[lin] = pw == C(2) ? std::sqrt(sum) : pw == C(1) ? sum : std::pow(sum, C(1) / pw);
        });
      } else {
        for_each_window(w, [&](int64_t lin, int64_t divisor, auto&& window) {
          C sum = 0;
          window([&](int64_t off) { sum += xp[off]; });
          yp[lin] = sum / static_cast<C>(divisor);
        });
      }
    }
  });
}

}  // namespace

void max_pool_nd(const PoolNdParams& p, const Tensor& x, const Tensor& y, const Tensor& indices) {
  const Windows3 axes = tabulate(p);
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
  const Windows3 w = tabulate(p);
  Shape xs{p.planes};
  xs.insert(xs.end(), p.in.begin(), p.in.end());
  Tensor dx = zeros(xs, TensorOptions(DType::f64));
  const double* gp = g.data<double>();
  double* dp = dx.data<double>();
  const int64_t in_n = numel(p.in), out_n = numel(p.out);
  parallel_for(0, p.planes, plane_grain(p), [&](int64_t a, int64_t b) {
    for (int64_t pl = a; pl < b; ++pl) {
      double* dpl = dp + pl * in_n;
      for_each_window(w, [&](int64_t lin, int64_t divisor, auto&& window) {
        const double share = gp[pl * out_n + lin] / static_cast<double>(divisor);
        window([&](int64_t off) { dpl[off] += share; });
      });
    }
  });
  return dx;
}

}  // namespace kiln::kernels::cpu
