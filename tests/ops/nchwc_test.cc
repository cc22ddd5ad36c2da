// The channel-blocked ops (src/ops/defs/conv/nchwc.cc; Note [Blocked channels] in
// kernels/cpu/conv_nchwc.cc): to_nchwc / from_nchwc round trips, and fused_conv2d_nchwc against a
// float64 reference (kiln's conv2d and unfused epilogue on f64 copies) for every panel width and
// both tilings, strides, dilations, asymmetric padding, 1x1 filters, batches, every epilogue, on
// every ISA (the scalar kernel too), also written over its own residual; bad inputs are errors
// naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/conv_nchwc.h"
#include "kernels/cpu/isa.h"
#include "kiln/kiln.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::random_tensor;

Tensor to_nchwc(const Tensor& x) { return dispatch1(op("to_nchwc"), {x}, {}); }
Tensor from_nchwc(const Tensor& x, int64_t c) { return dispatch1(op("from_nchwc"), {x}, {{"channels", c}}); }
Tensor f64(const Tensor& t) { return t.defined() ? t.to(DType::f64) : t; }

TEST(Nchwc, ConversionsRoundTripAndZeroThePaddedLanes) {
  int seed = 1;
  for (int64_t c : {1, 7, 16, 33}) {
    SCOPED_TRACE("C=" + std::to_string(c));
    Tensor x = random_tensor({2, c, 5, 3}, DType::f32, ++seed);
    Tensor xs = testing::noncontiguous(x);
    Tensor b = to_nchwc(xs);
    const int64_t blocks = (c + 15) / 16;
    ASSERT_EQ(b.shape(), (Shape{2, blocks, 5, 3, 16}));
    // Element (n, c, h, w) sits at block c / 16, lane c % 16; the lanes past C are zero.
    Tensor want = zeros({2, blocks * 16, 5, 3}, TensorOptions(DType::f32));
    want.slice(1, 0, c).copy_(x);
    want = want.reshape({2, blocks, 16, 5, 3}).permute({0, 1, 3, 4, 2});
    EXPECT_TRUE(testing::all_close(b, want, {0, 0}));
    EXPECT_TRUE(testing::all_close(from_nchwc(b, c), x, {0, 0}));
    // The same image as a channels-last view (an attention output permuted back): blocked by pixel.
    Tensor nhwc = x.permute({0, 2, 3, 1}).contiguous();
    EXPECT_TRUE(testing::all_close(to_nchwc(nhwc.permute({0, 3, 1, 2})), want, {0, 0}));
    EXPECT_TRUE(testing::all_close(to_nchwc(nhwc.slice(0, 1, 2).permute({0, 3, 1, 2})), want.slice(0, 1, 2), {0, 0}));
  }
}

struct ConvCase {
  int64_t n, c, k, h, w, r, s;
  std::vector<int64_t> stride, padding, dilation;
};

// Panels of 1-4 blocks (K = 16 .. 112), the 7-pixel tiling (7 x 7 and 14 x 7 outputs), 1x1 with
// and without stride (the stride-1 ones through Note [Dense 1x1 tiles]: whole tiles and a partial
// last one, slices that accumulate, partial blocks), dilation, asymmetric padding, a 1 x 1 output,
// a batch of 3.
const ConvCase kCases[] = {
    {1, 16, 16, 9, 9, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}},
    {2, 32, 48, 7, 7, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}},     // 7 x 7: 7-pixel tiles, panels of 3
    {1, 16, 112, 7, 7, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}},    // 7 blocks: 3 + 3 + 1
    {1, 48, 112, 11, 13, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}},  // 4 + 3 blocks, 6 / 8-pixel tiles
    {3, 32, 80, 10, 10, 1, 1, {2, 2}, {0, 0, 0, 0}, {1, 1}},   // 1x1 stride 2, read in place
    {1, 64, 32, 15, 12, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}},
    {1, 16, 64, 14, 7, 5, 3, {1, 2}, {2, 0, 3, 1}, {1, 1}},    // asymmetric padding and stride
    {2, 16, 32, 12, 12, 3, 3, {1, 1}, {2, 2, 2, 2}, {2, 2}},   // dilation 2
    {1, 32, 16, 1, 1, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}},     // a 1 x 1 plane: every tap but one is padding
    // One-pixel planes, tiles of one (Note [One-pixel planes]): a squeeze-excite's 1x1 layers
    // (partial blocks in and out, slices), a head after the global pool.
    {2, 200, 72, 1, 1, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}},
    {1, 40, 200, 1, 1, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}},
    {3, 96, 48, 3, 3, 3, 3, {2, 2}, {0, 0, 0, 0}, {1, 1}},     // a 3 x 3 window onto one pixel
    {1, 160, 64, 6, 6, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}},    // 10 input blocks: ten slices of one
    {2, 176, 32, 5, 5, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}},    // 1x1, 11 blocks: slices of 6 and 5
    {2, 24, 40, 9, 8, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}},     // partial blocks in and out
    {1, 8, 24, 7, 7, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}},      // one partial block in, 7-pixel tiles
    {1, 144, 24, 10, 10, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}},  // MobileNetV2's projection to 24
    // A partial last input block after whole ones, its real lanes only (Note [The last block's
    // real lanes]): 3x3 copied, 1x1 in slices of 6 and 5 blocks, 1x1 stride 2.
    {1, 40, 32, 9, 9, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}},
    {1, 170, 48, 6, 5, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}},
    {2, 72, 24, 9, 9, 1, 1, {2, 2}, {0, 0, 0, 0}, {1, 1}},
    {1, 32, 48, 40, 40, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}},   // a light 1x1 layer: 192-pixel chunks
    {1, 32, 384, 7, 14, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}},   // and with 7-pixel tiles: 196
    // Large enough planes to be cut into rectangles instead of copied (Note [Borders without a
    // copy]): stride 1, stride 2 (no bottom or right border), asymmetric padding with dilation.
    {1, 16, 32, 48, 48, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}},
    {2, 16, 24, 56, 56, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}},
    {1, 16, 16, 70, 61, 5, 3, {1, 1}, {3, 0, 1, 2}, {2, 1}},
    {1, 40, 32, 48, 48, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}},   // rectangles, a partial last block
    // Row tiles (Note [Row tiles]) at stride 2: 1x1 (pixels 32 floats apart, a partial block in
    // and out), 3x3 over panels of 4 and 1 blocks with listed taps on the top row.
    {1, 24, 72, 20, 30, 1, 1, {2, 2}, {0, 0, 0, 0}, {1, 1}},
    {1, 32, 80, 30, 34, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}},
    {2, 128, 32, 14, 14, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}},  // rows of 14: two 7-pixel row tiles
};

kernels::cpu::Conv2dParams params_of(const ConvCase& cc) {
  kernels::cpu::Conv2dParams p;
  p.n = cc.n, p.c = cc.c, p.k = cc.k, p.h = cc.h, p.w = cc.w, p.r = cc.r, p.s = cc.s;
  p.stride_h = cc.stride[0], p.stride_w = cc.stride[1];
  p.pad_top = cc.padding[0], p.pad_left = cc.padding[1];
  p.dil_h = cc.dilation[0], p.dil_w = cc.dilation[1];
  p.ho = (cc.h + cc.padding[0] + cc.padding[2] - cc.dilation[0] * (cc.r - 1) - 1) / cc.stride[0] + 1;
  p.wo = (cc.w + cc.padding[1] + cc.padding[3] - cc.dilation[1] * (cc.s - 1) - 1) / cc.stride[1] + 1;
  return p;
}

Conv2dOptions options_of(const ConvCase& cc) {
  Conv2dOptions o;
  o.stride = cc.stride;
  o.padding = cc.padding;
  o.dilation = cc.dilation;
  return o;
}

std::string name_of(kernels::cpu::Isa isa, const ConvCase& cc) {
  return std::string(kernels::cpu::isa_name(isa)) + " C=" + std::to_string(cc.c) + " K=" + std::to_string(cc.k) + " " +
         std::to_string(cc.h) + "x" + std::to_string(cc.w);
}

