// safetensors: round trips, per-tensor mismatch reports, malformed files, and interop with the
// Python `safetensors` package both ways (python3 with safetensors and NumPy is required: the test
// fails when they are missing; scripts/install-deps.sh installs them).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <algorithm>

#include "kiln/nn.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::random_tensor;

std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kiln_st_" + std::to_string(::getpid()) + "_" + name)).string();
}

int run_python(const std::string& script, const std::string& arg) {
  std::string py = tmp_path("script.py");
  std::ofstream(py) << script;
  int rc = std::system(("python3 " + py + " " + arg).c_str());
  std::remove(py.c_str());
  return rc;
}

TEST(Safetensors, RoundTripAllDtypesSortedNames) {
  std::vector<std::pair<std::string, Tensor>> ts = {
      {"z.f32", random_tensor({3, 5}, DType::f32, 1)},
      {"a.f64", testing::noncontiguous(random_tensor({2, 3, 2}, DType::f64, 2))},
      {"m.i64", random_tensor({7}, DType::i64, 3, -100, 100)},
      {"h.f16", random_tensor({4}, DType::f16, 4)},
      {"b.bf16", random_tensor({2, 2}, DType::bf16, 5)},
      {"u.u8", random_tensor({3}, DType::u8, 6, 0, 200)},
      {"k.bool", random_tensor({5}, DType::boolean, 7)},
      {"s.scalar", scalar_tensor(2.5)},
  };
  std::string p = tmp_path("rt.safetensors");
  nn::save_safetensors(p, ts, {{"who", "kiln \"test\""}});
  auto back = nn::load_safetensors(p);
  ASSERT_EQ(back.size(), ts.size());
  for (size_t i = 1; i < back.size(); ++i) EXPECT_LT(back[i - 1].first, back[i].first);
  for (auto& [n, t] : ts) {
    auto it = std::find_if(back.begin(), back.end(), [&](auto& e) { return e.first == n; });
    ASSERT_NE(it, back.end()) << n;
    EXPECT_EQ(it->second.dtype(), t.dtype()) << n;
    EXPECT_EQ(it->second.shape(), t.shape()) << n;
    EXPECT_TRUE(all_close(it->second, t, {0, 0})) << n;
  }
  std::remove(p.c_str());
}

TEST(Safetensors, LoadStateDictReportsEveryMismatch) {
  Generator g(1);
  nn::Sequential a;
  a.add(std::make_shared<nn::Linear>(4, 3, true, &g)).add(std::make_shared<nn::Linear>(3, 2, true, &g));
  std::string p = tmp_path("sd.safetensors");
  nn::save_safetensors(p, a.state_dict());
  nn::Sequential b;
  b.add(std::make_shared<nn::Linear>(4, 3, true, &g)).add(std::make_shared<nn::Linear>(3, 2, true, &g));
  nn::load_state_dict(b, p);
  for (size_t i = 0; i < a.state_dict().size(); ++i)
    EXPECT_TRUE(all_close(b.state_dict()[i].second, a.state_dict()[i].second, {0, 0}));

  nn::Sequential c;
  c.add(std::make_shared<nn::Linear>(5, 3, true, &g)).add(std::make_shared<nn::Linear>(3, 2, false, &g));
  c.to(DType::f64);
  EXPECT_KILN_ERROR(nn::load_state_dict(c, p), "does not match", "'0.weight': shape [3, 4] in the file, [3, 5]",
                    "'0.weight': dtype f32 in the file, f64", "'0.bias': dtype f32", "unexpected: '1.bias'");
  std::remove(p.c_str());
}

TEST(Safetensors, MalformedFiles) {
  std::string p = tmp_path("bad.safetensors");
  std::ofstream(p, std::ios::binary) << "abc";
  EXPECT_KILN_ERROR(nn::load_safetensors(p), "too short");
  {
    std::ofstream f(p, std::ios::binary);
    std::string h = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}";
    uint64_t n = h.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << h << std::string(8, '\0');
  }
  EXPECT_KILN_ERROR(nn::load_safetensors(p), "'x'", "data_offsets [0, 16]", "8 bytes");
  {
    std::ofstream f(p, std::ios::binary);
    std::string h = "{\"x\":{\"dtype\":\"F32\",";
    uint64_t n = h.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << h;
  }
  EXPECT_KILN_ERROR(nn::load_safetensors(p), "bad JSON header");
  EXPECT_KILN_ERROR(nn::load_safetensors(tmp_path("missing")), "cannot open");
  std::remove(p.c_str());
}

