// Bitwise ops on integer and bool tensors: bitwise_and/or/xor/not (ONNX BitwiseAnd/Or/Xor/Not)
// and bit_shift (ONNX BitShift). Binary forms broadcast and promote like the arithmetic ops; a
// floating operand is an error (there is no bit pattern a user would mean).
#include <type_traits>

#include "kernels/cpu/loops.h"
#include "kiln/ops/binary.h"
#include "ops/defs/common.h"
#include "ops/defs/register_all.h"

namespace kiln {

namespace {

using kernels::cpu::binary_loop;

const DTypeSet kBitwise = DTypeSet::integral() | DTypeSet{DType::boolean};

void check_bitwise_dtype(const InferCtx& c, size_t i, bool allow_bool) {
  const TensorMeta& m = c.in(i);
  if (is_floating(m.dtype) || (!allow_bool && m.dtype == DType::boolean))
    c.fail("input '" + c.arg_name(i) + "' is " + meta_str(m) + ", but " + c.op.name() + " needs " +
           (allow_bool ? "an integer or bool" : "an integer") + " dtype (cast it first)");
}

std::vector<TensorMeta> infer_bitwise_binary(const InferCtx& c) {
  check_bitwise_dtype(c, 0, true);
  check_bitwise_dtype(c, 1, true);
  return defs::infer_broadcast_promote(c);
}

template <class F>
KernelFn same_type_kernel(F f) {
  return [f](const KernelCall& k) {
    visit_dtype(k.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<compute_t<T>>) {
        KILN_ASSERT(false, k.op.name(), ": a floating dtype reached a bitwise kernel");
      } else {
        binary_loop<T, T>(k.out(0), k.in(0), k.in(1), [&](T a, T b) { return static_cast<T>(f(a, b)); });
      }
    });
  };
}

bool shift_left(const std::string& direction) { return direction == "left" || direction == "LEFT"; }

std::vector<TensorMeta> infer_bit_shift(const InferCtx& c) {
  const std::string& d = c.attrs.get_string("direction");
  if (!shift_left(d) && d != "right" && d != "RIGHT")
    c.fail("attribute 'direction' must be \"left\" or \"right\" (ONNX's \"LEFT\"/\"RIGHT\" are accepted too), got \"" +
           d + "\"");
  check_bitwise_dtype(c, 0, false);
  check_bitwise_dtype(c, 1, false);
  return defs::infer_broadcast_promote(c);
}

// Note [Shift semantics]: ONNX BitShift is defined for unsigned types only; kiln extends it to
// signed ones as NumPy and PyTorch do. A left shift moves the two's-complement bit pattern (bits
// shifted past the top are lost, no UB); a right shift of a signed value is arithmetic (fills
// with the sign bit), of an unsigned value logical. A count >= the bit width, or negative, shifts
// every bit out: 0, or -1 for a right shift of a negative value.
template <class T>
T shift_value(T a, T count, bool left) {
  using U = std::make_unsigned_t<T>;
  constexpr int kBits = static_cast<int>(sizeof(T) * 8);
  const bool out_of_range = count < T(0) || static_cast<U>(count) >= static_cast<U>(kBits);
  if (left) return out_of_range ? T(0) : static_cast<T>(static_cast<U>(static_cast<U>(a) << static_cast<int>(count)));
  if (out_of_range) return a < T(0) ? T(-1) : T(0);
  return static_cast<T>(a >> static_cast<int>(count));  // arithmetic for signed T (C++20)
}

void bit_shift_kernel(const KernelCall& k) {
  const bool left = shift_left(k.attrs.get_string("direction"));
  visit_dtype(k.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      binary_loop<T, T>(k.out(0), k.in(0), k.in(1), [left](T a, T b) { return shift_value(a, b, left); });
    } else {
      KILN_ASSERT(false, "bit_shift: ", dtype_name(k.in(0).dtype()), " reached the kernel");
    }
  });
}

OpDef& bitwise_def(OpRegistry& r, const char* schema, const char* onnx_type, int since) {
  return defs::rules_pending(r.add(schema), onnx_type, since)
      .infer(infer_bitwise_binary)
      .cast_inputs(InputCast::common)
      .no_vjp("integer output");
}

}  // namespace

void register_binary_bitwise_ops(OpRegistry& r) {
  bitwise_def(r, "bitwise_and(Tensor a, Tensor b) -> Tensor", "BitwiseAnd", 18)
      .kernel(DeviceType::cpu, kBitwise, same_type_kernel([](auto a, auto b) { return a & b; }))
      .doc("a & b on integer or bool tensors (bool: logical and)");
  bitwise_def(r, "bitwise_or(Tensor a, Tensor b) -> Tensor", "BitwiseOr", 18)
      .kernel(DeviceType::cpu, kBitwise, same_type_kernel([](auto a, auto b) { return a | b; }))
      .doc("a | b on integer or bool tensors (bool: logical or)");
  bitwise_def(r, "bitwise_xor(Tensor a, Tensor b) -> Tensor", "BitwiseXor", 18)
      .kernel(DeviceType::cpu, kBitwise, same_type_kernel([](auto a, auto b) { return a ^ b; }))
      .doc("a ^ b on integer or bool tensors (bool: logical xor)");
  defs::rules_pending(r.add("bitwise_not(Tensor x) -> Tensor"), "BitwiseNot", 18)
      .infer([](const InferCtx& c) {
        check_bitwise_dtype(c, 0, true);
        return defs::infer_same(c);
      })
      .kernel(DeviceType::cpu, kBitwise,
              [](const KernelCall& k) {
                visit_dtype(k.in(0).dtype(), [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  if constexpr (std::is_same_v<T, bool>) {
                    kernels::cpu::unary_loop<T, T>(k.out(0), k.in(0), [](bool x) { return !x; });
                  } else if constexpr (std::is_integral_v<T>) {
                    kernels::cpu::unary_loop<T, T>(k.out(0), k.in(0), [](T x) { return static_cast<T>(~x); });
                  } else {
                    KILN_ASSERT(false, "bitwise_not: ", dtype_name(k.in(0).dtype()), " reached the kernel");
                  }
                });
              })
      .no_vjp("integer output")
      .doc("~x on integer tensors (two's complement: ~x = -x - 1), logical not on bool");
  defs::rules_pending(r.add("bit_shift(Tensor a, Tensor b, str direction) -> Tensor"), "BitShift", 11)
      .infer(infer_bit_shift)
      .cast_inputs(InputCast::common)
      .kernel(DeviceType::cpu, DTypeSet::integral(), bit_shift_kernel)
      .no_vjp("integer output")
      .doc("a << b (direction \"left\") or a >> b (\"right\"), elementwise with broadcasting; see Note [Shift semantics]");
}

Tensor bitwise_and(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("bitwise_and"), {a, b}, {}, loc); }
Tensor bitwise_or(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("bitwise_or"), {a, b}, {}, loc); }
Tensor bitwise_xor(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("bitwise_xor"), {a, b}, {}, loc); }
Tensor bitwise_not(const Tensor& x, SourceLoc loc) { return dispatch1(op("bitwise_not"), {x}, {}, loc); }
Tensor bit_shift(const Tensor& a, const Tensor& b, const std::string& direction, SourceLoc loc) {
  return dispatch1(op("bit_shift"), {a, b}, {{"direction", direction}}, loc);
}

}  // namespace kiln
