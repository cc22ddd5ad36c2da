// View ops (slice, expand, squeeze, unsqueeze, reshape, permute, flatten, select) against values
// computed here from first principles: Python's slice rule for ONNX Slice, NumPy broadcasting
// for expand, row-major order for reshape. Also checks which calls alias storage and which copy.
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::kAllDTypes;
using testing::noncontiguous;
using testing::random_tensor;

Tensor rnd(const Shape& s, DType t, uint64_t seed) { return random_tensor(s, t, seed, -100, 100); }

// The positions Python's x[start:end:step] visits on a dim of size n (slice.indices()).
std::vector<int64_t> py_slice(int64_t n, int64_t start, int64_t end, int64_t step) {
  auto adjust = [&](int64_t v, bool is_start) {
    if (v < 0) {
      v += n;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= n) {
      v = step < 0 ? n - 1 : n;
    }
    (void)is_start;
    return v;
  };
  const int64_t s = adjust(start, true), e = adjust(end, false);
  std::vector<int64_t> out;
  if (step > 0)
    for (int64_t i = s; i < e; i += step) out.push_back(i);
  else
    for (int64_t i = s; i > e; i += step) out.push_back(i);
  return out;
}

// x's values at the cartesian product of per-dim positions.
Tensor pick(const Tensor& x, const std::vector<std::vector<int64_t>>& pos) {
  const std::vector<double> v = ref::values(x);
  Shape s;
  for (const auto& p : pos) s.push_back(static_cast<int64_t>(p.size()));
  std::vector<double> out;
  ref::for_each_index(s, [&](const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off = off * x.shape()[d] + pos[d][static_cast<size_t>(idx[d])];
    out.push_back(v[static_cast<size_t>(off)]);
  });
  return ref::from_values(out, s);
}

std::vector<int64_t> all_of(int64_t n) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(i);
  return p;
}

TEST(Slice, OnnxSemanticsWithNegativeStepsAndClamping) {
  struct Case {
    int64_t start, end, step;
  };
  const std::vector<Case> cases = {
      {0, 7, 1},     {2, -1, 1},     {-3, 100, 1},  {-100, 3, 2},   {100, -100, -1}, {-1, -100, -3},
      {5, 2, -1},    {2, 5, -1},     {0, 0, 1},     {INT64_MAX, INT64_MIN, -1}, {INT64_MIN, INT64_MAX, 4},
      {-2, -8, -2},  {6, 0, -7},
  };
  for (DType t : kAllDTypes) {
    for (int64_t n : {1, 7, 33, 1000}) {
      Tensor x = rnd({3, n}, t, 1);
      for (const Case& c : cases) {
        for (int64_t axis : {1, -1}) {
          Tensor want = pick(x, {all_of(3), py_slice(n, c.start, c.end, c.step)});
          Tensor got = slice(x, {c.start}, {c.end}, {axis}, {c.step});
          EXPECT_TRUE(all_close(got, want)) << dtype_name(t) << " n=" << n << " [" << c.start << ":" << c.end << ":"
                                            << c.step << "]";
          EXPECT_TRUE(got.storage() == x.storage());  // a view
          EXPECT_TRUE(all_close(slice(noncontiguous(x), {c.start}, {c.end}, {axis}, {c.step}), want)) << "nc";
        }
      }
    }
  }
  // Several axes at once, default axes and steps.
  Tensor x = rnd({5, 6, 7}, DType::f32, 2);
  EXPECT_TRUE(all_close(slice(x, {4, 1}, {0, -1}, {0, 2}, {-2, 3}),
                        pick(x, {py_slice(5, 4, 0, -2), all_of(6), py_slice(7, 1, -1, 3)})));
  EXPECT_TRUE(all_close(slice(x, {1, 2}, {3, 5}), pick(x, {py_slice(5, 1, 3, 1), py_slice(6, 2, 5, 1), all_of(7)})));
  // Tensor::slice and slicing a slice.
  Tensor s = x.slice(2, -1, -8, -1).slice(0, 1, 5, 2);
  EXPECT_TRUE(all_close(s, pick(x, {{1, 3}, all_of(6), {6, 5, 4, 3, 2, 1, 0}})));
}

TEST(Slice, Errors) {
  Tensor x = zeros({3, 4});
  EXPECT_KILN_ERROR(slice(x, {0}, {2}, {0}, {0}), "slice", "step cannot be 0");
  EXPECT_KILN_ERROR(slice(x, {0}, {2}, {2}), "slice", "axis");
  EXPECT_KILN_ERROR(slice(x, {0, 0}, {2}), "slice", "starts", "ends");
  EXPECT_KILN_ERROR(slice(x, {0, 0}, {2, 2}, {1, -1}), "slice", "repeated");
}

