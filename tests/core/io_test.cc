// .npy/.npz I/O: round trips for every dtype NumPy shares with kiln, non-contiguous saves, corrupt
// and truncated files (errors asserted by content), files written by NumPy (tests/data/make_npy.py)
// and files kiln writes checked by NumPy (tests/data/check_npy.py). The NumPy tests run python3
// (KILN_PYTHON overrides it) and fail, never skip, when NumPy is missing: scripts/install-deps.sh
// installs it.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "support/testing.h"

#ifndef KILN_TEST_DATA_DIR
#define KILN_TEST_DATA_DIR ""
#endif

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::all_close;

const std::vector<DType> kNpyDTypes = {DType::f32, DType::f64, DType::f16, DType::i8,
                                       DType::u8,  DType::i32, DType::i64, DType::boolean};
const std::vector<Shape> kShapes = {{}, {0}, {0, 3}, {1}, {7}, {33}, {2, 3, 4}, {1023}, {3, 1, 5, 2}};

// A fresh directory under the system temp dir, removed with its contents at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("kiln_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void spit(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Exact equality of dtype, shape and every value (bitwise-exact through f64 for floats).
::testing::AssertionResult same_tensor(const Tensor& actual, const Tensor& expected) {
  if (actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtype_name(actual.dtype()) << " != "
                                         << dtype_name(expected.dtype());
  return all_close(actual, expected, {0, 0});
}

// A version 1.0 .npy file with the given header dict and raw data, written by hand.
std::string npy_bytes(const std::string& dict, const std::string& data) {
  std::string h = dict;
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(h.size() & 0xff));
  out.push_back(static_cast<char>(h.size() >> 8));
  return out + h + data;
}

// ---- round trips ---------------------------------------------------------------------------------

TEST(Npy, RoundTripsEveryDTypeAndShape) {
  uint64_t seed = 1;
  for (DType t : kNpyDTypes) {
    for (const Shape& s : kShapes) {
      Tensor x = testing::random_tensor(s, t, seed++);
      std::string bytes = serialize_npy(x);
      Tensor y = parse_npy(bytes);
      EXPECT_TRUE(same_tensor(y, x)) << dtype_name(t) << shape_str(s);
      EXPECT_TRUE(y.is_contiguous());
      EXPECT_EQ(y.shape(), s);
    }
  }
}

TEST(Npy, HeaderIsVersion1AlignedTo64Bytes) {
  for (const Shape& s : kShapes) {
    std::string bytes = serialize_npy(testing::random_tensor(s, DType::f32, 3));
    ASSERT_EQ(bytes.compare(0, 6, "\x93NUMPY"), 0);
    EXPECT_EQ(bytes[6], 1);
    EXPECT_EQ(bytes[7], 0);
    size_t header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    EXPECT_EQ((10 + header_len) % 64, 0u) << shape_str(s);
    EXPECT_EQ(bytes[10 + header_len - 1], '\n');
    EXPECT_EQ(bytes.size(), 10 + header_len + static_cast<size_t>(numel_of(s)) * 4);
  }
  std::string scalar = serialize_npy(scalar_tensor(2.0, DType::f64));
  EXPECT_NE(scalar.find("'shape': ()"), std::string::npos);
  std::string vec = serialize_npy(zeros({5}, DType::i64));
  EXPECT_NE(vec.find("'descr': '<i8', 'fortran_order': False, 'shape': (5,)"), std::string::npos);
  EXPECT_NE(serialize_npy(zeros({2}, DType::boolean)).find("'|b1'"), std::string::npos);
  EXPECT_NE(serialize_npy(zeros({2}, DType::u8)).find("'|u1'"), std::string::npos);
  EXPECT_NE(serialize_npy(zeros({2}, DType::i8)).find("'|i1'"), std::string::npos);
  EXPECT_NE(serialize_npy(zeros({2}, DType::f16)).find("'<f2'"), std::string::npos);
}

TEST(Npy, HugeHeaderUsesVersion2) {
  Shape s(25000, 1);  // "1, " per dim: the header no longer fits version 1.0's 16-bit length
  s[7] = 3;
  Tensor x = testing::random_tensor(s, DType::i32, 5);
  std::string bytes = serialize_npy(x);
  EXPECT_EQ(bytes[6], 2);
  size_t header_len = 0;
  for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[8 + static_cast<size_t>(i)]);
  EXPECT_GT(header_len, 65535u);
  EXPECT_EQ((12 + header_len) % 64, 0u);
  EXPECT_TRUE(same_tensor(parse_npy(bytes), x));
}

