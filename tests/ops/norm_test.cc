// softmax, log_softmax, layer_norm, rms_norm, batch_norm and rotary_embedding against the float64
// reference (ref/norm.cc):
// floating dtypes, odd sizes, several axes, non-contiguous inputs, optional weight/bias, stability
// on large inputs, and error messages that name the op, the argument and both shapes.
// Tolerance: tol_for(result dtype) (each result is computed in f64 and rounded once).
#include <cmath>

#include "kernels/cpu/isa.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::noncontiguous;
using testing::random_tensor;

TEST(Norm, SoftmaxMatchesReference) {
  for (DType t : testing::kFloatDTypes) {
    for (int64_t n : testing::kOddSizes) {
      for (const Shape& shape : std::vector<Shape>{{n}, {3, n}, {n, 5}, {2, n, 3}}) {
        Tensor x = random_tensor(shape, t, 7 + static_cast<uint64_t>(n), -4, 4);
        for (int64_t axis = -1; axis < static_cast<int64_t>(shape.size()); ++axis) {
          EXPECT_TRUE(all_close(softmax(x, axis), ref::softmax(x, axis)))
              << dtype_name(t) << " " << shape_str(shape) << " axis " << axis;
          EXPECT_TRUE(all_close(log_softmax(x, axis), ref::softmax(x, axis, true)))
              << dtype_name(t) << " log " << shape_str(shape) << " axis " << axis;
        }
      }
    }
  }
}

TEST(Norm, SoftmaxRowsSumToOneAndLargeInputsDoNotOverflow) {
  Tensor x = random_tensor({7, 1000}, DType::f32, 3, -10, 10);
  EXPECT_TRUE(all_close(sum(softmax(x, 1), {1}), ones({7}, DType::f64), {1e-5, 1e-6}));
  EXPECT_TRUE(all_close(sum(softmax(x, 0), {0}), ones({1000}, DType::f64), {1e-5, 1e-6}));
  Tensor big = from_vector<float>({1000, 1000, 999, -1000});
  Tensor s = softmax(big, 0);
  double e1 = std::exp(-1.0), z = 2 + e1;
  EXPECT_TRUE(all_close(s, from_vector<double>({1 / z, 1 / z, e1 / z, 0}))) << s;
  EXPECT_TRUE(all_close(log_softmax(big, 0),
                        from_vector<double>({-std::log(z), -std::log(z), -1 - std::log(z), -2000 - std::log(z)})));
  Tensor h = from_vector<float>({60000, 60000}).to(DType::f16);  // exp(60000) overflows any float
  EXPECT_TRUE(all_close(softmax(h, 0), from_vector<double>({0.5, 0.5})));
}

TEST(Norm, SoftmaxNonContiguous) {
  for (DType t : {DType::f32, DType::f64, DType::bf16}) {
    Tensor x = random_tensor({5, 33, 7}, t, 13, -4, 4);
    for (int64_t axis : {0, 1, 2}) {
      EXPECT_TRUE(all_close(softmax(noncontiguous(x), axis), ref::softmax(x, axis))) << dtype_name(t) << axis;
      Tensor p = x.permute({2, 0, 1});
      EXPECT_TRUE(all_close(log_softmax(p, axis), ref::softmax(p, axis, true))) << dtype_name(t) << axis;
    }
  }
  Tensor s = scalar_tensor(3.0);
  EXPECT_EQ(softmax(s, 0).item<double>(), 1.0);
}