// The cases cover both ways of reading a padded input.
TEST(Nchwc, CasesCoverCopiedAndRectangleBorders) {
  int copied = 0, cut = 0;
  for (const ConvCase& cc : kCases) {
    const kernels::cpu::Conv2dParams p = params_of(cc);
    const bool padded = cc.padding[0] + cc.padding[1] + cc.padding[2] + cc.padding[3] > 0;
    if (!padded) continue;
    (kernels::cpu::conv2d_nchwc_copies_input(p) ? copied : cut) += 1;
  }
  EXPECT_GE(copied, 3);
  EXPECT_GE(cut, 3);
}

Tensor act_ref(const Tensor& y, const std::string& act) {
  if (act == "relu") return relu(y);
  if (act == "relu6") return clip(y, Scalar(0.0), Scalar(6.0));
  if (act == "hardswish") return hardswish(y);
  if (act == "sigmoid") return sigmoid(y);
  if (act == "silu") return silu(y);
  if (act == "gelu") return gelu(y);
  return y;
}

// What a partial block's extra lanes hold: act(0), zero but for sigmoid's 0.5 (finite: the next
// layer's filters, scales and depthwise taps are zero there).
Tensor extra_lanes(const Tensor& tail, const std::string& act) {
  return full(tail.shape(), act == "sigmoid" ? 0.5 : 0.0, TensorOptions(DType::f32));
}

// fused_conv2d_nchwc with o's geometry and groups; mode 1: the residual before the activation.
Tensor conv_nchwc(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& res, const Conv2dOptions& o,
                  const std::string& act, int mode) {
  return dispatch1(op("fused_conv2d_nchwc"), {x, w, bias, res},
                   {{"stride", o.stride},
                    {"padding", o.padding},
                    {"dilation", o.dilation},
                    {"groups", o.groups},
                    {"activation", act},
                    {"residual_before_activation", mode == 1}});
}

// act(ref (+ res)) (+ res) in f64; mode 0: no residual, 1: before the activation, 2: after it.
Tensor epilogue_ref(Tensor ref, const Tensor& res, int mode, const std::string& act) {
  if (mode == 1) ref = add(ref, f64(res));
  ref = act_ref(ref, act);
  if (mode == 2) ref = add(ref, f64(res));
  return ref;
}

TEST(Nchwc, ConvMatchesFloat64ReferenceOnEveryIsa) {
  int seed = 100;
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride on(isa);
    for (const ConvCase& cc : kCases) {
      for (const std::string act : {"none", "relu", "relu6", "hardswish", "sigmoid", "silu", "gelu"})
        for (int mode = 0; mode < 3; ++mode) {  // residual: none, before, after the activation
          ++seed;
          SCOPED_TRACE(name_of(isa, cc) + " act=" + act + " mode=" + std::to_string(mode));
          const Conv2dOptions o = options_of(cc);
          Tensor x = random_tensor({cc.n, cc.c, cc.h, cc.w}, DType::f32, seed, -1, 1);
          Tensor w = random_tensor({cc.k, cc.c, cc.r, cc.s}, DType::f32, seed + 1000, -0.3, 0.3);
          Tensor bias = seed % 3 ? random_tensor({cc.k}, DType::f32, seed + 2000) : Tensor();
          Tensor ref = conv2d(f64(x), f64(w), f64(bias), o);
          Tensor res = mode ? random_tensor(ref.shape(), DType::f32, seed + 3000) : Tensor();
          Tensor got = conv_nchwc(to_nchwc(x), w, bias, mode ? to_nchwc(res) : Tensor(), o, act, mode);
          Tensor want = epilogue_ref(ref, res, mode, act);
          ASSERT_EQ(got.shape(), (Shape{ref.shape()[0], (cc.k + 15) / 16, ref.shape()[2], ref.shape()[3], 16}));
          if (cc.k % 16) {  // a partial block's lanes stay zero (act(0)): the next layer sums them
            Tensor tail = got.slice(1, cc.k / 16, cc.k / 16 + 1).slice(4, cc.k % 16, 16);
            EXPECT_TRUE(testing::all_close(tail, extra_lanes(tail, act), {0, 0}));
          }
          EXPECT_TRUE(testing::all_close(from_nchwc(got, cc.k), want, {1e-4, 1e-4}));
        }
    }
  }
}

// Note [Residual in place]: the output written over its residual (the memory planner's choice
// when the residual dies at the layer) is the sum with the residual kept apart, over one slice of
// input blocks or several; a residual added after the activation cannot be overwritten.
TEST(Nchwc, ConvWritesOverItsResidual) {
  int seed = 900;
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride on(isa);
    for (const ConvCase& cc : kCases)
      for (const kernels::cpu::GemmActivation act : {kernels::cpu::GemmActivation::none, kernels::cpu::GemmActivation::relu}) {
        seed += 4;
        const bool relu = act == kernels::cpu::GemmActivation::relu;
        SCOPED_TRACE(name_of(isa, cc) + (relu ? " relu" : ""));
        const kernels::cpu::Conv2dParams p = params_of(cc);
        const Conv2dOptions o = options_of(cc);
        Tensor x = random_tensor({cc.n, cc.c, cc.h, cc.w}, DType::f32, seed, -1, 1);
        Tensor w = random_tensor({cc.k, cc.c, cc.r, cc.s}, DType::f32, seed + 1, -0.3, 0.3);
        Tensor bias = random_tensor({cc.k}, DType::f32, seed + 2);
        Tensor ref = conv2d(f64(x), f64(w), f64(bias), o);
        Tensor res = random_tensor(ref.shape(), DType::f32, seed + 3);
        Tensor xb = to_nchwc(x), y = to_nchwc(res).clone();
        std::vector<float> packed(kernels::cpu::conv2d_nchwc_packed_weight_f32_floats(p));
        kernels::cpu::pack_conv2d_nchwc_weight_f32(p, static_cast<const float*>(w.data_ptr()), packed.data());
        kernels::cpu::Conv2dEpilogue ep;
        ep.activation = act;
        ep.residual = static_cast<const float*>(y.data_ptr());
        ep.residual_before_activation = relu;
        kernels::cpu::conv2d_nchwc_f32(p, static_cast<const float*>(xb.data_ptr()), packed.data(),
                                       static_cast<const float*>(bias.data_ptr()), static_cast<float*>(y.data_ptr()), ep);
        EXPECT_TRUE(testing::all_close(from_nchwc(y, cc.k), epilogue_ref(ref, res, 1, relu ? "relu" : "none"), {1e-4, 1e-4}));
        if (relu) {
          ep.residual_before_activation = false;
          EXPECT_KILN_ERROR(kernels::cpu::conv2d_nchwc_f32(p, static_cast<const float*>(xb.data_ptr()), packed.data(),
                                                           nullptr, static_cast<float*>(y.data_ptr()), ep),
                            "residual in place of the output", "before the activation");
        }
      }
  }
}

// Note [Panels as tactics]: the output blocks in panels of 3 or 4 whatever the plane prefers, the
// filters packed to match, every case on every ISA (narrower last panels of 1-3 blocks, partial
// blocks, both tilings of 7 x 7 planes), with a residual before the activation, against float64.
TEST(Nchwc, EitherPanelWidthMatchesFloat64Reference) {
  int seed = 1300;
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride on(isa);
    for (const ConvCase& cc : kCases)
      for (int panel_blocks : {3, 4}) {
        seed += 4;
        SCOPED_TRACE(name_of(isa, cc) + " panels of " + std::to_string(panel_blocks));
        kernels::cpu::Conv2dParams p = params_of(cc);
        p.nchwc_panel_blocks = panel_blocks;
        ASSERT_EQ(kernels::cpu::conv2d_nchwc_tiling(p).panel_blocks, panel_blocks);
        Tensor x = random_tensor({cc.n, cc.c, cc.h, cc.w}, DType::f32, seed, -1, 1);
        Tensor w = random_tensor({cc.k, cc.c, cc.r, cc.s}, DType::f32, seed + 1, -0.3, 0.3);
        Tensor bias = random_tensor({cc.k}, DType::f32, seed + 2);
        Tensor ref = conv2d(f64(x), f64(w), f64(bias), options_of(cc));
        Tensor res = random_tensor(ref.shape(), DType::f32, seed + 3);
        Tensor xb = to_nchwc(x), rb = to_nchwc(res), y = empty_like(rb);
        std::vector<float> packed(kernels::cpu::conv2d_nchwc_packed_weight_f32_floats(p));
        kernels::cpu::pack_conv2d_nchwc_weight_f32(p, static_cast<const float*>(w.data_ptr()), packed.data());
        kernels::cpu::Conv2dEpilogue ep;
        ep.activation = kernels::cpu::GemmActivation::relu;
        ep.residual = static_cast<const float*>(rb.data_ptr());
        ep.residual_before_activation = true;
        kernels::cpu::conv2d_nchwc_f32(p, static_cast<const float*>(xb.data_ptr()), packed.data(),
                                       static_cast<const float*>(bias.data_ptr()), static_cast<float*>(y.data_ptr()), ep);
        EXPECT_TRUE(testing::all_close(from_nchwc(y, cc.k), epilogue_ref(ref, res, 1, "relu"), {1e-4, 1e-4}));
      }
  }
}

