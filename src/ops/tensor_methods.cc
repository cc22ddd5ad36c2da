// Tensor's view and math methods: thin forwards to the free functions (which dispatch).
#include "kiln/ops/dispatch.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace detail {
// Set by kernels/cuda: copies between devices (contiguous dst, any src layout on the CPU side).
void (*g_cross_device_copy)(const Tensor& dst, const Tensor& src) = nullptr;
}  // namespace detail

Tensor Tensor::view(const Shape& s, SourceLoc loc) const {
  return dispatch1(op("reshape"), {*this}, {{"shape", s}, {"allow_copy", false}}, loc);
}
Tensor Tensor::reshape(const Shape& s, SourceLoc loc) const { return kiln::reshape(*this, s, loc); }
Tensor Tensor::transpose(int64_t d0, int64_t d1, SourceLoc loc) const { return kiln::transpose(*this, d0, d1, loc); }
Tensor Tensor::t(SourceLoc loc) const {
  KILN_CHECK(dim() == 2, "t(): expected a 2-D tensor, got shape ", shape_str(shape()));
  return kiln::transpose(*this, 0, 1, loc);
}
Tensor Tensor::permute(const std::vector<int64_t>& dims, SourceLoc loc) const { return kiln::permute(*this, dims, loc); }
Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step, SourceLoc loc) const {
  return kiln::slice(*this, {start}, {end}, {d}, {step}, loc);
}
Tensor Tensor::select(int64_t d, int64_t index, SourceLoc loc) const {
  return dispatch1(op("select"), {*this}, {{"dim", d}, {"index", index}}, loc);
}
Tensor Tensor::expand(const Shape& s, SourceLoc loc) const { return kiln::expand(*this, s, loc); }
Tensor Tensor::broadcast_to(const Shape& s, SourceLoc loc) const {
  Shape b = broadcast_shapes(shape(), s, "broadcast_to");
  KILN_CHECK(b == s, "broadcast_to: a tensor of shape ", shape_str(shape()), " cannot be broadcast to ", shape_str(s));
  return kiln::expand(*this, s, loc);
}
Tensor Tensor::squeeze(SourceLoc loc) const { return kiln::squeeze(*this, {}, loc); }
Tensor Tensor::squeeze(int64_t d, SourceLoc loc) const { return kiln::squeeze(*this, {d}, loc); }
Tensor Tensor::unsqueeze(int64_t d, SourceLoc loc) const { return kiln::unsqueeze(*this, d, loc); }
Tensor Tensor::flatten(int64_t s, int64_t e, SourceLoc loc) const { return kiln::flatten(*this, s, e, loc); }

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  KILN_CHECK(detail::g_cross_device_copy != nullptr, "to(", d.str(), "): this kiln was built without CUDA");
  Tensor src = device().is_cpu() ? contiguous() : *this;
  Tensor dst = empty(shape(), TensorOptions(dtype(), d));
  detail::g_cross_device_copy(dst, src);
  return dst;
}

#define KILN_FORWARD_UNARY(name) \
  Tensor Tensor::name(SourceLoc loc) const { return kiln::name(*this, loc); }
KILN_FORWARD_UNARY(neg)
KILN_FORWARD_UNARY(abs)
KILN_FORWARD_UNARY(exp)
KILN_FORWARD_UNARY(log)
KILN_FORWARD_UNARY(sqrt)
KILN_FORWARD_UNARY(rsqrt)
KILN_FORWARD_UNARY(reciprocal)
KILN_FORWARD_UNARY(sin)
KILN_FORWARD_UNARY(cos)
KILN_FORWARD_UNARY(tanh)
KILN_FORWARD_UNARY(sigmoid)
KILN_FORWARD_UNARY(relu)
KILN_FORWARD_UNARY(erf)
KILN_FORWARD_UNARY(floor)
KILN_FORWARD_UNARY(ceil)
KILN_FORWARD_UNARY(round)
KILN_FORWARD_UNARY(sign)
#undef KILN_FORWARD_UNARY

Tensor Tensor::clip(std::optional<Scalar> lo, std::optional<Scalar> hi, SourceLoc loc) const {
  return kiln::clip(*this, lo, hi, loc);
}

#define KILN_FORWARD_BINARY(name) \
  Tensor Tensor::name(const Tensor& o, SourceLoc loc) const { return kiln::name(*this, o, loc); }
