// kiln Tensor <-> ONNX TensorProto, and the .pb tensor files ONNX's backend tests store
// (load_tensor / parse_tensor / save_tensor in kiln/onnx.h).
#include "onnx/tensor_proto.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "kiln/onnx.h"

namespace kiln::onnx {

static_assert(std::endian::native == std::endian::little,
              "ONNX raw_data is little-endian; kiln copies it as it is");

namespace fs = std::filesystem;
using ::onnx::TensorProto;

namespace {

// ONNX's element type names by number (onnx.proto TensorProto.DataType), including the ones newer
// than the generated classes Debian ships.
constexpr const char* kOnnxTypeNames[] = {
    "UNDEFINED", "FLOAT",        "UINT8",          "INT8",       "UINT16",         "INT16",
    "INT32",     "INT64",        "STRING",         "BOOL",       "FLOAT16",        "DOUBLE",
    "UINT32",    "UINT64",       "COMPLEX64",      "COMPLEX128", "BFLOAT16",       "FLOAT8E4M3FN",
    "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",   "INT4",           "FLOAT4E2M1",
    "FLOAT8E8M0", "UINT2",       "INT2"};

std::string label_for(const TensorProto& proto, const std::string& where) {
  std::string name = proto.name().empty() ? std::string() : "tensor '" + proto.name() + "'";
  if (where.empty()) return name.empty() ? "unnamed tensor" : name;
  return name.empty() ? where : name + " (" + where + ")";
}

std::string dims_str(const TensorProto& proto) {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < proto.dims_size(); ++i) os << (i ? ", " : "") << proto.dims(i);
  os << "]";
  return os.str();
}

int64_t parse_nonnegative(const std::string& text, const std::string& what, const std::string& label) {
  int64_t v = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  KILN_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= 0, label, ": external data ", what,
             " '", text, "' is not a non-negative integer");
  return v;
}

// True when `p` (already canonical) lies inside `dir` (canonical).
bool is_inside(const fs::path& dir, const fs::path& p) {
  auto d = dir.begin(), q = p.begin();
  for (; d != dir.end(); ++d, ++q) {
    if (d->empty()) continue;  // a trailing separator
    if (q == p.end() || *d != *q) return false;
  }
  return true;
}

// Note [External data paths]
// A model may only read files inside its own folder: the location must be relative, have no ".."
// component, and (after resolving symlinks) still lie inside the folder. Sizes are checked
// against the file before the tensor is allocated, so a hostile length cannot force a huge
// allocation.
Tensor read_external(const TensorProto& proto, const std::string& base_dir, const std::string& label, int64_t nbytes,
                     const Shape& shape, DType dtype) {
  std::string location, offset_text, length_text;
  for (const auto& kv : proto.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset_text = kv.value();
    else if (kv.key() == "length") length_text = kv.value();
  }
  KILN_CHECK(!location.empty(), label, ": data_location is EXTERNAL but external_data has no 'location'");
  KILN_CHECK(!base_dir.empty(), label, ": external data '", location,
             "' is not allowed here (no model folder to resolve it against; load the model from a file)");
  fs::path rel(location);
  KILN_CHECK(!rel.is_absolute() && !rel.has_root_name() && !rel.has_root_directory(), label,
             ": external data location '", location, "' is absolute; it must be relative to the model's folder");
  for (const auto& part : rel) {
    KILN_CHECK(part != "..", label, ": external data location '", location, "' escapes the model's folder");
  }
  std::error_code ec;
  fs::path base = fs::canonical(base_dir, ec);
  KILN_CHECK(!ec, label, ": model folder '", base_dir, "' for external data does not exist");
  fs::path full = fs::weakly_canonical(base / rel, ec);
  KILN_CHECK(!ec && is_inside(base, full), label, ": external data location '", location,
             "' resolves outside the model's folder");
  KILN_CHECK(fs::is_regular_file(full, ec), label, ": external data file '", full.string(), "' does not exist");
  const auto file_size = static_cast<int64_t>(fs::file_size(full, ec));
  KILN_CHECK(!ec, label, ": cannot read the size of external data file '", full.string(), "'");
  int64_t offset = offset_text.empty() ? 0 : parse_nonnegative(offset_text, "offset", label);
  if (!length_text.empty()) {
    int64_t length = parse_nonnegative(length_text, "length", label);
    KILN_CHECK(length == nbytes, label, ": external data length ", length, " does not match dims ",
               dims_str(proto), " of ", onnx_dtype_name(proto.data_type()), " (", nbytes, " bytes)");
  }
  KILN_CHECK(offset <= file_size && nbytes <= file_size - offset, label, ": external data file '", full.string(),
             "' has ", file_size, " bytes; the tensor needs ", nbytes, " from offset ", offset);
  Tensor out = empty(shape, TensorOptions(dtype));
  std::ifstream in(full, std::ios::binary);
  KILN_CHECK(in.good(), label, ": cannot open external data file '", full.string(), "'");
  in.seekg(offset);
  in.read(static_cast<char*>(out.data_ptr()), static_cast<std::streamsize>(nbytes));
  KILN_CHECK(in.gcount() == nbytes, label, ": short read from external data file '", full.string(), "'");
  return out;
}