TEST(Norm, LayerNormMatchesReference) {
  for (DType t : testing::kFloatDTypes) {
    for (int64_t n : testing::kOddSizes) {
      const Shape shape{3, n, 5};
      Tensor x = random_tensor(shape, t, 19 + static_cast<uint64_t>(n));
      for (int64_t axis : {-1, 1, 0, 2, -2}) {
        int64_t a = axis < 0 ? axis + 3 : axis;
        Shape ns(shape.begin() + a, shape.end());
        Tensor w = random_tensor(ns, t, 23), b = random_tensor(ns, t, 29);
        EXPECT_TRUE(all_close(layer_norm(x, axis), ref::layer_norm(x, axis, {}, {}, 1e-5)))
            << dtype_name(t) << " n=" << n << " axis " << axis;
        EXPECT_TRUE(all_close(layer_norm(x, axis, w, b), ref::layer_norm(x, axis, w, b, 1e-5)))
            << dtype_name(t) << " n=" << n << " axis " << axis << " affine";
        EXPECT_TRUE(all_close(layer_norm(x, axis, w, {}, 0.1), ref::layer_norm(x, axis, w, {}, 0.1)))
            << dtype_name(t) << " n=" << n << " axis " << axis << " weight only";
        EXPECT_TRUE(all_close(layer_norm(x, axis, {}, b), ref::layer_norm(x, axis, {}, b, 1e-5)))
            << dtype_name(t) << " n=" << n << " axis " << axis << " bias only";
      }
    }
  }
}

TEST(Norm, LayerNormStridedInputsAndParams) {
  Tensor x = random_tensor({4, 7, 33}, DType::f32, 31);
  Tensor w = random_tensor({7, 33}, DType::f32, 37), b = random_tensor({7, 33}, DType::f64, 41);
  Tensor want = ref::layer_norm(x, 1, w, b, 1e-5);
  EXPECT_TRUE(all_close(layer_norm(noncontiguous(x), 1, noncontiguous(w), noncontiguous(b)), want));
  Tensor xt = random_tensor({33, 7}, DType::f32, 43).t();
  EXPECT_TRUE(all_close(layer_norm(xt, -1), ref::layer_norm(xt, -1, {}, {}, 1e-5)));
  // A constant row normalizes to 0 (then the bias).
  Tensor c = full({2, 5}, 3.0);
  EXPECT_TRUE(all_close(layer_norm(c, 1), zeros({2, 5}, DType::f64)));
}

// Contiguous f32 rows take the vector row kernels (kernels/cpu/norm_f32.h) on every ISA this
// machine has: rows past one 4096-element chunk, short rows, rows whose mean dwarfs their spread
// (Note [Layer norm in f32 lanes]), a NaN or inf in one row (that row NaN, the others intact).
TEST(Norm, LayerNormF32RowsOnEveryIsa) {
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride o(isa);
    const std::string name(kernels::cpu::isa_name(isa));
    for (int64_t n : {1, 7, 16, 33, 64, 768, 1023, 4096, 5000, 9001}) {
      for (double offset : {0.0, 1000.0, -3e4}) {
        Tensor x = random_tensor({5, n}, DType::f32, 101 + static_cast<uint64_t>(n), offset - 1, offset + 1);
        Tensor w = random_tensor({n}, DType::f32, 103), b = random_tensor({n}, DType::f32, 107);
        EXPECT_TRUE(all_close(layer_norm(x, 1, w, b), ref::layer_norm(x, 1, w, b, 1e-5)))
            << name << " n=" << n << " offset " << offset;
        EXPECT_TRUE(all_close(layer_norm(x, 1, w, {}, 1e-3), ref::layer_norm(x, 1, w, {}, 1e-3)))
            << name << " n=" << n << " offset " << offset << " weight only";
        EXPECT_TRUE(all_close(layer_norm(x, 1, {}, b), ref::layer_norm(x, 1, {}, b, 1e-5)))
            << name << " n=" << n << " offset " << offset << " bias only";
        EXPECT_TRUE(all_close(layer_norm(x, -1), ref::layer_norm(x, -1, {}, {}, 1e-5)))
            << name << " n=" << n << " offset " << offset << " no affine";
      }
    }
    // Two normalized dims, [2, 3, 33, 17] over the last two; weight [33, 17].
    Tensor x4 = random_tensor({2, 3, 33, 17}, DType::f32, 109);
    Tensor w2 = random_tensor({33, 17}, DType::f32, 113), b2 = random_tensor({33, 17}, DType::f32, 127);
    EXPECT_TRUE(all_close(layer_norm(x4, 2, w2, b2), ref::layer_norm(x4, 2, w2, b2, 1e-5))) << name;
    // Non-finite values poison their own row only.
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      Tensor x = random_tensor({3, 37}, DType::f32, 131);
      static_cast<float*>(x.data_ptr())[37 + 20] = bad;
      Tensor y = layer_norm(x, 1);
      const float* yp = static_cast<const float*>(y.data_ptr());
      for (int64_t j = 0; j < 37; ++j) EXPECT_TRUE(std::isnan(yp[37 + j])) << name << " " << bad << " j=" << j;
      EXPECT_TRUE(all_close(y.slice(0, 0, 1), ref::layer_norm(x.slice(0, 0, 1), 1, {}, {}, 1e-5))) << name;
      EXPECT_TRUE(all_close(y.slice(0, 2, 3), ref::layer_norm(x.slice(0, 2, 3), 1, {}, {}, 1e-5))) << name;
    }
  }
}

