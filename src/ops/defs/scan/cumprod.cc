// cumprod: the running product along one axis, optionally exclusive (out[i] leaves out x[i]) and/or
// reversed (multiplies from the end); ONNX CumProd (opset 26). Dtypes follow cumsum: floating
// inputs keep their dtype and accumulate in double; bool and integers give i64, whose products
// wrap modulo 2^64 (two's complement, no UB). The derivative is exact when x holds zeros
// (Note [Cumprod gradient with zeros]).
#include <type_traits>

#include "kiln/ops/scan.h"
#include "ops/defs/common.h"
#include "ops/defs/reduce/row_loop.h"
#include "ops/defs/register_all.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace {

using defs::RowPlan;

std::vector<int64_t> scan_axes(const Shape& shape, int64_t axis) {
  int64_t a = normalize_axis(axis, static_cast<int64_t>(shape.size()), "cumprod");
  if (shape.empty()) return {};
  return {a};
}

std::vector<TensorMeta> infer_cumprod(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  scan_axes(x.shape, c.attrs.get_int("axis"));
  return {{is_floating(x.dtype) ? x.dtype : DType::i64, x.shape}};
}

// Scans one row of n elements at byte strides sx (input) and so (output), from the end if reverse.
template <class T, class Out, class Acc>
void product_row(const char* x, int64_t sx, char* out, int64_t so, int64_t n, bool exclusive, bool reverse) {
  Acc acc = 1;
  const int64_t step = reverse ? -1 : 1;
  for (int64_t c = 0, i = reverse ? n - 1 : 0; c < n; ++c, i += step) {
    Acc v;
    if constexpr (std::is_floating_point_v<Acc>) v = static_cast<Acc>(static_cast<compute_t<T>>(*reinterpret_cast<const T*>(x + i * sx)));
    else v = static_cast<Acc>(static_cast<int64_t>(*reinterpret_cast<const T*>(x + i * sx)));
    Out* o = reinterpret_cast<Out*>(out + i * so);
    if (exclusive) *o = convert<Out>(acc);
    acc = static_cast<Acc>(acc * v);
    if (!exclusive) *o = convert<Out>(acc);
  }
}

void cumprod_kernel(const KernelCall& k) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out(0);
  std::vector<int64_t> axes = scan_axes(x.shape(), k.attrs.get_int("axis"));
  const bool exclusive = k.attrs.get_bool("exclusive"), reverse = k.attrs.get_bool("reverse");
  std::array<std::vector<int64_t>, 2> st{defs::byte_strides(x), defs::byte_strides(out)};
  std::array<char*, 2> base{static_cast<char*>(x.data_ptr()), static_cast<char*>(out.data_ptr())};
  RowPlan<2> plan = defs::make_row_plan<2>(x.shape(), st, base, axes);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr bool kFloat = std::is_floating_point_v<compute_t<T>>;
    using Out = std::conditional_t<kFloat, T, int64_t>;
    using Acc = std::conditional_t<kFloat, double, uint64_t>;  // unsigned: wraps without UB
    defs::for_each_row(plan, [&](int64_t, char** row) {
      defs::for_each_inner_run(plan, row, [&](char** q, const int64_t* s, int64_t n) {
        product_row<T, Out, Acc>(q[0], s[0], q[1], s[1], n, exclusive, reverse);
      });
    });
  });
}

// `t` moved one place along `axis` in scan direction (toward higher indices unless reverse), the
// vacated place filled with `fill` and the last element dropped.
Tensor shift_along(const Tensor& t, int64_t axis, bool reverse, double fill) {
  std::vector<int64_t> pads(2 * static_cast<size_t>(t.dim()), 0);
  pads[static_cast<size_t>(axis)] = reverse ? -1 : 1;
  pads[static_cast<size_t>(t.dim() + axis)] = reverse ? 1 : -1;
  return pad(t, pads, "constant", fill);
}
Tensor unshift_along(const Tensor& t, int64_t axis, bool reverse) { return shift_along(t, axis, !reverse, 0.0); }

