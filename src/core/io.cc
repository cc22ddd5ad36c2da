// .npy and .npz reading and writing, compatible with NumPy.
//
// .npy: magic "\x93NUMPY", a version (1.0, 2.0 or 3.0), a little-endian header length (2 bytes in
// 1.0, 4 bytes after), then a Python dict literal {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), } padded with spaces and '\n' so the data starts 64-byte aligned. We read all
// three versions and write 1.0 (2.0 when the header does not fit in 65535 bytes), as NumPy does.
// .npz: a zip archive of .npy files, stored or deflated (zlib). See Note [Zip subset].
#include "kiln/core/io.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace kiln {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// ---- little-endian byte helpers ------------------------------------------------------------------
uint32_t read_le(const std::string& b, size_t pos, int nbytes) {
  uint32_t v = 0;
  for (int i = nbytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[pos + static_cast<size_t>(i)]);
  return v;
}
void put_le(std::string& out, uint32_t v, int nbytes) {
  for (int i = 0; i < nbytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

// ---- dtype descriptors -----------------------------------------------------------------------------
struct Descr {
  DType dtype;
  bool big_endian;
};

std::string kiln_descr(DType t, const std::string& what) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::f16: return "<f2";
    case DType::i8: return "|i1";
    case DType::u8: return "|u1";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::boolean: return "|b1";
    case DType::bf16: break;
  }
  KILN_FAIL(what, ": dtype bf16 has no NumPy equivalent and cannot be saved to .npy; convert it first, "
            "e.g. t.to(kiln::DType::f32)");
}

Descr parse_descr(const std::string& d, const std::string& what) {
  auto unsupported = [&]() -> Descr {
    KILN_FAIL(what, ": unsupported dtype '", d,
              "' (kiln reads f4, f8, f2, i1, u1, i4, i8 and b1 in either byte order)");
  };
  if (d.size() != 3) return unsupported();
  char order = d[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') return unsupported();
  std::string code = d.substr(1);
  DType t;
  if (code == "f4") t = DType::f32;
  else if (code == "f8") t = DType::f64;
  else if (code == "f2") t = DType::f16;
  else if (code == "i1") t = DType::i8;
  else if (code == "u1") t = DType::u8;
  else if (code == "i4") t = DType::i32;
  else if (code == "i8") t = DType::i64;
  else if (code == "b1") t = DType::boolean;
  else return unsupported();
  return Descr{t, order == '>' && dtype_size(t) > 1};
}

// ---- the header dict ---------------------------------------------------------------------------------
// A small parser for the Python literal NumPy writes: string keys, and string, bool or int-tuple
// values.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  void parse(std::string& descr, bool& fortran, Shape& shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') { ++pos_; break; }
      std::string key = parse_string();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (peek() == '[') fail("structured (record) dtypes are not supported");
        descr = parse_string();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran = parse_bool();
        have_fortran = true;
      } else if (key == "shape") {
        shape = parse_tuple();
        have_shape = true;
      } else {
        fail("unexpected key '" + key + "' in the header");
      }
      skip_ws();
      if (peek() == ',') ++pos_;
    }
    if (!have_descr || !have_fortran || !have_shape)
      fail("header lacks one of 'descr', 'fortran_order', 'shape'");
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    KILN_FAIL(what_, ": malformed .npy header (", msg, "): ", s_);
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void expect(char c) {
    skip_ws();
    if (peek() != c) fail(std::string("expected '") + c + "' at offset " + std::to_string(pos_));
    ++pos_;
  }
  std::string parse_string() {
    skip_ws();
    char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string at offset " + std::to_string(pos_));
    size_t end = s_.find(q, pos_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string v = s_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return v;
  }
  bool parse_bool() {
    if (s_.compare(pos_, 4, "True") == 0) { pos_ += 4; return true; }
    if (s_.compare(pos_, 5, "False") == 0) { pos_ += 5; return false; }
    fail("fortran_order is neither True nor False");
  }
  Shape parse_tuple() {
    expect('(');
    Shape shape;
    while (true) {
      skip_ws();
      if (peek() == ')') { ++pos_; break; }
      if (!(peek() >= '0' && peek() <= '9')) fail("shape holds a non-integer or negative dimension");
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("dimension too large");
        v = v * 10 + (s_[pos_++] - '0');
      }
      if (peek() == 'L') ++pos_;  // Python 2 longs
      shape.push_back(v);
      skip_ws();
      if (peek() == ',') ++pos_;
      else if (peek() != ')') fail("expected ',' or ')' in shape");
    }
    return shape;
  }

  const std::string& s_;
  const std::string& what_;
  size_t pos_ = 0;
};