// Rows stored across (Note [Layer norm across] in kernels/cpu/norm_f32.h): ConvNeXt's channel
// layer norm, an NCHW activation permuted to NHWC and normalized over C, on every ISA. Planes of 35
// pixels (16 + 16 + 3 rows), 16 and 117; C partial (7, 40) and whole (16, 96) blocks of 16; rows
// whose mean dwarfs their spread; tasks that span images (C = 7: 292 groups of 16 rows a task); a
// [N, C, L] activation read as [N, L, C]; a batch dim that is not the outermost in memory.
TEST(Norm, LayerNormAcrossPlanesOnEveryIsa) {
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride o(isa);
    const std::string name(kernels::cpu::isa_name(isa));
    int seed = 300;
    for (int64_t c : {7, 16, 40, 96})
      for (const auto& [h, w] : std::vector<std::pair<int64_t, int64_t>>{{5, 7}, {4, 4}, {9, 13}})
        for (double offset : {0.0, 1000.0}) {
          ++seed;
          Tensor x = random_tensor({3, c, h, w}, DType::f32, seed, offset - 1, offset + 1).permute({0, 2, 3, 1});
          Tensor wt = random_tensor({c}, DType::f32, seed + 1), b = random_tensor({c}, DType::f32, seed + 2);
          const std::string what = name + " C=" + std::to_string(c) + " " + std::to_string(h) + "x" +
                                   std::to_string(w) + " offset " + std::to_string(offset);
          EXPECT_TRUE(all_close(layer_norm(x, 3, wt, b, 1e-6), ref::layer_norm(x, 3, wt, b, 1e-6))) << what;
          EXPECT_TRUE(all_close(layer_norm(x, -1), ref::layer_norm(x, -1, {}, {}, 1e-5))) << what << " no affine";
        }
    // A 72 x 72 plane of 16 channels: 324 groups of 16 rows, tasks of at least 128 (one starts
    // mid-plane); and every other channel of a plane (the batch 2 C H W apart, not C H W).
    Tensor big = random_tensor({1, 16, 72, 72}, DType::f32, 399).permute({0, 2, 3, 1});
    EXPECT_TRUE(all_close(layer_norm(big, 3), ref::layer_norm(big, 3, {}, {}, 1e-5))) << name;
    Tensor half = random_tensor({2, 48, 6, 6}, DType::f32, 400).slice(1, 0, 24).permute({0, 2, 3, 1});
    EXPECT_TRUE(all_close(layer_norm(half, 3), ref::layer_norm(half, 3, {}, {}, 1e-5))) << name;
    Tensor seq = random_tensor({2, 24, 50}, DType::f32, 401).transpose(1, 2);  // [N, L, C] over [N, C, L]
    EXPECT_TRUE(all_close(layer_norm(seq, 2), ref::layer_norm(seq, 2, {}, {}, 1e-5))) << name;
    // [C, N, P] read as [N, P, C]: the batch dim strides less than the channels.
    Tensor inner = random_tensor({20, 3, 40}, DType::f32, 403).permute({1, 2, 0});
    EXPECT_TRUE(all_close(layer_norm(inner, 2), ref::layer_norm(inner, 2, {}, {}, 1e-5))) << name;
  }
}

