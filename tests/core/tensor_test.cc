// Tensor metadata, views sharing storage, factories, version counters, type promotion.
#include <sched.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "core/chunks.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;

TEST(DType, PromotionFollowsNumPyAndPyTorch) {
  EXPECT_EQ(promote_types(DType::boolean, DType::u8), DType::u8);
  EXPECT_EQ(promote_types(DType::u8, DType::i8), DType::i32);
  EXPECT_EQ(promote_types(DType::i32, DType::i64), DType::i64);
  EXPECT_EQ(promote_types(DType::i64, DType::f16), DType::f16);
  EXPECT_EQ(promote_types(DType::f16, DType::bf16), DType::f32);
  EXPECT_EQ(promote_types(DType::f32, DType::f64), DType::f64);
  EXPECT_EQ(promote_types(DType::bf16, DType::bf16), DType::bf16);
  for (int a = 0; a < kNumDTypes; ++a)
    for (int b = 0; b < kNumDTypes; ++b)
      EXPECT_EQ(promote_types(static_cast<DType>(a), static_cast<DType>(b)),
                promote_types(static_cast<DType>(b), static_cast<DType>(a)));
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_KILN_ERROR(parse_dtype("float128"), "unknown dtype 'float128'");
}

TEST(DType, HalfAndBFloat16RoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.1f, 1e-3f}) {
    EXPECT_NEAR(static_cast<float>(Half(f)), f, std::abs(f) * 1e-3 + 1e-7) << f;
    EXPECT_NEAR(static_cast<float>(BFloat16(f)), f, std::abs(f) * 8e-3 + 1e-30) << f;
  }
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(1e6f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(NAN))));
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(NAN))));
  EXPECT_EQ(Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  // Round to nearest even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(Half(1.0f + 0x1p-11f).bits, 0x3c00);
  EXPECT_EQ(Half(1.0f + 3 * 0x1p-11f).bits, 0x3c02);
}

TEST(Tensor, FactoriesAndMetadata) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.strides(), (Strides{3, 1}));
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(z.data_ptr()) % kAlignment, 0u);
  EXPECT_EQ(ones({4}, DType::i64).sum().item<int64_t>(), 4);
  EXPECT_EQ(full({2}, 7, DType::i32).data<int32_t>()[1], 7);
  EXPECT_TRUE(all_close(arange(5), from_vector<double>({0, 1, 2, 3, 4})));
  EXPECT_EQ(arange(5).dtype(), DType::f32);
  EXPECT_TRUE(all_close(arange(1, 2, 0.25, DType::f64), from_vector<double>({1, 1.25, 1.5, 1.75})));
  EXPECT_TRUE(all_close(arange(10, 0, -3, DType::i64), from_vector<double>({10, 7, 4, 1})));
  EXPECT_TRUE(all_close(linspace(0, 1, 5), from_vector<double>({0, 0.25, 0.5, 0.75, 1})));
  EXPECT_TRUE(all_close(eye(2, 3), from_vector<double>({1, 0, 0, 0, 1, 0}, Shape{2, 3})));
  EXPECT_EQ(scalar_tensor(3.5).dim(), 0);
  EXPECT_EQ(scalar_tensor(3.5).item<double>(), 3.5);
  EXPECT_KILN_ERROR(zeros({2, -1}), "negative dimension");
  EXPECT_KILN_ERROR(arange(0, 1, 0), "step must be nonzero");
  EXPECT_KILN_ERROR(zeros({2}).data<double>(), "data<T>()", "f64", "f32");
  EXPECT_KILN_ERROR(zeros({2}).item<float>(), "item()", "one element");
}