KILN_FORWARD_BINARY(add)
KILN_FORWARD_BINARY(sub)
KILN_FORWARD_BINARY(mul)
KILN_FORWARD_BINARY(div)
KILN_FORWARD_BINARY(pow)
KILN_FORWARD_BINARY(maximum)
KILN_FORWARD_BINARY(minimum)
KILN_FORWARD_BINARY(eq)
KILN_FORWARD_BINARY(ne)
KILN_FORWARD_BINARY(lt)
KILN_FORWARD_BINARY(le)
KILN_FORWARD_BINARY(gt)
KILN_FORWARD_BINARY(ge)
KILN_FORWARD_BINARY(matmul)
#undef KILN_FORWARD_BINARY

#define KILN_FORWARD_REDUCE(name)                                                      \
  Tensor Tensor::name(const std::vector<int64_t>& axes, bool keepdim, SourceLoc loc) const { \
    return kiln::name(*this, axes, keepdim, loc);                                      \
  }
KILN_FORWARD_REDUCE(sum)
KILN_FORWARD_REDUCE(mean)
KILN_FORWARD_REDUCE(max)
KILN_FORWARD_REDUCE(min)
KILN_FORWARD_REDUCE(prod)
#undef KILN_FORWARD_REDUCE

Tensor Tensor::argmax(int64_t axis, bool keepdim, SourceLoc loc) const { return kiln::argmax(*this, axis, keepdim, false, loc); }
Tensor Tensor::argmin(int64_t axis, bool keepdim, SourceLoc loc) const { return kiln::argmin(*this, axis, keepdim, false, loc); }
Tensor Tensor::softmax(int64_t axis, SourceLoc loc) const { return kiln::softmax(*this, axis, loc); }
Tensor Tensor::log_softmax(int64_t axis, SourceLoc loc) const { return kiln::log_softmax(*this, axis, loc); }

Tensor& Tensor::add_(const Tensor& o, SourceLoc loc) { return dispatch_inplace(op("add"), "add_", *this, {o}, {}, loc); }
Tensor& Tensor::sub_(const Tensor& o, SourceLoc loc) { return dispatch_inplace(op("sub"), "sub_", *this, {o}, {}, loc); }
Tensor& Tensor::mul_(const Tensor& o, SourceLoc loc) { return dispatch_inplace(op("mul"), "mul_", *this, {o}, {}, loc); }
Tensor& Tensor::div_(const Tensor& o, SourceLoc loc) { return dispatch_inplace(op("div"), "div_", *this, {o}, {}, loc); }
Tensor& Tensor::add_(Scalar o, SourceLoc loc) { return add_(wrap_scalar(o, dtype()), loc); }
Tensor& Tensor::sub_(Scalar o, SourceLoc loc) { return sub_(wrap_scalar(o, dtype()), loc); }
Tensor& Tensor::mul_(Scalar o, SourceLoc loc) { return mul_(wrap_scalar(o, dtype()), loc); }
Tensor& Tensor::div_(Scalar o, SourceLoc loc) { return div_(wrap_scalar(o, dtype()), loc); }

Tensor& Tensor::relu_(SourceLoc loc) { return dispatch_inplace(op("relu"), "relu_", *this, {}, {}, loc); }
Tensor& Tensor::sigmoid_(SourceLoc loc) { return dispatch_inplace(op("sigmoid"), "sigmoid_", *this, {}, {}, loc); }
Tensor& Tensor::tanh_(SourceLoc loc) { return dispatch_inplace(op("tanh"), "tanh_", *this, {}, {}, loc); }
Tensor& Tensor::clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi, SourceLoc loc) {
  Attrs attrs;
  if (lo) attrs.set("min", lo->to_double());
  if (hi) attrs.set("max", hi->to_double());
  return dispatch_inplace(op("clip"), "clamp_", *this, {}, attrs, loc);
}
Tensor& Tensor::cumsum_(int64_t axis, SourceLoc loc) {
  return dispatch_inplace(op("cumsum"), "cumsum_", *this, {}, {{"axis", axis}}, loc);
}

Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, wrap_scalar(b, a.dtype())); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, wrap_scalar(b, a.dtype())); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, wrap_scalar(b, a.dtype())); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, wrap_scalar(b, a.dtype())); }
Tensor operator+(Scalar a, const Tensor& b) { return add(wrap_scalar(a, b.dtype()), b); }
Tensor operator-(Scalar a, const Tensor& b) { return sub(wrap_scalar(a, b.dtype()), b); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(wrap_scalar(a, b.dtype()), b); }
Tensor operator/(Scalar a, const Tensor& b) { return div(wrap_scalar(a, b.dtype()), b); }

}  // namespace kiln
