// The direct NCHW convolution (kernels/cpu/conv.h: conv2d_direct_f32, Note [Direct convolution])
// against the float64 reference: unit and larger strides (the polyphase copy), asymmetric padding,
// dilation, groups, 1x1 with and without the copy, a ResNet stem, output widths with and without a
// halo (AVX-512's column tiles store across one 16 columns or wider: Note [Storing across the
// halo]), channel counts deep enough to slice K and rows past one mc block, images in parallel and
// one image split between threads by columns or by channels, the column tiles (AVX-512's 12 x 32
// and 8 x 48, AVX2's 6 x 16 and 4 x 24: Note [Direct convolution tiles]) and output pixels as
// rows (Note [Pixels as rows]) on every case, planes narrower than the halo (Note [A narrower
// halo]), raw and prepacked filters, and the epilogue. Runs on every ISA of the machine that has
// the direct kernel (AVX-512, AVX2); scalar must say it has none.
//
// Tolerance: each element within eps * (the same convolution of |x|, |w|, |bias|, plus |residual|)
// with eps = 1e-5: a few f32 roundings per product, summed in a different order than the reference.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/isa.h"
#include "kiln/core/thread_pool.h"
#include "support/conv_case.h"
#include "support/testing.h"

namespace kiln {
namespace {

using kernels::cpu::Conv2dEpilogue;
using kernels::cpu::Conv2dParams;
using kernels::cpu::GemmActivation;
using testing::abs_values;
using testing::close_by_magnitude;
using testing::random_tensor;

using Case = testing::ConvCase;
using testing::conv_params_of;

const std::vector<Case> kCases = {
    {{1, 1, 1, 1}, {1, 1, 1, 1}},                                     // everything size 1: x read in place
    {{2, 3, 7, 9}, {4, 3, 3, 3}},                                     // no padding, halo of 2
    {{2, 3, 9, 11}, {5, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}},              // stride 2: four phases
    {{1, 2, 7, 8}, {3, 2, 3, 2}, {1, 2}, {0, 2, 1, 0}},               // asymmetric stride and padding
    {{1, 3, 11, 9}, {2, 3, 3, 3}, {1, 1}, {2, 1, 2, 1}, {2, 3}},      // dilation
    {{1, 4, 10, 9}, {2, 4, 3, 3}, {3, 2}, {1, 1, 1, 1}, {2, 1}},      // dilation with stride 3 x 2
    {{1, 4, 8, 7}, {6, 2, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2},    // groups
    {{2, 5, 7, 7}, {33, 5, 1, 1}},                                    // 1x1: x in place, y direct
    {{1, 5, 7, 7}, {3, 5, 1, 1}, {2, 2}},                             // 1x1 strided: one phase
    {{1, 6, 5, 5}, {7, 6, 1, 1}, {1, 1}, {1, 1, 1, 1}},               // 1x1 padded: a copy
    {{1, 3, 33, 33}, {7, 3, 7, 7}, {2, 2}, {3, 3, 3, 3}},             // a ResNet stem, odd size
    {{1, 100, 9, 9}, {150, 100, 3, 3}, {1, 1}, {1, 1, 1, 1}},         // K in 2 slices, rows in 2 mc blocks
    {{1, 1000, 3, 5}, {13, 1000, 1, 1}},                              // 1x1 K in 2 slices, 15 columns
    {{1, 17, 33, 33}, {32, 17, 3, 3}, {1, 1}, {1, 1, 1, 1}},          // one image: split by columns, 8 x 48
    {{1, 64, 7, 7}, {256, 64, 3, 3}, {1, 1}, {1, 1, 1, 1}},           // one image: split by channels, 12 x 32
    {{3, 16, 20, 20}, {24, 8, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2},  // 3 images: each split
    {{4, 8, 12, 12}, {16, 8, 3, 3}, {2, 2}, {1, 1, 1, 1}},            // 4 images in parallel, 8 x 48
    {{1, 9, 6, 70}, {64, 9, 3, 3}, {1, 1}, {1, 1, 1, 1}},             // 8 x 48 with a ragged last tile
    {{1, 3, 6, 10}, {5, 3, 3, 3}, {1, 1}, {1, 2, 1, 0}},              // reads spill into the next row's pad
    {{2, 4, 9, 13}, {6, 4, 5, 5}, {1, 1}, {2, 2, 2, 2}},              // 5x5: 2 dropped columns, not 4
    {{1, 3, 6, 10}, {5, 3, 3, 3}, {1, 1}, {0, 0, 0, 2}},              // right padding only: no spill
    {{2, 4, 13, 11}, {5, 4, 3, 2}, {2, 3}, {0, 0, 0, 0}, {2, 1}},     // unpadded, strided, dilated: pixels read x
    {{1, 64, 14, 14}, {96, 64, 1, 1}, {2, 2}},                        // a 1x1 stride-2 projection
    {{2, 144, 32, 32}, {100, 144, 1, 1}},                             // images past 512 KiB: pixel tiles outer
    {{2, 64, 48, 48}, {20, 64, 3, 3}, {1, 1}, {1, 1, 1, 1}},          // tiles outer: 3 K slices per block of tiles
    {{1, 13, 14, 14}, {8, 13, 11, 11}, {1, 1}, {5, 5, 5, 5}},         // 11x11: K slices of 7 and 6 channels
    {{1, 16, 40, 41}, {32, 16, 3, 3}, {2, 2}, {1, 1, 1, 1}},          // one strided image split by pixel rows
    {{2, 40, 7, 7}, {250, 40, 1, 1}},                                 // pixel panels, a ragged last pixel tile
    {{1, 300, 5, 5}, {260, 300, 1, 1}},                               // pixel panels in 2 K slices, one image split
    {{3, 24, 9, 9}, {250, 24, 1, 1}, {2, 2}},                         // strided pixel panels, 3 images
    {{1, 32, 14, 14}, {64, 32, 3, 3}, {1, 1}, {1, 1, 1, 1}},          // border tiles skip taps: inner pixels first
    {{2, 24, 7, 7}, {40, 24, 3, 3}, {1, 1}, {1, 1, 1, 1}},            // 7 x 7: tiles skip taps by rows
    {{1, 8, 40, 40}, {16, 8, 3, 3}, {1, 1}, {1, 1, 1, 1}},            // 1600 pixels: inner first, tiles across rows
    {{1, 4, 3, 3}, {8, 4, 3, 3}, {1, 1}, {3, 3, 3, 3}},               // windows of only padding: the bias alone
};


const float* f32(const Tensor& t) { return t.defined() ? static_cast<const float*>(t.data_ptr()) : nullptr; }

Tensor run_direct(const Case& c, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dEpilogue& ep,
                  bool prepacked) {
  const Conv2dParams p = conv_params_of(c);
  Tensor y = full({p.n, p.k, p.ho, p.wo}, 123.0, TensorOptions(DType::f32));  // every element must be written
  std::vector<float> packed;
  if (prepacked) {
    packed.resize(kernels::cpu::conv2d_direct_packed_weight_f32_floats(p));
    kernels::cpu::pack_conv2d_direct_weight_f32(p, f32(w), packed.data());
  }
  kernels::cpu::conv2d_direct_f32(p, f32(x), prepacked ? nullptr : f32(w), prepacked ? packed.data() : nullptr,
                                  f32(bias), static_cast<float*>(y.data_ptr()), ep);
  return y;
}

// The ISAs of this machine that have the direct kernel (AVX-512's and AVX2's tiles).
std::vector<kernels::cpu::Isa> direct_isas() {
  std::vector<kernels::cpu::Isa> out;
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride o(isa);
    if (kernels::cpu::conv2d_direct_supported(conv_params_of(kCases[1]))) out.push_back(isa);
  }
  return out;
}

class ConvDirectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (direct_isas().empty())
      GTEST_SKIP() << "no direct convolution kernel for " << kernels::cpu::isa_name(kernels::cpu::active_isa());
  }
  void TearDown() override { set_num_threads(saved_); }
  int saved_ = get_num_threads();
};

// Every case with each tiling: output pixels as rows or as columns (Note [Pixels as rows]).
using ForcedTiling = kernels::cpu::DirectConvTilingOverride;
const kernels::cpu::DirectConvTiling kTilings[] = {kernels::cpu::DirectConvTiling::columns,
                                                   kernels::cpu::DirectConvTiling::pixels};
const char* tiling_name(kernels::cpu::DirectConvTiling t) {
  return t == kernels::cpu::DirectConvTiling::pixels ? "pixels" : "columns";
}

TEST_F(ConvDirectTest, MatchesReferenceOnEveryCase) {
  uint64_t seed = 1;
  for (kernels::cpu::Isa isa : direct_isas())
  for (kernels::cpu::DirectConvTiling tiling : kTilings)
  for (int threads : {1, 2}) {
    kernels::cpu::IsaOverride on(isa);
    ForcedTiling forced(tiling);
    set_num_threads(threads);
    for (const Case& c : kCases) {
      for (bool with_bias : {false, true}) {
        const bool prepacked = with_bias == (threads == 2);
        Tensor x = random_tensor(c.x, DType::f32, seed++), w = random_tensor(c.w, DType::f32, seed++);
        Tensor bias = with_bias ? random_tensor({c.w[0]}, DType::f32, seed++) : Tensor();
        Tensor got = run_direct(c, x, w, bias, {}, prepacked);
        Tensor want = ref::conv2d(x, w, bias, c.stride, c.padding, c.dilation, c.groups);
        Tensor mag = ref::conv2d(abs_values(x), abs_values(w), with_bias ? abs_values(bias) : Tensor(), c.stride,
                                 c.padding, c.dilation, c.groups);
        EXPECT_TRUE(close_by_magnitude(got, want, mag, 1e-5))
            << "x " << shape_str(c.x) << " w " << shape_str(c.w) << " bias " << with_bias << " threads " << threads
            << " prepacked " << prepacked << " tiling " << tiling_name(tiling) << " " << kernels::cpu::isa_name(isa);
      }
    }
  }
}

// relu and relu6 (with or without a residual stored straight into y) and hardswish (without a
// residual) run in the micro-kernel's store; where the output has a halo, AVX-512's column tiles
// store across it into y, reading the residual the same way (Note [Storing across the halo]: the
// stem and the 33 x 33 case, rows of 20 and 34 columns), AVX2's go through the product plane; silu,
// and hardswish with a residual, run in the separate epilogue: all against float64. The pixel
// tiles' staged stores (Note [Staged pixel stores]) read their sums from the stage or, with K slices
// (the 100- and 64-channel cases), from Yt, and tiles across two rows (the 40 x 40 case, read in
// place) end one run and start the next.
TEST_F(ConvDirectTest, EpilogueActivationAndResidual) {
  uint64_t seed = 100;
  set_num_threads(2);
  for (kernels::cpu::Isa isa : direct_isas()) {
  kernels::cpu::IsaOverride on(isa);
  const std::vector<std::pair<GemmActivation, std::function<Tensor(const Tensor&)>>> acts = {
      {GemmActivation::relu, [](const Tensor& t) { return t.relu(); }},
      {GemmActivation::relu6, [](const Tensor& t) { return minimum(t.relu(), full_like(t, 6.0)); }},
      {GemmActivation::silu, [](const Tensor& t) { return t * t.sigmoid(); }},
      {GemmActivation::hardswish,
       [](const Tensor& t) { return t * minimum((t + 3.0).relu(), full_like(t, 6.0)) / 6.0; }}};
  for (kernels::cpu::DirectConvTiling tiling : kTilings)
  for (const Case& c : {kCases[2], kCases[6], kCases[7], kCases[10], kCases[11], kCases[13], kCases[14], kCases[16],
                        kCases[24], kCases[32]}) {
    ForcedTiling forced(tiling);
    for (const auto& [act, ref_act] : acts) {
      for (int residual : {0, 1, 2}) {  // none, after the activation, before it
        const Conv2dParams p = conv_params_of(c);
        Tensor x = random_tensor(c.x, DType::f32, seed++), w = random_tensor(c.w, DType::f32, seed++);
        // Wide enough that relu6 clips some outputs and leaves others.
        Tensor bias = random_tensor({c.w[0]}, DType::f32, seed++, -3.0, 3.0);
        Tensor res = random_tensor({p.n, p.k, p.ho, p.wo}, DType::f32, seed++, -4.0, 4.0);
        Conv2dEpilogue ep;
        ep.activation = act;
        ep.residual = residual ? f32(res) : nullptr;
        ep.residual_before_activation = residual == 2;
        Tensor got = run_direct(c, x, w, bias, ep, residual == 1);
        Tensor conv = ref::conv2d(x, w, bias, c.stride, c.padding, c.dilation, c.groups);
        Tensor res64 = res.to(DType::f64);
        Tensor want = residual == 0 ? ref_act(conv) : residual == 2 ? ref_act(conv + res64) : ref_act(conv) + res64;
        Tensor mag =
            ref::conv2d(abs_values(x), abs_values(w), abs_values(bias), c.stride, c.padding, c.dilation, c.groups) +
            abs_values(res64);
        EXPECT_TRUE(close_by_magnitude(got, want, mag, 1e-5))
            << "x " << shape_str(c.x) << " w " << shape_str(c.w) << " activation " << static_cast<int>(act)
            << " residual " << residual << " tiling " << tiling_name(tiling) << " " << kernels::cpu::isa_name(isa);
      }
    }
  }
  }
}

// A NaN in x reaches exactly the outputs that read it, through relu, relu6 and hardswish in the
// tiles' stores (Note [A branch-free tile store]) as through vmath's, with and without a residual;
// every other output stays finite.
TEST_F(ConvDirectTest, ActivationsInTheStorePropagateNaN) {
  uint64_t seed = 500;
  set_num_threads(1);
  for (kernels::cpu::Isa isa : direct_isas()) {
  kernels::cpu::IsaOverride on(isa);
  for (kernels::cpu::DirectConvTiling tiling : kTilings)
  for (const Case& c : {kCases[2], kCases[7], kCases[13]}) {
    ForcedTiling forced(tiling);
    for (GemmActivation act :
         {GemmActivation::none, GemmActivation::relu, GemmActivation::relu6, GemmActivation::hardswish}) {
      for (bool residual : {false, true}) {
        const Conv2dParams p = conv_params_of(c);
        Tensor x = random_tensor(c.x, DType::f32, seed++), w = random_tensor(c.w, DType::f32, seed++);
        Tensor bias = random_tensor({c.w[0]}, DType::f32, seed++, -3.0, 3.0);
        Tensor res = random_tensor({p.n, p.k, p.ho, p.wo}, DType::f32, seed++, -4.0, 4.0);
        static_cast<float*>(x.data_ptr())[x.numel() / 2] = std::numeric_limits<float>::quiet_NaN();
        Conv2dEpilogue ep;
        ep.activation = act;
        ep.residual = residual ? f32(res) : nullptr;
        Tensor got = run_direct(c, x, w, bias, ep, false);
        Tensor want = ref::conv2d(x, w, bias, c.stride, c.padding, c.dilation, c.groups);
        const float* g = f32(got);
        const double* r = static_cast<const double*>(want.data_ptr());
        int64_t nans = 0, wrong = 0;
        for (int64_t i = 0; i < got.numel(); ++i) {
          nans += std::isnan(r[i]) ? 1 : 0;
          wrong += std::isnan(g[i]) != std::isnan(r[i]) ? 1 : 0;
        }
        EXPECT_GT(nans, 0);
        EXPECT_EQ(wrong, 0) << "x " << shape_str(c.x) << " w " << shape_str(c.w) << " activation "
                            << static_cast<int>(act) << " residual " << residual << " tiling " << tiling_name(tiling)
                            << " " << kernels::cpu::isa_name(isa);
      }
    }
  }
  }
}

// The tiling a convolution's params ask for (an engine's direct_columns / direct_pixels tactics)
// is the one it runs and packs for, on every ISA with the direct kernel; automatic is the waste
// rule's choice.
TEST_F(ConvDirectTest, ParamsChooseTheTiling) {
  set_num_threads(2);
  uint64_t seed = 2000;
  for (kernels::cpu::Isa isa : direct_isas()) {
    kernels::cpu::IsaOverride on(isa);
    for (const Case& c : {Case{{1, 64, 14, 14}, {96, 64, 1, 1}}, Case{{2, 16, 9, 11}, {24, 16, 3, 3}, {2, 1}, {1, 1, 1, 1}}}) {
      Conv2dParams p = conv_params_of(c);
      const bool automatic_pixels = kernels::cpu::conv2d_direct_pixel_rows(p);
      p.tiling = kernels::cpu::DirectConvTiling::columns;
      EXPECT_FALSE(kernels::cpu::conv2d_direct_pixel_rows(p)) << shape_str(c.w);
      const int column_rows = kernels::cpu::conv2d_direct_tile_rows(p);
      p.tiling = kernels::cpu::DirectConvTiling::pixels;
      EXPECT_TRUE(kernels::cpu::conv2d_direct_pixel_rows(p)) << shape_str(c.w);
      EXPECT_NE(kernels::cpu::conv2d_direct_tile_rows(p), column_rows) << "the two tilings pack differently";
      p.tiling = kernels::cpu::DirectConvTiling::automatic;
      EXPECT_EQ(kernels::cpu::conv2d_direct_pixel_rows(p), automatic_pixels);
      Tensor x = random_tensor(c.x, DType::f32, seed++), w = random_tensor(c.w, DType::f32, seed++);
      Tensor bias = random_tensor({c.w[0]}, DType::f32, seed++);
      Tensor want = ref::conv2d(x, w, bias, c.stride, c.padding, c.dilation, c.groups);
      Tensor mag = ref::conv2d(abs_values(x), abs_values(w), abs_values(bias), c.stride, c.padding, c.dilation, c.groups);
      for (auto tiling : kTilings) {
        p.tiling = tiling;
        std::vector<float> packed(kernels::cpu::conv2d_direct_packed_weight_f32_floats(p));
        kernels::cpu::pack_conv2d_direct_weight_f32(p, f32(w), packed.data());
        Tensor y = full({p.n, p.k, p.ho, p.wo}, 123.0, TensorOptions(DType::f32));
        kernels::cpu::conv2d_direct_f32(p, f32(x), nullptr, packed.data(), f32(bias), static_cast<float*>(y.data_ptr()));
        EXPECT_TRUE(close_by_magnitude(y, want, mag, 1e-5))
            << shape_str(c.w) << " " << tiling_name(tiling) << " " << kernels::cpu::isa_name(isa);
      }
    }
  }
}

// One image between two threads by (panel, pixel tile) pairs (Note [Panels and tiles in one
// order]), taken in chunks from both ends of a queue (Note [Shares taken, not dealt]): AVX-512's
// 5 panels x 7 tiles and 11 x 7, AVX2's 5 x 17, so panels are split between chunks; with the
// epilogue in the store (relu + residual) and after it (silu), and a 3x3 layer whose K slices
// leave partial sums in Yt. On every ISA with the direct kernel; a mutation that drops the last
// unit of each chunk fails it on AVX2.
TEST_F(ConvDirectTest, OneImageSplitsPanelsAndTilesTogether) {
  set_num_threads(2);
  uint64_t seed = 1000;
  for (kernels::cpu::Isa isa : direct_isas())
  for (const Case& c : {Case{{1, 960, 7, 7}, {160, 960, 1, 1}},
                        Case{{1, 512, 7, 7}, {512, 512, 3, 3}, {1, 1}, {1, 1, 1, 1}},
                        Case{{1, 96, 7, 7}, {160, 96, 3, 3}, {1, 1}, {1, 1, 1, 1}}}) {
    kernels::cpu::IsaOverride on(isa);
    const Conv2dParams p = conv_params_of(c);
    ASSERT_TRUE(kernels::cpu::conv2d_direct_pixel_rows(p)) << shape_str(c.w) << " " << kernels::cpu::isa_name(isa);
    for (GemmActivation act : {GemmActivation::relu, GemmActivation::silu}) {
      Tensor x = random_tensor(c.x, DType::f32, seed++), w = random_tensor(c.w, DType::f32, seed++);
      Tensor bias = random_tensor({c.w[0]}, DType::f32, seed++);
      Tensor res = random_tensor({p.n, p.k, p.ho, p.wo}, DType::f32, seed++);
      Conv2dEpilogue ep;
      ep.activation = act;
      ep.residual = f32(res);
      Tensor conv = ref::conv2d(x, w, bias, c.stride, c.padding, c.dilation, c.groups);
      Tensor want = (act == GemmActivation::relu ? conv.relu() : conv * conv.sigmoid()) + res.to(DType::f64);
      Tensor mag =
          ref::conv2d(abs_values(x), abs_values(w), abs_values(bias), c.stride, c.padding, c.dilation, c.groups) +
          abs_values(res.to(DType::f64));
      for (bool prepacked : {false, true})
        EXPECT_TRUE(close_by_magnitude(run_direct(c, x, w, bias, ep, prepacked), want, mag, 1e-5))
            << shape_str(c.w) << " activation " << static_cast<int>(act) << " prepacked " << prepacked << " "
            << kernels::cpu::isa_name(isa);
    }
  }
}

// Note [X' filled in the compute region]: one padded image's pixel tiles on 2 and 3 threads (bands
// that split output rows and tiles unevenly, by pixel rows and by filter panels, plain and
// strided copies, and pixel panels), and on two user threads at once, where the second runs its
// region inline, band after band, on its own (it must neither wait forever nor read a band
// before it is filled).
TEST_F(ConvDirectTest, PixelTilesFillXInTheirOwnRegion) {
  const std::vector<Case> cases = {
      Case{{1, 17, 33, 33}, {32, 17, 3, 3}, {1, 1}, {1, 1, 1, 1}},
      Case{{1, 16, 40, 41}, {32, 16, 3, 3}, {2, 2}, {1, 1, 1, 1}},
      Case{{1, 64, 7, 7}, {256, 64, 3, 3}, {1, 1}, {1, 1, 1, 1}},
      Case{{1, 3, 33, 33}, {7, 3, 7, 7}, {2, 2}, {3, 3, 3, 3}},
      Case{{1, 300, 5, 5}, {260, 300, 1, 1}},
  };
  ForcedTiling forced(kernels::cpu::DirectConvTiling::pixels);
  uint64_t seed = 2000;
  auto check = [&](const Case& c, uint64_t s, const std::string& what) {
    Tensor x = random_tensor(c.x, DType::f32, s), w = random_tensor(c.w, DType::f32, s + 1);
    Tensor bias = random_tensor({c.w[0]}, DType::f32, s + 2);
    Tensor want = ref::conv2d(x, w, bias, c.stride, c.padding, c.dilation, c.groups);
    Tensor mag = ref::conv2d(abs_values(x), abs_values(w), abs_values(bias), c.stride, c.padding, c.dilation, c.groups);
    return close_by_magnitude(run_direct(c, x, w, bias, {}, false), want, mag, 1e-5)
               ? ::testing::AssertionSuccess()
               : ::testing::AssertionFailure() << what << " x " << shape_str(c.x) << " w " << shape_str(c.w);
  };
  for (kernels::cpu::Isa isa : direct_isas()) {
    kernels::cpu::IsaOverride on(isa);
    for (int threads : {2, 3}) {
      set_num_threads(threads);
      for (const Case& c : cases) {
        EXPECT_TRUE(kernels::cpu::conv2d_direct_pixel_rows(conv_params_of(c)));
        EXPECT_TRUE(check(c, seed, std::to_string(threads) + " threads"));
        seed += 3;
      }
    }
  }
  set_num_threads(2);
  std::vector<::testing::AssertionResult> results(2, ::testing::AssertionSuccess());
  auto user = [&](int u) {
    for (int rep = 0; rep < 10 && results[static_cast<size_t>(u)]; ++rep)
      for (size_t i = 0; i < cases.size(); ++i)
        if (auto r = check(cases[i], 3000 + 10 * i + 100 * rep + 1000 * u, "user thread " + std::to_string(u)); !r)
          results[static_cast<size_t>(u)] = r;
  };
  std::thread other(user, 1);
  user(0);
  other.join();
  EXPECT_TRUE(results[0]);
  EXPECT_TRUE(results[1]);
}

// Each layer takes the tiling that wastes less of its tiles: the pixel tiles on ResNet's layers
// (7 x 48 or 6 x 64), the column tiles where 12 x 32 fits exactly (MobileNetV2's 16 -> 96); the
// packed filters' panel (the engine's cache key for them) says which.
TEST_F(ConvDirectTest, EachLayerTakesTheTilingThatWastesLess) {
  if (kernels::cpu::active_isa() != kernels::cpu::Isa::avx512) GTEST_SKIP() << "the tiles are AVX-512's";
  struct Want {
    Case c;
    int panel;  // the tile's output channels: 48 / 64 / 32 (pixel tiles) or 12 (column tiles)
  };
  const Want wants[] = {
      {{{1, 512, 7, 7}, {512, 512, 3, 3}, {1, 1}, {1, 1, 1, 1}}, 48},   // ResNet-50's last stage
      {{{8, 2048, 7, 7}, {512, 2048, 1, 1}}, 48},
      {{{1, 960, 7, 7}, {160, 960, 1, 1}}, 32},                       // MobileNetV2's projection: 160 = 5 x 32
      {{{1, 160, 7, 7}, {960, 160, 1, 1}}, 48},                       // MobileNetV2's expansion
      {{{1, 1024, 14, 14}, {256, 1024, 1, 1}}, 64},
      {{{1, 64, 56, 56}, {64, 64, 3, 3}, {1, 1}, {1, 1, 1, 1}}, 64},   // 6 x 64: 3136 = 522 * 6 + 4
      {{{1, 3, 224, 224}, {32, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}}, 32},  // MobileNetV2's stem: 8 x 32 fits exactly
      {{{1, 16, 112, 112}, {96, 16, 1, 1}}, 12},                     // 12 x 32 fits exactly
  };
  for (const Want& w : wants) {
    const Conv2dParams p = conv_params_of(w.c);
    EXPECT_EQ(kernels::cpu::conv2d_direct_pixel_rows(p), w.panel != 12) << shape_str(w.c.x) << " " << shape_str(w.c.w);
    EXPECT_EQ(kernels::cpu::conv2d_direct_tile_rows(p), w.panel) << shape_str(w.c.x) << " " << shape_str(w.c.w);
  }
  // A last-stage layer (half of ResNet-50's width), both threads splitting the panels, against float64.
  const Case c{{1, 256, 7, 7}, {256, 256, 3, 3}, {1, 1}, {1, 1, 1, 1}};
  ASSERT_TRUE(kernels::cpu::conv2d_direct_pixel_rows(conv_params_of(c)));
  set_num_threads(2);
  for (bool prepacked : {false, true}) {
    Tensor x = random_tensor(c.x, DType::f32, 900), w = random_tensor(c.w, DType::f32, 901);
    Tensor bias = random_tensor({c.w[0]}, DType::f32, 902);
    Tensor got = run_direct(c, x, w, bias, {}, prepacked);
    Tensor want = ref::conv2d(x, w, bias, c.stride, c.padding, c.dilation, c.groups);
    Tensor mag = ref::conv2d(abs_values(x), abs_values(w), abs_values(bias), c.stride, c.padding, c.dilation, c.groups);
    EXPECT_TRUE(close_by_magnitude(got, want, mag, 1e-5)) << "prepacked " << prepacked;
  }
}

// Note [Taps that read only padding]: the pixel tiles of padded layers run fewer (tile, tap) pairs
// than every tap of every tile (at 14 x 14 and 7 x 7, 5% fewer or better); unpadded layers run them
// all. The 14 x 14 and 40 x 40 planes read x in place (Note [Reading x in place]). Then with the residual in y's own buffer (an engine's in-place output), tiles stored
// in place and tiles gathered and scattered alike, against float64.
TEST_F(ConvDirectTest, PixelTilesSkipTapsThatReadOnlyPadding) {
  ForcedTiling forced(kernels::cpu::DirectConvTiling::pixels);
  struct Padded {
    Case c;
    bool in_place;  // Note [Reading x in place]
  };
  const Padded padded[] = {
      {Case{{1, 32, 14, 14}, {64, 32, 3, 3}, {1, 1}, {1, 1, 1, 1}}, true},
      {Case{{1, 24, 7, 7}, {40, 24, 3, 3}, {1, 1}, {1, 1, 1, 1}}, false},  // tiles per border class: a third more taps
      {Case{{1, 8, 40, 40}, {16, 8, 3, 3}, {1, 1}, {1, 1, 1, 1}}, true},
      {Case{{1, 3, 33, 33}, {7, 3, 7, 7}, {2, 2}, {3, 3, 3, 3}}, false},  // 17 x 17, six border rows and columns
  };
  uint64_t seed = 4000;
  for (kernels::cpu::Isa isa : direct_isas()) {
    kernels::cpu::IsaOverride on(isa);
    for (const auto& [c, in_place] : padded) {
      const Conv2dParams p = conv_params_of(c);
      ASSERT_TRUE(kernels::cpu::conv2d_direct_pixel_rows(p)) << shape_str(c.w) << " " << kernels::cpu::isa_name(isa);
      const auto pairs = kernels::cpu::conv2d_direct_tap_pairs(p);
      EXPECT_LT(pairs.run, pairs.every) << shape_str(c.x) << " " << kernels::cpu::isa_name(isa);
      // 3x3 layers at 14 x 14 and 7 x 7 skip at least 5% (a ninth of the taps read padding).
      if (c.x[2] <= 14) {
        EXPECT_LE(pairs.run * 100, pairs.every * 95) << shape_str(c.x) << " " << kernels::cpu::isa_name(isa);
      }
      EXPECT_EQ(pairs.in_place, in_place) << shape_str(c.x) << " " << kernels::cpu::isa_name(isa);
      set_num_threads(2);
      for (bool before : {false, true}) {
        Tensor x = random_tensor(c.x, DType::f32, seed++), w = random_tensor(c.w, DType::f32, seed++);
        Tensor bias = random_tensor({c.w[0]}, DType::f32, seed++, -3.0, 3.0);
        Tensor res = random_tensor({p.n, p.k, p.ho, p.wo}, DType::f32, seed++, -4.0, 4.0);
        Tensor y = res.clone();
        Conv2dEpilogue ep;
        ep.activation = GemmActivation::relu6;
        ep.residual = f32(y);
        ep.residual_before_activation = before;
        kernels::cpu::conv2d_direct_f32(p, f32(x), f32(w), nullptr, f32(bias), static_cast<float*>(y.data_ptr()), ep);
        Tensor conv = ref::conv2d(x, w, bias, c.stride, c.padding, c.dilation, c.groups), res64 = res.to(DType::f64);
        auto relu6 = [](const Tensor& t) { return minimum(t.relu(), full_like(t, 6.0)); };
        Tensor want = before ? relu6(conv + res64) : relu6(conv) + res64;
        Tensor mag =
            ref::conv2d(abs_values(x), abs_values(w), abs_values(bias), c.stride, c.padding, c.dilation, c.groups) +
            abs_values(res64);
        EXPECT_TRUE(close_by_magnitude(y, want, mag, 1e-5))
            << shape_str(c.x) << " before " << before << " " << kernels::cpu::isa_name(isa);
      }
    }
    for (const Case& c : {kCases[1], kCases[21]}) {  // unpadded: every window inside x
      const auto pairs = kernels::cpu::conv2d_direct_tap_pairs(conv_params_of(c));
      EXPECT_EQ(pairs.run, pairs.every) << shape_str(c.x) << " " << kernels::cpu::isa_name(isa);
    }
  }
}

TEST(ConvDirect, DepthwiseAndScalarAreNotSupported) {
  Conv2dParams dw = conv_params_of({{1, 6, 9, 9}, {6, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 6});
  EXPECT_FALSE(kernels::cpu::conv2d_direct_supported(dw));
  kernels::cpu::IsaOverride o(kernels::cpu::Isa::scalar);
  EXPECT_FALSE(kernels::cpu::conv2d_direct_supported(conv_params_of(kCases[1])));
}

}  // namespace
}  // namespace kiln
