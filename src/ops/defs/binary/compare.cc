// Comparisons (bool output), logical ops, and where.
#include <cstring>

#include "kernels/cpu/loops.h"
#include "kiln/ops/binary.h"
#include "ops/defs/common.h"
#include "ops/defs/register_all.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace {

using kernels::cpu::binary_loop;

template <class F>
KernelFn to_bool_kernel(F f) {
  return [f](const KernelCall& k) {
    visit_dtype(k.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      binary_loop<bool, T>(k.out(0), k.in(0), k.in(1), [&](compute_t<T> a, compute_t<T> b) { return f(a, b); });
    });
  };
}

std::vector<TensorMeta> infer_to_bool(const InferCtx& c) {
  auto m = defs::infer_broadcast_promote(c);
  m[0].dtype = DType::boolean;
  return m;
}

OpDef& compare_def(OpRegistry& r, const char* schema, const char* onnx_type, int since) {
  return defs::rules_pending(r.add(schema), onnx_type, since)
      .infer(infer_to_bool)
      .cast_inputs(InputCast::common);
}

std::vector<TensorMeta> infer_where(const InferCtx& c) {
  const TensorMeta& cond = c.in(0);
  if (cond.dtype != DType::boolean)
    c.fail("condition 'cond' must be bool, got " + meta_str(cond) + " (compare first, e.g. x.gt(0))");
  Shape s = broadcast_shapes(cond.shape, c.in(1).shape, "where");
  s = broadcast_shapes(s, c.in(2).shape, "where");
  return {{promote_types(c.in(1).dtype, c.in(2).dtype), s}};
}

void where_kernel(const KernelCall& k) {
  // where(cond, v, v) is v broadcast to the output, whatever cond holds: how the ONNX importer
  // broadcasts to a symbolic shape (ConvertCtx::broadcast_to_dims in src/onnx/import.cc). DeBERTa's
  // relative-position index table so expanded over the heads ([12, 128, 128] int64 at batch 1, two a
  // layer) took 0.09 ms each through the element loop; its runs are copied whole instead.
  const Tensor& a = k.in(1);
  const Tensor& b = k.in(2);
  if (a.data_ptr() == b.data_ptr() && a.shape() == b.shape() && a.strides() == b.strides() && a.dtype() == b.dtype() &&
      k.out(0).dtype() == a.dtype()) {
    const Tensor ops[2] = {k.out(0), a};
    const int64_t w = static_cast<int64_t>(dtype_size(a.dtype()));
    kernels::cpu::for_each_run<2>(ops, [w](char** p, const int64_t* s, int64_t n) {
      if (s[0] == w && s[1] == w) {
        std::memcpy(p[0], p[1], static_cast<size_t>(n * w));
        return;
      }
      for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], p[1] + i * s[1], static_cast<size_t>(w));
    });
    return;
  }
  visit_dtype(k.in(1).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor ops[4] = {k.out(0), k.in(0), k.in(1), k.in(2)};
    kernels::cpu::for_each_run<4>(ops, [](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
        *reinterpret_cast<T*>(p[0] + i * s[0]) = *reinterpret_cast<const T*>(p[c ? 2 : 3] + i * s[c ? 2 : 3]);
      }
    });
  });
}

}  // namespace

void register_binary_compare_ops(OpRegistry& r) {
  const DTypeSet all = DTypeSet::all();
  compare_def(r, "eq(Tensor a, Tensor b) -> Tensor", "Equal", 11)
      .kernel(DeviceType::cpu, all, to_bool_kernel([](auto a, auto b) { return a == b; })).no_vjp("bool output");
  compare_def(r, "ne(Tensor a, Tensor b) -> Tensor", nullptr, 0)
      .kernel(DeviceType::cpu, all, to_bool_kernel([](auto a, auto b) { return a != b; })).no_vjp("bool output");
  compare_def(r, "lt(Tensor a, Tensor b) -> Tensor", "Less", 9)
      .kernel(DeviceType::cpu, all, to_bool_kernel([](auto a, auto b) { return a < b; })).no_vjp("bool output");
  compare_def(r, "le(Tensor a, Tensor b) -> Tensor", "LessOrEqual", 12)
      .kernel(DeviceType::cpu, all, to_bool_kernel([](auto a, auto b) { return a <= b; })).no_vjp("bool output");
  compare_def(r, "gt(Tensor a, Tensor b) -> Tensor", "Greater", 9)
      .kernel(DeviceType::cpu, all, to_bool_kernel([](auto a, auto b) { return a > b; })).no_vjp("bool output");
  compare_def(r, "ge(Tensor a, Tensor b) -> Tensor", "GreaterOrEqual", 12)
      .kernel(DeviceType::cpu, all, to_bool_kernel([](auto a, auto b) { return a >= b; })).no_vjp("bool output");
  compare_def(r, "logical_and(Tensor a, Tensor b) -> Tensor", "And", 7)
      .kernel(DeviceType::cpu, all, to_bool_kernel([](auto a, auto b) { return a != decltype(a)(0) && b != decltype(b)(0); }))
      .no_vjp("bool output");
  compare_def(r, "logical_or(Tensor a, Tensor b) -> Tensor", "Or", 7)
      .kernel(DeviceType::cpu, all, to_bool_kernel([](auto a, auto b) { return a != decltype(a)(0) || b != decltype(b)(0); }))
      .no_vjp("bool output");
  compare_def(r, "logical_xor(Tensor a, Tensor b) -> Tensor", "Xor", 7)
      .kernel(DeviceType::cpu, all, to_bool_kernel([](auto a, auto b) { return (a != decltype(a)(0)) != (b != decltype(b)(0)); }))
      .no_vjp("bool output");
  defs::rules_pending(r.add("where(Tensor cond, Tensor a, Tensor b) -> Tensor"), "Where", 9)
      .infer(infer_where)
      .cast_inputs(InputCast::common, /*first_input=*/1)
      .dtype_key(1)
      .kernel(DeviceType::cpu, all, where_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     std::vector<Tensor> res(3);
                     Tensor zero = defs::scalar_like(0, g[0]);
                     if (c.needs(1)) res[1] = defs::sum_to(where(c.inputs[0], g[0], zero), c.in_shape(1));
                     if (c.needs(2)) res[2] = defs::sum_to(where(c.inputs[0], zero, g[0]), c.in_shape(2));
                     return res;
                   },
                   {0}, {}})
      .doc("cond ? a : b with broadcasting; cond must be bool");
}

void register_binary_ops(OpRegistry& r) {
  void register_binary_arith_ops(OpRegistry&);
  register_binary_arith_ops(r);
  register_binary_compare_ops(r);
  void register_binary_bitwise_ops(OpRegistry&);  // bitwise.cc
  register_binary_bitwise_ops(r);
}

Tensor eq(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("eq"), {a, b}, {}, loc); }
Tensor ne(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("ne"), {a, b}, {}, loc); }
Tensor lt(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("lt"), {a, b}, {}, loc); }
Tensor le(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("le"), {a, b}, {}, loc); }
Tensor gt(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("gt"), {a, b}, {}, loc); }
Tensor ge(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("ge"), {a, b}, {}, loc); }
Tensor logical_and(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("logical_and"), {a, b}, {}, loc); }
Tensor logical_or(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("logical_or"), {a, b}, {}, loc); }
Tensor logical_xor(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("logical_xor"), {a, b}, {}, loc); }
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, SourceLoc loc) {
  return dispatch1(op("where"), {cond, a, b}, {}, loc);
}

}  // namespace kiln