TEST(Npy, SavesNonContiguousViewsInLogicalOrder) {
  TempDir dir;
  for (DType t : kNpyDTypes) {
    Tensor base = testing::random_tensor({4, 6, 5}, t, 11);
    std::vector<Tensor> views = {
        testing::noncontiguous(base),
        base.transpose(0, 2),
        base.slice(1, 5, 0, -2),
        base.permute({1, 2, 0}).slice(2, 1, 4, 2),
        base.select(1, 3),
        base.slice(0, 0, 1).expand({3, 6, 5}),
    };
    for (size_t i = 0; i < views.size(); ++i) {
      const Tensor& v = views[i];
      std::string path = dir.file("view.npy");
      save_npy(path, v);
      Tensor y = load_npy(path);
      EXPECT_TRUE(y.is_contiguous());
      EXPECT_TRUE(same_tensor(y, v)) << dtype_name(t) << " view " << i << " " << shape_str(v.shape());
    }
  }
}

TEST(Npy, RefusesBFloat16WithAHint) {
  TempDir dir;
  std::string path = dir.file("b.npy");
  EXPECT_KILN_ERROR(save_npy(path, ones({2}, DType::bf16)), "bf16", "no NumPy equivalent", "to(kiln::DType::f32)",
                    path);
  EXPECT_KILN_ERROR(save_npz(dir.file("b.npz"), {{"w", ones({2}, DType::bf16)}}), "entry 'w'", "bf16");
  EXPECT_FALSE(fs::exists(path));
}

TEST(Npy, ReadsFortranOrderAndBigEndianHeaders) {
  // Written by hand: a 2x3 f32 array in column-major order; a big-endian i32 vector.
  auto npy = npy_bytes;
  std::vector<float> colmajor = {1, 4, 2, 5, 3, 6};  // [[1, 2, 3], [4, 5, 6]]
  Tensor f = parse_npy(npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                           std::string(reinterpret_cast<const char*>(colmajor.data()), 24)));
  EXPECT_TRUE(f.is_contiguous());
  EXPECT_TRUE(same_tensor(f, from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3})));
  Tensor b = parse_npy(npy("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }",
                           std::string("\x00\x00\x01\x02\xff\xff\xff\xfe", 8)));
  EXPECT_TRUE(same_tensor(b, from_vector<int32_t>({0x0102, -2})));
  // Bool bytes other than 0/1 read as true.
  Tensor m = parse_npy(npy("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x00\x07\x01", 3)));
  EXPECT_TRUE(same_tensor(m, from_vector<bool>({false, true, true})));
}

// ---- errors ---------------------------------------------------------------------------------------

TEST(Npy, CorruptFilesAreErrorsNamingFileAndProblem) {
  TempDir dir;
  const std::string good = serialize_npy(testing::random_tensor({3, 4}, DType::f32, 2));
  auto load_bytes = [&](const std::string& name, const std::string& bytes) {
    std::string path = dir.file(name);
    spit(path, bytes);
    return load_npy(path);
  };
  EXPECT_KILN_ERROR(load_npy(dir.file("missing.npy")), "load_npy", "missing.npy", "cannot open");
  EXPECT_KILN_ERROR(load_bytes("empty.npy", ""), "empty.npy", "bad magic");
  EXPECT_KILN_ERROR(load_bytes("magic.npy", "PK\x03\x04" + good.substr(4)), "magic.npy", "not a .npy file", "bad magic");
  EXPECT_KILN_ERROR(load_bytes("head.npy", good.substr(0, 40)), "head.npy", "truncated .npy file");
  EXPECT_KILN_ERROR(load_bytes("data.npy", good.substr(0, good.size() - 5)), "data.npy", "truncated .npy data",
                    "[3, 4]", "needs 48 bytes", "holds 43");
  EXPECT_KILN_ERROR(load_bytes("extra.npy", good + "xyz"), "extra.npy", "shape/data size mismatch", "holds 51");
  std::string v4 = good;
  v4[6] = 4;
  EXPECT_KILN_ERROR(load_bytes("v4.npy", v4), "v4.npy", "unsupported .npy format version 4.0");

  auto with_header = [&](std::string from, const std::string& to) {
    std::string b = good;
    size_t at = b.find(from);
    EXPECT_NE(at, std::string::npos);
    std::string repl = to + std::string(from.size() - to.size(), ' ');
    return b.replace(at, from.size(), repl);
  };
  EXPECT_KILN_ERROR(load_bytes("c8.npy", with_header("'<f4'", "'<c8'")), "c8.npy", "unsupported dtype '<c8'");
  EXPECT_KILN_ERROR(load_bytes("i2.npy", with_header("'<f4'", "'<i2'")), "unsupported dtype '<i2'");
  EXPECT_KILN_ERROR(load_bytes("obj.npy", with_header("'<f4'", "'|O'")), "unsupported dtype '|O'");
  EXPECT_KILN_ERROR(load_bytes("rec.npy", npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
                                                    std::string(4, '\0'))),
                    "rec.npy", "structured");
  EXPECT_KILN_ERROR(load_bytes("neg.npy", with_header("(3, 4)", "(-3,4)")), "neg.npy", "malformed .npy header");
  EXPECT_KILN_ERROR(load_bytes("shape.npy", with_header("(3, 4)", "(3, 5)")), "shape.npy", "truncated .npy data",
                    "[3, 5]");
  EXPECT_KILN_ERROR(load_bytes("key.npy", with_header("'fortran_order'", "'fortran_ordex'")), "key.npy",
                    "unexpected key 'fortran_ordex'");
  EXPECT_KILN_ERROR(load_bytes("bool.npy", with_header("False", "Nope ")), "bool.npy", "fortran_order");
  EXPECT_KILN_ERROR(save_npy((dir.path / "no" / "such" / "dir.npy").string(), zeros({1})), "save_npy",
                    "dir.npy", "cannot open the file for writing");
}

