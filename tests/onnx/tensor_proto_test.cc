// TensorProto <-> Tensor: round trips for every kiln dtype, the typed-field forms ONNX writers
// use, external data, and hostile protos (truncated, size mismatch, escaping paths, huge dims).
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "kiln/onnx.h"
#include "onnx/tensor_proto.h"
#include "support/testing.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::onnx::TensorProto;
using testing::kAllDTypes;
using testing::random_tensor;

// A fresh empty folder under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  explicit TempDir(const std::string& stem) {
    path_ = fs::temp_directory_path() / (stem + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Bit-exact equality (dtype, shape and bytes), NaN-safe.
void expect_identical(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  Tensor ca = a.contiguous(), cb = b.contiguous();
  EXPECT_EQ(std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()), 0) << "bytes differ";
}

TEST(TensorProto, RoundTripsEveryDType) {
  for (DType t : kAllDTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Tensor x = random_tensor({3, 5, 2}, t, 7);
    TensorProto proto;
    onnx::tensor_to_proto(x, &proto);
    EXPECT_EQ(proto.data_type(), onnx::to_onnx_dtype(t));
    EXPECT_EQ(onnx::from_onnx_dtype(proto.data_type(), "test"), t);
    std::string bytes;
    ASSERT_TRUE(proto.SerializeToString(&bytes));
    expect_identical(onnx::parse_tensor(bytes), x);
  }
}

TEST(TensorProto, WritesNonContiguousScalarAndEmpty) {
  Tensor x = testing::noncontiguous(random_tensor({4, 3}, DType::f32, 1));
  TensorProto proto;
  onnx::tensor_to_proto(x, &proto);
  expect_identical(onnx::tensor_from_proto(proto, "", 1 << 20), x);

  Tensor s = scalar_tensor(2.5, DType::f64);
  onnx::tensor_to_proto(s, &proto);
  EXPECT_EQ(proto.dims_size(), 0);
  expect_identical(onnx::tensor_from_proto(proto, "", 1 << 20), s);

  Tensor e = empty({0, 3}, DType::i64);
  onnx::tensor_to_proto(e, &proto);
  expect_identical(onnx::tensor_from_proto(proto, "", 1 << 20), e);
}

TEST(TensorProto, SaveAndLoadFile) {
  TempDir dir("kiln_tensor_proto_file");
  Tensor x = random_tensor({2, 7}, DType::bf16, 3);
  std::string path = (dir.path() / "input_0.pb").string();
  onnx::save_tensor(x, path, "input");
  expect_identical(onnx::load_tensor(path), x);
  TensorProto proto;
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(proto.ParseFromIstream(&in));
  EXPECT_EQ(proto.name(), "input");
}

// The typed fields: float_data, double_data, int64_data, and int32_data for i32 and the narrow
// types (int8/uint8/bool values, 16-bit floats as their bit patterns).
TEST(TensorProto, ReadsTypedFields) {
  TensorProto p;
  p.set_name("f");
  p.set_data_type(TensorProto::FLOAT);
  p.add_dims(2);
  p.add_float_data(1.5f);
  p.add_float_data(-2.25f);
  Tensor f = onnx::tensor_from_proto(p, "", 100);
  EXPECT_TRUE(testing::all_close(f, from_vector<double>({1.5, -2.25})));

  p.Clear();
  p.set_data_type(TensorProto::DOUBLE);
  p.add_double_data(0.125);
  Tensor d = onnx::tensor_from_proto(p, "", 100);  // no dims: a scalar
  EXPECT_EQ(d.dim(), 0);
  EXPECT_EQ(d.item<double>(), 0.125);

  p.Clear();
  p.set_data_type(TensorProto::INT64);
  p.add_dims(3);
  for (int64_t v : {int64_t{-1}, int64_t{1} << 40, int64_t{7}}) p.add_int64_data(v);
  expect_identical(onnx::tensor_from_proto(p, "", 100), from_vector<int64_t>({-1, int64_t{1} << 40, 7}));

  p.Clear();
  p.set_data_type(TensorProto::INT8);
  p.add_dims(3);
  for (int v : {-128, 5, 127}) p.add_int32_data(v);
  expect_identical(onnx::tensor_from_proto(p, "", 100), from_vector<int8_t>({-128, 5, 127}));

  p.set_data_type(TensorProto::UINT8);
  p.set_int32_data(0, 255);
  expect_identical(onnx::tensor_from_proto(p, "", 100), from_vector<uint8_t>({255, 5, 127}));

  p.set_data_type(TensorProto::INT32);
  expect_identical(onnx::tensor_from_proto(p, "", 100), from_vector<int32_t>({255, 5, 127}));

  p.Clear();
  p.set_data_type(TensorProto::BOOL);
  p.add_dims(2);
  p.add_int32_data(1);
  p.add_int32_data(0);
  expect_identical(onnx::tensor_from_proto(p, "", 100), from_vector<bool>({true, false}));

  p.Clear();
  p.set_data_type(TensorProto::FLOAT16);
  p.add_dims(2);
  p.add_int32_data(Half(1.5f).bits);
  p.add_int32_data(Half(-3.0f).bits);
  Tensor h = onnx::tensor_from_proto(p, "", 100);
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_TRUE(testing::all_close(h, from_vector<double>({1.5, -3.0})));

  p.set_data_type(TensorProto::BFLOAT16);
  p.set_int32_data(0, BFloat16(0.5f).bits);
  p.set_int32_data(1, BFloat16(-8.0f).bits);
  Tensor b = onnx::tensor_from_proto(p, "", 100);
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_TRUE(testing::all_close(b, from_vector<double>({0.5, -8.0})));
}