// Note [Cumprod gradient with zeros]
// For the inclusive scan y_i = x_0 ... x_i (in scan order), dL/dx_j = sum_{i >= j} g_i prod_{k <= i,
// k != j} x_k. The textbook form sum_{i >= j} g_i y_i / x_j divides by zero. Let z be the first zero
// of the line. Then
//   j < z:  the terms with i >= z vanish (y_i = 0), so dx_j = revcumsum(g * y)_j / x_j, x_j != 0;
//   j = z:  dx_z = (x_0 ... x_{z-1}) * sum_{i >= z} g_i prod_{z < k <= i} x_k, where the inner
//           products are the cumprod of x with every place up to z set to 1;
//   j > z:  every product holds x_z = 0, so dx_j = 0.
// All three are kiln ops on the whole tensor with masks from cumsum(x == 0), so the rule is O(n),
// needs no data-dependent branch (it traces), and differentiates again. The exclusive scan is the
// inclusive one of x shifted by one place; reverse scans run every cumsum/cumprod reversed.
// Limitation: the rule's own derivative (double backward) is exact where x has no zeros; at an x
// with zeros, the masks are constants, so second-order terms through a zero factor for j > z are
// dropped (the first derivative is exact everywhere).
Tensor inclusive_grad(const Tensor& x, const Tensor& g, int64_t axis, bool reverse) {
  Tensor zero = defs::scalar_like(0, x);
  Tensor is_zero = eq(x, zero);
  Tensor zeros_so_far = cumsum(is_zero, axis, false, reverse);  // i64
  Tensor before = eq(zeros_so_far, wrap_scalar(int64_t{0}, DType::i64));
  Tensor first_zero = logical_and(is_zero, eq(zeros_so_far, wrap_scalar(int64_t{1}, DType::i64)));
  Tensor safe_x = where(is_zero, defs::scalar_like(1, x), x);
  Tensor y = cumprod(x, axis, false, reverse);
  Tensor dx_before = cumsum(g * y, axis, false, !reverse) / safe_x;
  Tensor after_product = cumprod(where(logical_or(before, first_zero), defs::scalar_like(1, x), x), axis, false, reverse);
  Tensor tail = sum(where(before, zero, g * after_product), {axis}, true);
  Tensor dx_zero = cumprod(x, axis, true, reverse) * tail;
  return where(before, dx_before, where(first_zero, dx_zero, zero));
}

std::vector<Tensor> cumprod_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const Tensor& x = c.inputs[0];
  const Tensor& g = gs[0];
  if (x.dim() == 0) return {c.attrs.get_bool("exclusive") ? zeros_like(g) : g};
  const int64_t axis = normalize_axis(c.attrs.get_int("axis"), x.dim(), "cumprod");
  const bool reverse = c.attrs.get_bool("reverse");
  if (!c.attrs.get_bool("exclusive")) return {inclusive_grad(x, g, axis, reverse)};
  Tensor shifted = shift_along(x, axis, reverse, 1.0);
  return {unshift_along(inclusive_grad(shifted, g, axis, reverse), axis, reverse)};
}

}  // namespace

void register_cumprod_ops(OpRegistry& r) {
  defs::rules_pending(r.add("cumprod(Tensor x, int axis, bool exclusive=false, bool reverse=false) -> Tensor"),
                      "CumProd", 26)
      .infer(infer_cumprod)
      .kernel(DeviceType::cpu, DTypeSet::all(), cumprod_kernel)
      .vjp(VjpRule{cumprod_vjp, {0}, {}})
      .doc("running product along axis; exclusive leaves out the current element, reverse multiplies from the "
           "end; bool/integers give i64 (wrapping), floating accumulates in f64; gradient exact with zeros");
}

Tensor cumprod(const Tensor& x, int64_t axis, bool exclusive, bool reverse, SourceLoc loc) {
  return dispatch1(op("cumprod"), {x}, {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}}, loc);
}

}  // namespace kiln