// Note [Prepared kernels]: a resolved blocked convolution (each tactic: panels of the plane's
// choice, of 3 and 4, Winograd; a depthwise layer) is prepared once (parameters, packed filters,
// plan) and runs with it on new inputs as the eager kernel does; given other filters than it was
// prepared for, or another plane, it prepares again rather than use the old ones.
TEST(Nchwc, PreparedCallsMatchEagerCalls) {
  struct Case {
    int64_t c, k, groups;
    std::string tactic;
  };
  const Case cases[] = {{24, 40, 1, "default"}, {24, 40, 1, "panels3"}, {24, 40, 1, "panels4"},
                        {32, 48, 1, "winograd"}, {48, 48, 48, "default"}};
  int seed = 2100;
  for (const Case& cc : cases) {
    SCOPED_TRACE("C=" + std::to_string(cc.c) + " K=" + std::to_string(cc.k) + " groups=" +
                 std::to_string(cc.groups) + " " + cc.tactic);
    const OpDef& d = op("fused_conv2d_nchwc");
    const Attrs attrs = d.bind_attrs({{"stride", std::vector<int64_t>{1, 1}},
                                      {"padding", std::vector<int64_t>{1, 1, 1, 1}},
                                      {"dilation", std::vector<int64_t>{1, 1}},
                                      {"groups", cc.groups},
                                      {"activation", std::string("relu")},
                                      {"residual_before_activation", false}});
    Tensor w = random_tensor({cc.k, cc.c / cc.groups, 3, 3}, DType::f32, seed++, -0.3, 0.3);
    Tensor bias = random_tensor({cc.k}, DType::f32, seed++);
    std::vector<Tensor> ins{to_nchwc(random_tensor({1, cc.c, 10, 9}, DType::f32, seed++, -1, 1)), w, bias, Tensor()};
    ResolvedCall r = resolve_call(d, ins, attrs, cc.tactic);
    ASSERT_NE(r.kernel, nullptr);
    EXPECT_NE(r.prepared, nullptr);
    std::vector<Tensor> outs{empty(r.outputs[0].shape)};
    for (int run = 0; run < 3; ++run) {
      ins[0] = to_nchwc(random_tensor({1, cc.c, 10, 9}, DType::f32, seed++, -1, 1));
      if (run == 2) ins[1] = random_tensor(w.shape(), DType::f32, seed++, -0.3, 0.3);  // other filters
      run_resolved(r, d, ins, attrs, outs);
      Tensor want = dispatch1(d, ins, attrs);
      EXPECT_TRUE(testing::all_close(outs[0], want, {1e-5, 1e-5})) << "run " << run;
    }
    // Another plane than it was prepared for (the filters it was prepared for): prepared again too.
    ins[1] = w;
    ins[0] = to_nchwc(random_tensor({1, cc.c, 7, 12}, DType::f32, seed++, -1, 1));
    Tensor want = dispatch1(d, ins, attrs);
    std::vector<Tensor> other{empty(want.shape())};
    run_resolved(r, d, ins, attrs, other);
    EXPECT_TRUE(testing::all_close(other[0], want, {1e-5, 1e-5}));
  }
}

// Note [Grouped blocks]: a grouped convolution blocked a span of groups at a time, against the
// float64 grouped convolution, on every ISA, both panel widths and the plane's own choice, every
// epilogue kind with a residual: spans of 4 (ResNeXt's 4 channels a group), 2 (RegNet's 8, and 8
// in to 16 out) and 1 (16 and 32 channels a group, a block group of 2 and of 8 output blocks),
// strides, padding, a 1x1 grouped layer, odd planes, a 7 x 7 plane, batches of 1 and 3. The
// span, and what has none.
TEST(Nchwc, GroupedConvMatchesFloat64Reference) {
  struct Case {
    int64_t groups;
    ConvCase conv;
    int64_t span;
  };
  const Case cases[] = {
      {32, {1, 128, 128, 9, 9, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}}, 4},     // ResNeXt 32x4d's first stage
      {32, {3, 256, 256, 13, 11, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}}, 2},   // 8 a group, stride 2, batch 3
      {6, {1, 48, 96, 7, 7, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}}, 2},        // 8 in, 16 out a group
      {4, {2, 64, 64, 14, 14, 3, 3, {1, 1}, {0, 1, 2, 1}, {1, 1}}, 1},      // 16 a group, asymmetric padding
      {3, {1, 96, 96, 10, 12, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}}, 1},      // 32 a group: 2 blocks
      {2, {1, 256, 256, 7, 7, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}}, 1},      // 1x1, 8 blocks a group
      {8, {1, 128, 64, 15, 9, 1, 1, {2, 2}, {0, 0, 0, 0}, {1, 1}}, 2},      // 1x1 stride 2, 16 in, 8 out
  };
  int seed = 1700;
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride on(isa);
    for (const Case& gc : cases) {
      const ConvCase& cc = gc.conv;
      ASSERT_EQ(nchwc_conv_group_span(cc.c, cc.k, gc.groups), gc.span);
      for (int panel_blocks : {0, 3, 4})
        for (const std::string act : {"none", "relu", "silu"}) {
          seed += 4;
          SCOPED_TRACE(name_of(isa, cc) + " groups=" + std::to_string(gc.groups) + " panels=" +
                       std::to_string(panel_blocks) + " act=" + act);
          Conv2dOptions o = options_of(cc);
          o.groups = gc.groups;
          Tensor x = random_tensor({cc.n, cc.c, cc.h, cc.w}, DType::f32, seed, -1, 1);
          Tensor w = random_tensor({cc.k, cc.c / gc.groups, cc.r, cc.s}, DType::f32, seed + 1, -0.3, 0.3);
          Tensor bias = random_tensor({cc.k}, DType::f32, seed + 2);
          Tensor ref = conv2d(f64(x), f64(w), f64(bias), o);
          Tensor res = random_tensor(ref.shape(), DType::f32, seed + 3);
          const int mode = act == "relu" ? 1 : act == "silu" ? 2 : 0;
          Tensor want = epilogue_ref(ref, res, mode, act);
          Tensor got;
          if (panel_blocks == 0) {  // through the op
            got = conv_nchwc(to_nchwc(x), w, bias, mode ? to_nchwc(res) : Tensor(), o, act, mode);
          } else {  // the kernel with the panel width set
            kernels::cpu::Conv2dParams p = params_of(cc);
            p.groups = gc.groups;
            p.nchwc_panel_blocks = panel_blocks;
            ASSERT_TRUE(kernels::cpu::conv2d_nchwc_supported(p));
            Tensor xb = to_nchwc(x), rb = to_nchwc(res);
            got = empty_like(rb);
            std::vector<float> packed(kernels::cpu::conv2d_nchwc_packed_weight_f32_floats(p));
            ASSERT_EQ(packed.size(), static_cast<size_t>(cc.k * cc.c / gc.groups * gc.span * cc.r * cc.s));
            kernels::cpu::pack_conv2d_nchwc_weight_f32(p, static_cast<const float*>(w.data_ptr()), packed.data());
            kernels::cpu::Conv2dEpilogue ep;
            ep.activation = act == "relu" ? kernels::cpu::GemmActivation::relu
                            : act == "silu" ? kernels::cpu::GemmActivation::silu : kernels::cpu::GemmActivation::none;
            ep.residual = mode ? static_cast<const float*>(rb.data_ptr()) : nullptr;
            ep.residual_before_activation = mode == 1;
            kernels::cpu::conv2d_nchwc_f32(p, static_cast<const float*>(xb.data_ptr()), packed.data(),
                                           static_cast<const float*>(bias.data_ptr()),
                                           static_cast<float*>(got.data_ptr()), ep);
          }
          EXPECT_TRUE(testing::all_close(from_nchwc(got, cc.k), want, {1e-4, 1e-4}));
        }
    }
  }
  // No span: depthwise (16 groups a block), 2 channels a group (8), groups that do not divide C.
  EXPECT_EQ(nchwc_conv_group_span(64, 64, 64), 0);
  EXPECT_EQ(nchwc_conv_group_span(64, 64, 32), 0);
  EXPECT_EQ(nchwc_conv_group_span(48, 48, 5), 0);
  EXPECT_EQ(nchwc_conv_group_span(40, 40, 5), 0);  // 8 a group, but 5 groups do not pair up
  EXPECT_EQ(nchwc_conv_group_span(33, 16, 1), 1);
}