// ---- npz ----------------------------------------------------------------------------------------------

std::map<std::string, Tensor> sample_archive() {
  return {{"weights", testing::random_tensor({4, 3}, DType::f32, 21)},
          {"bias", testing::random_tensor({3}, DType::f64, 22)},
          {"mask", testing::random_tensor({2, 2}, DType::boolean, 23)},
          {"steps", testing::random_tensor({}, DType::i64, 24)},
          {"empty", zeros({0, 2}, DType::u8)},
          {"view", testing::noncontiguous(testing::random_tensor({5, 2}, DType::f16, 25))}};
}

TEST(Npz, RoundTripsStoredAndCompressed) {
  TempDir dir;
  auto tensors = sample_archive();
  for (bool compressed : {false, true}) {
    std::string path = dir.file(compressed ? "c.npz" : "s.npz");
    if (compressed) save_npz_compressed(path, tensors);
    else save_npz(path, tensors);
    auto back = load_npz(path);
    ASSERT_EQ(back.size(), tensors.size());
    for (const auto& [k, v] : tensors) {
      ASSERT_TRUE(back.count(k)) << k;
      EXPECT_TRUE(same_tensor(back.at(k), v)) << k << (compressed ? " (compressed)" : " (stored)");
    }
  }
  // Repetitive data compresses.
  std::map<std::string, Tensor> big = {{"z", zeros({10000})}};
  save_npz(dir.file("big_s.npz"), big);
  save_npz_compressed(dir.file("big_c.npz"), big);
  EXPECT_LT(fs::file_size(dir.file("big_c.npz")) * 10, fs::file_size(dir.file("big_s.npz")));
  EXPECT_TRUE(same_tensor(load_npz(dir.file("big_c.npz")).at("z"), big.at("z")));
  save_npz(dir.file("none.npz"), {});
  EXPECT_TRUE(load_npz(dir.file("none.npz")).empty());
}

