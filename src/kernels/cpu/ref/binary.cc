#include <cmath>

#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

namespace {

double py_mod(double a, double b, bool fmod) {
  double r = std::fmod(a, b);
  if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double apply(const std::string& op, double a, double b, const Attrs& attrs, bool integral) {
  if (op == "add") return a + b;
  if (op == "sub") return a - b;
  if (op == "mul") return a * b;
  if (op == "div") return integral ? std::trunc(a / b) : a / b;
  if (op == "pow") return std::pow(a, b);
  if (op == "mod") return py_mod(a, b, attrs.has("fmod") && attrs.get_bool("fmod"));
  if (op == "maximum") return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
  if (op == "minimum") return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
  if (op == "eq") return a == b;
  if (op == "ne") return a != b;
  if (op == "lt") return a < b;
  if (op == "le") return a <= b;
  if (op == "gt") return a > b;
  if (op == "ge") return a >= b;
  if (op == "logical_and") return (a != 0) && (b != 0);
  if (op == "logical_or") return (a != 0) || (b != 0);
  if (op == "logical_xor") return (a != 0) != (b != 0);
  KILN_FAIL("ref::binary: unknown op ", op);
}

}  // namespace

Tensor binary(const std::string& op, const Tensor& a, const Tensor& b, const Attrs& attrs) {
  Shape s = broadcast_shapes(a.shape(), b.shape(), op.c_str());
  std::vector<double> av = values(a), bv = values(b), out;
  out.reserve(static_cast<size_t>(numel_of(s)));
  DType common = promote_types(a.dtype(), b.dtype());
  bool integral = !is_floating(common);
  bool boolean = common == DType::boolean;  // bool arithmetic results are truth values
  for_each_index(s, [&](const std::vector<int64_t>& idx) {
    double x = av[static_cast<size_t>(broadcast_offset(a.shape(), idx))];
    double y = bv[static_cast<size_t>(broadcast_offset(b.shape(), idx))];
    double v = apply(op, x, y, attrs, integral);
    out.push_back(boolean ? static_cast<double>(v != 0) : v);
  });
  return from_values(out, s);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Shape s = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  std::vector<double> cv = values(cond), av = values(a), bv = values(b), out;
  for_each_index(s, [&](const std::vector<int64_t>& idx) {
    bool c = cv[static_cast<size_t>(broadcast_offset(cond.shape(), idx))] != 0;
    out.push_back(c ? av[static_cast<size_t>(broadcast_offset(a.shape(), idx))]
                    : bv[static_cast<size_t>(broadcast_offset(b.shape(), idx))]);
  });
  return from_values(out, s);
}

}  // namespace kiln::ref
