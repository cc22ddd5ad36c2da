// NumPy-style printing: aligned columns, floats with trailing zeros stripped (1., 0.25), scientific
// notation when magnitudes span too much, "..." summaries past 1000 elements (3 edge items),
// dtype shown unless it is f32 or i64 (the defaults), like PyTorch's repr.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "kernels_bridge.h"
#include "kiln/core/tensor.h"

namespace kiln {

namespace {

constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool floating = false, boolean = false, scientific = false;
  int precision = 4;
  // Column alignment like NumPy's: fixed-notation floats line up on the decimal point (the
  // integer part padded on the left, the fraction on the right); everything else right-aligns.
  size_t int_width = 0, frac_width = 0, width = 0;

  void measure(const std::vector<double>& vals) {
    for (double v : vals) {
      std::string s = fmt(v);
      width = std::max(width, s.size());
      size_t dot = s.find('.');
      if (aligns_on_point() && dot != std::string::npos) {
        int_width = std::max(int_width, dot);
        frac_width = std::max(frac_width, s.size() - dot - 1);
      } else {
        int_width = std::max(int_width, s.size());
      }
    }
  }
  bool aligns_on_point() const { return floating && !scientific; }
  std::string padded(double v) const {
    std::string s = fmt(v);
    size_t dot = s.find('.');
    if (!aligns_on_point()) return std::string(width - std::min(width, s.size()), ' ') + s;
    if (dot == std::string::npos) {  // nan, inf
      size_t w = int_width + (frac_width ? frac_width + 1 : 0);
      return std::string(w - std::min(w, s.size()), ' ') + s;
    }
    return std::string(int_width - std::min(int_width, dot), ' ') + s +
           std::string(frac_width - std::min(frac_width, s.size() - dot - 1), ' ');
  }

  std::string fmt(double v) const {
    if (boolean) return v != 0 ? "True" : "False";
    if (!floating) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
      return buf;
    }
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[64];
    if (scientific) {
      std::snprintf(buf, sizeof buf, "%.*e", precision, v);
      std::string s = buf;
      // strip trailing zeros of the mantissa: 1.5000e+00 -> 1.5e+00
      size_t e = s.find('e');
      std::string m = s.substr(0, e), ex = s.substr(e);
      while (m.size() > 2 && m.back() == '0') m.pop_back();
      return m + ex;
    }
    std::snprintf(buf, sizeof buf, "%.*f", precision, v);
    std::string s = buf;
    while (s.back() == '0') s.pop_back();
    return s;  // keeps the '.', as NumPy does ("1.")
  }
};

struct Printer {
  const std::vector<double>& vals;  // only the elements that are shown, in order
  const Shape& shape;
  bool summarize;
  const Formatter& f;
  size_t pos = 0;

  void print(std::ostream& os, size_t dim, size_t indent) {
    if (dim == shape.size()) {
      os << f.padded(vals[pos++]);
      return;
    }
    os << '[';
    int64_t n = shape[dim];
    bool cut = summarize && n > 2 * kEdgeItems;
    for (int64_t i = 0; i < n; ++i) {
      if (cut && i == kEdgeItems) {
        os << "...";
        i = n - kEdgeItems;
        sep(os, dim, indent);
      }
      print(os, dim + 1, indent + 1);
      if (i + 1 < n) sep(os, dim, indent);
    }
    os << ']';
  }
  void sep(std::ostream& os, size_t dim, size_t indent) {
    os << ',';
    if (dim + 1 == shape.size()) {
      os << ' ';
    } else {
      os << std::string(shape.size() - dim - 1, '\n') << std::string(indent + 1, ' ');
    }
  }
};

// The shown elements (all, or the edges of every dim when summarizing) in row-major order.
void collect(const Tensor& t, size_t dim, int64_t offset, bool summarize, std::vector<double>& out) {
  const Shape& s = t.shape();
  if (dim == s.size()) {
    out.push_back(detail::element_as_double(t, offset));
    return;
  }
  int64_t n = s[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    collect(t, dim + 1, offset + i * t.strides()[dim], summarize, out);
  }
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const TensorImpl& im = impl();
  std::ostringstream os;
  std::string suffix;
  if (im.dtype != DType::f32 && im.dtype != DType::i64) suffix += ", dtype=" + std::string(dtype_name(im.dtype));
  if (!im.device.is_cpu()) suffix += ", device=" + im.device.str();
  if (im.symbolic) return "tensor(<traced>, shape=" + shape_str(im.shape) + suffix + ")";
  if (!im.device.is_cpu()) return cpu().str();
  bool summarize = numel() > kThreshold;
  std::vector<double> vals;
  if (numel() > 0) collect(*this, 0, im.offset, summarize, vals);
  Formatter f;
  f.floating = is_floating(im.dtype);
  f.boolean = im.dtype == DType::boolean;
  if (f.floating) {
    double maxabs = 0, minabs = INFINITY;
    bool all_int = true;
    for (double v : vals) {
      if (!std::isfinite(v)) continue;
      double a = std::abs(v);
      maxabs = std::max(maxabs, a);
      if (a > 0) minabs = std::min(minabs, a);
      if (v != std::floor(v)) all_int = false;
    }
    f.scientific = maxabs >= 1e8 || (minabs < 1e-4 && !all_int) || (maxabs > 0 && maxabs / minabs > 1e3 && minabs < 1e-3);
    f.precision = 4;
  }
  f.measure(vals);
  os << "tensor(";
  if (numel() == 0) {
    os << "[]";
    if (dim() != 1) suffix = ", shape=" + shape_str(im.shape) + suffix;
  } else if (dim() == 0) {
    os << f.fmt(vals[0]);
  } else {
    Printer p{vals, im.shape, summarize, f};
    p.print(os, 0, 7);  // 7 = strlen("tensor(")
  }
  os << suffix << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace kiln