TEST(Npz, CorruptArchivesAreErrorsNamingFileAndProblem) {
  TempDir dir;
  std::map<std::string, Tensor> one = {{"w", testing::random_tensor({16}, DType::f32, 31)}};
  save_npz(dir.file("good.npz"), one);
  save_npz_compressed(dir.file("goodc.npz"), one);
  const std::string good = slurp(dir.file("good.npz"));
  const std::string goodc = slurp(dir.file("goodc.npz"));
  auto load_bytes = [&](const std::string& name, const std::string& bytes) {
    spit(dir.file(name), bytes);
    return load_npz(dir.file(name));
  };
  const size_t data_at = 30 + 5;  // local header + "w.npy"
  EXPECT_KILN_ERROR(load_npz(dir.file("missing.npz")), "load_npz", "missing.npz", "cannot open");
  EXPECT_KILN_ERROR(load_bytes("tiny.npz", "PK"), "tiny.npz", "not a zip archive");
  EXPECT_KILN_ERROR(load_bytes("npy.npz", serialize_npy(zeros({40}))), "npy.npz", "not a zip archive", "bad magic");

  std::string flipped = good;
  flipped[data_at + 150] = static_cast<char>(flipped[data_at + 150] ^ 0x40);
  EXPECT_KILN_ERROR(load_bytes("crc.npz", flipped), "crc.npz", "entry 'w.npy'", "CRC-32 mismatch");

  std::string deflated = goodc;
  for (size_t i = data_at; i < data_at + 12; ++i) deflated[i] = static_cast<char>(0xff);
  EXPECT_KILN_ERROR(load_bytes("deflate.npz", deflated), "deflate.npz", "entry 'w.npy'", "corrupt deflate data");

  // Cut the data out of the middle but keep the end records: offsets now point past the end.
  std::string cut = good.substr(0, 100) + good.substr(good.size() - 60);
  EXPECT_KILN_ERROR(load_bytes("cut.npz", cut), "cut.npz", "zip");
  EXPECT_KILN_ERROR(load_bytes("trunc.npz", good.substr(0, good.size() - 30)), "trunc.npz", "not a zip archive");

  std::string method = good;
  size_t central = method.rfind("PK\x01\x02");
  ASSERT_NE(central, std::string::npos);
  method[central + 10] = 12;  // bzip2
  EXPECT_KILN_ERROR(load_bytes("bzip.npz", method), "bzip.npz", "unsupported zip compression method 12");

  std::string zip64 = good;
  size_t eocd = zip64.rfind("PK\x05\x06");
  zip64[eocd + 10] = zip64[eocd + 11] = static_cast<char>(0xff);
  EXPECT_KILN_ERROR(load_bytes("zip64.npz", zip64), "zip64.npz", "ZIP64 archives are not supported");

  std::string encrypted = good;
  encrypted[central + 8] = 1;
  EXPECT_KILN_ERROR(load_bytes("enc.npz", encrypted), "enc.npz", "encrypted");
}

// ---- interoperability with NumPy -------------------------------------------------------------------

std::string data_dir() {
  const char* env = std::getenv("KILN_TEST_DATA");
  return env && *env ? env : KILN_TEST_DATA_DIR;
}
std::string python() {
  const char* env = std::getenv("KILN_PYTHON");
  return env && *env ? env : "python3";
}

// Runs `python script arg`; returns the exit status and fills `output` with what it printed.
int run_python(const std::string& script, const std::string& arg, std::string& output) {
  std::string log = arg + "/python.log";
  std::ostringstream cmd_text;  // (ostringstream: GCC 12 warns falsely on chains of string +)
  cmd_text << "'" << python() << "' '" << data_dir() << "/" << script << "' '" << arg << "' > '" << log << "' 2>&1";
  std::string cmd = cmd_text.str();
  int rc = std::system(cmd.c_str());
  output = slurp(log);
  return rc;
}

struct ManifestEntry {
  std::string file, key;
  DType dtype;
  Shape shape;
  std::vector<std::string> values;
};

std::vector<ManifestEntry> read_manifest(const std::string& path) {
  std::vector<ManifestEntry> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ls(line);
    ManifestEntry e;
    std::string dtype, shape;
    if (!(ls >> e.file >> e.key >> dtype >> shape)) continue;
    e.dtype = parse_dtype(dtype);
    if (shape != "scalar") {
      std::stringstream ss(shape);
      for (std::string d; std::getline(ss, d, ',');) e.shape.push_back(std::stoll(d));
    }
    for (std::string v; ls >> v;) e.values.push_back(v);
    out.push_back(std::move(e));
  }
  return out;
}

// Element i (C order) of a contiguous CPU tensor.
double element_f64(const Tensor& t, int64_t i) {
  return visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return convert<double>(static_cast<const T*>(t.data_ptr())[i]);
  });
}
int64_t element_i64(const Tensor& t, int64_t i) {
  return visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return convert<int64_t>(static_cast<const T*>(t.data_ptr())[i]);
  });
}

