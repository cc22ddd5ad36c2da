// `kiln demo`: a short tour of the array layer, using only the public API: creation, broadcasting,
// views that share storage, reductions, and a timed matmul.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

#include "demo.h"
#include "kiln/kiln.h"

namespace {

void heading(const char* title) { std::cout << "\n== " << title << " ==\n"; }

// Prints "expr -> dtype[shape]   # note" and then the tensor.
void show(const std::string& expr, const kiln::Tensor& t, const std::string& note = "") {
  std::string line = expr + " -> " + std::string(kiln::dtype_name(t.dtype())) + kiln::shape_str(t.shape());
  if (!note.empty()) line += std::string(line.size() < 44 ? 44 - line.size() : 1, ' ') + "# " + note;
  std::cout << line << "\n" << t << "\n";
}

std::string yes_no(bool b) { return b ? "yes" : "no"; }

}  // namespace

int run_demo(const DemoOptions& opt) {
  using namespace kiln;
  if (opt.threads > 0) set_num_threads(opt.threads);
  std::cout << "kiln " << kVersion << " demo: the array layer (" << get_num_threads() << " threads, seed " << opt.seed
            << ")\n";

  heading("1. creation");
  Tensor a = arange(6).reshape({2, 3});
  show("a = arange(6).reshape({2, 3})", a);
  Generator gen(opt.seed);
  Tensor r = randn({2, 3}, DType::f32, &gen);
  show("r = randn({2, 3}, f32, &gen)", r, "Generator gen(seed): reproducible");
  show("eye(3, std::nullopt, i64)", eye(3, std::nullopt, DType::i64));
  show("linspace(0, 1, 5, f64)", linspace(0, 1, 5, DType::f64));

  heading("2. broadcasting (NumPy rules; dtypes promote like NumPy/PyTorch)");
  Tensor row = from_vector<float>({10, 20, 30});
  Tensor col = from_vector<int32_t>({1, 2}, Shape{2, 1});
  show("a + row", a + row, "[2, 3] + [3]: row repeats down");
  show("a * col", a * col, "f32[2, 3] * i32[2, 1]: promotes to f32");
  show("col + from_vector<double>({0.5})", col + from_vector<double>({0.5}), "i32 + f64 -> f64");

  heading("3. views share storage (no copies)");
  Tensor big = arange(12).reshape({3, 4});
  Tensor tr = big.t();
  Tensor every_other = big.slice(1, 0, 4, 2);
  std::cout << "big = arange(12).reshape({3, 4}); strides " << shape_str(big.strides()) << "\n";
  std::cout << "big.t():            shape " << shape_str(tr.shape()) << ", strides " << shape_str(tr.strides())
            << ", contiguous " << yes_no(tr.is_contiguous()) << ", same storage " << yes_no(tr.storage() == big.storage())
            << "\n";
  std::cout << "big.slice(1, 0, 4, 2): shape " << shape_str(every_other.shape()) << ", strides "
            << shape_str(every_other.strides()) << ", same storage " << yes_no(every_other.storage() == big.storage())
            << "\n";
  uint64_t v0 = big.version();
  every_other.fill_(-1);
  std::cout << "every_other.fill_(-1) writes through the view; big's version " << v0 << " -> " << big.version()
            << "\n";
  show("big", big);
  Tensor packed = tr.contiguous();
  std::cout << "big.t().contiguous() copies: same storage " << yes_no(packed.storage() == big.storage()) << "\n";

  heading("4. reductions");
  Tensor x = randn({4, 5}, DType::f32, &gen);
  show("x = randn({4, 5})", x);
  show("x.sum({1})", x.sum({1}));
  show("x.mean({0}, keepdim=true)", x.mean({0}, true));
  show("x.max()", x.max());
  show("x.argmax(1)", x.argmax(1));
  show("cumsum(arange(1, 6, 1), 0)", cumsum(arange(1, 6, 1), 0));

  heading("5. matmul");
  const int64_t n = opt.matmul_size;
  Tensor ma = randn({n, n}, DType::f32, &gen), mb = randn({n, n}, DType::f32, &gen);
  Tensor mc = matmul(ma, mb);  // warm-up (and first-touch of the output memory)
  int reps = 0;
  double seconds = 0;
  auto t0 = std::chrono::steady_clock::now();
  do {
    mc = matmul(ma, mb);
    ++reps;
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (seconds < 0.5 && reps < 50);
  const double per_call = seconds / reps;
  const double gflops = 2.0 * static_cast<double>(n) * n * n / per_call * 1e-9;
  // Spot-check a few entries against float64 dot products.
  const float* pa = ma.data<float>();
  const float* pb = mb.data<float>();
  const float* pc = mc.data<float>();
  double worst = 0;
  for (int64_t k = 0; k < 8; ++k) {
    int64_t i = (k * 131) % n, j = (k * 71 + 3) % n;
    double ref = 0, mag = 0;
    for (int64_t p = 0; p < n; ++p) {
      ref += static_cast<double>(pa[i * n + p]) * pb[p * n + j];
      mag += std::abs(static_cast<double>(pa[i * n + p]) * pb[p * n + j]);
    }
    worst = std::max(worst, std::abs(pc[i * n + j] - ref) / mag);
  }
  std::printf("matmul f32 [%lld, %lld] x [%lld, %lld]: %.3f ms per call (%d calls), %.2f GFLOP/s\n",
              static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(n),
              static_cast<long long>(n), per_call * 1e3, reps, gflops);
  std::printf("spot check against float64: worst relative error %.2e %s\n", worst, worst < 1e-5 ? "(ok)" : "(TOO LARGE)");
  return worst < 1e-5 ? 0 : 1;
}