TEST(Tensor, RandomIsSeededAndHasTheRightMoments) {
  manual_seed(42);
  Tensor a = randn({100000});
  manual_seed(42);
  Tensor b = randn({100000});
  EXPECT_TRUE(all_close(a, b, {0, 0}));
  double mean = a.mean().item<double>();
  double sd = std_dev(a).item<double>();
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(sd, 1.0, 0.02);
  Generator g(7);
  Tensor u = rand({100000}, DType::f64, &g);
  EXPECT_NEAR(u.mean().item<double>(), 0.5, 0.01);
  EXPECT_GE(u.min().item<double>(), 0.0);
  EXPECT_LT(u.max().item<double>(), 1.0);
  Tensor r = randint(-3, 4, {1000}, DType::i64, &g);
  EXPECT_GE(r.min().item<int64_t>(), -3);
  EXPECT_LE(r.max().item<int64_t>(), 3);
}

TEST(Tensor, ViewsShareStorageAndNeverCopy) {
  Tensor a = arange(24).reshape({2, 3, 4});
  Tensor t = a.transpose(0, 2);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.storage(), a.storage());
  EXPECT_FALSE(t.is_contiguous());
  Tensor p = a.permute({1, 2, 0});
  EXPECT_EQ(p.shape(), (Shape{3, 4, 2}));
  EXPECT_EQ(p.storage(), a.storage());
  Tensor s = a.slice(2, 1, 4, 2);  // [..., 1::2]
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(s.storage(), a.storage());
  EXPECT_TRUE(all_close(s.select(0, 1).select(0, 2), from_vector<double>({21, 23})));
  Tensor neg = a.slice(2, -1, -5, -1);  // reversed last dim
  EXPECT_TRUE(all_close(neg.select(0, 0).select(0, 0), from_vector<double>({3, 2, 1, 0})));
  Tensor e = from_vector<float>({1, 2, 3}).reshape({3, 1}).expand({3, 4});
  EXPECT_EQ(e.strides(), (Strides{1, 0}));
  EXPECT_TRUE(all_close(e.sum({1}), from_vector<double>({4, 8, 12})));
  Tensor u = a.unsqueeze(1);
  EXPECT_EQ(u.shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(u.squeeze().shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(u.squeeze(1).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(a.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(a.view({6, -1}).shape(), (Shape{6, 4}));
  EXPECT_EQ(a.view({6, -1}).storage(), a.storage());
  // Writing through a view changes the base and bumps the shared version.
  uint64_t v0 = a.version();
  s.fill_(-1);
  EXPECT_EQ(a.version(), v0 + 1);
  EXPECT_EQ(a.data<float>()[1], -1.0f);
  EXPECT_EQ(a.data<float>()[0], 0.0f);
}

TEST(Tensor, ReshapeCopiesOnlyWhenStridesForbidAView) {
  Tensor a = arange(12).reshape({3, 4});
  Tensor t = a.t();  // [4, 3], not contiguous
  EXPECT_KILN_ERROR(t.view({12}), "view", "cannot be viewed", "reshape()");
  Tensor r = t.reshape({12});
  EXPECT_NE(r.storage(), a.storage());
  EXPECT_TRUE(all_close(r, from_vector<double>({0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11})));
  // Splitting a transposed dim is still a view.
  Tensor b = arange(24).reshape({4, 6}).t();   // [6, 4] strides [1, 6]
  Tensor bv = b.view({2, 3, 4});
  EXPECT_EQ(bv.storage(), b.storage());
  EXPECT_EQ(bv.strides(), (Strides{3, 1, 6}));
  EXPECT_KILN_ERROR(a.reshape({5, -1}), "reshape", "[3, 4]", "12 elements");
  EXPECT_KILN_ERROR(a.reshape({-1, -1}), "only one dimension may be -1");
}

TEST(Tensor, ViewErrorsNameTheOp) {
  Tensor a = zeros({2, 3});
  EXPECT_KILN_ERROR(a.transpose(0, 2), "transpose", "axis 2", "rank 2");
  EXPECT_KILN_ERROR(a.permute({0, 0}), "permute", "twice");
  EXPECT_KILN_ERROR(a.squeeze(0), "squeeze", "size 2");
  EXPECT_KILN_ERROR(a.expand({3, 3}), "expand", "[2, 3]", "[3, 3]");
  EXPECT_KILN_ERROR(a.slice(0, 0, 1, 0), "slice", "step cannot be 0");
  EXPECT_KILN_ERROR(a.select(1, 3), "select", "index 3");
  EXPECT_KILN_ERROR(a.broadcast_to({3}), "broadcast");
  // Axis 0 / -1 may name a 0-d tensor itself (sum, softmax), but there is no dim to size, slice or index.
  Tensor s = scalar_tensor(2.5);
  EXPECT_KILN_ERROR(s.size(0), "size(0)", "0-d");
  EXPECT_KILN_ERROR(s.stride(-1), "stride(-1)", "0-d");
  EXPECT_KILN_ERROR(s.slice(0, 0, 1), "slice", "0-d tensor");
  Tensor st = s.transpose(0, -1);  // as torch.transpose: the tensor itself
  EXPECT_EQ(st.shape(), Shape{});
  EXPECT_EQ(st.item<double>(), 2.5);
}

TEST(Tensor, ShapesWhoseStridesOverflowAreRefused) {
  EXPECT_EQ(empty({0, 5}).numel(), 0);
  EXPECT_EQ(empty({0, int64_t{1} << 40}).numel(), 0);  // strides fit
  EXPECT_KILN_ERROR(empty({0, int64_t{1} << 62}), "empty", "too large", "overflow");  // no elements, but 4-byte strides
  EXPECT_KILN_ERROR(empty({int64_t{1} << 31, 0, int64_t{1} << 31, 4}), "empty", "too large");
  EXPECT_KILN_ERROR(empty({int64_t{1} << 61}, TensorOptions(DType::f64)), "empty", "of f64 is too large");
}

TEST(Tensor, ContiguousCloneAndCast) {
  Tensor a = arange(6).reshape({2, 3});
  Tensor t = a.t();
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_TRUE(all_close(c, t));
  EXPECT_TRUE(a.contiguous().is_same(a));
  Tensor cl = a.clone();
  EXPECT_NE(cl.storage(), a.storage());
  Tensor f = from_vector<float>({-1.7f, 2.9f, 0.0f, 300.0f});
  EXPECT_TRUE(all_close(f.to(DType::i32), from_vector<double>({-1, 2, 0, 300})));
  EXPECT_TRUE(all_close(f.to(DType::boolean), from_vector<double>({1, 1, 0, 1})));
  EXPECT_TRUE(all_close(f.to(DType::f16).to(DType::f32), f, {1e-3, 0}));
  for (DType from : testing::kAllDTypes)
    for (DType to : testing::kAllDTypes) {
      Tensor x = testing::random_tensor({33}, from, 3, 1, 9);
      // Expected per NumPy's astype: floats truncate toward zero into integers, bool is != 0.
      std::vector<double> want = ref::values(x);
      for (double& v : want) v = to == DType::boolean ? (v != 0) : is_integral(to) ? std::trunc(v) : v;
      EXPECT_TRUE(all_close(x.to(to), from_vector<double>(want), testing::tol_for(to)))
          << dtype_name(from) << " -> " << dtype_name(to);
    }
}

TEST(Tensor, CopyBroadcastsAndConverts) {
  Tensor dst = zeros({2, 3}, DType::f64);
  dst.copy_(from_vector<int32_t>({1, 2, 3}));
  EXPECT_TRUE(all_close(dst, from_vector<double>({1, 2, 3, 1, 2, 3}, Shape{2, 3})));
  EXPECT_KILN_ERROR(dst.copy_(ones({4})), "copy_", "[4]", "[2, 3]");
}

TEST(Tensor, PrintsLikeNumPy) {
  EXPECT_EQ(from_vector<float>({1, 2, 3}).str(), "tensor([1., 2., 3.])");
  EXPECT_EQ(from_vector<float>({0.25f, -1.5f}).str(), "tensor([ 0.25, -1.5 ])");
  EXPECT_EQ(arange(6, DType::i64).reshape({2, 3}).str(), "tensor([[0, 1, 2],\n        [3, 4, 5]])");
  EXPECT_EQ(from_vector<int32_t>({1, 2}).str(), "tensor([1, 2], dtype=i32)");
  EXPECT_EQ(from_vector<bool>({true, false}).str(), "tensor([ True, False], dtype=bool)");
  EXPECT_EQ(scalar_tensor(2.5).str(), "tensor(2.5)");
  EXPECT_EQ(from_vector<float>({1e-5f, 1.0f}).str(), "tensor([1.e-05, 1.e+00])");
  std::string big = arange(2000).str();
  EXPECT_NE(big.find("..."), std::string::npos);
  EXPECT_NE(big.find("1999."), std::string::npos);
  EXPECT_EQ(zeros({0}).str(), "tensor([])");
}

TEST(Allocator, ReusesFreedBlocks) {
  Allocator& a = allocator_for(Device::cpu());
  { Tensor t = empty({1 << 20}); }
  AllocatorStats before = a.stats();
  { Tensor t = empty({1 << 20}); }
  AllocatorStats after = a.stats();
  EXPECT_EQ(after.allocations, before.allocations + 1);
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(after.cache_hits, before.cache_hits + 1);
#endif
#if !KILN_HAS_CUDA
  EXPECT_KILN_ERROR(allocator_for(Device::cuda()), "cuda");  // with CUDA: tests/cuda/cuda_test.cc
#endif
}

TEST(ThreadPool, ParallelForCoversTheRangeOnce) {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    EXPECT_EQ(get_num_threads(), threads);
    std::vector<int> hits(10007, 0);
    parallel_for(0, 10007, 100, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
    });
    for (int h : hits) ASSERT_EQ(h, 1);
  }
  // Odd sizes, an offset range and grains below, near and past the range: every item once, every
  // chunk but the range's last at least the grain.
  set_num_threads(2);
  for (int64_t n : {1, 7, 33, 1000})
    for (int64_t grain : {1, 5, 100, 5000}) {
      std::vector<int> hits(static_cast<size_t>(n), 0);
      std::mutex mu;
      parallel_for(5, 5 + n, grain, [&](int64_t b, int64_t e) {
        std::lock_guard<std::mutex> g(mu);
        EXPECT_TRUE(e - b >= grain || e == 5 + n) << "chunk [" << b << ", " << e << ") grain " << grain;
        for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i - 5)];
      });
      for (int h : hits) ASSERT_EQ(h, 1) << "n " << n << " grain " << grain;
    }
  EXPECT_THROW(parallel_for(0, 1000, 1, [](int64_t, int64_t) { throw Error("boom"); }), Error);
  set_num_threads(available_cores());
  EXPECT_KILN_ERROR(set_num_threads(0), "n >= 1");
}