TEST(Expand, BroadcastsWithoutCopying) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{1}, {1000}}, {{7, 1}, {7, 33}}, {{1, 3}, {2, 5, 3}}, {{}, {2, 3}}, {{3}, {-1}}, {{2, 1}, {4, -1, 7}},
  };
  for (DType t : kAllDTypes) {
    for (const auto& [in, target] : cases) {
      Tensor x = rnd(in, t, 3);
      Tensor got = expand(x, target);
      // Reference: every output element reads x at the broadcast position.
      const std::vector<double> v = ref::values(x);
      std::vector<double> out;
      ref::for_each_index(got.shape(), [&](const std::vector<int64_t>& idx) {
        out.push_back(v[static_cast<size_t>(ref::broadcast_offset(in, idx))]);
      });
      EXPECT_TRUE(all_close(got, ref::from_values(out, got.shape()))) << dtype_name(t) << " " << shape_str(in);
      EXPECT_TRUE(got.storage() == x.storage());
      EXPECT_TRUE(all_close(expand(noncontiguous(x), target), ref::from_values(out, got.shape())));
    }
  }
  EXPECT_EQ(expand(zeros({2, 1}), {4, -1, 7}).shape(), (Shape{4, 2, 7}));
  EXPECT_KILN_ERROR(expand(zeros({2, 3}), {2, 4}), "expand", "[2, 3]", "[2, 4]");
  EXPECT_KILN_ERROR(expand(zeros({3}), {-1, 3}), "expand", "-1");
}

TEST(SqueezeUnsqueeze, MultipleDimsAndNegativeAxes) {
  Tensor x = rnd({1, 3, 1, 5, 1}, DType::f32, 4);
  EXPECT_EQ(squeeze(x).shape(), (Shape{3, 5}));
  EXPECT_EQ(squeeze(x, {0, -1}).shape(), (Shape{3, 1, 5}));
  EXPECT_EQ(squeeze(x, {2, 0, 4}).shape(), (Shape{3, 5}));
  EXPECT_EQ(x.squeeze(-3).shape(), (Shape{1, 3, 5, 1}));
  EXPECT_TRUE(all_close(squeeze(x), ref::from_values(ref::values(x), {3, 5})));
  EXPECT_TRUE(squeeze(x).storage() == x.storage());
  EXPECT_KILN_ERROR(squeeze(x, {1}), "squeeze", "dim 1", "size 3", "[1, 3, 1, 5, 1]");
  EXPECT_KILN_ERROR(squeeze(x, {5}), "squeeze", "5");

  Tensor y = rnd({3, 5}, DType::i32, 5);
  EXPECT_EQ(unsqueeze(y, 0).shape(), (Shape{1, 3, 5}));
  EXPECT_EQ(unsqueeze(y, -1).shape(), (Shape{3, 5, 1}));
  EXPECT_EQ(unsqueeze(y, 1).shape(), (Shape{3, 1, 5}));
  // ONNX Unsqueeze with several axes (positions in the output).
  Tensor u = dispatch1(op("unsqueeze"), {y}, {{"dims", std::vector<int64_t>{0, 3, -1}}});
  EXPECT_EQ(u.shape(), (Shape{1, 3, 5, 1, 1}));
  Tensor u2 = dispatch1(op("unsqueeze"), {y}, {{"dims", std::vector<int64_t>{1, 3}}});
  EXPECT_EQ(u2.shape(), (Shape{3, 1, 5, 1}));
  EXPECT_TRUE(all_close(u2, ref::from_values(ref::values(y), {3, 1, 5, 1})));
  EXPECT_TRUE(all_close(unsqueeze(noncontiguous(y), 1), ref::from_values(ref::values(y), {3, 1, 5})));
  EXPECT_KILN_ERROR(unsqueeze(y, 3), "unsqueeze", "3");
  EXPECT_KILN_ERROR(dispatch1(op("unsqueeze"), {y}, {{"dims", std::vector<int64_t>{1, 1}}}), "unsqueeze");
}

TEST(Reshape, ViewWhenStridesAllowCopyOtherwise) {
  for (DType t : kAllDTypes) {
    Tensor x = rnd({6, 35}, t, 6);
    const std::vector<double> v = ref::values(x);
    for (const Shape& s : {Shape{210}, Shape{2, 3, 5, 7}, Shape{-1, 7}, Shape{35, -1}, Shape{1, 210, 1}}) {
      Tensor r = reshape(x, s);
      EXPECT_TRUE(r.storage() == x.storage()) << "contiguous reshape is a view";
      EXPECT_TRUE(all_close(r, ref::from_values(v, r.shape()))) << dtype_name(t) << " " << shape_str(s);
    }
    // A transposed tensor cannot be flattened by strides: reshape copies, in row-major order of the view.
    Tensor xt = x.t();
    Tensor r = reshape(xt, {-1});
    EXPECT_FALSE(r.storage() == x.storage());
    EXPECT_TRUE(all_close(r, ref::from_values(ref::values(xt), {210}))) << dtype_name(t);
    EXPECT_KILN_ERROR(xt.view({210}), "view", "cannot be viewed", "reshape");
    // Splitting one dim of a strided view is still a view.
    Tensor sl = x.slice(1, 0, 35, 5);  // [6, 7], strides [35, 5]
    Tensor rs = reshape(sl, {6, 7, 1});
    EXPECT_TRUE(rs.storage() == x.storage());
    EXPECT_TRUE(all_close(rs, ref::from_values(ref::values(sl), {6, 7, 1})));
  }
  EXPECT_KILN_ERROR(reshape(zeros({6}), {4}), "reshape", "[6]", "[4]");
  EXPECT_KILN_ERROR(reshape(zeros({6}), {-1, -1}), "reshape", "only one dimension may be -1");
  EXPECT_KILN_ERROR(reshape(zeros({6}), {-1, 4}), "reshape", "[6]", "[-1, 4]");
}

