// safetensors reading and writing (a small JSON reader for the header) and load_state_dict.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>

#include "kiln/autograd.h"
#include "kiln/core/error.h"
#include "kiln/nn.h"

namespace kiln::nn {
namespace {

const char* st_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i8: return "I8";
    case DType::u8: return "U8";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::boolean: return "BOOL";
  }
  KILN_ASSERT(false, "unknown dtype");
  return "";
}

DType st_dtype(const std::string& s, const std::string& tensor) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8, DType::u8, DType::i32, DType::i64,
                  DType::boolean})
    if (s == st_name(t)) return t;
  KILN_FAIL("safetensors: tensor '", tensor, "' has dtype '", s, "', which kiln does not support");
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

// A JSON value as far as safetensors headers need: objects, arrays, strings, integers.
struct Json {
  enum Kind { object, array, string, number } kind = number;
  std::vector<std::pair<std::string, Json>> members;
  std::vector<Json> items;
  std::string str;
  int64_t num = 0;
};

class Parser {
 public:
  Parser(const std::string& s, const std::string& path) : s_(s), path_(path) {}
  Json parse() {
    Json v = value();
    ws();
    check(i_ == s_.size(), "trailing characters");
    return v;
  }

 private:
  void check(bool ok, const char* what) const {
    KILN_CHECK(ok, "safetensors: '", path_, "': bad JSON header at byte ", i_, ": ", what);
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  char peek() {
    ws();
    check(i_ < s_.size(), "unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    check(peek() == c, "unexpected character");
    ++i_;
  }
  std::string string_() {
    expect('"');
    std::string o;
    while (true) {
      check(i_ < s_.size(), "unterminated string");
      char c = s_[i_++];
      if (c == '"') break;
      if (c == '\\') {
        check(i_ < s_.size(), "bad escape");
        char e = s_[i_++];
        if (e == 'u') {
          check(i_ + 4 <= s_.size(), "bad \\u escape");
          unsigned cp = static_cast<unsigned>(std::stoul(s_.substr(i_, 4), nullptr, 16));
          i_ += 4;
          if (cp < 0x80) {
            o += static_cast<char>(cp);
          } else if (cp < 0x800) {
            o += static_cast<char>(0xC0 | (cp >> 6));
            o += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            o += static_cast<char>(0xE0 | (cp >> 12));
            o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            o += static_cast<char>(0x80 | (cp & 0x3F));
          }
        } else {
          const char* from = "\"\\/bfnrt";
          const char* to = "\"\\/\b\f\n\r\t";
          const char* p = std::strchr(from, e);
          check(p != nullptr && e != 0, "bad escape");
          o += to[p - from];
        }
      } else {
        o += c;
      }
    }
    return o;
  }
  Json value() {
    Json v;
    char c = peek();
    if (c == '{') {
      v.kind = Json::object;
      ++i_;
      if (peek() == '}') return ++i_, v;
      while (true) {
        std::string k = string_();
        expect(':');
        v.members.emplace_back(k, value());
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::array;
      ++i_;
      if (peek() == ']') return ++i_, v;
      while (true) {
        v.items.push_back(value());
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::string;
      v.str = string_();
      return v;
    }
    check(c == '-' || (c >= '0' && c <= '9'), "expected a value");
    size_t end = i_ + 1;
    while (end < s_.size() && s_[end] >= '0' && s_[end] <= '9') ++end;
    v.num = std::stoll(s_.substr(i_, end - i_));
    i_ = end;
    return v;
  }
  const std::string& s_;
  const std::string& path_;
  size_t i_ = 0;
};

const Json* member(const Json& o, const char* k) {
  for (auto& [n, v] : o.members)
    if (n == k) return &v;
  return nullptr;
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::vector<std::pair<std::string, Tensor>> sorted;
  for (auto& [n, t] : tensors) {
    KILN_CHECK(t.defined(), "save_safetensors: tensor '", n, "' is undefined");
    KILN_CHECK(n != "__metadata__", "save_safetensors: '__metadata__' is reserved");
    sorted.emplace_back(n, t.detach().cpu().contiguous());
  }
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < sorted.size(); ++i)
    KILN_CHECK(sorted[i].first != sorted[i - 1].first, "save_safetensors: duplicate tensor name '", sorted[i].first, "'");
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (i) h += ',';
      h += '"';
      h += json_escape(metadata[i].first);
      h += "\":\"";
      h += json_escape(metadata[i].second);
      h += '"';
    }
    h += "}";
  }
  uint64_t off = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const Tensor& t = sorted[i].second;
    if (i || !metadata.empty()) h += ",";
    h += '"';
    h += json_escape(sorted[i].first);
    h += "\":{\"dtype\":\"";
    h += st_name(t.dtype());
    h += "\",\"shape\":[";
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (d) h += ',';
      h += std::to_string(t.size(d));
    }
    h += "],\"data_offsets\":[";
    h += std::to_string(off);
    h += ',';
    h += std::to_string(off + t.nbytes());
    h += "]}";
    off += t.nbytes();
  }
  h += "}";
  while (h.size() % 8) h += ' ';  // the data starts 8-byte aligned
  std::ofstream out(path, std::ios::binary);
  KILN_CHECK(out.good(), "save_safetensors: cannot open '", path, "' for writing");
  uint64_t n = h.size();
  unsigned char len[8];
  for (int b = 0; b < 8; ++b) len[b] = static_cast<unsigned char>(n >> (8 * b));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (auto& [name, t] : sorted)  // kiln runs on little-endian hosts only
    out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  KILN_CHECK(out.good(), "save_safetensors: write to '", path, "' failed");
}