// Note [Chunks that shrink]: every unit once, the front and back ends meeting, chunks capped at
// 1 / per_thread of a thread's part, shrinking at the end down to the minimum, and ranges past
// 2^32 units handed out whole.
TEST(ThreadPool, TwoEndedChunksShrinkTowardsTheEnd) {
  for (int64_t n : {1, 7, 33, 1000, 100003})
    for (int64_t min : {1, 3, 50}) {
      TwoEndedChunks q(n, min, 2, 8);
      std::vector<int> hits(static_cast<size_t>(n), 0);
      std::vector<int64_t> sizes;
      int64_t front_end = 0, back_start = n;
      for (int turn = 0;; ++turn) {
        int64_t u0 = -1, u1 = -1;
        if (!q.take(turn % 2, u0, u1)) break;
        ASSERT_TRUE(0 <= u0 && u0 < u1 && u1 <= n) << u0 << " " << u1;
        if (turn % 2 == 0) {
          EXPECT_EQ(u0, front_end);
          front_end = u1;
        } else {
          EXPECT_EQ(u1, back_start);
          back_start = u0;
        }
        EXPECT_GE(u1 - u0, std::min(min, n));
        EXPECT_LT(u1 - u0, std::max<int64_t>(min, (n + 15) / 16) + min);
        sizes.push_back(u1 - u0);
        for (int64_t i = u0; i < u1; ++i) ++hits[static_cast<size_t>(i)];
      }
      for (int h : hits) ASSERT_EQ(h, 1) << "n " << n << " min " << min;
      EXPECT_LT(sizes.back(), 2 * min) << "n " << n << " min " << min;
      if (n >= 1000 && min == 1) {
        EXPECT_LT(sizes.back(), sizes.front());
      }
    }
  const int64_t huge = (int64_t{1} << 33) + 5;
  TwoEndedChunks q(huge, 1, 2, 8);
  int64_t covered = 0, u0 = 0, u1 = 0, last = 0;
  for (int turn = 0; q.take(0, u0, u1); ++turn) {
    ASSERT_EQ(u0, last);
    covered += u1 - u0, last = u1;
  }
  EXPECT_EQ(covered, huge);
}