// Copies ONNX's int32_data into a tensor of a narrow type, checking each value's range.
template <class T>
void from_int32_field(const TensorProto& proto, const std::string& label, Tensor& out, int64_t lo, int64_t hi) {
  T* dst = static_cast<T*>(out.data_ptr());
  for (int i = 0; i < proto.int32_data_size(); ++i) {
    int64_t v = proto.int32_data(i);
    KILN_CHECK(v >= lo && v <= hi, label, ": int32_data[", i, "] = ", v, " does not fit ",
               onnx_dtype_name(proto.data_type()));
    if constexpr (std::is_same_v<T, Half>) dst[i] = Half::from_bits(static_cast<uint16_t>(v));
    else if constexpr (std::is_same_v<T, BFloat16>) dst[i] = BFloat16::from_bits(static_cast<uint16_t>(v));
    else dst[i] = static_cast<T>(v);
  }
}

// The number of values in each typed field, to find the one holding the data.
struct TypedFields {
  int float_n, int32_n, int64_n, double_n, other_n;
};

}  // namespace

std::string onnx_dtype_name(int32_t onnx_type) {
  constexpr int n = static_cast<int>(std::size(kOnnxTypeNames));
  return onnx_type >= 0 && onnx_type < n ? kOnnxTypeNames[onnx_type] : std::to_string(onnx_type);
}

int32_t to_onnx_dtype(DType t) {
  switch (t) {
    case DType::f32: return TensorProto::FLOAT;
    case DType::f64: return TensorProto::DOUBLE;
    case DType::f16: return TensorProto::FLOAT16;
    case DType::bf16: return TensorProto::BFLOAT16;
    case DType::i8: return TensorProto::INT8;
    case DType::u8: return TensorProto::UINT8;
    case DType::i32: return TensorProto::INT32;
    case DType::i64: return TensorProto::INT64;
    case DType::boolean: return TensorProto::BOOL;
  }
  KILN_ASSERT(false, "unknown dtype");
  return 0;
}

DType from_onnx_dtype(int32_t onnx_type, const std::string& where) {
  switch (onnx_type) {
    case TensorProto::FLOAT: return DType::f32;
    case TensorProto::DOUBLE: return DType::f64;
    case TensorProto::FLOAT16: return DType::f16;
    case TensorProto::BFLOAT16: return DType::bf16;
    case TensorProto::INT8: return DType::i8;
    case TensorProto::UINT8: return DType::u8;
    case TensorProto::INT32: return DType::i32;
    case TensorProto::INT64: return DType::i64;
    case TensorProto::BOOL: return DType::boolean;
    default: break;
  }
  constexpr int n = static_cast<int>(std::size(kOnnxTypeNames));
  KILN_CHECK(onnx_type > 0 && onnx_type < n, (onnx_type == 0 ? "undefined" : "unknown"), " ONNX dtype ",
             onnx_type, " in ", where);
  KILN_FAIL("unsupported ONNX dtype ", kOnnxTypeNames[onnx_type], " in ", where,
            " (kiln has f32, f64, f16, bf16, i8, u8, i32, i64, bool)");
}