TEST(TensorProto, RawBoolBytesNormalize) {
  TensorProto p;
  p.set_data_type(TensorProto::BOOL);
  p.add_dims(3);
  p.set_raw_data(std::string("\x00\x02\x01", 3));
  Tensor t = onnx::tensor_from_proto(p, "", 100);
  expect_identical(t, from_vector<bool>({false, true, true}));
}

TEST(TensorProto, ReadsExternalData) {
  TempDir dir("kiln_tensor_proto_ext");
  Tensor x = random_tensor({4, 5}, DType::f32, 11);
  std::string blob(16, 'z');  // data at offset 16
  blob.append(static_cast<const char*>(x.data_ptr()), x.nbytes());
  fs::create_directories(dir.path() / "weights");
  write_file(dir.path() / "weights" / "w.bin", blob);

  TensorProto p;
  p.set_name("w");
  p.set_data_type(TensorProto::FLOAT);
  p.add_dims(4);
  p.add_dims(5);
  p.set_data_location(TensorProto::EXTERNAL);
  auto add_kv = [&](const std::string& k, const std::string& v) {
    auto* e = p.add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add_kv("location", "weights/w.bin");
  add_kv("offset", "16");
  add_kv("length", std::to_string(x.nbytes()));
  expect_identical(onnx::tensor_from_proto(p, dir.path().string(), 1000), x);

  // The same tensor as a .pb file next to its data: load_tensor resolves against the file's folder.
  std::string bytes;
  ASSERT_TRUE(p.SerializeToString(&bytes));
  write_file(dir.path() / "w.pb", bytes);
  expect_identical(onnx::load_tensor((dir.path() / "w.pb").string()), x);
  // parse_tensor has no folder: external data is refused.
  EXPECT_KILN_ERROR(onnx::parse_tensor(bytes, "mem"), "tensor 'w'", "external data 'weights/w.bin'",
                    "not allowed");

  // Wrong length, data past the end of the file, bad offset text.
  p.mutable_external_data(2)->set_value("12");
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, dir.path().string(), 1000), "tensor 'w'", "length 12",
                    "does not match", "80 bytes");
  p.mutable_external_data(2)->set_value("80");
  p.mutable_external_data(1)->set_value("17");
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, dir.path().string(), 1000), "tensor 'w'", "has 96 bytes",
                    "from offset 17");
  p.mutable_external_data(1)->set_value("-4");
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, dir.path().string(), 1000), "offset '-4'",
                    "not a non-negative integer");
  p.mutable_external_data(1)->set_value("16");
  p.mutable_external_data(0)->set_value("weights/missing.bin");
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, dir.path().string(), 1000), "tensor 'w'", "does not exist");
}

TEST(TensorProto, ExternalDataMustStayInsideTheFolder) {
  TempDir dir("kiln_tensor_proto_escape");
  fs::create_directories(dir.path() / "model");
  write_file(dir.path() / "secret.bin", std::string(64, 'x'));
  std::error_code ec;
  fs::create_symlink(dir.path() / "secret.bin", dir.path() / "model" / "link.bin", ec);

  TensorProto p;
  p.set_name("w");
  p.set_data_type(TensorProto::FLOAT);
  p.add_dims(4);
  p.set_data_location(TensorProto::EXTERNAL);
  auto* loc = p.add_external_data();
  loc->set_key("location");
  const std::string base = (dir.path() / "model").string();

  loc->set_value("../secret.bin");
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, base, 1000), "tensor 'w'", "'../secret.bin'",
                    "escapes the model's folder");
  loc->set_value("sub/../../secret.bin");
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, base, 1000), "escapes the model's folder");
  loc->set_value((dir.path() / "secret.bin").string());
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, base, 1000), "is absolute");
  if (!ec) {
    loc->set_value("link.bin");
    EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, base, 1000), "'link.bin'", "resolves outside the model's folder");
  }
  p.clear_external_data();
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, base, 1000), "no 'location'");
}