TEST(Norm, RmsNormMatchesReference) {
  for (DType t : testing::kFloatDTypes) {
    for (int64_t n : testing::kOddSizes) {
      const Shape shape{3, n, 5};
      Tensor x = random_tensor(shape, t, 211 + static_cast<uint64_t>(n));
      for (int64_t axis : {-1, 1, 0, 2, -2}) {
        int64_t a = axis < 0 ? axis + 3 : axis;
        Tensor w = random_tensor(Shape(shape.begin() + a, shape.end()), t, 223);
        const std::string what =
            std::string(dtype_name(t)) + " n=" + std::to_string(n) + " axis " + std::to_string(axis);
        EXPECT_TRUE(all_close(rms_norm(x, axis), ref::rms_norm(x, axis, {}, 1e-5))) << what;
        EXPECT_TRUE(all_close(rms_norm(x, axis, w), ref::rms_norm(x, axis, w, 1e-5))) << what << " weight";
        EXPECT_TRUE(all_close(rms_norm(x, axis, w, 0.1), ref::rms_norm(x, axis, w, 0.1))) << what << " eps 0.1";
      }
    }
  }
}

TEST(Norm, RmsNormStridedInputsAndWeight) {
  Tensor x = random_tensor({4, 7, 33}, DType::f32, 227);
  Tensor w = random_tensor({7, 33}, DType::f32, 229);
  EXPECT_TRUE(all_close(rms_norm(noncontiguous(x), 1, noncontiguous(w)), ref::rms_norm(x, 1, w, 1e-5)));
  Tensor xt = random_tensor({33, 7}, DType::f32, 233).t();
  EXPECT_TRUE(all_close(rms_norm(xt, -1), ref::rms_norm(xt, -1, {}, 1e-5)));
  // An f64 weight on f32 rows takes the generic loop.
  Tensor w64 = random_tensor({33}, DType::f64, 239);
  EXPECT_TRUE(all_close(rms_norm(x, 2, w64), ref::rms_norm(x, 2, w64, 1e-5)));
}

