// ONNX reductions → kiln: Reduce{Sum,Mean,Max,Min,Prod,L1,L2,LogSum,LogSumExp,SumSquare},
// ArgMax/ArgMin and TopK. ONNX keeps the input's dtype (kiln's integer sum widens to i64, its
// integer mean computes in f32), so results are cast back.
#include <algorithm>
#include <limits>

#include "onnx/convert.h"

namespace kiln::onnx::detail {
namespace {

using V = std::vector<ir::Value*>;
using Ints = std::vector<int64_t>;

enum class Post { none, abs_first, square_first, sqrt_after, log_after };

// `axes_input_since`: the opset from which axes is an input rather than an attribute.
Converter reduction(std::string kiln_op, int axes_input_since, Post post) {
  return [kiln_op, axes_input_since, post](ConvertCtx& c) -> V {
    Ints axes = c.opset() < axes_input_since ? c.attr_ints("axes")
                                             : (c.has_input(1) ? c.const_ints(1, "axes") : Ints{});
    bool keep = c.attr_int("keepdims", 1) != 0;
    ir::Value* x = c.in(0);
    DType dt = x->type().dtype;
    if (axes.empty() && c.attr_int("noop_with_empty_axes", 0) != 0) {
      // Reduce over nothing: only the elementwise part of the reduction applies.
      if (post == Post::abs_first) return {c.emit("abs", {x})};
      if (post == Post::square_first) return {c.emit("mul", {x, x})};
      return {x};
    }
    int64_t r = c.rank(0);
    for (auto& a : axes) a = c.axis(a, r, "axes entry");
    if (axes.empty())
      for (int64_t i = 0; i < r; ++i) axes.push_back(i);
    // Over an empty set ONNX gives the reduction's identity (-inf for max, +inf for min); kiln
    // refuses to pick one, so the importer does.
    if (kiln_op == "max" || kiln_op == "min") {
      const auto& shape = c.type(0).shape;
      bool empty = std::any_of(axes.begin(), axes.end(), [&](int64_t a) {
        const auto& d = shape[static_cast<size_t>(a)];
        return !d.is_symbolic() && d.size == 0;
      });
      if (empty) {
        Shape out;
        for (int64_t i = 0; i < r; ++i) {
          bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
          if (!reduced) out.push_back(c.static_shape(0)[static_cast<size_t>(i)]);
          else if (keep) out.push_back(1);
        }
        double inf = std::numeric_limits<double>::infinity();
        return {c.constant(full(out, kiln_op == "max" ? -inf : inf, TensorOptions(DType::f64)).to(dt))};
      }
    }
    if (post == Post::abs_first) x = c.emit("abs", {x});
    if (post == Post::square_first) x = c.emit("mul", {x, x});
    ir::Value* y = c.emit(kiln_op, {x}, {{"axes", axes}, {"keepdim", keep}});
    if (post == Post::sqrt_after) y = c.emit("sqrt", {y});
    if (post == Post::log_after) y = c.emit("log", {y});
    return {c.cast(y, dt)};
  };
}

Converter arg(std::string kiln_op) {
  return [kiln_op](ConvertCtx& c) -> V {
    int64_t axis = c.axis(c.attr_int("axis", 0), c.rank(0));
    return {c.emit(kiln_op, {c.in(0)},
                   {{"axis", axis}, {"keepdim", c.attr_int("keepdims", 1) != 0},
                    {"select_last_index", c.attr_int("select_last_index", 0) != 0}})};
  };
}

V topk(ConvertCtx& c) {
  int64_t k = c.opset() < 10 ? c.attr_int("k") : c.const_ints(1, "k").at(0);
  int64_t axis = c.axis(c.attr_int("axis", -1), c.rank(0));
  return c.emit_multi("topk", {c.in(0)},
                      {{"k", k}, {"axis", axis}, {"largest", c.attr_int("largest", 1) != 0},
                       {"sorted", c.attr_int("sorted", 1) != 0}});
}

}  // namespace

void add_reduce_converters(std::map<std::string, Converter>& m) {
  m["ReduceSum"] = reduction("sum", 13, Post::none);
  m["ReduceMean"] = reduction("mean", 18, Post::none);
  m["ReduceMax"] = reduction("max", 18, Post::none);
  m["ReduceMin"] = reduction("min", 18, Post::none);
  m["ReduceProd"] = reduction("prod", 18, Post::none);
  m["ReduceL1"] = reduction("sum", 18, Post::abs_first);
  m["ReduceL2"] = reduction("norm", 18, Post::none);
  m["ReduceSumSquare"] = reduction("sum", 18, Post::square_first);
  m["ReduceLogSum"] = reduction("sum", 18, Post::log_after);
  m["ReduceLogSumExp"] = reduction("logsumexp", 18, Post::none);
  m["ArgMax"] = arg("argmax");
  m["ArgMin"] = arg("argmin");
  m["TopK"] = topk;
}

}  // namespace kiln::onnx::detail
