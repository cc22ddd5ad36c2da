// Helpers for kernels that only move elements (shape and index families): raw views of a
// tensor's storage, a contiguous copy that bypasses the dispatcher, and a switch on element size
// so byte-moving loops are compiled once per size (1, 2, 4, 8) rather than once per dtype.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/loops.h"
#include "kiln/core/tensor.h"

namespace kiln::defs {

// A view of t's storage with an explicit layout (offset and strides in elements). Kernels use it
// to address parts of their inputs and outputs; it carries no autograd or tracing state.
inline Tensor raw_view(const Tensor& t, int64_t offset, Shape shape, Strides strides) {
  return make_tensor(t.storage(), offset, std::move(shape), std::move(strides), t.dtype());
}

// t itself when contiguous, else a contiguous copy. Runs the copy loop directly: a kernel must
// not go back through the dispatcher (the interceptors above it have already seen the call).
inline Tensor contiguous_data(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor c = empty(t.shape(), TensorOptions(t.dtype(), t.device()));
  kernels::cpu::copy_into(c, t);
  return c;
}

// Unsigned integer types standing for "some element of N bytes".
template <size_t N> struct ElemBits;
template <> struct ElemBits<1> { using type = uint8_t; };
template <> struct ElemBits<2> { using type = uint16_t; };
template <> struct ElemBits<4> { using type = uint32_t; };
template <> struct ElemBits<8> { using type = uint64_t; };

// Calls f(TypeTag<U>{}) with U an unsigned type of the element size of `t` (copied with memcpy, so
// no aliasing rules are bent).
template <class F>
decltype(auto) visit_elem_size(DType t, F&& f) {
  switch (dtype_size(t)) {
    case 1: return f(TypeTag<uint8_t>{});
    case 2: return f(TypeTag<uint16_t>{});
    case 4: return f(TypeTag<uint32_t>{});
    case 8: return f(TypeTag<uint64_t>{});
    default: break;
  }
  KILN_ASSERT(false, "unexpected element size ", dtype_size(t), " of ", dtype_name(t));
  return f(TypeTag<uint8_t>{});
}

}  // namespace kiln::defs