// take()'s `after`: where the same thread's next chunk begins when the other end takes nothing in
// between, from either end, and -1 with nothing left; the front's guess holds whatever the back
// takes, its chunks being contiguous.
TEST(ThreadPool, TwoEndedChunksSayWhereTheNextChunkBegins) {
  for (int64_t n : {1, 7, 33, 1000})
    for (int t : {0, 1}) {
      TwoEndedChunks q(n, 1, 2, 8);
      int64_t u0 = -1, u1 = -1, after = -2, expected = -2;
      int takes = 0;
      while (q.take(t, u0, u1, &after)) {
        if (expected != -2) {
          EXPECT_EQ(u0, expected) << "n " << n << " thread " << t << " take " << takes;
        }
        expected = after;
        ++takes;
      }
      EXPECT_EQ(expected, -1) << "n " << n << " thread " << t;
      EXPECT_GT(takes, n >= 33 ? 2 : 0);
    }
  TwoEndedChunks q(1000, 1, 2, 8);
  int64_t u0 = 0, u1 = 0, after = 0, front_after = -1;
  for (int turn = 0; q.take(turn % 2, u0, u1, &after); ++turn) {
    if (turn % 2 == 0) {
      if (turn > 0 && front_after >= 0) {
        EXPECT_EQ(u0, front_after);
      }
      front_after = after;
    }
  }
}