// Contiguous f32 rows take the vector row kernel (Note [RMS norm in f32 lanes]) on every ISA this
// machine has: rows past one 4096-element chunk, short rows, rows far from zero, many rows split
// over the pool, two normalized dims, and a NaN or inf in one row (that row NaN where the float64
// loop makes it so, the other rows intact).
TEST(Norm, RmsNormF32RowsOnEveryIsa) {
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride o(isa);
    const std::string name(kernels::cpu::isa_name(isa));
    for (int64_t n : {1, 7, 16, 33, 64, 768, 1023, 4096, 5000, 9001}) {
      for (double offset : {0.0, 1000.0, -3e4}) {
        Tensor x = random_tensor({5, n}, DType::f32, 241 + static_cast<uint64_t>(n), offset - 1, offset + 1);
        Tensor w = random_tensor({n}, DType::f32, 251);
        EXPECT_TRUE(all_close(rms_norm(x, 1, w), ref::rms_norm(x, 1, w, 1e-5)))
            << name << " n=" << n << " offset " << offset;
        EXPECT_TRUE(all_close(rms_norm(x, -1, {}, 1e-3), ref::rms_norm(x, -1, {}, 1e-3)))
            << name << " n=" << n << " offset " << offset << " no weight";
      }
    }
    Tensor many = random_tensor({6001, 17}, DType::f32, 257);
    Tensor w17 = random_tensor({17}, DType::f32, 263);
    EXPECT_TRUE(all_close(rms_norm(many, 1, w17), ref::rms_norm(many, 1, w17, 1e-5))) << name;
    Tensor x4 = random_tensor({2, 3, 33, 17}, DType::f32, 269);
    Tensor w2 = random_tensor({33, 17}, DType::f32, 271);
    EXPECT_TRUE(all_close(rms_norm(x4, 2, w2), ref::rms_norm(x4, 2, w2, 1e-5))) << name;
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      Tensor x = random_tensor({3, 37}, DType::f32, 277);
      static_cast<float*>(x.data_ptr())[37 + 20] = bad;
      Tensor y = rms_norm(x, 1);
      Tensor want = ref::rms_norm(x, 1, {}, 1e-5);
      const float* yp = static_cast<const float*>(y.data_ptr());
      const double* wp = static_cast<const double*>(want.contiguous().data_ptr());
      for (int64_t j = 0; j < 37; ++j)
        EXPECT_EQ(std::isnan(yp[37 + j]), std::isnan(wp[37 + j])) << name << " " << bad << " j=" << j;
      EXPECT_TRUE(std::isnan(yp[37 + 20])) << name << " " << bad;
      EXPECT_TRUE(all_close(y.slice(0, 0, 1), want.slice(0, 0, 1))) << name;
      EXPECT_TRUE(all_close(y.slice(0, 2, 3), want.slice(0, 2, 3))) << name;
    }
  }
}

// rotary_embedding against the long-double reference: every float dtype, rows of 2 to 130 over odd
// leading sizes, both pair layouts, cos and sin of x's shape and broadcast ([S, D] over [B, H, S,
// D]), and heads permuted out of [B, S, H, D] as attention reads them (not contiguous).
TEST(Norm, RotaryEmbeddingMatchesReference) {
  for (DType t : testing::kFloatDTypes) {
    for (int64_t d : {2, 8, 66, 130}) {
      for (int64_t n : {1, 7, 33}) {
        Tensor x = random_tensor({2, 3, n, d}, t, 281 + static_cast<uint64_t>(n + d));
        Tensor c = random_tensor({n, d}, t, 283), s = random_tensor({n, d}, t, 293);
        Tensor cf = random_tensor({2, 3, n, d}, t, 307), sf = random_tensor({2, 3, n, d}, t, 311);
        Tensor heads = random_tensor({2, n, 3, d}, t, 313).permute({0, 2, 1, 3});
        for (bool il : {false, true}) {
          const std::string what = std::string(dtype_name(t)) + " d=" + std::to_string(d) +
                                   " n=" + std::to_string(n) + (il ? " interleaved" : "");
          EXPECT_TRUE(all_close(rotary_embedding(x, c, s, il), ref::rotary_embedding(x, c, s, il))) << what;
          EXPECT_TRUE(all_close(rotary_embedding(x, cf, sf, il), ref::rotary_embedding(x, cf, sf, il))) << what;
          EXPECT_TRUE(all_close(rotary_embedding(heads, c, s, il), ref::rotary_embedding(heads, c, s, il)))
              << what << " permuted heads";
          EXPECT_TRUE(all_close(rotary_embedding(noncontiguous(x), noncontiguous(c), s, il),
                                ref::rotary_embedding(x, c, s, il)))
              << what << " strided";
        }
      }
    }
  }
}