// A permuted view made contiguous goes in tiles where its source is contiguous along another dim
// (Note [Transposed operands] in loops.h): every dtype (1, 2, 4 and 8 bytes), partial tiles on
// both sides, a permute whose dims merge to three, a cast of one (two element sizes), and copy_
// into a contiguous destination.
TEST(Permute, ContiguousCopiesInTilesMatchReference) {
  auto permuted_values = [](const Tensor& x, const std::vector<int64_t>& dims) {
    const std::vector<double> v = ref::values(x);
    Shape ps;
    for (int64_t d : dims) ps.push_back(x.shape()[static_cast<size_t>(d)]);
    std::vector<double> out;
    ref::for_each_index(ps, [&](const std::vector<int64_t>& i) {
      std::vector<int64_t> src(i.size());
      for (size_t k = 0; k < i.size(); ++k) src[static_cast<size_t>(dims[k])] = i[k];
      int64_t off = 0;
      for (size_t d = 0; d < src.size(); ++d) off = off * x.shape()[d] + src[d];
      out.push_back(v[static_cast<size_t>(off)]);
    });
    return ref::from_values(out, ps);
  };
  for (DType t : kAllDTypes) {
    SCOPED_TRACE(dtype_name(t));
    for (const auto& [shape, dims] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
             {{2, 19, 150}, {0, 2, 1}}, {{150, 37}, {1, 0}}, {{2, 9, 5, 17}, {0, 3, 1, 2}}, {{9, 1, 8}, {2, 1, 0}}}) {
      Tensor x = rnd(shape, t, 11);
      Tensor want = permuted_values(x, dims);
      Tensor got = x.permute(dims).contiguous();
      EXPECT_TRUE(got.is_contiguous());
      EXPECT_TRUE(all_close(got, want)) << shape_str(shape);
      Tensor dst = empty(want.shape(), TensorOptions(t));
      dst.copy_(x.permute(dims));
      EXPECT_TRUE(all_close(dst, want)) << shape_str(shape) << " copy_";
    }
  }
  Tensor x = rnd({3, 150, 37}, DType::f32, 12);
  EXPECT_TRUE(all_close(x.permute({0, 2, 1}).to(DType::f16), permuted_values(x, {0, 2, 1}).to(DType::f16)));
  EXPECT_TRUE(all_close(x.permute({0, 2, 1}).to(DType::f64), permuted_values(x, {0, 2, 1})));
}

TEST(PermuteFlattenSelect, MatchReference) {
  Tensor x = rnd({2, 3, 4}, DType::f64, 7);
  Tensor p = permute(x, {2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  std::vector<double> want;
  const std::vector<double> v = ref::values(x);
  ref::for_each_index(p.shape(), [&](const std::vector<int64_t>& i) { want.push_back(v[static_cast<size_t>((i[1] * 3 + i[2]) * 4 + i[0])]); });
  EXPECT_TRUE(all_close(p, ref::from_values(want, p.shape())));
  EXPECT_TRUE(all_close(transpose(x, -1, 0), permute(x, {2, 1, 0})));
  EXPECT_EQ(flatten(x, 1).shape(), (Shape{2, 12}));
  EXPECT_EQ(flatten(x, 0, -2).shape(), (Shape{6, 4}));
  EXPECT_TRUE(all_close(flatten(p), ref::from_values(ref::values(p), {24})));
  EXPECT_TRUE(all_close(x.select(1, -1), pick(x, {all_of(2), {2}, all_of(4)}).reshape({2, 4})));
  EXPECT_KILN_ERROR(permute(x, {0, 0, 1}), "permute", "twice");
  EXPECT_KILN_ERROR(permute(x, {0, 1}), "permute", "rank 3");
  EXPECT_KILN_ERROR(x.select(1, 3), "select", "index 3", "size 3");
  EXPECT_KILN_ERROR(flatten(x, 2, 1), "flatten", "start_dim");
}

}  // namespace
}  // namespace kiln