// Note [Loops by reference]: a FunctionRef calls the callable it was made from (its state
// included, results returned), and the pool runs a lambda of many captures through one on every
// thread, each index once, its captured variables read and written where they are.
TEST(ThreadPool, FunctionRefCallsTheLambdaItRefersTo) {
  int calls = 0;
  auto count = [&calls](int a, int b) { return ++calls * 100 + a * b; };
  FunctionRef<int(int, int)> f(count);
  EXPECT_EQ(f(3, 4), 112);
  FunctionRef<int(int, int)> g = f;  // a copy refers to the same lambda
  EXPECT_EQ(g(5, 6), 230);
  EXPECT_EQ(calls, 2);
  set_num_threads(2);
  const int64_t n = 1000, offset = 7, scale = 3;
  const std::string tag = "x";
  std::vector<int64_t> out(n, -1);
  std::vector<int> seen(2, 0);
  std::atomic<int> ranges{0};
  parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
    ranges.fetch_add(1);
    for (int64_t i = b; i < e; ++i) out[static_cast<size_t>(i)] = i * scale + offset + static_cast<int64_t>(tag.size());
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], i * scale + offset + 1) << i;
  EXPECT_GE(ranges.load(), 1);
  parallel_run(2, [&](int i, int threads) {
    EXPECT_EQ(threads, 2);
    seen[static_cast<size_t>(i)] += 1;
  });
  EXPECT_EQ(seen, (std::vector<int>{1, 1}));
  set_num_threads(available_cores());
}

