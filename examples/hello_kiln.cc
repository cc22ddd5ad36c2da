// A small program outside kiln's tree, built against the installed package (pkg-config or
// find_package). It checks randn, matmul, cumsum and views against plain loops and exits non-zero
// when anything disagrees, so CI can trust it.
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("  [%s] %s\n", ok ? " ok " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// Element (i, j) of a 2-D f32 tensor of any layout, read through its strides.
float at(const kiln::Tensor& t, int64_t i, int64_t j) {
  const float* base = static_cast<const float*>(t.data_ptr());
  return base[i * t.stride(0) + j * t.stride(1)];
}

void check_randn() {
  kiln::Generator g1(2024), g2(2024);
  kiln::Tensor a = kiln::randn({200000}, kiln::DType::f32, &g1);
  kiln::Tensor b = kiln::randn({200000}, kiln::DType::f32, &g2);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  double sum = 0, sq = 0;
  bool same = true;
  for (int64_t i = 0; i < a.numel(); ++i) {
    same = same && pa[i] == pb[i];
    sum += pa[i];
    sq += static_cast<double>(pa[i]) * pa[i];
  }
  double mean = sum / static_cast<double>(a.numel());
  double var = sq / static_cast<double>(a.numel()) - mean * mean;
  check(a.shape() == kiln::Shape{200000} && a.dtype() == kiln::DType::f32, "randn: shape and dtype");
  check(same, "randn: the same seed gives the same numbers");
  check(std::abs(mean) < 0.01 && std::abs(std::sqrt(var) - 1.0) < 0.01,
        "randn: mean " + std::to_string(mean) + ", std " + std::to_string(std::sqrt(var)));
}

void check_matmul() {
  kiln::Generator g(7);
  const int64_t m = 37, k = 53, n = 29;
  kiln::Tensor a = kiln::randn({m, k}, kiln::DType::f32, &g);
  kiln::Tensor bt = kiln::randn({n, k}, kiln::DType::f32, &g);
  kiln::Tensor b = bt.t();  // a non-contiguous view as the right operand
  kiln::Tensor c = kiln::matmul(a, b);
  bool ok = c.shape() == kiln::Shape{m, n};
  double worst = 0;
  for (int64_t i = 0; ok && i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        ref += static_cast<double>(at(a, i, p)) * at(b, p, j);
        mag += std::abs(static_cast<double>(at(a, i, p)) * at(b, p, j));
      }
      worst = std::max(worst, std::abs(at(c, i, j) - ref) / (mag + 1e-30));
    }
  check(ok && worst < 1e-5, "matmul: [37, 53] x [53, 29] (transposed view) within 1e-5 relative, worst " +
                                std::to_string(worst));
}

void check_cumsum() {
  kiln::Tensor x = kiln::arange(1, 16, 1, kiln::DType::f64).reshape({3, 5});
  kiln::Tensor inc = kiln::cumsum(x, 1);
  kiln::Tensor exc_rev = kiln::cumsum(x, 0, /*exclusive=*/true, /*reverse=*/true);
  bool ok = inc.shape() == x.shape() && exc_rev.shape() == x.shape();
  const double* px = x.contiguous().data<double>();
  kiln::Tensor ic = inc.contiguous(), ec = exc_rev.contiguous();
  for (int64_t i = 0; ok && i < 3; ++i) {
    double run = 0;
    for (int64_t j = 0; j < 5; ++j) {
      run += px[i * 5 + j];
      ok = ok && ic.data<double>()[i * 5 + j] == run;
    }
  }
  for (int64_t j = 0; ok && j < 5; ++j) {
    double below = 0;
    for (int64_t i = 2; i >= 0; --i) {
      ok = ok && ec.data<double>()[i * 5 + j] == below;
      below += px[i * 5 + j];
    }
  }
  check(ok, "cumsum: inclusive along axis 1, exclusive+reverse along axis 0");
}

void check_views() {
  kiln::Tensor base = kiln::arange(24, kiln::DType::f32).reshape({2, 3, 4});
  kiln::Tensor tr = base.transpose(0, 2);             // [4, 3, 2]
  kiln::Tensor sl = base.slice(2, 1, 4, 2);           // [2, 3, 2]: columns 1 and 3
  kiln::Tensor flat = base.view({6, 4});
  bool shares = tr.storage() == base.storage() && sl.storage() == base.storage() && flat.storage() == base.storage();
  check(shares, "views: transpose, slice and view share the base's storage (no copy)");
  check(tr.shape() == kiln::Shape{4, 3, 2} && !tr.is_contiguous() && tr.strides() == kiln::Strides{1, 4, 12},
        "views: transpose swaps strides");
  const float* b = base.data<float>();
  bool values = true;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t c = 0; c < 2; ++c)
        values = values && static_cast<const float*>(sl.data_ptr())[i * sl.stride(0) + j * sl.stride(1) + c * sl.stride(2)] ==
                               b[i * 12 + j * 4 + 1 + 2 * c];
  check(values, "views: a stepped slice reads the right elements");
  uint64_t before = base.version();
  sl.fill_(-1.0);
  check(b[1] == -1.0f && b[3] == -1.0f && b[0] == 0.0f && base.version() > before,
        "views: writing through a slice changes the base and bumps its version");
}

}  // namespace

int main() {
  std::printf("hello_kiln (kiln %s)\n", kiln::kVersion);
  try {
    check_randn();
    check_matmul();
    check_cumsum();
    check_views();
  } catch (const kiln::Error& e) {
    std::printf("  [FAIL] kiln::Error: %s\n", e.what());
    ++failures;
  }
  std::printf(failures ? "hello_kiln: %d check(s) FAILED\n" : "hello_kiln: all checks passed\n", failures);
  return failures ? 1 : 0;
}