::testing::AssertionResult matches_entry(const Tensor& t, const ManifestEntry& e) {
  if (t.dtype() != e.dtype)
    return ::testing::AssertionFailure() << "dtype " << dtype_name(t.dtype()) << ", NumPy wrote " << dtype_name(e.dtype);
  if (t.shape() != e.shape)
    return ::testing::AssertionFailure() << "shape " << shape_str(t.shape()) << ", NumPy wrote " << shape_str(e.shape);
  if (static_cast<size_t>(t.numel()) != e.values.size())
    return ::testing::AssertionFailure() << "manifest holds " << e.values.size() << " values";
  Tensor c = t.contiguous();
  for (int64_t i = 0; i < c.numel(); ++i) {
    const std::string& v = e.values[static_cast<size_t>(i)];
    if (is_floating(e.dtype)) {
      double want = std::strtod(v.c_str(), nullptr), got = element_f64(c, i);
      bool ok = (std::isnan(want) && std::isnan(got)) || got == want;
      if (!ok) return ::testing::AssertionFailure() << "element " << i << " is " << got << ", NumPy wrote " << v;
    } else {
      int64_t want = std::stoll(v), got = element_i64(c, i);
      if (got != want) return ::testing::AssertionFailure() << "element " << i << " is " << got << ", NumPy wrote " << v;
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(NumPyInterop, LoadsFilesWrittenByNumPy) {
  TempDir dir;
  std::string out;
  int rc = run_python("make_npy.py", dir.path.string(), out);
  ASSERT_EQ(rc, 0) << "tests/data/make_npy.py failed (NumPy is required; scripts/install-deps.sh installs it):\n"
                   << out;
  auto entries = read_manifest(dir.file("manifest.txt"));
  ASSERT_GE(entries.size(), 50u) << out;
  std::map<std::string, std::map<std::string, Tensor>> archives;
  std::set<std::string> seen_files;
  for (const auto& e : entries) {
    SCOPED_TRACE(e.file + " " + e.key);
    Tensor t;
    if (e.key == "-") {
      t = load_npy(dir.file(e.file));
    } else {
      if (!archives.count(e.file)) archives[e.file] = load_npz(dir.file(e.file));
      ASSERT_TRUE(archives[e.file].count(e.key));
      t = archives[e.file].at(e.key);
    }
    EXPECT_TRUE(matches_entry(t, e));
    seen_files.insert(e.file);
  }
  for (const char* f : {"f32_fortran.npy", "i64_transposed.npy", "f16_bigendian.npy", "i64_bigendian.npy",
                        "f32_bigendian_fortran.npy", "f64_v2.npy", "i32_v3.npy", "bool_scalar.npy",
                        "u8_empty.npy", "stored.npz", "compressed.npz", "f32_special.npy"})
    EXPECT_TRUE(seen_files.count(f)) << f << " missing from the fixtures";
  // The fixture really is column-major / big-endian / version 3 on disk.
  EXPECT_NE(slurp(dir.file("i64_transposed.npy")).find("'fortran_order': True"), std::string::npos);
  EXPECT_NE(slurp(dir.file("f16_bigendian.npy")).find("'>f2'"), std::string::npos);
  EXPECT_EQ(slurp(dir.file("i32_v3.npy"))[6], 3);
}

std::string manifest_value(const Tensor& c, int64_t i) {
  if (!is_floating(c.dtype())) return std::to_string(element_i64(c, i));
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", element_f64(c, i));
  return buf;
}

std::string manifest_line(const std::string& file, const std::string& key, const Tensor& t) {
  std::ostringstream line;
  line << file << " " << key << " " << dtype_name(t.dtype()) << " ";
  if (t.dim() == 0) {
    line << "scalar";
  } else {
    for (int64_t d = 0; d < t.dim(); ++d) line << (d ? "," : "") << t.size(d);
  }
  Tensor c = t.contiguous();
  for (int64_t i = 0; i < c.numel(); ++i) line << " " << manifest_value(c, i);
  line << "\n";
  return line.str();
}

TEST(NumPyInterop, NumPyLoadsFilesWrittenByKiln) {
  TempDir dir;
  std::string manifest;
  uint64_t seed = 100;
  for (DType t : kNpyDTypes) {
    for (const Shape& s : std::vector<Shape>{{}, {0, 2}, {7}, {2, 3, 5}}) {
      Tensor x = testing::random_tensor(s, t, seed++);
      std::string name = std::string(dtype_name(t)) + "_" + std::to_string(seed) + ".npy";
      save_npy(dir.file(name), x);
      manifest += manifest_line(name, "-", x);
    }
    Tensor v = testing::random_tensor({6, 4}, t, seed++).transpose(0, 1).slice(1, 0, 6, 2);
    std::string name = std::string(dtype_name(t)) + "_view.npy";
    save_npy(dir.file(name), v);
    manifest += manifest_line(name, "-", v);
  }
  auto tensors = sample_archive();
  save_npz(dir.file("kiln_stored.npz"), tensors);
  save_npz_compressed(dir.file("kiln_compressed.npz"), tensors);
  for (const char* f : {"kiln_stored.npz", "kiln_compressed.npz"})
    for (const auto& [k, v] : tensors) manifest += manifest_line(f, k, v);
  spit(dir.file("manifest.txt"), manifest);

  std::string out;
  int rc = run_python("check_npy.py", dir.path.string(), out);
  EXPECT_EQ(rc, 0) << "NumPy disagrees with kiln's files (tests/data/check_npy.py):\n" << out;
  EXPECT_NE(out.find(" 0 mismatches"), std::string::npos) << out;
}

}  // namespace
}  // namespace kiln
