// The CUDA back end: allocation (a clear error without a GPU), copies between devices, and the
// GPU "add" kernel against the CPU kernel on odd sizes up to 1e6. Tests that need a GPU skip when
// kiln::cuda_available() is false; the rest check the no-GPU behaviour.
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;

const Device kGpu = Device::cuda(0);

TEST(Cuda, AddHasACudaKernelForF32) {
  const KernelEntry* k = op("add").find_kernel(DeviceType::cuda, DType::f32);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->tactic, "default");
  EXPECT_EQ(op("add").find_kernel(DeviceType::cuda, DType::f64), nullptr);
}

TEST(Cuda, AllocationWorksOnAGpuAndIsAClearErrorWithout) {
  if (!cuda_available()) {
    EXPECT_KILN_ERROR(empty({4}, TensorOptions(DType::f32, kGpu)), "cuda:0", "CUDA device", "cuda_available()");
    EXPECT_KILN_ERROR(ones({4}).to(kGpu), "cuda:0", "CUDA device");
    // Zero bytes need no device.
    EXPECT_EQ(empty({0}, TensorOptions(DType::f32, kGpu)).numel(), 0);
    return;
  }
  Allocator& a = allocator_for(kGpu);
  AllocatorStats before = a.stats();
  for (int64_t n : {1, 7, 1000, 1 << 20}) {
    Tensor t = empty({n}, TensorOptions(DType::f32, kGpu));
    EXPECT_EQ(t.device(), kGpu);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 256, 0u);
  }
  EXPECT_EQ(a.stats().allocations, before.allocations + 4);
  EXPECT_EQ(a.stats().bytes_in_use, before.bytes_in_use);  // all returned to the cache
  EXPECT_KILN_ERROR(empty({2}, TensorOptions(DType::f32, kGpu)).data<float>(), "data<T>()", "cuda:0", ".cpu()");
}

TEST(Cuda, CopiesRoundTripEveryDType) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (DType t : testing::kAllDTypes) {
    Tensor x = testing::random_tensor({33, 7}, t, 1);
    Tensor g = x.to(kGpu);
    EXPECT_EQ(g.device(), kGpu);
    EXPECT_EQ(g.dtype(), t);
    EXPECT_TRUE(all_close(g.cpu(), x, {0, 0})) << dtype_name(t);
    Tensor v = x.transpose(0, 1);  // a non-contiguous CPU view is made contiguous on the way
    EXPECT_TRUE(all_close(v.to(kGpu).cpu(), v, {0, 0})) << dtype_name(t);
  }
}

TEST(Cuda, AddMatchesTheCpuKernel) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 10;
  for (int64_t n : {1, 7, 33, 1000, 1023, 65537, 1000000}) {
    Tensor a = testing::random_tensor({n}, DType::f32, seed++), b = testing::random_tensor({n}, DType::f32, seed++);
    Tensor g = add(a.to(kGpu), b.to(kGpu));
    EXPECT_EQ(g.device(), kGpu);
    EXPECT_TRUE(all_close(g.cpu(), add(a, b), {0, 0})) << "n = " << n;  // one IEEE add: bitwise equal
  }
  Tensor m = testing::random_tensor({37, 29}, DType::f32, 3);
  Tensor s = testing::random_tensor({1}, DType::f32, 4);
  EXPECT_TRUE(all_close(add(m.to(kGpu), s.to(kGpu)).cpu(), add(m, s), {0, 0}));
  EXPECT_TRUE(all_close(add(s.to(kGpu), m.to(kGpu)).cpu(), add(s, m), {0, 0}));
  Tensor row = testing::random_tensor({1, 29}, DType::f32, 5), vec = testing::random_tensor({29}, DType::f32, 6);
  EXPECT_TRUE(all_close(add(row.to(kGpu), vec.to(kGpu)).cpu(), add(row, vec), {0, 0}));
}

// The kernel moves float4s when every operand it reads per element is 16-byte aligned; views that
// start 1-3 floats into their storage are contiguous but not aligned, and take the scalar loop.
TEST(Cuda, AddMatchesTheCpuKernelOnUnalignedViews) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Tensor a = testing::random_tensor({1003}, DType::f32, 11), b = testing::random_tensor({1003}, DType::f32, 12);
  Tensor s = testing::random_tensor({1}, DType::f32, 13);
  Tensor ga = a.to(kGpu), gb = b.to(kGpu), gs = s.to(kGpu);
  for (int64_t off : {0, 1, 2, 3}) {
    for (int64_t len : {1, 3, 4, 5, 999}) {
      Tensor va = ga.slice(0, off, off + len), vb = gb.slice(0, 3 - off, 3 - off + len);
      Tensor ca = a.slice(0, off, off + len), cb = b.slice(0, 3 - off, 3 - off + len);
      EXPECT_TRUE(all_close(add(va, vb).cpu(), add(ca, cb), {0, 0})) << off << " " << len;
      EXPECT_TRUE(all_close(add(va, gs).cpu(), add(ca, s), {0, 0})) << off << " " << len;
      EXPECT_TRUE(all_close(add(gs, vb).cpu(), add(s, cb), {0, 0})) << off << " " << len;
    }
  }
}

TEST(Cuda, UnsupportedGpuCallsAreErrorsNamingTheOp) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Tensor a = testing::random_tensor({4, 3}, DType::f32, 7);
  Tensor g = a.to(kGpu);
  EXPECT_KILN_ERROR(add(a, g), "add", "cuda:0", "cpu", "one device");
  Tensor d = testing::random_tensor({4, 3}, DType::f64, 9).to(kGpu);
  EXPECT_KILN_ERROR(add(d, d), "add", "no kernel for dtype f64 on cuda:0", "f32");
  EXPECT_KILN_ERROR(add(g, testing::random_tensor({3}, DType::f32, 8).to(kGpu)), "add on cuda:0", "[4, 3]", "[3]");
  EXPECT_KILN_ERROR(add(g.transpose(0, 1), g.transpose(0, 1)), "add on cuda:0", "contiguous");
}

}  // namespace
}  // namespace kiln
