// OpDef: schema parsing, attribute binding, inference entry point, rule slots.
#include "kiln/ops/op_def.h"

#include <cctype>
#include <cstdlib>

namespace kiln {

// ---- schema parser ------------------------------------------------------------------------------
namespace {

class SchemaParser {
 public:
  explicit SchemaParser(const std::string& text) : s_(text) {}

  Schema parse() {
    Schema sc;
    sc.name = ident();
    expect('(');
    skip_ws();
    if (peek() != ')') {
      for (;;) {
        parse_arg(sc);
        skip_ws();
        if (peek() == ',') { ++i_; continue; }
        break;
      }
    }
    expect(')');
    expect_str("->");
    skip_ws();
    if (peek() == '(') {
      ++i_;
      for (;;) {
        expect_str("Tensor");
        skip_ws();
        sc.outputs.push_back(is_ident_start(peek()) ? ident() : "out" + std::to_string(sc.outputs.size()));
        skip_ws();
        if (peek() == ',') { ++i_; continue; }
        break;
      }
      expect(')');
    } else {
      expect_str("Tensor");
      if (peek() == '[') {
        expect_str("[]");
        sc.variadic_outputs = true;
      }
      skip_ws();
      sc.outputs.push_back(is_ident_start(peek()) ? ident() : "out");
    }
    skip_ws();
    if (i_ != s_.size()) fail("trailing text");
    sc.text = s_;
    return sc;
  }

 private:
  void parse_arg(Schema& sc) {
    std::string type = ident();
    if (type == "Tensor") {
      TensorArg a;
      if (peek() == '?') { ++i_; a.optional = true; }
      else if (peek() == '[') { expect_str("[]"); a.variadic = true; }
      a.name = ident();
      if (!sc.attrs.empty()) fail("tensor argument '" + a.name + "' after attributes");
      sc.inputs.push_back(a);
      return;
    }
    AttrSpec spec;
    if (type == "int") spec.type = AttrType::int_;
    else if (type == "float") spec.type = AttrType::float_;
    else if (type == "bool") spec.type = AttrType::bool_;
    else if (type == "str") spec.type = AttrType::string;
    else if (type == "dtype") spec.type = AttrType::dtype;
    else fail("unknown argument type '" + type + "'");
    if (peek() == '[') {
      expect_str("[]");
      if (spec.type == AttrType::int_) spec.type = AttrType::ints;
      else if (spec.type == AttrType::float_) spec.type = AttrType::floats;
      else fail("only int[] and float[] lists are supported");
    }
    if (peek() == '?') { ++i_; spec.nullable = true; }
    spec.name = ident();
    skip_ws();
    if (peek() == '=') {
      ++i_;
      spec.default_value = value(spec.type);
    }
    sc.attrs.push_back(spec);
  }

  AttrValue value(AttrType t) {
    skip_ws();
    switch (t) {
      case AttrType::int_: return static_cast<int64_t>(number());
      case AttrType::float_: return number();
      case AttrType::bool_: {
        std::string w = ident();
        if (w == "true") return true;
        if (w == "false") return false;
        fail("bad bool default '" + w + "'");
      }
      case AttrType::string: {
        expect('"');
        size_t start = i_;
        while (i_ < s_.size() && s_[i_] != '"') ++i_;
        std::string v = s_.substr(start, i_ - start);
        expect('"');
        return v;
      }
      case AttrType::dtype: return parse_dtype(ident());
      case AttrType::ints:
      case AttrType::floats: {
        expect('[');
        std::vector<int64_t> is;
        std::vector<double> fs;
        skip_ws();
        while (peek() != ']') {
          double d = number();
          is.push_back(static_cast<int64_t>(d));
          fs.push_back(d);
          skip_ws();
          if (peek() == ',') ++i_;
          skip_ws();
        }
        expect(']');
        if (t == AttrType::ints) return is;
        return fs;
      }
    }
    fail("bad default");
  }

  double number() {
    skip_ws();
    const char* start = s_.c_str() + i_;
    char* end = nullptr;
    double d = std::strtod(start, &end);
    if (end == start) fail("expected a number");
    i_ += static_cast<size_t>(end - start);
    return d;
  }