Tensor tensor_from_proto(const TensorProto& proto, const std::string& base_dir, int64_t max_elements,
                         const std::string& where) {
  const std::string label = label_for(proto, where);
  KILN_CHECK(!proto.has_segment(), label, ": segmented tensors are not supported");
  const DType dtype = from_onnx_dtype(proto.data_type(), label);

  // Dims first, with overflow-safe counting, so nothing below allocates from a hostile shape.
  Shape shape;
  int64_t numel = 1;
  bool has_zero = false;
  for (int i = 0; i < proto.dims_size(); ++i) {
    const int64_t d = proto.dims(i);
    KILN_CHECK(d >= 0, label, ": dim ", i, " of dims ", dims_str(proto), " is negative");
    shape.push_back(d);
    if (d == 0) has_zero = true;
  }
  // Bounded over max(d, 1) even when a dim is 0: the strides of [0, 2^40, 2^40] would overflow.
  for (int64_t d : shape) {
    const int64_t extent = std::max<int64_t>(d, 1);
    KILN_CHECK(numel <= max_elements / extent, label, ": dims ", dims_str(proto), " declare more than ",
               max_elements, " elements (the limit for a materialized tensor)");
    numel *= extent;
  }
  if (has_zero) numel = 0;
  const int64_t nbytes = numel * static_cast<int64_t>(dtype_size(dtype));

  const TypedFields fields{proto.float_data_size(), proto.int32_data_size(), proto.int64_data_size(),
                           proto.double_data_size(),
                           proto.string_data_size() + proto.uint64_data_size()};
  const int typed_sources = (fields.float_n > 0) + (fields.int32_n > 0) + (fields.int64_n > 0) +
                            (fields.double_n > 0) + (fields.other_n > 0);
  const bool external = proto.data_location() == TensorProto::EXTERNAL;
  const int sources = typed_sources + (proto.has_raw_data() ? 1 : 0) + (external ? 1 : 0);
  KILN_CHECK(sources <= 1, label, ": holds its data in more than one place (raw_data, typed fields, external)");

  // Each branch allocates only once the data is known to fill the declared dims: a hostile proto
  // declaring a huge shape over a few bytes must not allocate the shape.
  Tensor out;
  if (external) {
    out = read_external(proto, base_dir, label, nbytes, shape, dtype);
  } else if (proto.has_raw_data()) {
    const std::string& raw = proto.raw_data();
    KILN_CHECK(static_cast<int64_t>(raw.size()) == nbytes, label, ": raw_data holds ", raw.size(),
               " bytes but dims ", dims_str(proto), " of ", onnx_dtype_name(proto.data_type()), " need ", nbytes);
    out = empty(shape, TensorOptions(dtype));
    if (nbytes > 0) std::memcpy(out.data_ptr(), raw.data(), static_cast<size_t>(nbytes));
  } else if (typed_sources == 1) {
    const char* field = "int32_data";
    int n = fields.int32_n;
    switch (dtype) {
      case DType::f32: field = "float_data"; n = fields.float_n; break;
      case DType::f64: field = "double_data"; n = fields.double_n; break;
      case DType::i64: field = "int64_data"; n = fields.int64_n; break;
      default: break;
    }
    KILN_CHECK(n > 0, label, ": ", onnx_dtype_name(proto.data_type()), " data must be in ", field,
               " (or raw_data), not in another typed field");
    KILN_CHECK(n == numel, label, ": ", field, " holds ", n, " values but dims ", dims_str(proto), " need ",
               numel);
    out = empty(shape, TensorOptions(dtype));
    switch (dtype) {
      case DType::f32: std::memcpy(out.data_ptr(), proto.float_data().data(), sizeof(float) * n); break;
      case DType::f64: std::memcpy(out.data_ptr(), proto.double_data().data(), sizeof(double) * n); break;
      case DType::i64: std::memcpy(out.data_ptr(), proto.int64_data().data(), sizeof(int64_t) * n); break;
      case DType::i32: std::memcpy(out.data_ptr(), proto.int32_data().data(), sizeof(int32_t) * n); break;
      case DType::i8: from_int32_field<int8_t>(proto, label, out, -128, 127); break;
      case DType::u8: from_int32_field<uint8_t>(proto, label, out, 0, 255); break;
      case DType::boolean: from_int32_field<bool>(proto, label, out, 0, 1); break;
      // The 16-bit floats' bit patterns, in the low 16 bits.
      case DType::f16: from_int32_field<Half>(proto, label, out, 0, 65535); break;
      case DType::bf16: from_int32_field<BFloat16>(proto, label, out, 0, 65535); break;
    }
  } else {
    KILN_CHECK(numel == 0, label, ": has no data (no raw_data, typed field or external data) for dims ",
               dims_str(proto));
    out = empty(shape, TensorOptions(dtype));
  }
  if (dtype == DType::boolean && numel > 0) {
    // kiln's bools are 0 or 1; ONNX readers treat any non-zero byte as true.
    auto* p = static_cast<uint8_t*>(out.data_ptr());
    for (int64_t i = 0; i < numel; ++i) p[i] = p[i] != 0;
  }
  return out;
}