// Note [Chunks on lines of their own]: each thread starts at the front of its own share (at a
// multiple of `min`), then takes from others' when its own is empty; every unit once, no chunk
// under `min` but one that ends at n, and a thread that stalls after its first chunk has the rest
// of its share taken by the others.
TEST(ThreadPool, OwnedChunksTakeOwnSharesFirstThenSteal) {
  for (int threads : {1, 2, 3, 5})
    for (int64_t n : {1, 7, 33, 1000, 100003})
      for (int64_t min : {1, 3, 50})
        for (int slow : {-1, 0}) {  // -1: every thread in turn; 0: thread 0 takes once, then stops
          if (slow == 0 && threads == 1) continue;
          std::vector<ChunkShare> shares(static_cast<size_t>(threads));
          OwnedChunks q(n, min, threads, 8, shares.data());
          std::vector<int> hits(static_cast<size_t>(n), 0);
          std::vector<int64_t> next(static_cast<size_t>(threads), -1);  // the end of t's last chunk (-1: none)
          std::vector<bool> done(static_cast<size_t>(threads), false);
          int active = threads, took0 = 0;
          for (int turn = 0; active > 0; ++turn) {
            const int t = turn % threads;
            if (done[static_cast<size_t>(t)]) continue;
            if (t == slow && took0 == 1) {  // stalled in its first chunk: the others finish its share
              done[0] = true, --active;
              continue;
            }
            int64_t u0 = -1, u1 = -1;
            if (!q.take(t, u0, u1)) {
              done[static_cast<size_t>(t)] = true, --active;
              continue;
            }
            if (t == 0) ++took0;
            ASSERT_TRUE(0 <= u0 && u0 < u1 && u1 <= n) << u0 << " " << u1;
            EXPECT_TRUE(u1 - u0 >= min || u1 == n) << "[" << u0 << ", " << u1 << ") min " << min;
            if (next[static_cast<size_t>(t)] < 0 && n >= 2 * threads * min) {  // first: its share's front
              EXPECT_EQ(u0, n * t / threads / min * min) << "threads " << threads << " n " << n << " t " << t;
            }
            next[static_cast<size_t>(t)] = u1;
            for (int64_t i = u0; i < u1; ++i) ++hits[static_cast<size_t>(i)];
          }
          int64_t missing = 0;
          for (int h : hits) {
            ASSERT_LE(h, 1) << "n " << n << " min " << min;
            missing += h == 0;
          }
          // Every unit taken: with slow = 0, the rest of thread 0's share by the others. (5 threads:
          // shares past the inline ones, on the heap.)
          EXPECT_EQ(missing, 0) << "threads " << threads << " n " << n << " min " << min << " slow " << slow;
        }
}

// Note [Loops taken, not dealt]: the calling thread stalls in its first chunk until the other has
// done everything else, which it can only do by taking the chunks a fixed split would have dealt
// to the caller.
TEST(ThreadPool, ParallelForHandsAStalledThreadsChunksToTheOther) {
  set_num_threads(2);
  const int64_t n = 1000;
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int64_t> done{0}, by_caller{0};
  parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
    if (std::this_thread::get_id() == caller) {
      by_caller += e - b;
      const auto t0 = std::chrono::steady_clock::now();
      while (done.load() < n - (e - b) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
        std::this_thread::yield();
    }
    done += e - b;
  });
  EXPECT_EQ(done.load(), n);
  EXPECT_LT(by_caller.load(), n / 4);
  set_num_threads(available_cores());
}