std::string shape_tuple(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += std::to_string(shape[i]);
    s += (shape.size() == 1 || i + 1 < shape.size()) ? "," : "";
    if (i + 1 < shape.size()) s += " ";
  }
  return s + ")";
}

// Bytes needed for `shape` of elements of `esize`, with an overflow check.
size_t data_bytes(const Shape& shape, size_t esize, const std::string& what) {
  size_t n = esize;
  for (int64_t d : shape) {
    if (d == 0) return 0;
    KILN_CHECK(static_cast<uint64_t>(d) <= std::numeric_limits<size_t>::max() / n, what, ": shape ",
               shape_str(shape), " is too large");
    n *= static_cast<size_t>(d);
  }
  return n;
}

void byteswap_elements(char* p, size_t count, size_t esize) {
  for (size_t i = 0; i < count; ++i) std::reverse(p + i * esize, p + (i + 1) * esize);
}

// Copies the elements of any CPU tensor into `dst` in C (row-major) order.
void copy_to_c_order(const Tensor& t, char* dst) {
  const size_t esize = t.element_size();
  const int64_t n = t.numel();
  if (n == 0) return;
  const char* base = static_cast<const char*>(t.data_ptr());
  if (t.is_contiguous()) {
    std::memcpy(dst, base, static_cast<size_t>(n) * esize);
    return;
  }
  const Shape& shape = t.shape();
  const Strides& strides = t.strides();
  const size_t rank = shape.size();
  std::vector<int64_t> idx(rank, 0);
  const int64_t inner = rank ? shape[rank - 1] : 1;
  const int64_t inner_stride = rank ? strides[rank - 1] : 0;
  for (int64_t done = 0; done < n; done += inner) {
    int64_t off = 0;
    for (size_t d = 0; d + 1 < rank; ++d) off += idx[d] * strides[d];
    for (int64_t i = 0; i < inner; ++i) {
      std::memcpy(dst, base + (off + i * inner_stride) * static_cast<int64_t>(esize), esize);
      dst += esize;
    }
    for (size_t d = rank >= 1 ? rank - 1 : 0; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

std::string read_file(const std::string& path, const char* fn) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), fn, "('", path, "'): cannot open the file for reading: ", std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  KILN_CHECK(!f.bad(), fn, "('", path, "'): error while reading the file");
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes, const char* fn) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(f.good(), fn, "('", path, "'): cannot open the file for writing: ", std::strerror(errno));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  KILN_CHECK(!f.fail(), fn, "('", path, "'): error while writing the file (disk full?)");
}

}  // namespace

// ---- .npy -----------------------------------------------------------------------------------------------