// Note [Winograd tiles]: F(2x2, 3x3) and F(4x4, 3x3) against the float64 direct convolution on
// every ISA: odd planes (a partial last tile row and column), a 1 x 1 and a 1 x 1000 plane, no,
// symmetric and asymmetric padding, partial blocks in and out, panels of 1-4 blocks, more input
// blocks than a slice (two slices summed), batches spanning chunks, every epilogue, and the output
// written over its residual.
TEST(Nchwc, WinogradMatchesFloat64Reference) {
  struct Case {
    int64_t n, c, k, h, w;
    std::vector<int64_t> padding;
    int64_t groups = 1;  // Note [Winograd by groups]: whole blocks a group
  };
  const Case cases[] = {{1, 16, 16, 9, 9, {1, 1, 1, 1}},      // odd plane: a partial last tile
                        {2, 32, 64, 14, 14, {1, 1, 1, 1}},    // two images
                        {1, 5, 20, 7, 11, {0, 0, 0, 0}},      // unpadded, partial blocks, 2 blocks out
                        {1, 48, 80, 12, 13, {2, 0, 1, 2}},    // asymmetric; panels of 4 and 1
                        {3, 160, 48, 6, 5, {1, 1, 1, 1}},     // 10 input blocks: two slices
                        {1, 16, 32, 1, 1, {1, 1, 1, 1}},      // a 1 x 1 plane
                        {1, 16, 16, 1, 1000, {1, 1, 1, 1}},   // one row of 1000
                        {2, 24, 40, 33, 33, {1, 1, 1, 1}},    // 289 tiles an image: several chunks
                        // 1.3 MB of transformed filters: two passes, panels of 4 + 4 + 1 blocks
                        {2, 144, 144, 9, 10, {1, 1, 1, 1}},
                        {1, 64, 128, 14, 14, {1, 1, 1, 1}, 2},  // ResNeSt's split attention: 2 x (32 -> 64)
                        {2, 96, 240, 7, 9, {1, 0, 1, 1}, 3},    // 3 x (32 -> 80): a group's panels 4 + 1
                        {1, 48, 48, 5, 6, {1, 1, 1, 1}, 3},     // 3 x (16 -> 16): a block a group
                        // 2 x (128 -> 128), 4.7 MB transformed: two passes, by group
                        {1, 256, 256, 6, 5, {1, 1, 1, 1}, 2}};
  int seed = 1700;
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride on(isa);
    for (int tile : {2, 4})
      for (const Case& cc : cases)
        for (const std::string act : {"none", "relu", "sigmoid", "gelu"})
          for (int mode = 0; mode < 4; ++mode) {  // residual: none, before, after; 3: before, in place
            seed += 4;
            SCOPED_TRACE(std::string(kernels::cpu::isa_name(isa)) + " F(" + std::to_string(tile) + ") C=" +
                         std::to_string(cc.c) + " K=" +
                         std::to_string(cc.k) + " G=" + std::to_string(cc.groups) + " " + std::to_string(cc.h) + "x" +
                         std::to_string(cc.w) + " act=" +
                         act + " mode=" + std::to_string(mode));
            Conv2dOptions o;
            o.padding = cc.padding;
            o.groups = cc.groups;
            Tensor x = random_tensor({cc.n, cc.c, cc.h, cc.w}, DType::f32, seed, -1, 1);
            Tensor w = random_tensor({cc.k, cc.c / cc.groups, 3, 3}, DType::f32, seed + 1, -0.3, 0.3);
            Tensor bias = random_tensor({cc.k}, DType::f32, seed + 2);
            Tensor ref = conv2d(f64(x), f64(w), f64(bias), o);
            Tensor res = mode ? random_tensor(ref.shape(), DType::f32, seed + 3) : Tensor();
            kernels::cpu::Conv2dParams p;
            p.n = cc.n, p.c = cc.c, p.h = cc.h, p.w = cc.w, p.k = cc.k, p.r = p.s = 3;
            p.ho = ref.shape()[2], p.wo = ref.shape()[3], p.pad_top = cc.padding[0], p.pad_left = cc.padding[1];
            p.groups = cc.groups;
            ASSERT_TRUE(kernels::cpu::conv2d_nchwc_winograd_supported(p));
            std::vector<float> packed(kernels::cpu::conv2d_nchwc_winograd_packed_weight_f32_floats(p, tile));
            kernels::cpu::pack_conv2d_nchwc_winograd_weight_f32(p, tile, static_cast<const float*>(w.data_ptr()),
                                                                packed.data());
            Tensor xb = to_nchwc(x), rb = mode ? to_nchwc(res).clone() : Tensor();
            Tensor y = mode == 3 ? rb : full({cc.n, (cc.k + 15) / 16, p.ho, p.wo, 16}, 7.0, TensorOptions(DType::f32));
            kernels::cpu::Conv2dEpilogue ep;
            ep.activation = act == "relu"      ? kernels::cpu::GemmActivation::relu
                            : act == "sigmoid" ? kernels::cpu::GemmActivation::sigmoid
                            : act == "gelu"    ? kernels::cpu::GemmActivation::gelu
                                               : kernels::cpu::GemmActivation::none;
            ep.residual = mode ? static_cast<const float*>(rb.data_ptr()) : nullptr;
            ep.residual_before_activation = mode != 2;
            kernels::cpu::conv2d_nchwc_winograd_f32(p, tile, static_cast<const float*>(xb.data_ptr()), packed.data(),
                                                    static_cast<const float*>(bias.data_ptr()),
                                                    static_cast<float*>(y.data_ptr()), ep);
            if (cc.k % 16) {  // a partial block's lanes stay act(0): the next layer sums them
              Tensor tail = y.slice(1, cc.k / 16, cc.k / 16 + 1).slice(4, cc.k % 16, 16);
              EXPECT_TRUE(testing::all_close(tail, extra_lanes(tail, act), {0, 0}));
            }
            // F(4x4, 3x3) rounds more (Note [Winograd tiles]): up to 1.7e-4 here, where the outputs'
            // spread is ~3.6 (C = 144: 1296 products of U(-1, 1) x U(-0.3, 0.3)); F(2x2, 3x3) under 1e-4.
            const double atol = tile == 2 ? 1e-4 : 4e-4;
            EXPECT_TRUE(testing::all_close(from_nchwc(y, cc.k), epilogue_ref(ref, res, mode == 3 ? 1 : mode, act),
                                           {1e-4, atol}));
          }
  }
}

