// The text form of a Graph: print() and a parser for exactly what it prints (Note [Text IR]).
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kiln/ir.h"

namespace kiln::ir {

// Note [Text IR]
//   graph main(%x: f32[batch, 3], %w: f32[3, 4]) {
//     %b: f32[4] = constant [0.5, -1, 2, 3]
//     %y: f32[batch, 4] = matmul(%x, %w)
//     %v: f32[batch, 2], %i: i64[batch, 2] = topk(%y) {axis=-1, k=2, largest=true, sorted=true}
//     return %v, %i
//   }
// One definition a line, every value with its type. Attributes are printed bound (defaults
// included, sorted by name) so the text says everything the node does. Constants of up to
// kInlineElements elements print as a flat row-major list of the shortest decimal forms that read
// back to the same bits; larger ones (and f16/bf16) as hex"..." of their little-endian bytes,
// so print(parse(print(g))) == print(g) always. `_` is an absent optional input; `//` starts a
// comment. The parser fills omitted attributes with their defaults and converts int to float where
// the schema asks, then leaves every other check to the verifier.
namespace {

constexpr int64_t kInlineElements = 16;

template <class T>
std::string float_repr(T v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

bool inline_dtype(DType t) { return t != DType::f16 && t != DType::bf16; }

std::string constant_str(const Tensor& t) {
  if (t.numel() <= kInlineElements && inline_dtype(t.dtype())) {
    std::string s = "[";
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (i) s += ", ";
      switch (t.dtype()) {
        case DType::f32: s += float_repr(t.data<float>()[i]); break;
        case DType::f64: s += float_repr(t.data<double>()[i]); break;
        case DType::i8: s += std::to_string(t.data<int8_t>()[i]); break;
        case DType::u8: s += std::to_string(t.data<uint8_t>()[i]); break;
        case DType::i32: s += std::to_string(t.data<int32_t>()[i]); break;
        case DType::i64: s += std::to_string(t.data<int64_t>()[i]); break;
        case DType::boolean: s += t.data<bool>()[i] ? "true" : "false"; break;
        default: KILN_ASSERT(false, "unreachable");
      }
    }
    return s + "]";
  }
  static const char* hex = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(t.data_ptr());
  std::string s = "hex\"";
  s.reserve(t.nbytes() * 2 + 5);
  for (size_t i = 0; i < t.nbytes(); ++i) {
    s += hex[p[i] >> 4];
    s += hex[p[i] & 15];
  }
  return s + "\"";
}

std::string attrs_str(const Attrs& a) {
  if (a.values().empty()) return "";
  std::string s = " {";
  bool first = true;
  for (const auto& [k, v] : a.values()) {
    s += (first ? "" : ", ") + k + "=" + attr_value_str(v);
    first = false;
  }
  return s + "}";
}

}  // namespace

std::string print(const Graph& g) {
  std::ostringstream os;
  os << "graph " << g.name << "(";
  for (size_t i = 0; i < g.inputs().size(); ++i)
    os << (i ? ", %" : "%") << g.inputs()[i]->name() << ": " << type_str(g.inputs()[i]->type());
  os << ") {\n";
  for (const Value* c : g.constants())
    os << "  %" << c->name() << ": " << type_str(c->type()) << " = constant " << constant_str(c->constant()) << "\n";
  for (const Node* n : g.nodes()) {
    os << "  ";
    for (size_t i = 0; i < n->outputs().size(); ++i)
      os << (i ? ", %" : "%") << n->outputs()[i]->name() << ": " << type_str(n->outputs()[i]->type());
    os << " = " << n->op().name() << "(";
    for (size_t i = 0; i < n->inputs().size(); ++i)
      os << (i ? ", " : "") << (n->inputs()[i] ? "%" + n->inputs()[i]->name() : std::string("_"));
    os << ")" << attrs_str(n->attrs()) << "\n";
  }
  os << "  return";
  for (size_t i = 0; i < g.outputs().size(); ++i) os << (i ? ", %" : " %") << g.outputs()[i]->name();
  os << "\n}\n";
  return os.str();
}

// ---- parser --------------------------------------------------------------------------------------------
namespace {

class Parser {
 public:
  Parser(const std::string& text, const std::string& source) : s_(text), source_(source) {}

