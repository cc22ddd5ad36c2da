// Scalar reference kernels: plain loops in float64 over logical indices, written independently of
// the fast kernels so tests can check one against the other. Slow on purpose; never used by the
// dispatcher.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/attrs.h"

namespace kiln::ref {

// The elements of any tensor (any dtype, strides, offset) in logical row-major order, as double.
std::vector<double> values(const Tensor& t);
// An f64 tensor with the given values.
Tensor from_values(const std::vector<double>& v, const Shape& shape);
// Calls fn(index) for every multi-index of `shape` in row-major order.
void for_each_index(const Shape& shape, const std::function<void(const std::vector<int64_t>&)>& fn);
// Row-major linear position of `idx` in `shape`, broadcasting: dims of size 1 read index 0 and
// missing leading dims are ignored.
int64_t broadcast_offset(const Shape& shape, const std::vector<int64_t>& idx);
// Row-major linear position of an in-bounds multi-index `idx` (same rank as `shape`).
int64_t row_major_offset(const Shape& shape, const std::vector<int64_t>& idx);

// ---- references per family (each in its own file under src/kernels/cpu/ref/) -------------------
// Unary: `op` is the registry name ("exp", "gelu", ...); attrs as the op's schema has them.
Tensor unary(const std::string& op, const Tensor& x, const Attrs& attrs = {});
// Binary with broadcasting ("add", "pow", "mod", "eq", "logical_and", ...).
Tensor binary(const std::string& op, const Tensor& a, const Tensor& b, const Attrs& attrs = {});
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// "bitwise_and/or/xor", "bit_shift" (attrs: direction), "bitwise_not" (b ignored): exact integer
// results as an i64 tensor (bitwise.cc).
Tensor bitwise(const std::string& op, const Tensor& a, const Tensor& b = {}, const Attrs& attrs = {});

// ---- reduce, scan, norm (reduce.cc, scan.cc, norm.cc) --------------------------------------------
// Reductions "sum", "prod", "mean", "max", "min", "var", "std_dev", "logsumexp", "norm" with
// attrs as their schemas have them (axes, keepdim, correction; absent = default).
Tensor reduce(const std::string& op, const Tensor& x, const Attrs& attrs = {});
// "argmax" / "argmin": indices (as f64) along axis.
Tensor arg_reduce(const std::string& op, const Tensor& x, int64_t axis, bool keepdim = false,
                  bool select_last_index = false);
Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive = false, bool reverse = false);
// Floating: f64 values (long double products); integer/bool: i64 with wrapping products (cumprod.cc).
Tensor cumprod(const Tensor& x, int64_t axis, bool exclusive = false, bool reverse = false);
Tensor softmax(const Tensor& x, int64_t axis, bool log = false);
// weight/bias may be undefined.
Tensor layer_norm(const Tensor& x, int64_t axis, const Tensor& weight, const Tensor& bias, double eps);
// x / sqrt(mean(x^2) + eps) * weight over dims axis..end; weight may be undefined.
Tensor rms_norm(const Tensor& x, int64_t axis, const Tensor& weight, double eps);
// x * cos + R(x) * sin on the last dim, R(x) = (-x2, x1) for pairs (i, i + D/2), or (2i, 2i + 1)
// when interleaved; cos and sin broadcast to x.
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved);
Tensor batch_norm(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight,
                  const Tensor& bias, double eps);

// ---- linalg, conv (linalg.cc, conv.cc) -------------------------------------------------------------
// NumPy matmul (1-D promotion, batch broadcasting) summed in f64.
Tensor matmul(const Tensor& a, const Tensor& b);
// alpha * op(a) @ op(b) + beta * c; c may be undefined or broadcast to [M, N].
Tensor gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta, bool trans_a,
            bool trans_b);
// NCHW convolution; padding [top, left, bottom, right]; bias may be undefined.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<int64_t>& stride,
              const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, int64_t groups);
// NCHW transposed convolution, w [C, K / groups, R, S]; padding [top, left, bottom, right] crops
// the full output; bias may be undefined (conv_transpose.cc).
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<int64_t>& stride,
                        const std::vector<int64_t>& padding, const std::vector<int64_t>& output_padding,
                        const std::vector<int64_t>& dilation, int64_t groups);
// Max (max = true) or average pooling; stride empty = kernel; PyTorch's ceil_mode and
// count_include_pad rules.
Tensor pool2d(bool max, const Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
              const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, bool ceil_mode,
              bool count_include_pad);
Tensor global_avg_pool(const Tensor& x);
Tensor lrn(const Tensor& x, int64_t size, double alpha, double beta, double bias);

// ---- shape and index families (shape.cc, index.cc) ---------------------------------------------
// Axes may be negative. Indices must be in range (negative wrap); results are f64.
Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
Tensor stack(const std::vector<Tensor>& xs, int64_t axis);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis);
Tensor tile(const Tensor& x, const std::vector<int64_t>& repeats);
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode, double value);
Tensor trilu(const Tensor& x, int64_t k, bool upper);
Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis);
Tensor gather_elements(const Tensor& x, const Tensor& index, int64_t axis);
Tensor scatter(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src);
Tensor one_hot(const Tensor& indices, int64_t depth, int64_t axis);
// ONNX GatherND / ScatterND (reduction "none", "add", "mul", "max", "min"; tuples in order) (gather_nd.cc).
Tensor gather_nd(const Tensor& x, const Tensor& indices, int64_t batch_dims);
Tensor scatter_nd(const Tensor& x, const Tensor& indices, const Tensor& updates, const std::string& reduction);
// Values and indices (as f64), sorted best first; ties keep the lower index; NaN ranks highest.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t axis, bool largest);

}  // namespace kiln::ref