// Note [Workers kept off the caller's CPU]: the worker pins itself to one CPU and the caller moves
// there too; the pool then pins the worker to another CPU (without it, the worker stays).
TEST(ThreadPool, AWorkerOnTheCallersCpuIsMovedOff) {
  if (available_cores() < 2) GTEST_SKIP() << "one CPU";
  const char* env = std::getenv("KILN_PIN_THREADS");
  if (env != nullptr && std::string(env) == "0") GTEST_SKIP() << "KILN_PIN_THREADS=0";
  set_num_threads(2);
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  std::atomic<int> worker_cpu{-1};
  parallel_run(2, [&](int i, int) {
    if (i == 1) {
      ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    }
  });
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  auto region = [&] {
    parallel_run(2, [&](int i, int) {
      if (i == 1) {
        worker_cpu = sched_getcpu();
      }
    });
  };
  // The worker runs on `first` (its own pin) until the pool, after a region in which it found the
  // two together, moves it; that may have happened already after the pinning region, on whichever
  // CPU the caller was then. Either way the worker is off `first` from the second region on.
  region();
  region();
  EXPECT_NE(worker_cpu.load(), first);
  region();
  EXPECT_NE(worker_cpu.load(), first);
  EXPECT_EQ(sched_getcpu(), first);  // the caller stays where it was put
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  set_num_threads(available_cores());
}

// Note [The caller's frames fetched at once]: parallel_for's chunk shares belong to the pool, so a
// loop from a second thread while the pool runs another's (run inline) must not take them: two
// threads loop at once, thousands of times, and each covers its own range exactly once.
TEST(ThreadPool, TwoCallersLoopingAtOnceEachCoverTheirRangeOnce) {
  set_num_threads(2);
  auto loops = [](int seed) {
    volatile int sink = 0;
    for (int rep = 0; rep < 3000; ++rep) {
      const int64_t n = 37 + (rep * 7 + seed * 13) % 200;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          for (int spin = 0; spin < 100; ++spin) sink = spin;  // long enough for the loops to overlap
          hits[static_cast<size_t>(i)].fetch_add(1);
        }
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "caller " << seed << " unit " << i;
    }
  };
  std::thread other([&] { loops(1); });
  loops(0);
  other.join();
  set_num_threads(available_cores());
}

// Note [One line hands out a job]: jobs of every width on a pool of 3 threads (more than this
// machine's cores, so workers are often descheduled between reading a job and checking it), back
// to back: each job runs each of its indices exactly once, on distinct threads, and never an
// index past its width; workers left to fall asleep wake for the next job; an exception on a
// worker reaches the caller once and not the job after it.
TEST(ThreadPool, EveryJobRunsEachIndexOnceOnItsOwnThread) {
  set_num_threads(3);
  std::array<std::atomic<int>, 3> runs{};
  std::array<std::atomic<std::thread::id>, 3> by{};
  auto job = [&](int n) {
    for (auto& r : runs) r.store(0);
    parallel_run(n, [&](int i, int total) {
      ASSERT_EQ(total, n);
      ASSERT_LT(i, n);
      runs[static_cast<size_t>(i)].fetch_add(1);
      by[static_cast<size_t>(i)].store(std::this_thread::get_id());
    });
    for (int i = 0; i < 3; ++i) ASSERT_EQ(runs[static_cast<size_t>(i)].load(), i < n ? 1 : 0) << "width " << n;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < i; ++j) ASSERT_NE(by[static_cast<size_t>(i)].load(), by[static_cast<size_t>(j)].load());
  };
  for (int rep = 0; rep < 20000; ++rep) job(1 + rep % 3);
  for (int rep = 0; rep < 3; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // past the workers' spin: asleep
    job(3);
    job(2);
  }
  for (int rep = 0; rep < 3; ++rep) {
    EXPECT_KILN_ERROR(parallel_run(3, [](int i, int) { if (i == 2) throw Error("worker two failed"); }),
                      "worker two failed");
    job(3);  // no stale error
  }
  set_num_threads(available_cores());
}

}  // namespace
}  // namespace kiln