TEST(Safetensors, InteropWithPythonPackage) {
  ASSERT_EQ(std::system("python3 -c 'import safetensors, numpy' > /dev/null 2>&1"), 0)
      << "python3 with the safetensors and numpy packages is required (scripts/install-deps.sh)";
  // kiln -> Python
  Tensor w = random_tensor({3, 4}, DType::f32, 11), ids = random_tensor({5}, DType::i64, 12, -9, 9);
  Tensor h = random_tensor({2}, DType::f16, 13);
  std::string p = tmp_path("k2p.safetensors");
  nn::save_safetensors(p, {{"layer.weight", w}, {"ids", ids}, {"half", h}}, {{"format", "pt"}});
  std::string check = "import sys, numpy as np\nfrom safetensors.numpy import load_file\nfrom safetensors import safe_open\n"
                      "d = load_file(sys.argv[1])\n"
                      "assert sorted(d) == ['half', 'ids', 'layer.weight'], sorted(d)\n"
                      "assert d['layer.weight'].dtype == np.float32 and d['layer.weight'].shape == (3, 4)\n"
                      "assert d['ids'].dtype == np.int64 and d['ids'].shape == (5,)\n"
                      "assert d['half'].dtype == np.float16 and d['half'].shape == (2,)\n"
                      "with safe_open(sys.argv[1], 'np') as f: assert f.metadata() == {'format': 'pt'}\n"
                      "vals = [";
  for (int64_t i = 0; i < 12; ++i) check += std::to_string(w.flatten().select(0, i).item<double>()) + ",";
  check += "]\nassert np.allclose(d['layer.weight'].ravel(), vals, atol=1e-5), d['layer.weight']\n"
           "assert list(d['ids']) == [";
  for (int64_t i = 0; i < 5; ++i) check += std::to_string(ids.select(0, i).item<int64_t>()) + ",";
  check += "]\n";
  EXPECT_EQ(run_python(check, p), 0);
  // Python -> kiln
  std::string q = tmp_path("p2k.safetensors");
  std::string make = "import sys, numpy as np\nfrom safetensors.numpy import save_file\n"
                     "save_file({'b': np.arange(6, dtype=np.float64).reshape(2, 3) / 4, "
                     "'a': np.array([[1, -2], [3, 4]], dtype=np.int32), 'c': np.array([True, False])}, "
                     "sys.argv[1], metadata={'k': 'v'})\n";
  ASSERT_EQ(run_python(make, q), 0);
  auto back = nn::load_safetensors(q);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[0].first, "a");
  EXPECT_EQ(back[0].second.dtype(), DType::i32);
  EXPECT_EQ(back[0].second.shape(), (Shape{2, 2}));
  EXPECT_EQ(back[0].second.data<int32_t>()[1], -2);
  EXPECT_EQ(back[1].second.dtype(), DType::f64);
  EXPECT_TRUE(all_close(back[1].second, arange(6, DType::f64).reshape({2, 3}) / 4.0, {0, 0}));
  EXPECT_EQ(back[2].second.dtype(), DType::boolean);
  EXPECT_EQ(back[2].second.shape(), (Shape{2}));
  std::remove(p.c_str());
  std::remove(q.c_str());
}

TEST(DataLoader, SeededShuffleCoversEveryRowOnce) {
  Tensor x = arange(10, DType::f32).reshape({10, 1}), y = arange(10, DType::i64);
  nn::DataLoader a(x, y, 3, true, 42), b(x, y, 3, true, 42);
  auto ea = a.epoch(), eb = b.epoch();
  ASSERT_EQ(ea.size(), 4u);
  EXPECT_EQ(ea.back().x.size(0), 1);
  std::vector<int> seen(10, 0);
  bool moved = false;
  for (size_t i = 0; i < ea.size(); ++i) {
    EXPECT_TRUE(all_close(ea[i].y, eb[i].y, {0, 0}));
    for (int64_t j = 0; j < ea[i].y.size(0); ++j) {
      int64_t v = ea[i].y.data<int64_t>()[j];
      ++seen[static_cast<size_t>(v)];
      EXPECT_EQ(ea[i].x.data<float>()[j], static_cast<float>(v));
      moved |= v != static_cast<int64_t>(i * 3) + j;
    }
  }
  for (int s : seen) EXPECT_EQ(s, 1);
  EXPECT_TRUE(moved);
  nn::DataLoader c(x, y, 4, false, 0, true);
  EXPECT_EQ(c.epoch().size(), 2u);
  EXPECT_KILN_ERROR(nn::DataLoader(x, y.slice(0, 0, 9), 2), "same first dim");
}

TEST(DataDigits, FixedSplit) {
  nn::Digits d = nn::load_digits(KILN_SOURCE_DIR "/data/digits/digits.csv");
  EXPECT_EQ(d.train_x.shape(), (Shape{1437, 1, 8, 8}));
  EXPECT_EQ(d.test_x.shape(), (Shape{360, 1, 8, 8}));
  EXPECT_EQ(d.train_y.data<int64_t>()[0], 0);  // first row's label
  EXPECT_LE(d.train_x.max().item<double>(), 1.0);
  EXPECT_GE(d.train_x.min().item<double>(), 0.0);
  for (int64_t c = 0; c < 10; ++c) EXPECT_GT(d.test_y.eq(scalar_tensor(c, DType::i64)).sum().item<int64_t>(), 20);
  EXPECT_KILN_ERROR(nn::load_digits("/nonexistent/digits.csv"), "cannot open");
}

}  // namespace
}  // namespace kiln