void tensor_to_proto(const Tensor& t, TensorProto* proto) {
  KILN_CHECK(t.defined(), "tensor_to_proto: undefined tensor");
  Tensor c = t.cpu().contiguous();
  proto->clear_dims();
  for (int64_t d : c.shape()) proto->add_dims(d);
  proto->set_data_type(to_onnx_dtype(c.dtype()));
  proto->set_raw_data(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// ---- .pb tensor files -----------------------------------------------------------------------------

namespace {
// Large enough for any tensor a test file holds; allocation is bounded by the bytes present anyway.
constexpr int64_t kTensorFileMaxElements = int64_t{1} << 34;
}  // namespace

Tensor parse_tensor(std::string_view bytes, const std::string& where) {
  KILN_CHECK(bytes.size() <= static_cast<size_t>(INT_MAX), where, ": ", bytes.size(),
             " bytes is larger than a protobuf message may be (2 GiB)");
  TensorProto proto;
  KILN_CHECK(proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), where,
             ": not a valid ONNX TensorProto (truncated or corrupt protobuf, ", bytes.size(), " bytes)");
  return tensor_from_proto(proto, "", kTensorFileMaxElements, where);
}

Tensor load_tensor(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), "load_tensor: cannot open '", path, "'");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  KILN_CHECK(bytes.size() <= static_cast<size_t>(INT_MAX), path, ": ", bytes.size(),
             " bytes is larger than a protobuf message may be (2 GiB)");
  TensorProto proto;
  KILN_CHECK(proto.ParseFromString(bytes), path, ": not a valid ONNX TensorProto (truncated or corrupt protobuf, ",
             bytes.size(), " bytes)");
  std::string dir = fs::path(path).parent_path().string();
  return tensor_from_proto(proto, dir.empty() ? "." : dir, kTensorFileMaxElements, path);
}

void save_tensor(const Tensor& t, const std::string& path, const std::string& name) {
  TensorProto proto;
  tensor_to_proto(t, &proto);
  if (!name.empty()) proto.set_name(name);
  KILN_CHECK(proto.ByteSizeLong() <= static_cast<size_t>(INT_MAX), "save_tensor: '", path, "': ",
             t.nbytes(), " bytes is larger than a TensorProto may be (2 GiB)");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(out.good(), "save_tensor: cannot write '", path, "'");
  KILN_CHECK(proto.SerializeToOstream(&out), "save_tensor: writing '", path, "' failed");
  out.close();
  KILN_CHECK(out.good(), "save_tensor: writing '", path, "' failed");
}

}  // namespace kiln::onnx