// Where a panel's transformed filters fit L2 (Note [Winograd in two passes]): ResNet's 64- to
// 256-channel layers, not its 512-channel ones.
TEST(Nchwc, WinogradIsOfferedWhereAPanelsFiltersStayInL2) {
  EXPECT_TRUE(kernels::cpu::conv2d_nchwc_winograd_offered(64, 64, 2));
  EXPECT_TRUE(kernels::cpu::conv2d_nchwc_winograd_offered(128, 128, 2));
  EXPECT_TRUE(kernels::cpu::conv2d_nchwc_winograd_offered(256, 256, 2));
  EXPECT_TRUE(kernels::cpu::conv2d_nchwc_winograd_offered(256, 512, 2));
  EXPECT_FALSE(kernels::cpu::conv2d_nchwc_winograd_offered(512, 512, 2));
  kernels::cpu::Conv2dParams p;
  p.c = p.k = 16, p.r = p.s = 3, p.h = p.w = p.ho = p.wo = 8, p.pad_top = p.pad_left = 1;
  EXPECT_TRUE(kernels::cpu::conv2d_nchwc_winograd_supported(p));
  p.stride_h = 2;
  EXPECT_FALSE(kernels::cpu::conv2d_nchwc_winograd_supported(p));
  p.stride_h = 1, p.dil_w = 2;
  EXPECT_FALSE(kernels::cpu::conv2d_nchwc_winograd_supported(p));
  p.dil_w = 1, p.s = 5;
  EXPECT_FALSE(kernels::cpu::conv2d_nchwc_winograd_supported(p));
  // Groups of whole blocks in and out only (Note [Winograd by groups]).
  p.s = 3, p.c = 64, p.k = 96, p.groups = 2;
  EXPECT_TRUE(kernels::cpu::conv2d_nchwc_winograd_supported(p));
  p.k = 80;  // 40 filters a group: blocks shared by two groups
  EXPECT_FALSE(kernels::cpu::conv2d_nchwc_winograd_supported(p));
  p.k = 64, p.groups = 8;  // 8 channels a group
  EXPECT_FALSE(kernels::cpu::conv2d_nchwc_winograd_supported(p));
  p.c = p.k = 16, p.groups = 1, p.s = 5;
  std::vector<float> packed(1);
  EXPECT_KILN_ERROR(kernels::cpu::conv2d_nchwc_winograd_f32(p, 2, packed.data(), packed.data(), nullptr, packed.data()),
                    "3x3 filter of stride 1", "got 3x5");
}

// A stem reads its NCHW input as it is (NchwcInput::plain), or copied by pixel and read a kernel
// row at a time (Note [Stem rows]), and writes blocked output.
TEST(Nchwc, StemConvReadsNchwInput) {
  struct Stem {
    int64_t n, c, k, h, w, r, stride, pad;
    bool rows;
  };
  const Stem stems[] = {{1, 3, 64, 23, 19, 7, 2, 3, true},    // ResNet's stem, odd sizes
                        {2, 3, 64, 17, 18, 7, 2, 3, true},    // two images, a row of 18
                        {2, 3, 32, 9, 9, 3, 2, 1, false},     // MobileNet's
                        {1, 1, 16, 6, 5, 3, 1, 1, false},     // one channel
                        {1, 5, 48, 7, 7, 3, 1, 0, true},      // 5 channels, unpadded
                        {1, 2, 33, 9, 11, 5, 1, 2, true},     // 2 channels, a partial block
                        {1, 16, 16, 8, 8, 3, 1, 1, false},    // 16 channels: as plain input
                        // Wide enough for row tiles (Note [Row tiles]): stride 2, 1, 4 channels.
                        {1, 3, 32, 40, 52, 3, 2, 1, false},
                        {2, 3, 16, 20, 30, 3, 1, 1, false},
                        {1, 4, 48, 30, 40, 3, 2, 1, false},
                        // Rows wide enough for row tiles: 3 and 4 channels at stride 1 and 2.
                        {1, 3, 32, 12, 30, 5, 1, 2, true},
                        {1, 4, 64, 20, 40, 7, 2, 3, true},
                        {1, 4, 32, 10, 24, 3, 1, 1, true}};
  int seed = 900;
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride on(isa);
    for (const Stem& st : stems)
      for (int mode = 0; mode < 2; ++mode) {
        ++seed;
        SCOPED_TRACE(std::string(kernels::cpu::isa_name(isa)) + " C=" + std::to_string(st.c) + " K=" +
                     std::to_string(st.k) + " mode=" + std::to_string(mode));
        Conv2dOptions o;
        o.stride = {st.stride, st.stride};
        o.padding = {st.pad, st.pad, st.pad, st.pad};
        Tensor x = random_tensor({st.n, st.c, st.h, st.w}, DType::f32, seed, -1, 1);
        if (mode) x = testing::noncontiguous(x);
        Tensor w = random_tensor({st.k, st.c, st.r, st.r}, DType::f32, seed + 1000, -0.3, 0.3);
        Tensor bias = random_tensor({st.k}, DType::f32, seed + 2000);
        Tensor ref = conv2d(f64(x), f64(w), f64(bias), o);
        Tensor res = mode ? random_tensor(ref.shape(), DType::f32, seed + 3000) : Tensor();
        kernels::cpu::Conv2dParams p;
        p.n = st.n, p.c = st.c, p.h = st.h, p.w = st.w, p.k = st.k, p.r = p.s = st.r;
        p.ho = ref.shape()[2], p.wo = ref.shape()[3];
        p.stride_h = p.stride_w = st.stride, p.pad_top = p.pad_left = st.pad;
        EXPECT_EQ(kernels::cpu::conv2d_nchwc_reads_rows(p, kernels::cpu::NchwcInput::plain), st.rows);
        Tensor got = conv_nchwc(x, w, bias, mode ? to_nchwc(res) : Tensor(), o, "relu", /*mode=*/1);
        Tensor want = relu(mode ? add(ref, f64(res)) : ref);
        EXPECT_TRUE(testing::all_close(from_nchwc(got, st.k), want, {1e-4, 1e-4}));
      }
  }
}

// Depthwise convolutions (groups = C, Note [Blocked depthwise]) against the f64 reference: partial
// blocks, 3x3 and 5x5, strides, dilation, asymmetric padding, rows shorter and longer than 8
// outputs, a plane smaller than the filter (no interior column), every epilogue, every ISA.
TEST(Nchwc, DepthwiseMatchesFloat64Reference) {
  struct Dw {
    int64_t n, c, h, w, r;
    std::vector<int64_t> stride, padding, dilation;
  };
  const Dw cases[] = {{1, 16, 9, 9, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}},   {2, 24, 14, 13, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}},
                      {1, 40, 11, 19, 5, {1, 2}, {2, 1, 2, 3}, {1, 1}}, {1, 96, 7, 7, 3, {1, 1}, {2, 2, 2, 2}, {2, 2}},
                      {1, 8, 3, 5, 3, {1, 1}, {0, 0, 0, 0}, {1, 1}},    {1, 16, 2, 2, 5, {1, 1}, {2, 2, 2, 2}, {1, 1}},
                      {1, 32, 30, 29, 3, {2, 2}, {0, 1, 1, 0}, {1, 1}},
                      // Most above run in bands of rows (Note [Small depthwise planes]); wide
                      // outputs row by row (Note [Blocked depthwise]), as 30 x 29 does.
                      {1, 24, 20, 40, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}}, {2, 40, 18, 34, 5, {2, 2}, {2, 2, 2, 2}, {1, 1}},
                      {1, 16, 23, 15, 5, {1, 1}, {2, 0, 1, 2}, {2, 1}},
                      // Kernel rows in registers (stride 1 across): 5 x 5 rows of 33 interior
                      // outputs (8, 4 and 1 at a time), and with the rows 2 apart.
                      {1, 40, 12, 37, 5, {1, 1}, {2, 2, 2, 2}, {1, 1}}, {2, 16, 16, 30, 5, {2, 1}, {4, 2, 4, 2}, {2, 1}},
                      // and in bands: rows of 7 (MobileNets' 7 x 7 planes), 8 + 6, 4, 8 + 3 every
                      // other input row.
                      {1, 48, 7, 7, 5, {1, 1}, {2, 2, 2, 2}, {1, 1}},   {2, 32, 14, 14, 5, {1, 1}, {2, 2, 2, 2}, {1, 1}},
                      {1, 24, 7, 7, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}},   {1, 16, 6, 4, 5, {1, 1}, {2, 2, 2, 2}, {1, 1}},
                      {1, 16, 12, 11, 3, {2, 1}, {1, 1, 1, 1}, {1, 1}},
                      // a 5 x 5 window at stride 2 onto a narrow plane runs by rows, unbanded;
                      // at stride 2 across, rows of 5-wide windows run padded (Note [Row borders
                      // as zeros]): 22 outputs (8 + 8 + 6) under asymmetric padding, 17 above.
                      {1, 48, 28, 28, 5, {2, 2}, {2, 2, 2, 2}, {1, 1}}, {1, 24, 9, 45, 5, {1, 2}, {1, 2, 3, 1}, {1, 1}},
                      // 7- and 9-wide windows at stride 1 by kernel rows: ConvNeXt's 7 x 7 (padded 3),
                      // ConvMixer's 9 x 9 (padded 4) on a wide plane and in bands, asymmetric padding.
                      {1, 32, 19, 37, 7, {1, 1}, {3, 3, 3, 3}, {1, 1}}, {2, 16, 7, 7, 7, {1, 1}, {3, 3, 3, 3}, {1, 1}},
                      {1, 24, 33, 33, 9, {1, 1}, {4, 4, 4, 4}, {1, 1}},
                      {1, 16, 14, 14, 9, {1, 1}, {4, 2, 3, 4}, {1, 1}},
                      {1, 16, 20, 20, 7, {2, 1}, {3, 1, 3, 5}, {1, 1}}};
  int seed = 700;
  // On 2 and 3 threads: one image's rows go in a band a thread (Note [One image split by rows]),
  // 3 leaving a shorter last band.
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
      kernels::cpu::IsaOverride on(isa);
      for (const Dw& d : cases)
        for (const std::string act : {"none", "relu6", "hardswish", "silu", "gelu"})
          for (int mode = 0; mode < 3; ++mode) {
            ++seed;
            SCOPED_TRACE(std::string(kernels::cpu::isa_name(isa)) + " C=" + std::to_string(d.c) + " r=" +
                         std::to_string(d.r) + " act=" + act + " mode=" + std::to_string(mode) +
                         " threads=" + std::to_string(threads));
            Conv2dOptions o;
            o.stride = d.stride;
            o.padding = d.padding;
            o.dilation = d.dilation;
            o.groups = d.c;
            Tensor x = random_tensor({d.n, d.c, d.h, d.w}, DType::f32, seed, -1, 1);
            Tensor w = random_tensor({d.c, 1, d.r, d.r}, DType::f32, seed + 1000, -0.5, 0.5);
            Tensor bias = seed % 2 ? random_tensor({d.c}, DType::f32, seed + 2000) : Tensor();
            Tensor ref = conv2d(f64(x), f64(w), f64(bias), o);
            Tensor res = mode ? random_tensor(ref.shape(), DType::f32, seed + 3000) : Tensor();
            Tensor got = conv_nchwc(to_nchwc(x), w, bias, mode ? to_nchwc(res) : Tensor(), o, act, mode);
            Tensor want = epilogue_ref(ref, res, mode, act);
            EXPECT_TRUE(testing::all_close(from_nchwc(got, d.c), want, {1e-4, 1e-4}));
          }
    }
  }
  set_num_threads(available_cores());
}

