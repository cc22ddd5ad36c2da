// Reference bitwise ops: exact integer arithmetic on the values (not the kernels' C operators):
// and/or/xor/not on two's-complement values, shifts as multiplication / floor division by 2
// repeated `count` times and wrapped to the dtype's width.
#include <cstring>

#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

namespace {

__extension__ typedef __int128 I128;  // exact products of 64-bit values

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  const char* base = static_cast<const char*>(t.data_ptr());
  const int64_t es = static_cast<int64_t>(t.element_size());
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      for_each_index(t.shape(), [&](const std::vector<int64_t>& idx) {
        int64_t off = 0;
        for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
        T v;
        std::memcpy(&v, base + off * es, sizeof(T));
        out.push_back(static_cast<int64_t>(v));
      });
    } else {
      KILN_FAIL("ref::bitwise: integer or bool tensors only, got ", dtype_name(t.dtype()));
    }
  });
  return out;
}

int bits_of(DType t) { return t == DType::boolean ? 1 : static_cast<int>(dtype_size(t) * 8); }

// v reduced modulo 2^bits into the dtype's range.
int64_t wrap(I128 v, DType t) {
  if (t == DType::boolean) return v != 0;
  const int bits = bits_of(t);
  const I128 m = static_cast<I128>(1) << bits;
  I128 r = ((v % m) + m) % m;
  if (t != DType::u8 && r >= m / 2) r -= m;
  return static_cast<int64_t>(r);
}

}  // namespace

Tensor bitwise(const std::string& op, const Tensor& a, const Tensor& b, const Attrs& attrs) {
  if (op == "bitwise_not") {
    std::vector<int64_t> v = ints(a);
    for (int64_t& e : v) e = a.dtype() == DType::boolean ? !e : wrap(-static_cast<I128>(e) - 1, a.dtype());
    return from_vector<int64_t>(v, a.shape());
  }
  const DType common = promote_types(a.dtype(), b.dtype());
  const Shape s = broadcast_shapes(a.shape(), b.shape(), op.c_str());
  const std::vector<int64_t> av = ints(a), bv = ints(b);
  std::vector<int64_t> out;
  for_each_index(s, [&](const std::vector<int64_t>& idx) {
    int64_t x = wrap(av[static_cast<size_t>(broadcast_offset(a.shape(), idx))], common);
    int64_t y = wrap(bv[static_cast<size_t>(broadcast_offset(b.shape(), idx))], common);
    int64_t r = 0;
    if (op == "bitwise_and") r = x & y;
    else if (op == "bitwise_or") r = x | y;
    else if (op == "bitwise_xor") r = x ^ y;
    else if (op == "bit_shift") {
      const std::string d = attrs.get_string("direction");
      const bool left = d == "left" || d == "LEFT";
      const int bits = bits_of(common);
      const int64_t count = y < 0 || y > bits ? bits : y;
      I128 v = x;
      for (int64_t i = 0; i < count; ++i) {
        if (left) v = wrap(v * 2, common);
        else v = v >= 0 ? v / 2 : -((-v + 1) / 2);  // floor(v / 2)
      }
      r = wrap(v, common);
    } else {
      KILN_FAIL("ref::bitwise: unknown op ", op);
    }
    out.push_back(r);
  });
  return from_vector<int64_t>(out, s);
}

}  // namespace kiln::ref
