#include "kiln/ops/attrs.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <sstream>

namespace kiln {

std::string_view attr_type_name(AttrType t) {
  switch (t) {
    case AttrType::int_: return "int";
    case AttrType::float_: return "float";
    case AttrType::bool_: return "bool";
    case AttrType::string: return "str";
    case AttrType::ints: return "int[]";
    case AttrType::floats: return "float[]";
    case AttrType::dtype: return "dtype";
  }
  return "?";
}

AttrType attr_type_of(const AttrValue& v) {
  switch (v.index()) {
    case 0: return AttrType::int_;
    case 1: return AttrType::float_;
    case 2: return AttrType::bool_;
    case 3: return AttrType::string;
    case 4: return AttrType::ints;
    case 5: return AttrType::floats;
    default: return AttrType::dtype;
  }
}

namespace {
bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }
}  // namespace

bool attr_values_identical(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<double>(&a)) return same_bits(*x, std::get<double>(b));
  if (const auto* x = std::get_if<std::vector<double>>(&a)) {
    const auto& y = std::get<std::vector<double>>(b);
    return x->size() == y.size() && std::equal(x->begin(), x->end(), y.begin(), same_bits);
  }
  return a == b;
}

bool Attrs::operator==(const Attrs& o) const {
  return values_.size() == o.values_.size() &&
         std::equal(values_.begin(), values_.end(), o.values_.begin(), [](const auto& x, const auto& y) {
           return x.first == y.first && attr_values_identical(x.second, y.second);
         });
}

namespace {
std::string float_str(double d) {
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (std::isnan(d)) return "nan";
  std::ostringstream os;
  os.precision(17);
  os << d;
  std::string s = os.str();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}
}  // namespace

std::string attr_value_str(const AttrValue& v) {
  struct V {
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return float_str(d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const { return quote(s); }
    std::string operator()(const std::vector<int64_t>& xs) const {
      std::string s = "[";
      for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + std::to_string(xs[i]);
      return s + "]";
    }
    std::string operator()(const std::vector<double>& xs) const {
      std::string s = "[";
      for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + float_str(xs[i]);
      return s + "]";
    }
    std::string operator()(DType t) const { return std::string(dtype_name(t)); }
  };
  return std::visit(V{}, v);
}

const AttrValue& Attrs::get(const std::string& name) const {
  auto it = values_.find(name);
  KILN_ASSERT(it != values_.end(), "attribute '", name, "' is not bound");
  return it->second;
}

namespace {
template <class T>
const T& get_as(const Attrs& a, const std::string& name, AttrType want) {
  const AttrValue& v = a.get(name);
  const T* p = std::get_if<T>(&v);
  KILN_ASSERT(p != nullptr, "attribute '", name, "' has type ", attr_type_name(attr_type_of(v)),
              ", read as ", attr_type_name(want));
  return *p;
}
}  // namespace

int64_t Attrs::get_int(const std::string& n) const { return get_as<int64_t>(*this, n, AttrType::int_); }
double Attrs::get_float(const std::string& n) const {
  const AttrValue& v = get(n);
  if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return get_as<double>(*this, n, AttrType::float_);
}
bool Attrs::get_bool(const std::string& n) const { return get_as<bool>(*this, n, AttrType::bool_); }
const std::string& Attrs::get_string(const std::string& n) const {
  return get_as<std::string>(*this, n, AttrType::string);
}
const std::vector<int64_t>& Attrs::get_ints(const std::string& n) const {
  return get_as<std::vector<int64_t>>(*this, n, AttrType::ints);
}
const std::vector<double>& Attrs::get_floats(const std::string& n) const {
  return get_as<std::vector<double>>(*this, n, AttrType::floats);
}
DType Attrs::get_dtype(const std::string& n) const { return get_as<DType>(*this, n, AttrType::dtype); }

}  // namespace kiln