// A quarter turn by hand: the pair (x_i, x_{i+2}) of a 4-wide row (or (x_2i, x_2i+1) interleaved)
// turned by angle a: (x cos a - y sin a, y cos a + x sin a).
TEST(Norm, RotaryEmbeddingTurnsEachPair) {
  const double a = 0.3, b = -1.1;
  Tensor x = from_vector<double>({1, 2, 3, 4}, Shape{1, 4});
  Tensor c = from_vector<double>({std::cos(a), std::cos(b), std::cos(a), std::cos(b)}, Shape{4});
  Tensor s = from_vector<double>({std::sin(a), std::sin(b), std::sin(a), std::sin(b)}, Shape{4});
  Tensor half = from_vector<double>({1 * std::cos(a) - 3 * std::sin(a), 2 * std::cos(b) - 4 * std::sin(b),
                                     3 * std::cos(a) + 1 * std::sin(a), 4 * std::cos(b) + 2 * std::sin(b)},
                                    Shape{1, 4});
  EXPECT_TRUE(all_close(rotary_embedding(x, c, s), half));
  Tensor ci = from_vector<double>({std::cos(a), std::cos(a), std::cos(b), std::cos(b)}, Shape{4});
  Tensor si = from_vector<double>({std::sin(a), std::sin(a), std::sin(b), std::sin(b)}, Shape{4});
  Tensor pairs = from_vector<double>({1 * std::cos(a) - 2 * std::sin(a), 2 * std::cos(a) + 1 * std::sin(a),
                                      3 * std::cos(b) - 4 * std::sin(b), 4 * std::cos(b) + 3 * std::sin(b)},
                                     Shape{1, 4});
  EXPECT_TRUE(all_close(rotary_embedding(x, ci, si, true), pairs));
}

TEST(Norm, BatchNormMatchesReference) {
  for (DType t : testing::kFloatDTypes) {
    for (int64_t n : testing::kOddSizes) {
      for (const Shape& shape : std::vector<Shape>{{2, n}, {n, 3}, {2, 3, n}, {2, 3, 5, n > 33 ? 3 : n}}) {
        const int64_t c = shape[1];
        Tensor x = random_tensor(shape, t, 51 + static_cast<uint64_t>(n));
        Tensor m = random_tensor({c}, t, 53), v = testing::random_positive({c}, t, 59);
        Tensor w = random_tensor({c}, t, 61), b = random_tensor({c}, t, 67);
        EXPECT_TRUE(all_close(batch_norm(x, m, v, w, b), ref::batch_norm(x, m, v, w, b, 1e-5)))
            << dtype_name(t) << " " << shape_str(shape);
        EXPECT_TRUE(all_close(batch_norm(x, m, v), ref::batch_norm(x, m, v, {}, {}, 1e-5)))
            << dtype_name(t) << " " << shape_str(shape) << " no affine";
        EXPECT_TRUE(all_close(batch_norm(noncontiguous(x), m, v, w, {}, 1e-3), ref::batch_norm(x, m, v, w, {}, 1e-3)))
            << dtype_name(t) << " " << shape_str(shape) << " noncontiguous";
      }
    }
  }
  // Parameters in another floating dtype than x, and a transposed input.
  Tensor x = random_tensor({4, 3, 6}, DType::f16, 71);
  Tensor m = random_tensor({3}, DType::f32, 73), v = testing::random_positive({3}, DType::f64, 79);
  EXPECT_TRUE(all_close(batch_norm(x, m, v), ref::batch_norm(x, m, v, {}, {}, 1e-5)));
  Tensor xt = random_tensor({6, 3, 4}, DType::f32, 83).transpose(0, 2);
  EXPECT_TRUE(all_close(batch_norm(xt, m, v), ref::batch_norm(xt, m, v, {}, {}, 1e-5)));
}