// max_pool2d_nchwc against max_pool2d on the NCHW tensor: padding, stride, dilation, ceil_mode,
// a window wholly in the padding (-inf), and NaN propagation.
TEST(Nchwc, MaxPoolMatchesNchwMaxPool) {
  struct Pool {
    std::vector<int64_t> kernel, stride, padding, dilation;
    bool ceil;
  };
  const Pool pools[] = {{{3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, false},
                        {{2, 3}, {1, 2}, {0, 1, 1, 0}, {2, 1}, true},
                        {{2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, true}};
  int seed = 50;
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride on(isa);
    for (const Pool& pp : pools) {
      SCOPED_TRACE(std::string(kernels::cpu::isa_name(isa)));
      Tensor x = random_tensor({2, 32, 9, 8}, DType::f32, ++seed);
      x.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
      x.data<float>()[9 * 8 * 17 + 3] = std::numeric_limits<float>::quiet_NaN();
      Attrs a{{"kernel", pp.kernel}, {"stride", pp.stride}, {"padding", pp.padding}, {"dilation", pp.dilation},
              {"ceil_mode", pp.ceil}};
      Tensor want = dispatch1(op("max_pool2d"), {x}, a);
      Tensor got = dispatch1(op("max_pool2d_nchwc"), {to_nchwc(x)}, a);
      ASSERT_EQ(got.shape(), (Shape{2, 2, want.shape()[2], want.shape()[3], 16}));
      Tensor back = from_nchwc(got, 32);
      EXPECT_TRUE(testing::all_close(back, want, {0, 0}));
      EXPECT_TRUE(std::isnan(back.data<float>()[0])) << "a NaN in the first window propagates";
    }
  }
}

// Note [Blocked average pool]: avg_pool2d_nchwc against avg_pool2d of the float64 NCHW tensor:
// ResNet-D's 2 x 2 stride-2 ceil-mode pool on an odd plane (its last window hangs past the input),
// a padded 3 x 3 pool at stride 1 (Inception's branch) and 2, asymmetric padding, padding counted or
// not, and 40 channels (a partial block's lanes stay zero); on every ISA this machine has.
TEST(Nchwc, AvgPoolMatchesFloat64Reference) {
  struct Pool {
    std::vector<int64_t> kernel, stride, padding;
    bool ceil, count_pad;
  };
  const Pool pools[] = {{{2, 2}, {2, 2}, {0, 0, 0, 0}, true, false},  {{3, 3}, {1, 1}, {1, 1, 1, 1}, false, false},
                        {{3, 3}, {1, 1}, {1, 1, 1, 1}, false, true},   {{3, 3}, {2, 2}, {1, 1, 1, 1}, true, true},
                        {{2, 3}, {1, 2}, {0, 1, 1, 0}, true, false},   {{2, 2}, {2, 2}, {0, 0, 0, 0}, false, true}};
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride on(isa);
    int seed = 1500;
    for (const Pool& pp : pools) {
      SCOPED_TRACE(std::string(kernels::cpu::isa_name(isa)) + " kernel " + std::to_string(pp.kernel[0]) + "x" +
                   std::to_string(pp.kernel[1]) + " ceil " + std::to_string(pp.ceil) + " count_include_pad " +
                   std::to_string(pp.count_pad));
      Tensor x = random_tensor({2, 40, 9, 7}, DType::f32, ++seed);
      Attrs a{{"kernel", pp.kernel}, {"stride", pp.stride}, {"padding", pp.padding}, {"ceil_mode", pp.ceil},
              {"count_include_pad", pp.count_pad}};
      Tensor want = dispatch1(op("avg_pool2d"), {f64(x)}, a);
      Tensor got = dispatch1(op("avg_pool2d_nchwc"), {to_nchwc(x)}, a);
      ASSERT_EQ(got.shape(), (Shape{2, 3, want.shape()[2], want.shape()[3], 16}));
      Tensor tail = got.slice(1, 2, 3).slice(4, 8, 16);
      EXPECT_TRUE(testing::all_close(tail, full(tail.shape(), 0.0, TensorOptions(DType::f32)), {0, 0}));
      EXPECT_TRUE(testing::all_close(from_nchwc(got, 40), want, {1e-5, 1e-6}));
    }
  }
  EXPECT_THROW(dispatch1(op("avg_pool2d_nchwc"), {random_tensor({1, 16, 4, 4}, DType::f32, 1)},
                         Attrs{{"kernel", std::vector<int64_t>{2, 2}}}),
               Error);
}

// Note [Blocked global pool]: the mean of each channel's plane, against float64, for partial
// blocks (whose zero lanes stay zero), one-pixel planes, planes of 1-3 pixels past a multiple of
// 4 and a large plane; and what is not blocked is an error.
TEST(Nchwc, GlobalAveragePoolMatchesFloat64Reference) {
  int seed = 1700;
  for (const Shape& s : std::vector<Shape>{{2, 33, 7, 7}, {1, 16, 1, 1}, {3, 40, 13, 11}, {1, 7, 2, 3}, {1, 64, 56, 56}}) {
    SCOPED_TRACE(shape_str(s));
    Tensor x = random_tensor(s, DType::f32, ++seed);
    Tensor got = dispatch1(op("global_avg_pool_nchwc"), {to_nchwc(x)}, {});
    ASSERT_EQ(got.shape(), (Shape{s[0], (s[1] + 15) / 16, 1, 1, 16}));
    EXPECT_TRUE(testing::all_close(from_nchwc(got, s[1]), global_avg_pool(f64(x)), {1e-5, 1e-6}));
    if (s[1] % 16) {
      Tensor tail = got.slice(1, s[1] / 16, s[1] / 16 + 1).slice(4, s[1] % 16, 16);
      EXPECT_TRUE(testing::all_close(tail, zeros(tail.shape(), TensorOptions(DType::f32)), {0, 0}));
    }
  }
  EXPECT_KILN_ERROR(dispatch1(op("global_avg_pool_nchwc"), {random_tensor({1, 16, 5, 5}, DType::f32, 1)}, {}),
                    "global_avg_pool_nchwc", "must be blocked");
  EXPECT_KILN_ERROR(dispatch1(op("global_avg_pool_nchwc"), {zeros({1, 1, 0, 4, 16}, TensorOptions(DType::f32))}, {}),
                    "no pixels to average");
}

