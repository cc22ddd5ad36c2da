// Typed operator attributes (the non-tensor arguments of an op).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"

namespace kiln {

enum class AttrType : uint8_t { int_, float_, bool_, string, ints, floats, dtype };
std::string_view attr_type_name(AttrType t);  // as written in schemas: int, float, bool, str, int[], float[], dtype

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>,
                               std::vector<double>, DType>;
AttrType attr_type_of(const AttrValue& v);
std::string attr_value_str(const AttrValue& v);  // as written in schemas and the text IR
// Same type and same value; floats compare by their bits, so a NaN attribute equals itself (a graph
// holding one is still equal to its copy) and 0.0 and -0.0 differ (they are different arguments).
bool attr_values_identical(const AttrValue& a, const AttrValue& b);

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : values_(init) {}

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  void set(const std::string& name, AttrValue v) { values_[name] = std::move(v); }
  const AttrValue& get(const std::string& name) const;

  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;  // accepts an int attribute too
  bool get_bool(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  const std::vector<double>& get_floats(const std::string& name) const;
  DType get_dtype(const std::string& name) const;

  const std::map<std::string, AttrValue>& values() const { return values_; }
  bool operator==(const Attrs& o) const;  // same names, attr_values_identical values

 private:
  std::map<std::string, AttrValue> values_;
};

}  // namespace kiln