  Graph parse_graph() {
    Graph g;
    skip();
    expect_word("graph");
    g.name = ident("a graph name");
    expect('(');
    skip();
    if (!peek(')')) {
      for (;;) {
        auto [name, type] = typed_name();
        g.add_input(name, type);
        if (!accept(',')) break;
      }
    }
    expect(')');
    expect('{');
    for (;;) {
      skip();
      if (at_word("return")) break;
      statement(g);
    }
    expect_word("return");
    skip();
    if (peek('%')) {
      for (;;) {
        g.add_output(use(g));
        if (!accept(',')) break;
      }
    }
    expect('}');
    skip();
    if (pos_ < s_.size()) fail("expected the end of the text after the graph's closing '}'");
    return g;
  }

 private:
  const std::string& s_;
  std::string source_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& msg, size_t at = std::string::npos) const {
    if (at == std::string::npos) at = pos_;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    KILN_FAIL(source_, ":", line, ":", col, ": ", msg);
  }
  std::string near() const {
    if (pos_ >= s_.size()) return "the end of the text";
    size_t e = pos_;
    while (e < s_.size() && e - pos_ < 12 && s_[e] != '\n') ++e;
    std::string q = "'";
    return q.append(s_, pos_, e - pos_).append("'");
  }
  void skip() {
    while (pos_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      else if (s_.compare(pos_, 2, "//") == 0) { while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_; }
      else break;
    }
  }
  bool peek(char c) { skip(); return pos_ < s_.size() && s_[pos_] == c; }
  bool accept(char c) {
    if (!peek(c)) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!accept(c)) fail(std::string("expected '") + c + "', found " + near());
  }
  static bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }
  bool at_word(const char* w) {
    skip();
    size_t n = std::strlen(w);
    return s_.compare(pos_, n, w) == 0 && (pos_ + n >= s_.size() || !ident_char(s_[pos_ + n]));
  }
  void expect_word(const char* w) {
    if (!at_word(w)) fail(std::string("expected '") + w + "', found " + near());
    pos_ += std::strlen(w);
  }
  std::string ident(const char* what) {
    skip();
    size_t b = pos_;
    while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
    if (b == pos_) fail(std::string("expected ") + what + ", found " + near());
    return s_.substr(b, pos_ - b);
  }
  std::string value_name() {
    skip();
    if (!accept('%')) fail("expected a value name like %x, found " + near());
    if (pos_ >= s_.size() || !ident_char(s_[pos_])) fail("expected a value name after '%'");
    return ident("a value name");
  }
  Value* use(const Graph& g) {
    skip();
    size_t at = pos_;
    std::string n = value_name();
    Value* v = g.find(n);
    if (!v) fail("use of undefined value %" + n, at);
    return v;
  }
  int64_t integer() {
    skip();
    size_t b = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    int64_t v = 0;
    auto r = std::from_chars(s_.data() + b, s_.data() + pos_, v);
    if (r.ec != std::errc() || r.ptr != s_.data() + pos_) fail("expected an integer, found " + near(), b);
    return v;
  }
  ValueType type() {
    skip();
    size_t at = pos_;
    std::string dt = ident("a dtype");
    ValueType t;
    try {
      t.dtype = parse_dtype(dt);
    } catch (const Error&) {
      fail("unknown dtype '" + dt + "'", at);
    }
    expect('[');
    if (!peek(']')) {
      for (;;) {
        skip();
        if (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '-')) {
          size_t d_at = pos_;
          int64_t d = integer();
          if (d < 0) fail("a dimension must be >= 0, got " + std::to_string(d), d_at);
          if (accept('*')) {  // a scaled symbol, "4*batch"
            if (d < 1) fail("a symbol's scale must be >= 1, got " + std::to_string(d), d_at);
            t.shape.push_back(Dim::sym(ident("a symbol after '*'"), d));
          } else {
            t.shape.push_back(Dim(d));
          }
        } else {
          t.shape.push_back(Dim::sym(ident("a dimension (a size or a symbol)")));
        }
        if (!accept(',')) break;
      }
    }
    expect(']');
    return t;
  }
  std::pair<std::string, ValueType> typed_name() {
    std::string n = value_name();
    expect(':');
    return {n, type()};
  }

  // A scalar literal: its text and whether it is a float.
  std::string number_text(bool& is_float) {
    skip();
    size_t b = pos_;
    is_float = false;
    if (pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) ++pos_;
    if (s_.compare(pos_, 3, "inf") == 0 || s_.compare(pos_, 3, "nan") == 0) {
      pos_ += 3;
      is_float = true;
      return s_.substr(b, pos_ - b);
    }
    while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' ||
                                s_[pos_] == 'e' || s_[pos_] == 'E' ||
                                ((s_[pos_] == '-' || s_[pos_] == '+') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E')))) {
      if (!std::isdigit(static_cast<unsigned char>(s_[pos_]))) is_float = true;
      ++pos_;
    }
    if (b == pos_) fail("expected a number, found " + near());
    return s_.substr(b, pos_ - b);
  }
  template <class T>
  T parse_num(const std::string& txt, size_t at) {
    if constexpr (std::is_floating_point_v<T>) {
      if (txt == "nan" || txt == "-nan" || txt == "+nan") return std::numeric_limits<T>::quiet_NaN();
      if (txt == "inf" || txt == "+inf") return std::numeric_limits<T>::infinity();
      if (txt == "-inf") return -std::numeric_limits<T>::infinity();
    }
    T v{};
    const char* b = txt.data() + (txt[0] == '+' ? 1 : 0);
    auto r = std::from_chars(b, txt.data() + txt.size(), v);
    if (r.ec != std::errc() || r.ptr != txt.data() + txt.size()) fail("invalid number '" + txt + "'", at);
    return v;
  }

  AttrValue attr_value() {
    skip();
    size_t at = pos_;
    if (accept('[')) {
      std::vector<int64_t> ints;
      std::vector<double> floats;
      bool any_float = false;
      std::vector<std::pair<std::string, size_t>> items;
      if (!peek(']')) {
        for (;;) {
          bool f = false;
          skip();
          size_t item_at = pos_;
          items.emplace_back(number_text(f), item_at);
          any_float = any_float || f;
          if (!accept(',')) break;
        }
      }
      expect(']');
      if (!any_float) {
        for (auto& [t, a] : items) ints.push_back(parse_num<int64_t>(t, a));
        return ints;
      }
      for (auto& [t, a] : items) floats.push_back(parse_num<double>(t, a));
      return floats;
    }
    if (peek('"')) return string_literal();
    if (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '-' || s_[pos_] == '+') ) {
      bool f = false;
      std::string t = number_text(f);
      if (f) return parse_num<double>(t, at);
      return parse_num<int64_t>(t, at);
    }
    if (at_word("inf") || at_word("nan")) {
      bool f = false;
      return parse_num<double>(number_text(f), at);
    }
    std::string w = ident("an attribute value");
    if (w == "true") return true;
    if (w == "false") return false;
    try {
      return parse_dtype(w);
    } catch (const Error&) {
      fail("expected an attribute value (number, list, string, true/false or a dtype), found '" + w + "'", at);
    }
  }
  std::string string_literal() {
    expect('"');
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) ++pos_;
      out += s_[pos_++];
    }
    if (pos_ >= s_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }

  Tensor constant_literal(const ValueType& t, size_t type_at) {
    if (!t.is_static()) fail("a constant must have a static shape, got " + type_str(t), type_at);
    Shape shape;
    for (const Dim& d : t.shape) shape.push_back(d.size);
    Tensor out = empty(shape, TensorOptions(t.dtype));
    skip();
    size_t at = pos_;
    if (at_word("hex")) {
      pos_ += 3;
      std::string hex = string_literal();
      if (hex.size() != out.nbytes() * 2)
        fail("hex constant of " + type_str(t) + " needs " + std::to_string(out.nbytes() * 2) + " hex digits, got " +
                 std::to_string(hex.size()), at);
      auto* p = static_cast<unsigned char*>(out.data_ptr());
      auto nib = [&](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        fail(std::string("invalid hex digit '") + c + "' in constant", at);
      };
      for (size_t i = 0; i < out.nbytes(); ++i) p[i] = static_cast<unsigned char>(nib(hex[2 * i]) * 16 + nib(hex[2 * i + 1]));
      return out;
    }
    expect('[');
    int64_t i = 0;
    if (!peek(']')) {
      for (;;) {
        skip();
        size_t item_at = pos_;
        if (i >= out.numel()) fail("constant of type " + type_str(t) + " has more than " + std::to_string(out.numel()) + " elements", item_at);
        if (t.dtype == DType::boolean) {
          std::string w = ident("true or false");
          if (w != "true" && w != "false") fail("expected true or false, found '" + w + "'", item_at);
          out.data<bool>()[i] = w == "true";
        } else {
          bool f = false;
          std::string txt = number_text(f);
          switch (t.dtype) {
            case DType::f32: out.data<float>()[i] = parse_num<float>(txt, item_at); break;
            case DType::f64: out.data<double>()[i] = parse_num<double>(txt, item_at); break;
            case DType::i8: out.data<int8_t>()[i] = parse_num<int8_t>(txt, item_at); break;
            case DType::u8: out.data<uint8_t>()[i] = parse_num<uint8_t>(txt, item_at); break;
            case DType::i32: out.data<int32_t>()[i] = parse_num<int32_t>(txt, item_at); break;
            case DType::i64: out.data<int64_t>()[i] = parse_num<int64_t>(txt, item_at); break;
            default: fail("constants of dtype " + std::string(dtype_name(t.dtype)) + " are written as hex\"...\"", item_at);
          }
        }
        ++i;
        if (!accept(',')) break;
      }
    }
    if (i != out.numel())
      fail("constant of type " + type_str(t) + " needs " + std::to_string(out.numel()) + " elements, got " + std::to_string(i), at);
    expect(']');
    return out;
  }

  void statement(Graph& g) {
    std::vector<std::pair<std::string, ValueType>> outs;
    std::vector<size_t> out_at;
    size_t type_at = 0;
    for (;;) {
      skip();
      out_at.push_back(pos_);
      std::string n = value_name();
      expect(':');
      skip();
      type_at = pos_;
      outs.emplace_back(n, type());
      if (!accept(',')) break;
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      if (g.find(outs[i].first)) fail("value %" + outs[i].first + " is defined twice", out_at[i]);
      for (size_t j = 0; j < i; ++j)
        if (outs[j].first == outs[i].first) fail("value %" + outs[i].first + " is defined twice", out_at[i]);
    }
    expect('=');
    skip();
    size_t op_at = pos_;
    std::string op_name = ident("an op name or 'constant'");
    if (op_name == "constant") {
      if (outs.size() != 1) fail("a constant defines exactly one value", op_at);
      g.add_constant(outs[0].first, constant_literal(outs[0].second, type_at));
      return;
    }
    const OpDef* op = OpRegistry::instance().find(op_name);
    if (!op) fail("unknown op '" + op_name + "'", op_at);
    expect('(');
    std::vector<Value*> ins;
    if (!peek(')')) {
      for (;;) {
        skip();
        if (accept('_')) ins.push_back(nullptr);
        else ins.push_back(use(g));
        if (!accept(',')) break;
      }
    }
    expect(')');
    Attrs attrs;
    if (accept('{')) {
      if (!peek('}')) {
        for (;;) {
          skip();
          size_t key_at = pos_;
          std::string key = ident("an attribute name");
          if (attrs.has(key)) fail("attribute '" + key + "' given twice", key_at);
          expect('=');
          attrs.set(key, attr_value());
          if (!accept(',')) break;
        }
      }
      expect('}');
    }
    // Fill defaults and convert int -> float where the schema says float (Note [Text IR]).
    Attrs filled;
    for (const auto& [k, v] : attrs.values()) {
      const AttrSpec* spec = op->schema().find_attr(k);
      AttrValue val = v;
      if (spec && spec->type == AttrType::float_ && std::holds_alternative<int64_t>(v))
        val = static_cast<double>(std::get<int64_t>(v));
      if (spec && spec->type == AttrType::floats && std::holds_alternative<std::vector<int64_t>>(v)) {
        const auto& xs = std::get<std::vector<int64_t>>(v);
        val = std::vector<double>(xs.begin(), xs.end());
      }
      filled.set(k, val);
    }
    for (const auto& spec : op->schema().attrs)
      if (!filled.has(spec.name) && spec.default_value) filled.set(spec.name, *spec.default_value);
    g.add_node_raw(*op, std::move(ins), std::move(filled), outs);
  }
};

}  // namespace

Graph parse(const std::string& text, const std::string& source_name) { return Parser(text, source_name).parse_graph(); }

Graph load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot open graph file '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse(ss.str(), path);
}

}  // namespace kiln::ir