// Note [Blocked spatial norm]: each plane's L2 norm over its pixels, against the norm op in f64;
// a partial block's extra lanes stay zero; no pixels give 0.
TEST(Nchwc, GlobalNormMatchesFloat64Reference) {
  int seed = 1700;
  for (const Shape& s : std::vector<Shape>{{2, 33, 7, 7}, {1, 16, 1, 1}, {3, 40, 13, 11}, {1, 160, 56, 56}}) {
    SCOPED_TRACE(shape_str(s));
    Tensor x = random_tensor(s, DType::f32, ++seed, -3, 3);
    Tensor got = dispatch1(op("global_norm_nchwc"), {to_nchwc(x)}, {});
    ASSERT_EQ(got.shape(), (Shape{s[0], (s[1] + 15) / 16, 1, 1, 16}));
    EXPECT_TRUE(testing::all_close(from_nchwc(got, s[1]), norm(f64(x), {2, 3}, true), {1e-6, 1e-6}));
    if (s[1] % 16) {
      Tensor tail = got.slice(1, s[1] / 16, s[1] / 16 + 1).slice(4, s[1] % 16, 16);
      EXPECT_TRUE(testing::all_close(tail, zeros(tail.shape(), TensorOptions(DType::f32)), {0, 0}));
    }
  }
  // Squares summed in f64: 1e20 squared overflows f32, not the norm.
  Tensor big = full({1, 16, 2, 2}, Scalar(1e20), TensorOptions(DType::f32));
  Tensor got = from_nchwc(dispatch1(op("global_norm_nchwc"), {to_nchwc(big)}, {}), 16);
  EXPECT_TRUE(testing::all_close(got, full({1, 16, 1, 1}, Scalar(2e20), TensorOptions(DType::f32)), {1e-6, 0}));
  Tensor none = dispatch1(op("global_norm_nchwc"), {zeros({1, 1, 0, 4, 16}, TensorOptions(DType::f32))}, {});
  EXPECT_TRUE(testing::all_close(none, zeros({1, 1, 1, 1, 16}, TensorOptions(DType::f32)), {0, 0}));
}

// Note [Blocked channel norm]: a layer norm over each pixel's channels against layer_norm of the
// channels-last permute in f64, on every ISA, for one block, partial blocks (whose extra input lanes
// hold garbage the sums must skip, and whose extra output lanes come out zero) and planes split
// between threads; written over x too.
TEST(Nchwc, ChannelLayerNormMatchesFloat64Reference) {
  int seed = 1750;
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride on(isa);
    for (const Shape& s : std::vector<Shape>{{2, 40, 7, 5}, {1, 16, 1, 1}, {1, 1, 3, 3}, {3, 33, 13, 11},
                                             {1, 96, 56, 56}}) {
      SCOPED_TRACE(std::string(kernels::cpu::isa_name(isa)) + " " + shape_str(s));
      ++seed;
      const int64_t c = s[1], lanes = (c + 15) / 16 * 16;
      Tensor x = random_tensor(s, DType::f32, seed, -4, 4);
      Tensor w = random_tensor({c}, DType::f32, seed + 1000, -2, 2), b = random_tensor({c}, DType::f32, seed + 2000);
      Tensor w_l = zeros({lanes}, TensorOptions(DType::f32)), b_l = zeros({lanes}, TensorOptions(DType::f32));
      w_l.slice(0, 0, c).copy_(w);
      b_l.slice(0, 0, c).copy_(b);
      Tensor want = layer_norm(f64(x).permute({0, 2, 3, 1}), 3, f64(w), f64(b), 1e-6).permute({0, 3, 1, 2});
      Tensor xb = to_nchwc(x);
      if (c % 16) xb.slice(1, c / 16, c / 16 + 1).slice(4, c % 16, 16).fill_(Scalar(7.5));  // not zero: skipped
      const Attrs a{{"channels", c}, {"eps", 1e-6}};
      Tensor got = dispatch1(op("layer_norm_nchwc"), {xb, w_l, b_l}, a);
      ASSERT_EQ(got.shape(), xb.shape());
      EXPECT_TRUE(testing::all_close(from_nchwc(got, c), want, {2e-5, 2e-5}));
      if (c % 16) {
        Tensor tail = got.slice(1, c / 16, c / 16 + 1).slice(4, c % 16, 16);
        EXPECT_TRUE(testing::all_close(tail, zeros(tail.shape(), TensorOptions(DType::f32)), {0, 0}));
      }
      kernels::cpu::layer_norm_channels_nchwc_f32(s[0], lanes / 16, s[2] * s[3], c,
                                                  static_cast<const float*>(xb.data_ptr()),
                                                  static_cast<const float*>(w_l.data_ptr()),
                                                  static_cast<const float*>(b_l.data_ptr()), 1e-6f,
                                                  static_cast<float*>(xb.data_ptr()));
      EXPECT_TRUE(testing::all_close(xb, got, {0, 0}));
    }
  }
  Tensor xb = to_nchwc(random_tensor({1, 20, 3, 3}, DType::f32, 1));
  Tensor v32 = random_tensor({32}, DType::f32, 2);
  EXPECT_KILN_ERROR(dispatch1(op("layer_norm_nchwc"), {xb, v32, v32}, {{"channels", int64_t{40}}}),
                    "layer_norm_nchwc", "channels = 40 does not fill x's 2 blocks");
  EXPECT_KILN_ERROR(dispatch1(op("layer_norm_nchwc"), {xb, random_tensor({20}, DType::f32, 3), v32},
                              {{"channels", int64_t{20}}}),
                    "weight of shape [20] must be [32]");
}

// Note [Blocked batch norm]: act(x * scale + shift) a channel each, on every ISA, over planes of one
// pixel to thousands (split between threads at batch 1) and partial blocks, whose extra lanes
// come out act(0); written over x too.
TEST(Nchwc, ScaleShiftMatchesFloat64Reference) {
  int seed = 1800;
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride on(isa);
    for (const Shape& s :
         std::vector<Shape>{{2, 33, 7, 7}, {1, 16, 1, 1}, {3, 40, 13, 11}, {1, 7, 1, 33}, {1, 64, 56, 56}})
      for (const std::string act : {"none", "relu", "relu6", "hardswish", "sigmoid", "silu", "gelu"}) {
        SCOPED_TRACE(std::string(kernels::cpu::isa_name(isa)) + " " + shape_str(s) + " act=" + act);
        ++seed;
        const int64_t c = s[1], lanes = (c + 15) / 16 * 16;
        Tensor x = random_tensor(s, DType::f32, seed, -8, 8);
        Tensor scale = random_tensor({c}, DType::f32, seed + 1000, -2, 2);
        Tensor shift = random_tensor({c}, DType::f32, seed + 2000, -1, 1);
        // Zero past C, as the layout pass packs them.
        Tensor scale_l = zeros({lanes}, TensorOptions(DType::f32)), shift_l = zeros({lanes}, TensorOptions(DType::f32));
        scale_l.slice(0, 0, c).copy_(scale);
        shift_l.slice(0, 0, c).copy_(shift);
        Tensor want =
            act_ref(add(mul(f64(x), f64(scale).reshape({1, c, 1, 1})), f64(shift).reshape({1, c, 1, 1})), act);
        Tensor xb = to_nchwc(x);
        Tensor got = dispatch1(op("scale_shift_nchwc"), {xb, scale_l, shift_l}, {{"activation", act}});
        ASSERT_EQ(got.shape(), xb.shape());
        EXPECT_TRUE(testing::all_close(from_nchwc(got, c), want, {1e-5, 1e-6}));
        if (c % 16) {
          Tensor tail = got.slice(1, c / 16, c / 16 + 1).slice(4, c % 16, 16);
          EXPECT_TRUE(testing::all_close(tail, extra_lanes(tail, act), {0, 0}));
        }
        // In place: the kernel reads each vector before it writes it.
        kernels::cpu::scale_shift_nchwc_f32(s[0], lanes / 16, s[2] * s[3], static_cast<const float*>(xb.data_ptr()),
                                            static_cast<const float*>(scale_l.data_ptr()),
                                            static_cast<const float*>(shift_l.data_ptr()),
                                            static_cast<float*>(xb.data_ptr()),
                                            act == "relu"        ? kernels::cpu::GemmActivation::relu
                                            : act == "relu6"     ? kernels::cpu::GemmActivation::relu6
                                            : act == "hardswish" ? kernels::cpu::GemmActivation::hardswish
                                            : act == "sigmoid"   ? kernels::cpu::GemmActivation::sigmoid
                                            : act == "silu"      ? kernels::cpu::GemmActivation::silu
                                            : act == "gelu"      ? kernels::cpu::GemmActivation::gelu
                                                                 : kernels::cpu::GemmActivation::none);
        EXPECT_TRUE(testing::all_close(xb, got, {0, 0}));
      }
  }
  Tensor xb = to_nchwc(random_tensor({1, 20, 3, 3}, DType::f32, 1));
  Tensor v32 = random_tensor({32}, DType::f32, 2);
  EXPECT_KILN_ERROR(dispatch1(op("scale_shift_nchwc"), {random_tensor({1, 16, 3, 3}, DType::f32, 1), v32, v32}, {}),
                    "scale_shift_nchwc", "must be blocked");
  EXPECT_KILN_ERROR(dispatch1(op("scale_shift_nchwc"), {xb, random_tensor({20}, DType::f32, 3), v32}, {}),
                    "scale of shape [20] must be [32]");
  EXPECT_KILN_ERROR(dispatch1(op("scale_shift_nchwc"), {xb, v32, v32}, {{"activation", std::string("gelu_tanh")}}),
                    "activation 'gelu_tanh' is not one of");
}