Tensor parse_npy(const std::string& bytes, const std::string& what) {
  KILN_CHECK(bytes.size() >= kMagicLen + 2 && bytes.compare(0, kMagicLen, kMagic, kMagicLen) == 0, what,
             ": not a .npy file (bad magic; expected \\x93NUMPY, file is ", bytes.size(), " bytes)");
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  KILN_CHECK((major == 1 || major == 2 || major == 3) && minor == 0, what, ": unsupported .npy format version ",
             major, ".", minor, " (kiln reads 1.0, 2.0 and 3.0)");
  const size_t len_bytes = major == 1 ? 2 : 4;
  KILN_CHECK(bytes.size() >= 8 + len_bytes, what, ": truncated .npy file (", bytes.size(),
             " bytes, the header length is missing)");
  const size_t header_len = read_le(bytes, 8, static_cast<int>(len_bytes));
  const size_t data_start = 8 + len_bytes + header_len;
  KILN_CHECK(bytes.size() >= data_start, what, ": truncated .npy file (header says ", header_len,
             " bytes of header, the file has ", bytes.size(), " bytes in all)");
  const std::string header = bytes.substr(8 + len_bytes, header_len);

  std::string descr_text;
  bool fortran = false;
  Shape shape;
  HeaderParser(header, what).parse(descr_text, fortran, shape);
  const Descr descr = parse_descr(descr_text, what);
  const size_t esize = dtype_size(descr.dtype);
  const size_t need = data_bytes(shape, esize, what);
  const size_t have = bytes.size() - data_start;
  KILN_CHECK(have >= need, what, ": truncated .npy data (shape ", shape_str(shape), " of ", descr_text, " needs ",
             need, " bytes, the file holds ", have, ")");
  KILN_CHECK(have == need, what, ": shape/data size mismatch (shape ", shape_str(shape), " of ", descr_text,
             " needs ", need, " bytes, the file holds ", have, ")");

  Tensor out = empty(shape, TensorOptions(descr.dtype));
  if (need == 0) return out;
  char* dst = static_cast<char*>(out.data_ptr());
  const char* src = bytes.data() + data_start;
  const size_t count = need / esize;
  if (!fortran || shape.size() <= 1) {
    std::memcpy(dst, src, need);
  } else {
    // Column-major data: element with index (i0, ..., ik) sits at sum(i_d * fstride_d).
    const size_t rank = shape.size();
    std::vector<size_t> fstride(rank);
    size_t s = 1;
    for (size_t d = 0; d < rank; ++d) {
      fstride[d] = s;
      s *= static_cast<size_t>(shape[d]);
    }
    std::vector<int64_t> idx(rank, 0);
    for (size_t i = 0; i < count; ++i) {
      size_t off = 0;
      for (size_t d = 0; d < rank; ++d) off += static_cast<size_t>(idx[d]) * fstride[d];
      std::memcpy(dst + i * esize, src + off * esize, esize);
      for (size_t d = rank; d-- > 0;) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
  }
  if (descr.big_endian) byteswap_elements(dst, count, esize);
  if (descr.dtype == DType::boolean) {
    // Any nonzero byte is true; normalize so every stored bool is 0 or 1.
    for (size_t i = 0; i < count; ++i) dst[i] = dst[i] != 0 ? 1 : 0;
  }
  return out;
}

std::string serialize_npy(const Tensor& t) {
  const std::string what = "save_npy";
  KILN_CHECK(t.defined(), what, ": the tensor is undefined");
  KILN_CHECK(t.device().is_cpu(), what, ": tensor is on ", t.device().str(), "; copy it to the CPU first with .cpu()");
  const std::string descr = kiln_descr(t.dtype(), what);
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_tuple(t.shape()) + ", }";
  // Pad with spaces and end with '\n' so that magic + version + length + header is a multiple of 64.
  auto padded_size = [&](size_t len_bytes) {
    size_t total = kMagicLen + 2 + len_bytes + dict.size() + 1;
    return dict.size() + 1 + (64 - total % 64) % 64;
  };
  size_t len_bytes = 2;
  size_t header_len = padded_size(2);
  if (header_len > 65535) {
    len_bytes = 4;
    header_len = padded_size(4);
  }
  std::string out(kMagic, kMagicLen);
  out.push_back(static_cast<char>(len_bytes == 2 ? 1 : 2));
  out.push_back(0);
  put_le(out, static_cast<uint32_t>(header_len), static_cast<int>(len_bytes));
  out += dict;
  out.append(header_len - dict.size() - 1, ' ');
  out.push_back('\n');
  const size_t start = out.size();
  out.resize(start + t.nbytes());
  copy_to_c_order(t, out.data() + start);
  return out;
}

Tensor load_npy(const std::string& path) { return parse_npy(read_file(path, "load_npy"), "load_npy('" + path + "')"); }

void save_npy(const std::string& path, const Tensor& t) {
  std::string bytes;
  try {
    bytes = serialize_npy(t);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (saving '" + path + "')");
  }
  write_file(path, bytes, "save_npy");
}

// ---- .npz ---------------------------------------------------------------------------------------------------
// Note [Zip subset]
// np.savez writes a plain zip (stored entries; deflated for savez_compressed). We read and write
// exactly that: no encryption, no multi-disk archives and no ZIP64 (archives over 4 GiB, or more
// than 65535 entries), each rejected with a clear error. Sizes and offsets come from the central
// directory, so entries with a trailing data descriptor (flag bit 3) read fine. Every entry's
// CRC-32 is checked.

namespace {

constexpr uint32_t kLocalSig = 0x04034b50u;
constexpr uint32_t kCentralSig = 0x02014b50u;
constexpr uint32_t kEndSig = 0x06054b50u;
constexpr uint32_t kZip64LocatorSig = 0x07064b50u;

uint32_t crc_of(const std::string& data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t pos = 0;
  while (pos < data.size()) {
    uInt chunk = static_cast<uInt>(std::min<size_t>(data.size() - pos, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + pos), chunk);
    pos += chunk;
  }
  return static_cast<uint32_t>(crc);
}

std::string inflate_raw(const std::string& in, size_t out_size, const std::string& what) {
  std::string out(out_size, '\0');
  z_stream zs{};
  KILN_CHECK(inflateInit2(&zs, -MAX_WBITS) == Z_OK, what, ": zlib inflateInit failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  int rc = inflate(&zs, Z_FINISH);
  size_t produced = zs.total_out;
  inflateEnd(&zs);
  KILN_CHECK(rc == Z_STREAM_END && produced == out_size, what, ": corrupt deflate data (zlib says ",
             rc == Z_DATA_ERROR ? "data error" : rc == Z_BUF_ERROR ? "unexpected end or size mismatch" : "error ",
             rc == Z_DATA_ERROR || rc == Z_BUF_ERROR ? "" : std::to_string(rc), ")");
  return out;
}

std::string deflate_raw(const std::string& in) {
  z_stream zs{};
  KILN_ASSERT(deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&zs, static_cast<uLong>(in.size())), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  KILN_ASSERT(rc == Z_STREAM_END, "deflate returned ", rc);
  return out;
}

}  // namespace

std::map<std::string, Tensor> load_npz(const std::string& path) {
  const std::string bytes = read_file(path, "load_npz");
  const std::string what = "load_npz('" + path + "')";
  // The end-of-central-directory record: 22 bytes plus a comment of up to 65535 bytes.
  KILN_CHECK(bytes.size() >= 22, what, ": not a zip archive (", bytes.size(), " bytes, too short)");
  size_t eocd = std::string::npos;
  const size_t lowest = bytes.size() > 22 + 65535 ? bytes.size() - 22 - 65535 : 0;
  for (size_t p = bytes.size() - 22 + 1; p-- > lowest;) {
    if (read_le(bytes, p, 4) == kEndSig) { eocd = p; break; }
  }
  KILN_CHECK(eocd != std::string::npos, what, ": not a zip archive (bad magic: no end-of-central-directory record)");
  KILN_CHECK(!(eocd >= 20 && read_le(bytes, eocd - 20, 4) == kZip64LocatorSig), what,
             ": ZIP64 archives are not supported");
  const uint32_t disk = read_le(bytes, eocd + 4, 2), cd_disk = read_le(bytes, eocd + 6, 2);
  const uint32_t entries = read_le(bytes, eocd + 10, 2);
  const uint32_t cd_size = read_le(bytes, eocd + 12, 4), cd_offset = read_le(bytes, eocd + 16, 4);
  KILN_CHECK(entries != 0xffffu && cd_size != 0xffffffffu && cd_offset != 0xffffffffu, what,
             ": ZIP64 archives are not supported");
  KILN_CHECK(disk == 0 && cd_disk == 0, what, ": multi-disk zip archives are not supported");
  KILN_CHECK(static_cast<size_t>(cd_offset) + cd_size <= eocd, what,
             ": truncated or corrupt zip archive (central directory at ", cd_offset, "+", cd_size,
             " runs past its end record at ", eocd, ")");

  std::map<std::string, Tensor> out;
  size_t p = cd_offset;
  for (uint32_t e = 0; e < entries; ++e) {
    KILN_CHECK(p + 46 <= eocd && read_le(bytes, p, 4) == kCentralSig, what,
               ": corrupt zip central directory (entry ", e, " of ", entries, ")");
    const uint32_t flags = read_le(bytes, p + 8, 2), method = read_le(bytes, p + 10, 2);
    const uint32_t crc = read_le(bytes, p + 16, 4);
    const uint32_t csize = read_le(bytes, p + 20, 4), usize = read_le(bytes, p + 24, 4);
    const uint32_t name_len = read_le(bytes, p + 28, 2), extra_len = read_le(bytes, p + 30, 2);
    const uint32_t comment_len = read_le(bytes, p + 32, 2), local = read_le(bytes, p + 42, 4);
    KILN_CHECK(p + 46 + name_len <= eocd, what, ": corrupt zip central directory (entry ", e, " name)");
    const std::string name = bytes.substr(p + 46, name_len);
    const std::string ewhat = what + " entry '" + name + "'";
    p += 46 + name_len + extra_len + comment_len;

    KILN_CHECK(csize != 0xffffffffu && usize != 0xffffffffu && local != 0xffffffffu, ewhat,
               ": ZIP64 entries are not supported");
    KILN_CHECK(!(flags & 1u), ewhat, ": encrypted zip entries are not supported");
    KILN_CHECK(method == 0 || method == 8, ewhat, ": unsupported zip compression method ", method,
               " (kiln reads stored (0) and deflate (8))");
    KILN_CHECK(static_cast<size_t>(local) + 30 <= bytes.size() && read_le(bytes, local, 4) == kLocalSig, ewhat,
               ": corrupt zip archive (bad local header at offset ", local, ")");
    const size_t data = local + 30 + read_le(bytes, local + 26, 2) + read_le(bytes, local + 28, 2);
    KILN_CHECK(data + csize <= bytes.size(), ewhat, ": truncated zip archive (entry data needs ", csize,
               " bytes at offset ", data, ", the file has ", bytes.size(), ")");
    std::string payload = bytes.substr(data, csize);
    if (method == 8) {
      payload = inflate_raw(payload, usize, ewhat);
    } else {
      KILN_CHECK(csize == usize, ewhat, ": stored entry has compressed size ", csize, " != size ", usize);
    }
    KILN_CHECK(crc_of(payload) == crc, ewhat, ": CRC-32 mismatch (the archive is corrupt)");

    std::string key = name;
    if (key.size() > 4 && key.compare(key.size() - 4, 4, ".npy") == 0) key.resize(key.size() - 4);
    KILN_CHECK(out.count(key) == 0, what, ": duplicate entry '", name, "'");
    out.emplace(key, parse_npy(payload, ewhat));
  }
  return out;
}

namespace {

void write_npz(const std::string& path, const std::map<std::string, Tensor>& tensors, bool compress,
               const char* fn) {
  KILN_CHECK(tensors.size() < 0xffffu, fn, "('", path, "'): too many entries (", tensors.size(),
             "); ZIP64 archives are not supported");
  std::string archive, central;
  constexpr uint32_t kDosTime = 0, kDosDate = (0u << 9) | (1u << 5) | 1u;  // 1980-01-01 00:00
  for (const auto& [key, t] : tensors) {
    KILN_CHECK(!key.empty(), fn, "('", path, "'): an entry has an empty name");
    const std::string name = key + ".npy";
    std::string npy;
    try {
      npy = serialize_npy(t);
    } catch (const Error& e) {
      KILN_FAIL(fn, "('", path, "') entry '", key, "': ", e.what());
    }
    const uint32_t crc = crc_of(npy);
    const std::string body = compress ? deflate_raw(npy) : npy;
    KILN_CHECK(npy.size() < 0xffffffffu && body.size() < 0xffffffffu && archive.size() < 0xffffffffu, fn, "('",
               path, "') entry '", key, "': too large (", npy.size(),
               " bytes) for a zip without ZIP64, which kiln does not write; use save_npy per tensor");
    const uint32_t method = compress ? 8 : 0;
    const uint32_t offset = static_cast<uint32_t>(archive.size());
    auto common = [&](std::string& h) {
      put_le(h, 20, 2);  // version needed: 2.0
      put_le(h, 0, 2);   // flags
      put_le(h, method, 2);
      put_le(h, kDosTime, 2);
      put_le(h, kDosDate, 2);
      put_le(h, crc, 4);
      put_le(h, static_cast<uint32_t>(body.size()), 4);
      put_le(h, static_cast<uint32_t>(npy.size()), 4);
      put_le(h, static_cast<uint32_t>(name.size()), 2);
      put_le(h, 0, 2);  // extra length
    };
    put_le(archive, kLocalSig, 4);
    common(archive);
    archive += name;
    archive += body;

    put_le(central, kCentralSig, 4);
    put_le(central, 20, 2);  // version made by
    common(central);
    put_le(central, 0, 2);  // comment length
    put_le(central, 0, 2);  // disk number
    put_le(central, 0, 2);  // internal attributes
    put_le(central, 0, 4);  // external attributes
    put_le(central, offset, 4);
    central += name;
  }
  KILN_CHECK(archive.size() + central.size() < 0xffffffffu, fn, "('", path,
             "'): archive over 4 GiB needs ZIP64, which kiln does not write");
  const uint32_t cd_offset = static_cast<uint32_t>(archive.size());
  archive += central;
  put_le(archive, kEndSig, 4);
  put_le(archive, 0, 2);
  put_le(archive, 0, 2);
  put_le(archive, static_cast<uint32_t>(tensors.size()), 2);
  put_le(archive, static_cast<uint32_t>(tensors.size()), 2);
  put_le(archive, static_cast<uint32_t>(central.size()), 4);
  put_le(archive, cd_offset, 4);
  put_le(archive, 0, 2);  // comment length
  write_file(path, archive, fn);
}

}  // namespace

void save_npz(const std::string& path, const std::map<std::string, Tensor>& tensors) {
  write_npz(path, tensors, /*compress=*/false, "save_npz");
}

void save_npz_compressed(const std::string& path, const std::map<std::string, Tensor>& tensors) {
  write_npz(path, tensors, /*compress=*/true, "save_npz_compressed");
}

}  // namespace kiln