  static bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
  std::string ident() {
    skip_ws();
    size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) ++i_;
    if (start == i_) fail("expected an identifier");
    return s_.substr(start, i_ - start);
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    skip_ws();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  void expect_str(const char* w) {
    skip_ws();
    for (const char* p = w; *p; ++p, ++i_)
      if (peek() != *p) fail(std::string("expected '") + w + "'");
  }
  [[noreturn]] void fail(const std::string& msg) const {
    KILN_ASSERT(false, "bad op schema '", s_, "' at column ", i_, ": ", msg);
    std::abort();
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

Schema Schema::parse(const std::string& text) { return SchemaParser(text).parse(); }

const AttrSpec* Schema::find_attr(const std::string& n) const {
  for (const auto& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

std::string meta_str(const TensorMeta& m) { return std::string(dtype_name(m.dtype)) + shape_str(m.shape); }

// ---- inference context ---------------------------------------------------------------------------------
const TensorMeta& InferCtx::in(size_t i) const {
  if (!has(i)) fail("input '" + arg_name(i) + "' is required but absent");
  return *inputs[i];
}

const std::string& InferCtx::arg_name(size_t i) const {
  const auto& ins = op.schema().inputs;
  if (i < ins.size()) return ins[i].name;
  static const std::string kVariadic = "inputs";
  return ins.empty() ? kVariadic : ins.back().name;  // variadic tail
}

void InferCtx::fail(const std::string& msg) const { KILN_FAIL(op.name(), ": ", msg); }

// ---- OpDef ------------------------------------------------------------------------------------------------
OpDef::OpDef(const std::string& schema_text) : schema_(Schema::parse(schema_text)) {}

OpDef& OpDef::kernel(DeviceType d, DTypeSet dtypes, KernelFn fn, std::string tactic, PrepareFn prepare) {
  kernels_.push_back(KernelEntry{d, dtypes, std::move(tactic), std::move(fn), std::move(prepare)});
  return *this;
}

const KernelEntry* OpDef::find_kernel(DeviceType d, DType t, const std::string& tactic) const {
  for (const auto& k : kernels_)
    if (k.device == d && k.dtypes.contains(t) && (tactic.empty() || k.tactic == tactic)) return &k;
  return nullptr;
}

OpDef& OpDef::vjp(VjpRule rule) {
  vjp_ = std::move(rule);
  vjp_status_ = {RuleStatus::Kind::provided, ""};
  return *this;
}
OpDef& OpDef::no_vjp(std::string reason) {
  vjp_status_ = {RuleStatus::Kind::not_applicable, std::move(reason)};
  return *this;
}
OpDef& OpDef::vjp_pending(std::string reason) {
  vjp_status_ = {RuleStatus::Kind::pending, std::move(reason)};
  return *this;
}
OpDef& OpDef::batch(BatchRule rule) {
  batch_ = std::move(rule);
  batch_status_ = {RuleStatus::Kind::provided, ""};
  return *this;
}
OpDef& OpDef::no_batch(std::string reason) {
  batch_status_ = {RuleStatus::Kind::not_applicable, std::move(reason)};
  return *this;
}
OpDef& OpDef::batch_pending(std::string reason) {
  batch_status_ = {RuleStatus::Kind::pending, std::move(reason)};
  return *this;
}
OpDef& OpDef::writes_over(int input) {
  return writes_over([input](const Attrs&, const std::vector<bool>& present) {
    return static_cast<size_t>(input) < present.size() && present[static_cast<size_t>(input)] ? input : -1;
  });
}

OpDef& OpDef::onnx(OnnxMapping m) {
  onnx_ = std::move(m);
  onnx_status_ = {RuleStatus::Kind::provided, ""};
  return *this;
}
OpDef& OpDef::no_onnx(std::string reason) {
  onnx_status_ = {RuleStatus::Kind::not_applicable, std::move(reason)};
  return *this;
}
OpDef& OpDef::onnx_pending(std::string reason) {
  onnx_status_ = {RuleStatus::Kind::pending, std::move(reason)};
  return *this;
}

Attrs OpDef::bind_attrs(const Attrs& given) const {
  Attrs out;
  for (const auto& [key, value] : given.values()) {
    const AttrSpec* spec = schema_.find_attr(key);
    if (!spec) {
      std::string known;
      for (const auto& a : schema_.attrs) known += (known.empty() ? "" : ", ") + a.name;
      KILN_FAIL(name(), ": unknown attribute '", key, "' (the op takes: ",
                known.empty() ? "no attributes" : known, ")");
    }
    AttrType got = attr_type_of(value);
    if (got == spec->type) {
      out.set(key, value);
    } else if (spec->type == AttrType::float_ && got == AttrType::int_) {
      out.set(key, static_cast<double>(std::get<int64_t>(value)));
    } else if (spec->type == AttrType::floats && got == AttrType::ints) {
      const auto& is = std::get<std::vector<int64_t>>(value);
      out.set(key, std::vector<double>(is.begin(), is.end()));
    } else {
      KILN_FAIL(name(), ": attribute '", key, "' expects ", attr_type_name(spec->type), ", got ",
                attr_type_name(got), " ", attr_value_str(value));
    }
  }
  for (const auto& spec : schema_.attrs) {
    if (out.has(spec.name)) continue;
    if (spec.default_value) out.set(spec.name, *spec.default_value);
    else if (!spec.nullable) KILN_FAIL(name(), ": required attribute '", spec.name, "' (", attr_type_name(spec.type), ") is missing");
  }
  return out;
}

std::vector<TensorMeta> OpDef::infer_meta(const std::vector<std::optional<TensorMeta>>& inputs,
                                          const Attrs& bound) const {
  KILN_ASSERT(static_cast<bool>(infer_), "op ", name(), " has no inference rule");
  size_t fixed = schema_.inputs.size();
  bool variadic = fixed > 0 && schema_.inputs.back().variadic;
  if (variadic) {
    KILN_CHECK(inputs.size() >= fixed - 1, name(), ": expected at least ", fixed - 1, " inputs, got ", inputs.size());
  } else {
    KILN_CHECK(inputs.size() <= fixed, name(), ": expected at most ", fixed, " tensor inputs, got ", inputs.size());
    for (size_t i = inputs.size(); i < fixed; ++i)
      KILN_CHECK(schema_.inputs[i].optional, name(), ": missing required input '", schema_.inputs[i].name, "'");
  }
  for (size_t i = 0; i < inputs.size() && i < fixed; ++i) {
    if (!schema_.inputs[i].optional && !schema_.inputs[i].variadic)
      KILN_CHECK(inputs[i].has_value(), name(), ": required input '", schema_.inputs[i].name,
                 "' is an undefined tensor");
  }
  InferCtx ctx{*this, inputs, bound};
  return infer_(ctx);
}

}  // namespace kiln