TEST(Nchwc, TilingFollowsThePlane) {
  kernels::cpu::Conv2dParams p;
  p.ho = p.wo = 7;
  EXPECT_EQ(kernels::cpu::conv2d_nchwc_tiling(p).panel_blocks, 3);  // 49 pixels: 7 tiles of 7, not 9 of 6
  p.ho = p.wo = 56;
  EXPECT_EQ(kernels::cpu::conv2d_nchwc_tiling(p).panel_blocks, 4);
  p.ho = p.wo = 14;
  EXPECT_EQ(kernels::cpu::conv2d_nchwc_tiling(p).panel_blocks, 4);  // 196 = 33 tiles of 6, 1% spare
  EXPECT_EQ(kernels::cpu::conv2d_nchwc_tiling(p).pixels(4), 6);
  p.ho = p.wo = 1;  // Note [One-pixel planes]
  for (int blocks : {1, 2, 3, 4}) EXPECT_EQ(kernels::cpu::conv2d_nchwc_tiling(p).pixels(blocks), 1);
  p.ho = p.wo = 14;
  // Note [Panels as tactics]: a last panel of one or two blocks, where panels of 3 leave none or
  // two, takes panels of 3.
  for (const auto& [k, blocks] : std::vector<std::pair<int64_t, int>>{
           {64, 4}, {96, 3}, {144, 3}, {160, 4}, {240, 4}, {32, 3}, {80, 3}, {112, 4}, {16, 4}, {1024, 4}}) {
    p.k = k;
    EXPECT_EQ(kernels::cpu::conv2d_nchwc_tiling(p).panel_blocks, blocks) << "K=" << k;
  }
  // An engine's tactic sets the width (Note [Panels as tactics]); nothing but 3 or 4 is one.
  p.nchwc_panel_blocks = 3;
  EXPECT_EQ(kernels::cpu::conv2d_nchwc_tiling(p).panel_blocks, 3);
  p.ho = p.wo = 7;
  p.nchwc_panel_blocks = 4;
  EXPECT_EQ(kernels::cpu::conv2d_nchwc_tiling(p).panel_blocks, 4);
  p.nchwc_panel_blocks = 2;
  EXPECT_KILN_ERROR(kernels::cpu::conv2d_nchwc_tiling(p), "panels of 2 blocks", "expected 3 or 4");
}

TEST(Nchwc, RejectsWhatTheBlockedLayoutCannotHold) {
  Tensor x = random_tensor({1, 32, 5, 5}, DType::f32, 1);
  Tensor xb = to_nchwc(x);
  EXPECT_KILN_ERROR(from_nchwc(xb, 33), "from_nchwc", "channels = 33 does not fit x of shape [1, 2, 5, 5, 16]",
                    "channels 17 to 32");
  EXPECT_KILN_ERROR(from_nchwc(x, 32), "x of shape [1, 32, 5, 5] must be blocked");
  EXPECT_KILN_ERROR(to_nchwc(random_tensor({1, 3, 5}, DType::f32, 2)), "to_nchwc", "must be [N, C, H, W]");
  EXPECT_KILN_ERROR(to_nchwc(random_tensor({1, 3, 5, 5}, DType::f64, 2)), "x is f64", "f32 only");
  auto conv = [&](const Tensor& in, const Tensor& w, const std::string& act) {
    return dispatch1(op("fused_conv2d_nchwc"), {in, w, Tensor(), Tensor()}, {{"activation", act}});
  };
  EXPECT_KILN_ERROR(conv(xb, random_tensor({16, 16, 3, 3}, DType::f32, 3), "relu"),
                    "w of shape [16, 16, 3, 3] reads 16 input channels but x of shape [1, 2, 5, 5, 16] holds 2 blocks");
  EXPECT_KILN_ERROR(dispatch1(op("fused_conv2d_nchwc"), {xb, random_tensor({32, 2, 3, 3}, DType::f32, 4)},
                              {{"groups", int64_t{16}}}),
                    "groups = 16 with w of shape [32, 2, 3, 3]", "one group, depthwise filters",
                    "at most 4 consecutive ones fill whole blocks");
  EXPECT_KILN_ERROR(dispatch1(op("fused_conv2d_nchwc"),
                              {random_tensor({1, 16, 5, 5}, DType::f32, 11), random_tensor({32, 8, 3, 3}, DType::f32, 12)},
                              {{"groups", int64_t{2}}}),
                    "a grouped convolution needs blocked x");
  EXPECT_KILN_ERROR(dispatch1(op("fused_conv2d_nchwc"),
                              {random_tensor({1, 8, 5, 5}, DType::f32, 11), random_tensor({8, 1, 3, 3}, DType::f32, 12)},
                              {{"groups", int64_t{8}}}),
                    "a depthwise convolution needs blocked x");
  EXPECT_KILN_ERROR(conv(xb, random_tensor({16, 32, 3, 3}, DType::f32, 5), "gelu_tanh"),
                    "activation 'gelu_tanh' is not one of the blocked kernel's");
  EXPECT_KILN_ERROR(conv(x, random_tensor({16, 32, 3, 3}, DType::f32, 6), "relu"),
                    "x of shape [1, 32, 5, 5] is NCHW with more than 16 channels; block it first (to_nchwc)");
  EXPECT_KILN_ERROR(conv(random_tensor({1, 3, 5, 5}, DType::f32, 9), random_tensor({16, 4, 3, 3}, DType::f32, 10), "relu"),
                    "w of shape [16, 4, 3, 3] has 4 input channels but x of shape [1, 3, 5, 5] has 3");
  EXPECT_KILN_ERROR(dispatch1(op("max_pool2d_nchwc"), {x}, {{"kernel", std::vector<int64_t>{2, 2}}}),
                    "max_pool2d_nchwc", "x of shape [1, 32, 5, 5] must be blocked");
  EXPECT_KILN_ERROR(dispatch1(op("fused_conv2d_nchwc"),
                              {xb, random_tensor({16, 32, 3, 3}, DType::f32, 7), Tensor(),
                               to_nchwc(random_tensor({1, 16, 5, 5}, DType::f32, 8))},
                              {}),
                    "residual of shape [1, 1, 5, 5, 16] must have the output's shape [1, 1, 3, 3, 16]");
}

}  // namespace
}  // namespace kiln