// Many short rows: split over the thread pool.
TEST(Norm, ManyRowsTakeTheParallelPath) {
  Tensor x = random_tensor({6001, 17}, DType::f32, 81);
  EXPECT_TRUE(all_close(softmax(x, 1), ref::softmax(x, 1)));
  EXPECT_TRUE(all_close(log_softmax(noncontiguous(x), 1), ref::softmax(x, 1, true)));
  Tensor w = random_tensor({17}, DType::f32, 83), b = random_tensor({17}, DType::f32, 87);
  EXPECT_TRUE(all_close(layer_norm(x, 1, w, b), ref::layer_norm(x, 1, w, b, 1e-5)));
  Tensor y = random_tensor({3001, 7, 3}, DType::f32, 89);
  Tensor m = random_tensor({7}, DType::f32, 91), v = testing::random_positive({7}, DType::f32, 93);
  EXPECT_TRUE(all_close(batch_norm(y, m, v, {}, b.slice(0, 0, 7)), ref::batch_norm(y, m, v, {}, b.slice(0, 0, 7), 1e-5)));
}

TEST(Norm, Errors) {
  Tensor x = ones({2, 4, 5});
  EXPECT_KILN_ERROR(layer_norm(x, 1, ones({4})), "layer_norm", "'weight'", "[4]", "[4, 5]");
  EXPECT_KILN_ERROR(layer_norm(x, -1, {}, ones({4})), "layer_norm", "'bias'", "[4]", "[5]");
  EXPECT_KILN_ERROR(layer_norm(x, 3), "layer_norm", "axis 3", "rank 3");
  EXPECT_KILN_ERROR(layer_norm(ones({2, 3}, DType::i32), 1), "layer_norm", "'x'", "floating", "i32[2, 3]");
  EXPECT_KILN_ERROR(rms_norm(x, 1, ones({4})), "rms_norm", "'weight'", "[4]", "[4, 5]");
  EXPECT_KILN_ERROR(rms_norm(x, 3), "rms_norm", "axis 3", "rank 3");
  EXPECT_KILN_ERROR(rms_norm(x, -1, {}, -1.0), "rms_norm", "eps", ">= 0");
  EXPECT_KILN_ERROR(rms_norm(ones({2, 3}, DType::i32)), "rms_norm", "'x'", "floating", "i32[2, 3]");
  EXPECT_KILN_ERROR(rotary_embedding(ones({2, 3}), ones({3}), ones({3})), "rotary_embedding", "even last dim");
  EXPECT_KILN_ERROR(rotary_embedding(ones({2, 4, 6}), ones({2, 6}), ones({6})), "rotary_embedding", "'cos'",
                    "[2, 6]", "[2, 4, 6]");
  EXPECT_KILN_ERROR(rotary_embedding(ones({2, 4}), ones({4}), ones({4}, DType::f64)), "rotary_embedding", "'sin'",
                    "f64", "share a dtype");
  Tensor c4 = ones({4});
  EXPECT_KILN_ERROR(batch_norm(x, ones({5}), c4), "batch_norm", "'mean'", "[5]", "[4]", "[2, 4, 5]");
  EXPECT_KILN_ERROR(batch_norm(x, c4, ones({2, 2})), "batch_norm", "'var'", "[2, 2]", "[4]");
  EXPECT_KILN_ERROR(batch_norm(x, c4, c4, ones({3})), "batch_norm", "'weight'", "[3]", "[4]");
  EXPECT_KILN_ERROR(batch_norm(x, c4, c4, c4, ones({1})), "batch_norm", "'bias'", "[1]", "[4]");
  EXPECT_KILN_ERROR(batch_norm(ones({4}), c4, c4), "batch_norm", "'x'", "[4]", "[N, C, ...]");
  EXPECT_KILN_ERROR(batch_norm(x, Tensor(), c4), "batch_norm", "'mean'");
  EXPECT_KILN_ERROR(batch_norm(x, ones({4}, DType::i64), c4), "batch_norm", "'mean'", "floating");
  EXPECT_KILN_ERROR(softmax(x, 3), "softmax", "axis 3", "rank 3");
  EXPECT_KILN_ERROR(log_softmax(ones({3}, DType::i64), 0), "log_softmax", "'x'", "floating", "i64[3]");
}

}  // namespace
}  // namespace kiln