std::vector<std::pair<std::string, Tensor>> load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), "load_safetensors: cannot open '", path, "'");
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  KILN_CHECK(file_size >= 8, "load_safetensors: '", path, "' is too short (", file_size, " bytes)");
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int b = 0; b < 8; ++b) n |= static_cast<uint64_t>(len[b]) << (8 * b);
  KILN_CHECK(n <= file_size - 8, "load_safetensors: '", path, "': header length ", n, " exceeds the file size ",
             file_size);
  std::string h(n, '\0');
  in.read(h.data(), static_cast<std::streamsize>(n));
  Json root = Parser(h, path).parse();
  KILN_CHECK(root.kind == Json::object, "load_safetensors: '", path, "': the header is not a JSON object");
  const uint64_t data_size = file_size - 8 - n;
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, v] : root.members) {
    if (name == "__metadata__") continue;
    const Json* dt = member(v, "dtype");
    const Json* sh = member(v, "shape");
    const Json* of = member(v, "data_offsets");
    KILN_CHECK(v.kind == Json::object && dt && sh && of && dt->kind == Json::string && sh->kind == Json::array &&
                   of->kind == Json::array && of->items.size() == 2,
               "load_safetensors: '", path, "': entry '", name, "' needs dtype, shape and data_offsets [begin, end]");
    Shape shape;
    for (auto& d : sh->items) {
      KILN_CHECK(d.kind == Json::number && d.num >= 0, "load_safetensors: '", name, "': bad shape");
      shape.push_back(d.num);
    }
    DType t = st_dtype(dt->str, name);
    const int64_t b = of->items[0].num, e = of->items[1].num;
    const uint64_t want = static_cast<uint64_t>(numel_of(shape)) * dtype_size(t);
    KILN_CHECK(b >= 0 && e >= b && static_cast<uint64_t>(e) <= data_size && static_cast<uint64_t>(e - b) == want,
               "load_safetensors: '", path, "': tensor '", name, "' has data_offsets [", b, ", ", e, "] but needs ",
               want, " bytes within a ", data_size, "-byte data section");
    Tensor x = empty(shape, t);
    in.seekg(static_cast<std::streamoff>(8 + n + static_cast<uint64_t>(b)));
    in.read(static_cast<char*>(x.data_ptr()), static_cast<std::streamsize>(want));
    KILN_CHECK(in.good(), "load_safetensors: '", path, "': read of tensor '", name, "' failed");
    out.emplace_back(name, x);
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& c) { return a.first < c.first; });
  return out;
}

void load_state_dict(Module& m, const std::string& path) {
  auto loaded = load_safetensors(path);
  std::map<std::string, Tensor> byname(loaded.begin(), loaded.end());
  std::string problems;
  auto sd = m.state_dict();
  for (auto& [n, t] : sd) {
    auto it = byname.find(n);
    if (it == byname.end()) {
      problems += "\n  missing: '" + n + "'";
      continue;
    }
    if (it->second.shape() != t.shape())
      problems += "\n  '" + n + "': shape " + shape_str(it->second.shape()) + " in the file, " + shape_str(t.shape()) +
                  " in the module";
    if (it->second.dtype() != t.dtype())
      problems += "\n  '" + n + "': dtype " + std::string(dtype_name(it->second.dtype())) + " in the file, " +
                  std::string(dtype_name(t.dtype())) + " in the module";
    byname.erase(it);
  }
  for (auto& [n, t] : byname) problems += "\n  unexpected: '" + n + "'";
  KILN_CHECK(problems.empty(), "load_state_dict: '", path, "' does not match the module:", problems);
  NoGradGuard ng;
  std::map<std::string, Tensor> src(loaded.begin(), loaded.end());
  for (auto& [n, t] : sd) {
    Tensor dst = t;
    dst.copy_(src.at(n));
  }
}

}  // namespace kiln::nn
