// The blocked f32 scan (kernels/cpu/scan.h) under every ISA: exact-ish against float64 prefix sums
// at odd sizes, and the 1e-5 relative bound on 64M uniform [0, 1) values at 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "kernels/cpu/scan.h"
#include "kiln/core/thread_pool.h"
#include "support/testing.h"

namespace kiln::kernels::cpu {
namespace {

std::vector<float> uniform01(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

double max_rel_error(const std::vector<float>& x, const std::vector<float>& out) {
  double s = 0, worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    s += x[i];
    worst = std::max(worst, std::abs(out[i] - s) / std::max(std::abs(s), 1e-30));
  }
  return worst;
}

class ScanIsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << isa_name(GetParam()) << " not supported on this machine";
    override_.emplace(GetParam());
  }
  std::optional<IsaOverride> override_;
};

TEST_P(ScanIsaTest, OddSizesMatchFloat64) {
  for (int64_t n : {1, 7, 15, 16, 17, 33, 1000, 1023, 70001, 300007}) {
    std::vector<float> x = uniform01(n, static_cast<uint32_t>(n)), out(x.size());
    for (float& v : x) v -= 0.3f;  // mixed signs
    cumsum_f32(x.data(), out.data(), n);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
      s += x[static_cast<size_t>(i)];
      ASSERT_NEAR(out[static_cast<size_t>(i)], s, 1e-6 * (1 + std::abs(s)) + 1e-4) << "n=" << n << " i=" << i;
    }
  }
}

// The row sum behind global average pooling, at every tail length of the vector kernels.
TEST_P(ScanIsaTest, SumMatchesFloat64AtEveryTail) {
  const ScanKernelsF32 k = GetParam() == Isa::avx512 ? scan_kernels_f32_avx512()
                           : GetParam() == Isa::avx2 ? scan_kernels_f32_avx2()
                                                     : scan_kernels_f32_scalar();
  std::vector<float> x = uniform01(1100, 5);
  for (float& v : x) v -= 0.4f;
  for (int64_t n = 0; n <= 70; ++n) {
    for (int64_t off : {0, 1, 7}) {  // unaligned starts too
      double want = 0;
      for (int64_t i = 0; i < n; ++i) want += x[static_cast<size_t>(off + i)];
      EXPECT_NEAR(k.sum(x.data() + off, n), want, 1e-12 * (1 + static_cast<double>(n))) << "n=" << n << " off=" << off;
    }
  }
  double want = 0;
  for (int64_t i = 0; i < 1049; ++i) want += x[static_cast<size_t>(i)];
  EXPECT_NEAR(k.sum(x.data(), 1049), want, 1e-9);
}

TEST_P(ScanIsaTest, InPlace) {
  std::vector<float> x = uniform01(100003, 9), y = x;
  cumsum_f32(y.data(), y.data(), static_cast<int64_t>(y.size()));
  EXPECT_LE(max_rel_error(x, y), 1e-6);
}

TEST_P(ScanIsaTest, SixtyFourMillionAccurateAtOneAndTwoThreads) {
  const int64_t n = int64_t{1} << 26;
  std::vector<float> x = uniform01(n, 7), out(x.size());
  const int saved = get_num_threads();
  for (int t : {1, 2}) {
    set_num_threads(t);
    cumsum_f32(x.data(), out.data(), n);
    EXPECT_LE(max_rel_error(x, out), 1e-5) << t << " threads";
  }
  set_num_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(Isa, ScanIsaTest, ::testing::Values(Isa::scalar, Isa::avx2, Isa::avx512),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

}  // namespace
}  // namespace kiln::kernels::cpu