TEST(TensorProto, RejectsTruncatedBytes) {
  Tensor x = random_tensor({16, 16}, DType::f32, 5);
  TensorProto proto;
  onnx::tensor_to_proto(x, &proto);
  proto.set_name("x");
  std::string bytes;
  ASSERT_TRUE(proto.SerializeToString(&bytes));
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{3}}) {
    SCOPED_TRACE(keep);
    EXPECT_KILN_ERROR(onnx::parse_tensor(std::string_view(bytes).substr(0, keep), "input_0.pb"), "input_0.pb",
                      "not a valid ONNX TensorProto");
  }
  EXPECT_KILN_ERROR(onnx::parse_tensor("\xff\xff\xff", "junk.pb"), "junk.pb", "not a valid ONNX TensorProto");
  EXPECT_KILN_ERROR(onnx::load_tensor("/nonexistent/kiln/input.pb"), "cannot open", "/nonexistent/kiln/input.pb");
}

TEST(TensorProto, RejectsSizeMismatches) {
  TensorProto p;
  p.set_name("w");
  p.set_data_type(TensorProto::FLOAT);
  p.add_dims(2);
  p.add_dims(3);
  p.set_raw_data(std::string(20, '\0'));
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, "", 100), "tensor 'w'", "raw_data holds 20 bytes",
                    "dims [2, 3] of FLOAT need 24");
  p.clear_raw_data();
  for (int i = 0; i < 5; ++i) p.add_float_data(1.0f);
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, "", 100), "float_data holds 5 values", "need 6");
  p.add_float_data(1.0f);
  p.set_raw_data(std::string(24, '\0'));
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, "", 100), "more than one place");
  p.clear_raw_data();
  p.clear_float_data();
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, "", 100), "tensor 'w'", "has no data");
  for (int i = 0; i < 6; ++i) p.add_int64_data(1);
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, "", 100), "FLOAT data must be in float_data");

  TensorProto q;
  q.set_data_type(TensorProto::INT8);
  q.add_dims(1);
  q.add_int32_data(300);
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(q, "", 100, "initializer #3"), "initializer #3",
                    "int32_data[0] = 300 does not fit INT8");
}

TEST(TensorProto, RejectsHostileDims) {
  TensorProto p;
  p.set_name("big");
  p.set_data_type(TensorProto::FLOAT);
  p.add_dims(int64_t{1} << 40);
  p.add_dims(int64_t{1} << 40);  // the product overflows int64
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, "", int64_t{1} << 30), "tensor 'big'", "more than 1073741824");
  p.clear_dims();
  p.add_dims(1000);
  p.add_dims(1001);
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, "", 1000000), "dims [1000, 1001]", "more than 1000000");
  p.set_dims(0, -3);
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, "", 1000000), "dim 0", "[-3, 1001]", "is negative");
}

TEST(TensorProto, RejectsUnsupportedDTypes) {
  EXPECT_KILN_ERROR(onnx::from_onnx_dtype(TensorProto::UINT16, "input 'x'"), "unsupported ONNX dtype UINT16",
                    "in input 'x'");
  EXPECT_KILN_ERROR(onnx::from_onnx_dtype(TensorProto::STRING, "node #2"), "unsupported ONNX dtype STRING");
  EXPECT_KILN_ERROR(onnx::from_onnx_dtype(17, "w"), "unsupported ONNX dtype FLOAT8E4M3FN");
  EXPECT_KILN_ERROR(onnx::from_onnx_dtype(0, "w"), "undefined ONNX dtype 0");
  EXPECT_KILN_ERROR(onnx::from_onnx_dtype(99, "w"), "unknown ONNX dtype 99");
  TensorProto p;
  p.set_name("s");
  p.set_data_type(TensorProto::STRING);
  p.add_string_data("hi");
  EXPECT_KILN_ERROR(onnx::tensor_from_proto(p, "", 100), "unsupported ONNX dtype STRING", "tensor 's'");
}

}  // namespace
}  // namespace kiln
