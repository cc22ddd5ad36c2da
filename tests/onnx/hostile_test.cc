// Hostile ONNX models for the importer: truncated and bit-flipped files, broken graphs (cycles,
// duplicate and missing names), huge declared sizes, type mismatches, wrong attribute types, unknown
// ops, domains and opsets, external data reaching outside the model's folder, recursive functions.
// Each must end in a kiln::Error that names the node ("node #i 'name' (OpType)") or the value and
// says what is wrong: never a crash, a hang or an allocation the file's size does not justify. CI
// also runs this suite under ASan+UBSan; fuzz/onnx_import_fuzz.cc covers what is random.
#include <onnx/onnx_pb.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <filesystem>
#include <fstream>
#include <random>

#include "kiln/core/generator.h"
#include "kiln/onnx.h"
#include "onnx/tensor_proto.h"
#include "support/testing.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::onnx::AttributeProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;
using testing::random_tensor;

// ---- building models ------------------------------------------------------------------------------

ModelProto new_model(int64_t opset = 17) {
  ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln-hostile-test");
  m.mutable_graph()->set_name("g");
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(opset);
  return m;
}

// dims: -1 is a symbolic dim "N".
void add_input(ModelProto& m, const std::string& name, int32_t elem, const std::vector<int64_t>& dims) {
  auto* vi = m.mutable_graph()->add_input();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) {
    if (d < 0) shape->add_dim()->set_dim_param("N");
    else shape->add_dim()->set_dim_value(d);
  }
}

void add_output(ModelProto& m, const std::string& name, int32_t elem = TensorProto::FLOAT) {
  auto* vo = m.mutable_graph()->add_output();
  vo->set_name(name);
  vo->mutable_type()->mutable_tensor_type()->set_elem_type(elem);
}

NodeProto* add_node(ModelProto& m, const std::string& op, const std::vector<std::string>& inputs,
                    const std::vector<std::string>& outputs, const std::string& name = "") {
  NodeProto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
  return n;
}

AttributeProto* add_attr(NodeProto* n, const std::string& name, AttributeProto::AttributeType type) {
  AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(type);
  return a;
}
void attr_int(NodeProto* n, const std::string& name, int64_t v) { add_attr(n, name, AttributeProto::INT)->set_i(v); }
void attr_ints(NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = add_attr(n, name, AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void attr_tensor(NodeProto* n, const std::string& name, const Tensor& t) {
  onnx::tensor_to_proto(t, add_attr(n, name, AttributeProto::TENSOR)->mutable_t());
}

TensorProto* add_init(ModelProto& m, const std::string& name, const Tensor& t) {
  TensorProto* p = m.mutable_graph()->add_initializer();
  onnx::tensor_to_proto(t, p);
  p->set_name(name);
  return p;
}

std::string bytes_of(const ModelProto& m) {
  std::string s;
  EXPECT_TRUE(m.SerializeToString(&s));
  return s;
}

onnx::Model import(const ModelProto& m, const onnx::ImportOptions& options = {}) {
  return onnx::import_bytes(bytes_of(m), "", options);
}

// A small CNN classifier: Conv(pads 1) → Relu → Reshape → Gemm(transB) → Softmax, every weight an
// initializer, x: f32[1, 2, 5, 5] → y: f32[1, 4]. The opset import is serialized last, so every
// proper prefix of the file lacks it.
ModelProto small_cnn() {
  ModelProto m = new_model();
  add_input(m, "x", TensorProto::FLOAT, {1, 2, 5, 5});
  add_init(m, "W", random_tensor({3, 2, 3, 3}, DType::f32, 1));
  add_init(m, "B", random_tensor({3}, DType::f32, 2));
  add_init(m, "shape", from_vector<int64_t>({1, 75}));
  add_init(m, "W2", random_tensor({4, 75}, DType::f32, 3));
  add_init(m, "b2", random_tensor({4}, DType::f32, 4));
  attr_ints(add_node(m, "Conv", {"x", "W", "B"}, {"c"}, "conv"), "pads", {1, 1, 1, 1});
  add_node(m, "Relu", {"c"}, {"r"}, "relu");
  add_node(m, "Reshape", {"r", "shape"}, {"f"}, "flatten");
  attr_int(add_node(m, "Gemm", {"f", "W2", "b2"}, {"g"}, "fc"), "transB", 1);
  attr_int(add_node(m, "Softmax", {"g"}, {"y"}, "softmax"), "axis", 1);
  add_output(m, "y");
  return m;
}

// Runs an imported model on random inputs when every input is static and small; kiln::Error is an
// acceptable answer, anything else fails the calling test.
void run_if_small(const onnx::Model& model, uint64_t seed) {
  std::vector<Tensor> inputs;
  Generator gen(seed);
  for (const ir::Value* v : model.graph.inputs()) {
    Shape s;
    int64_t n = 1;
    for (const auto& d : v->type().shape) {
      if (d.is_symbolic()) return;
      s.push_back(d.size);
      n *= std::min<int64_t>(d.size, 1 << 16);
      if (n > (1 << 16)) return;
    }
    inputs.push_back((rand(s, TensorOptions(DType::f64), &gen) * 4.0 - 2.0).to(v->type().dtype));
  }
  try {
    (void)ir::run(model.graph, inputs);
  } catch (const Error&) {
  }
}

// Peak resident memory of this process (KiB); only grows.
int64_t peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Expects `fn` to throw a kiln::Error containing every part, within `seconds`, without raising the
// process's peak memory by more than 256 MiB.
template <class Fn>
void expect_fast_bounded_error(Fn&& fn, std::initializer_list<std::string> parts, double seconds = 5.0) {
  const int64_t rss_before = peak_rss_kib();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(testing::throws_error(fn, parts));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, seconds) << "the error took " << took << " s";
  EXPECT_LT(peak_rss_kib() - rss_before, 256 * 1024) << "peak memory grew by " << (peak_rss_kib() - rss_before)
                                                     << " KiB";
}

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

// ---- damaged files ------------------------------------------------------------------------------

TEST(OnnxHostile, TheSmallModelImportsAndRuns) {
  onnx::Model model = import(small_cnn());
  EXPECT_EQ(model.input_names, std::vector<std::string>{"x"});
  EXPECT_EQ(model.output_names, std::vector<std::string>{"y"});
  std::vector<Tensor> out = ir::run(model.graph, {random_tensor({1, 2, 5, 5}, DType::f32, 9)});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape(), (Shape{1, 4}));
  EXPECT_NEAR(out[0].to(DType::f64).sum().item<double>(), 1.0, 1e-5);
}

TEST(OnnxHostile, EveryTruncationIsAnError) {
  const std::string bytes = bytes_of(small_cnn());
  ASSERT_GT(bytes.size(), 1000u);
  size_t unparsable = 0;
  for (size_t keep = 0; keep < bytes.size(); ++keep) {
    SCOPED_TRACE("prefix of " + std::to_string(keep) + " bytes");
    std::string message;
    try {
      (void)onnx::import_bytes(std::string_view(bytes).substr(0, keep));
      ADD_FAILURE() << "a truncated model imported";
    } catch (const Error& e) {
      message = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw a non-kiln::Error exception: " << e.what();
    }
    // Either the protobuf is cut mid-field, or it parses to a model missing what comes later.
    if (message.find("not a valid ONNX model") != std::string::npos) ++unparsable;
    else
      EXPECT_TRUE(message.find("has no graph") != std::string::npos ||
                  message.find("imports no ai.onnx opset") != std::string::npos ||
                  message.find("unsupported ONNX IR version") != std::string::npos)
          << message;
  }
  EXPECT_GT(unparsable, bytes.size() / 2);

  // Through a file: the message names the file.
  TempDir dir("kiln_onnx_truncated");
  const fs::path path = dir.path() / "cut.onnx";
  write_file(path, bytes.substr(0, bytes.size() / 3));
  EXPECT_KILN_ERROR(onnx::import_model(path.string()), path.string(), "not a valid ONNX model");
  EXPECT_KILN_ERROR(onnx::import_model((dir.path() / "absent.onnx").string()), "cannot open ONNX model",
                    "absent.onnx");
}

TEST(OnnxHostile, BitFlippedFilesImportOrFailCleanly) {
  const std::string bytes = bytes_of(small_cnn());
  std::mt19937_64 rng(20261202);
  int imported = 0, rejected = 0;
  constexpr int kMutants = 3000;
  for (int i = 0; i < kMutants; ++i) {
    std::string mutant = bytes;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f) {
      const size_t bit = rng() % (mutant.size() * 8);
      mutant[bit / 8] = static_cast<char>(mutant[bit / 8] ^ (1 << (bit % 8)));
    }
    try {
      onnx::ImportOptions options;
      options.max_constant_elements = 1 << 20;
      onnx::Model model = onnx::import_bytes(mutant, "", options);
      ++imported;
      run_if_small(model, static_cast<uint64_t>(i));
    } catch (const Error& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()), "") << "mutant " << i;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "mutant " << i << " threw a non-kiln::Error exception: " << e.what();
    }
  }
  std::cout << kMutants << " bit-flipped models: " << imported << " imported, " << rejected << " rejected\n";
  // Most flips land in weight bytes (the model still imports); some break the structure.
  EXPECT_GT(imported, 0);
  EXPECT_GT(rejected, 0);
}

// ---- broken graphs --------------------------------------------------------------------------------

TEST(OnnxHostile, CyclicGraph) {
  ModelProto m = new_model();
  add_input(m, "x", TensorProto::FLOAT, {2});
  add_node(m, "Add", {"x", "b"}, {"a"}, "first");
  add_node(m, "Relu", {"a"}, {"b"}, "second");
  add_output(m, "b");
  EXPECT_KILN_ERROR(import(m), "node #0 'first' (Add)", "input 'b' is not defined by any earlier node", "cyclic");
}

TEST(OnnxHostile, NodeConsumingItsOwnOutput) {
  ModelProto m = new_model();
  add_input(m, "x", TensorProto::FLOAT, {2});
  add_node(m, "Add", {"x", "y"}, {"y"}, "loop");
  add_output(m, "y");
  EXPECT_KILN_ERROR(import(m), "node #0 'loop' (Add)", "input 'y' is not defined");
}

TEST(OnnxHostile, DuplicateValueNames) {
  {
    ModelProto m = new_model();
    add_input(m, "x", TensorProto::FLOAT, {2});
    add_node(m, "Relu", {"x"}, {"y"}, "one");
    add_node(m, "Neg", {"x"}, {"y"}, "two");
    add_output(m, "y");
    EXPECT_KILN_ERROR(import(m), "node #1 'two' (Neg)", "output 'y' is already defined");
  }
  {  // A node output shadowing a graph input.
    ModelProto m = new_model();
    add_input(m, "x", TensorProto::FLOAT, {2});
    add_node(m, "Relu", {"x"}, {"x"}, "shadow");
    add_output(m, "x");
    EXPECT_KILN_ERROR(import(m), "node #0 'shadow' (Relu)", "output 'x' is already defined");
  }
  {  // One node writing the same name twice.
    ModelProto m = new_model();
    add_input(m, "x", TensorProto::FLOAT, {4});
    attr_int(add_node(m, "Split", {"x"}, {"p", "p"}, "halves"), "axis", 0);
    add_output(m, "p");
    EXPECT_KILN_ERROR(import(m), "node #0 'halves' (Split)", "output 'p' is listed twice");
  }
  {
    ModelProto m = new_model();
    add_input(m, "x", TensorProto::FLOAT, {2});
    add_input(m, "x", TensorProto::FLOAT, {3});
    add_node(m, "Relu", {"x"}, {"y"});
    add_output(m, "y");
    EXPECT_KILN_ERROR(import(m), "graph input 'x' is declared twice");
  }
  {
    ModelProto m = new_model();
    add_input(m, "x", TensorProto::FLOAT, {2});
    add_init(m, "w", random_tensor({2}, DType::f32, 1));
    add_init(m, "w", random_tensor({2}, DType::f32, 2));
    add_node(m, "Add", {"x", "w"}, {"y"});
    add_output(m, "y");
    EXPECT_KILN_ERROR(import(m), "initializer 'w' is defined twice");
  }
  {  // An output of a function call colliding with an earlier value.
    ModelProto m = new_model();
    auto* os = m.add_opset_import();
    os->set_domain("local");
    os->set_version(1);
    auto* f = m.add_functions();
    f->set_name("F");
    f->set_domain("local");
    f->add_input("a");
    f->add_output("b");
    f->add_opset_import()->set_version(17);
    auto* body = f->add_node();
    body->set_op_type("Relu");
    body->add_input("a");
    body->add_output("b");
    add_input(m, "x", TensorProto::FLOAT, {2});
    add_node(m, "F", {"x"}, {"x"}, "call")->set_domain("local");
    add_output(m, "x");
    EXPECT_KILN_ERROR(import(m), "node #0 'call' (F)", "output 'x' is already defined");
  }
}

TEST(OnnxHostile, MissingInitializerOrInput) {
  ModelProto m = small_cnn();
  // Drop W2: Gemm's weight is now undefined.
  auto* inits = m.mutable_graph()->mutable_initializer();
  for (int i = 0; i < inits->size(); ++i)
    if (inits->Get(i).name() == "W2") {
      inits->DeleteSubrange(i, 1);
      break;
    }
  EXPECT_KILN_ERROR(import(m), "node #3 'fc' (Gemm)", "input 'W2' is not defined", "missing an initializer");

  ModelProto u = new_model();
  add_input(u, "x", TensorProto::FLOAT, {2});
  add_node(u, "Mul", {"x", "nowhere"}, {"y"});
  add_output(u, "y");
  EXPECT_KILN_ERROR(import(u), "node #0 (Mul)", "input 'nowhere' is not defined");

  ModelProto o = new_model();
  add_input(o, "x", TensorProto::FLOAT, {2});
  add_node(o, "Relu", {"x"}, {"y"});
  add_output(o, "z");
  EXPECT_KILN_ERROR(import(o), "graph output 'z' is not computed by any node");

  ModelProto r = new_model();  // a required input left empty
  add_input(r, "x", TensorProto::FLOAT, {2});
  add_node(r, "Add", {"x", ""}, {"y"}, "half");
  add_output(r, "y");
  EXPECT_KILN_ERROR(import(r), "node #0 'half' (Add)", "input #1 is required but absent");
}

// ---- huge declared sizes ----------------------------------------------------------------------------

TEST(OnnxHostile, HugeDeclaredInputDimsAllocateNothing) {
  // A graph input may declare any static size: nothing is allocated for it at import.
  ModelProto m = new_model();
  add_input(m, "x", TensorProto::FLOAT, {int64_t{1} << 40, int64_t{1} << 20});
  add_node(m, "Relu", {"x"}, {"y"});
  add_output(m, "y");
  const int64_t rss_before = peak_rss_kib();
  onnx::Model model = import(m);
  EXPECT_EQ(model.graph.outputs()[0]->type().shape[0].size, int64_t{1} << 40);
  EXPECT_LT(peak_rss_kib() - rss_before, 64 * 1024);

  // ... but dims whose element count overflows int64 are refused.
  ModelProto o = new_model();
  add_input(o, "x", TensorProto::FLOAT, {int64_t{1} << 40, int64_t{1} << 40});
  add_node(o, "Relu", {"x"}, {"y"});
  add_output(o, "y");
  EXPECT_KILN_ERROR(import(o), "graph input #0 'x'", "overflow");

  // Shape → ConstantOfShape of the huge input: the fill would be 2^60 elements.
  ModelProto c = new_model();
  add_input(c, "x", TensorProto::FLOAT, {int64_t{1} << 40, int64_t{1} << 20});
  add_node(c, "Shape", {"x"}, {"s"}, "shape");
  add_node(c, "ConstantOfShape", {"s"}, {"y"}, "fill");
  add_output(c, "y");
  expect_fast_bounded_error([&] { import(c); }, {"node #1 'fill' (ConstantOfShape)", "folding would materialize",
                                                 "over the importer's limit of 1073741824"});

  // EyeLike and Range build their constants themselves.
  ModelProto e = new_model();
  add_input(e, "x", TensorProto::FLOAT, {int64_t{1} << 30, int64_t{1} << 30});
  add_node(e, "EyeLike", {"x"}, {"y"}, "eye");
  add_output(e, "y");
  expect_fast_bounded_error([&] { import(e); }, {"node #0 'eye' (EyeLike)", "over the importer's limit"});
}

TEST(OnnxHostile, HugeConstantOfShapeAndExpand) {
  for (std::vector<int64_t> dims : {std::vector<int64_t>{1 << 20, 1 << 20}, std::vector<int64_t>{int64_t{1} << 62, 4},
                                    std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40}}) {
    ModelProto m = new_model();
    add_init(m, "dims", from_vector(dims));
    add_node(m, "ConstantOfShape", {"dims"}, {"y"}, "fill");
    add_output(m, "y");
    expect_fast_bounded_error([&] { import(m); }, {"node #0 'fill' (ConstantOfShape)"});
  }
  ModelProto m = new_model();
  add_init(m, "one", from_vector<float>({1.0f}));
  add_init(m, "dims", from_vector<int64_t>({int64_t{1} << 40, int64_t{1} << 40}));
  add_node(m, "Expand", {"one", "dims"}, {"y"}, "grow");
  add_output(m, "y");
  expect_fast_bounded_error([&] { import(m); }, {"node #0 'grow' (Expand)", "folding would materialize",
                                                 "over the importer's limit"});

  // No elements, but a dim whose stride in bytes overflows (the fuzzer's: [0, 0x6465...]).
  ModelProto z = new_model();
  add_init(z, "dims", from_vector<int64_t>({0, int64_t{1} << 62}));
  add_node(z, "ConstantOfShape", {"dims"}, {"y"}, "fill");
  add_output(z, "y");
  expect_fast_bounded_error([&] { import(z); }, {"node #0 'fill' (ConstantOfShape)", "strides in bytes overflow"});

  // The limit is the caller's: a smaller one refuses smaller fills.
  ModelProto s = new_model();
  add_init(s, "dims", from_vector<int64_t>({64, 64}));
  add_node(s, "ConstantOfShape", {"dims"}, {"y"}, "fill");
  add_output(s, "y");
  onnx::ImportOptions small;
  small.max_constant_elements = 1000;
  EXPECT_KILN_ERROR(import(s, small), "node #0 'fill' (ConstantOfShape)", "4096 elements", "limit of 1000");
  EXPECT_EQ(import(s).graph.outputs()[0]->constant().numel(), 4096);
  attr_tensor(s.mutable_graph()->mutable_node(0), "value", from_vector<float>({1.0f, 2.0f}));
  EXPECT_KILN_ERROR(import(s), "node #0 'fill' (ConstantOfShape)", "'value' must hold one element, it has 2");

  ModelProto r = new_model();
  add_init(r, "start", scalar_tensor(0.0, DType::f32));
  add_init(r, "limit", scalar_tensor(1e30, DType::f32));
  add_init(r, "delta", scalar_tensor(1.0, DType::f32));
  add_node(r, "Range", {"start", "limit", "delta"}, {"y"}, "count");
  add_output(r, "y");
  expect_fast_bounded_error([&] { import(r); }, {"node #0 'count' (Range)", "over the importer's limit"});
}

TEST(OnnxHostile, HugeInitializersAllocateNothing) {
  // dims declare 2^28 floats (1 GiB, under the default limit) over 4 bytes of data.
  ModelProto m = new_model();
  add_input(m, "x", TensorProto::FLOAT, {1});
  TensorProto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(TensorProto::FLOAT);
  w->add_dims(int64_t{1} << 28);
  w->set_raw_data(std::string(4, '\0'));
  add_node(m, "Add", {"x", "w"}, {"y"});
  add_output(m, "y");
  expect_fast_bounded_error([&] { import(m); }, {"tensor 'w'", "raw_data holds 4 bytes", "need 1073741824"}, 1.0);
  w->clear_raw_data();
  w->add_float_data(1.0f);
  expect_fast_bounded_error([&] { import(m); }, {"tensor 'w'", "float_data holds 1 values"}, 1.0);
  w->set_dims(0, int64_t{1} << 40);
  expect_fast_bounded_error([&] { import(m); }, {"tensor 'w'", "declare more than 1073741824 elements"}, 1.0);

  // A Constant node's tensor attribute goes through the same checks, named by the node.
  ModelProto c = new_model();
  NodeProto* n = add_node(c, "Constant", {}, {"y"}, "k");
  TensorProto* t = add_attr(n, "value", AttributeProto::TENSOR)->mutable_t();
  t->set_data_type(TensorProto::DOUBLE);
  t->add_dims(int64_t{1} << 29);
  t->set_raw_data(std::string(8, '\0'));
  add_output(c, "y", TensorProto::DOUBLE);
  expect_fast_bounded_error([&] { import(c); }, {"node #0 'k' (Constant)", "raw_data holds 8 bytes"}, 1.0);
}

// ---- types and attributes ----------------------------------------------------------------------------

TEST(OnnxHostile, TypeMismatches) {
  ModelProto m = new_model();
  add_input(m, "x", TensorProto::FLOAT, {2, 3});
  add_node(m, "Shape", {"x"}, {"y"}, "shape");
  add_output(m, "y", TensorProto::FLOAT);  // Shape computes i64
  EXPECT_KILN_ERROR(import(m), "graph output 'y' is declared f32", "kiln computes i64[2]");

  ModelProto a = new_model();
  add_input(a, "x", TensorProto::FLOAT, {2});
  add_init(a, "k", from_vector<int64_t>({1, 2}));
  add_node(a, "Add", {"x", "k"}, {"y"}, "mixed");
  add_output(a, "y");
  EXPECT_KILN_ERROR(import(a), "node #0 'mixed' (Add)", "input #1 is i64 but input #0 is f32");

  ModelProto s = new_model();
  add_input(s, "x", TensorProto::FLOAT, {2});
  add_input(s, "z", TensorProto::DOUBLE, {2});
  add_node(s, "Sum", {"x", "x", "z"}, {"y"}, "total");
  add_output(s, "y");
  EXPECT_KILN_ERROR(import(s), "node #0 'total' (Sum)", "input #2 is f64 but input #0 is f32");

  ModelProto u = new_model();  // an element type kiln lacks
  add_input(u, "x", TensorProto::UINT16, {2});
  add_node(u, "Relu", {"x"}, {"y"});
  add_output(u, "y", TensorProto::UINT16);
  EXPECT_KILN_ERROR(import(u), "graph input #0 'x'", "unsupported ONNX dtype UINT16");

  ModelProto q = new_model();  // a sequence input
  auto* vi = q.mutable_graph()->add_input();
  vi->set_name("seq");
  vi->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(1);
  add_node(q, "Identity", {"seq"}, {"y"});
  add_output(q, "y");
  EXPECT_KILN_ERROR(import(q), "graph input #0 'seq'", "only tensor inputs are supported");

  ModelProto k = new_model();  // Conv with an i64 weight
  add_input(k, "x", TensorProto::FLOAT, {1, 1, 4, 4});
  add_init(k, "W", from_vector<int64_t>({1, 1, 1, 1}, Shape{1, 1, 2, 2}));
  add_node(k, "Conv", {"x", "W"}, {"y"}, "conv");
  add_output(k, "y");
  EXPECT_KILN_ERROR(import(k), "node #0 'conv' (Conv)");

  // A 0-d input to ops that name its dims (the fuzzer found Slice reading dim 0 of a scalar): ONNX's
  // axis range [-r, r - 1] is empty there, and slice itself refuses when the axes are implied.
  auto on_scalar = [](const std::string& op, const std::vector<std::pair<std::string, Tensor>>& consts) {
    ModelProto z = new_model(18);
    add_input(z, "x", TensorProto::FLOAT, {});
    std::vector<std::string> ins = {"x"};
    for (const auto& [name, t] : consts) {
      add_init(z, name, t);
      ins.push_back(name);
    }
    add_node(z, op, ins, {"y"}, "n");
    add_output(z, "y");
    return z;
  };
  const Tensor one = from_vector<int64_t>({1}), zero = from_vector<int64_t>({0});
  EXPECT_KILN_ERROR(import(on_scalar("Slice", {{"starts", one}, {"ends", one}, {"axes", zero}})),
                    "node #0 'n' (Slice)", "axes entry 0 given for a 0-d input");
  EXPECT_KILN_ERROR(import(on_scalar("Slice", {{"starts", one}, {"ends", one}})), "node #0 'n' (Slice)",
                    "cannot slice a 0-d tensor");
  EXPECT_KILN_ERROR(import(on_scalar("Split", {})), "node #0 'n' (Split)", "axis 0 given for a 0-d input");
  EXPECT_KILN_ERROR(import(on_scalar("Pad", {{"pads", from_vector<int64_t>({1, 1})}, {"value", scalar_tensor(0.0, TensorOptions(DType::f32))},
                                               {"axes", zero}})),
                    "node #0 'n' (Pad)", "axes entry 0 given for a 0-d input");
  EXPECT_KILN_ERROR(import(on_scalar("Softmax", {})), "node #0 'n' (Softmax)", "axis -1 given for a 0-d input");
}

TEST(OnnxHostile, WrongAttributeTypes) {
  ModelProto m = new_model();
  add_input(m, "x", TensorProto::FLOAT, {1, 1, 4, 4});
  add_init(m, "W", random_tensor({1, 1, 2, 2}, DType::f32, 1));
  NodeProto* conv = add_node(m, "Conv", {"x", "W"}, {"y"}, "conv");
  add_attr(conv, "strides", AttributeProto::FLOAT)->set_f(2.0f);
  add_output(m, "y");
  EXPECT_KILN_ERROR(import(m), "node #0 'conv' (Conv)", "attribute 'strides' must be INTS, got FLOAT");

  ModelProto f = new_model();
  add_input(f, "x", TensorProto::FLOAT, {2, 3});
  add_attr(add_node(f, "Flatten", {"x"}, {"y"}, "flat"), "axis", AttributeProto::STRING)->set_s("1");
  add_output(f, "y");
  EXPECT_KILN_ERROR(import(f), "node #0 'flat' (Flatten)", "attribute 'axis' must be INT, got STRING");

  ModelProto c = new_model();
  add_input(c, "x", TensorProto::FLOAT, {2});
  attr_int(add_node(c, "Cast", {"x"}, {"y"}, "cast"), "to", 999);
  add_output(c, "y");
  EXPECT_KILN_ERROR(import(c), "node #0 'cast' (Cast)", "unknown ONNX dtype 999");

  ModelProto n = new_model();
  add_input(n, "x", TensorProto::FLOAT, {2});
  add_node(n, "Concat", {"x", "x"}, {"y"}, "cat");
  add_output(n, "y");
  EXPECT_KILN_ERROR(import(n), "node #0 'cat' (Concat)", "required attribute 'axis' is missing");

  ModelProto a = new_model();
  add_input(a, "x", TensorProto::FLOAT, {2});
  attr_int(add_node(a, "Concat", {"x", "x"}, {"y"}, "cat"), "axis", 5);
  add_output(a, "y");
  EXPECT_KILN_ERROR(import(a), "node #0 'cat' (Concat)", "axis 5 is out of range for rank 1");

  ModelProto k = new_model();
  add_node(k, "Constant", {}, {"y"}, "nothing");
  add_output(k, "y");
  EXPECT_KILN_ERROR(import(k), "node #0 'nothing' (Constant)", "no value attribute");

  // An empty tensor where a scalar is read (TopK's k).
  ModelProto t = new_model();
  add_input(t, "x", TensorProto::FLOAT, {4});
  add_init(t, "k", empty({0}, TensorOptions(DType::i64)));
  add_node(t, "TopK", {"x", "k"}, {"v", "i"}, "top");
  add_output(t, "v");
  EXPECT_KILN_ERROR(import(t), "node #0 'top' (TopK)", "fewer values");
}

// A NaN float attribute is odd but well-formed: the model imports, passes the verifier after every
// pass, and the NaN reaches the output as it would in ONNX Runtime. (The fuzzer found Gemm's alpha
// = NaN failing the verifier's "attributes in bound form" check, because NaN != NaN.)
TEST(OnnxHostile, NaNAttributesImportAndPropagate) {
  ModelProto m = new_model();
  add_input(m, "x", TensorProto::FLOAT, {2, 3});
  add_init(m, "W", random_tensor({3, 4}, DType::f32, 1));
  add_init(m, "b", random_tensor({4}, DType::f32, 2));
  NodeProto* gemm = add_node(m, "Gemm", {"x", "W", "b"}, {"g"}, "fc");
  add_attr(gemm, "alpha", AttributeProto::FLOAT)->set_f(std::numeric_limits<float>::quiet_NaN());
  add_attr(add_node(m, "LeakyRelu", {"x"}, {"l"}, "leaky"), "alpha", AttributeProto::FLOAT)
      ->set_f(std::numeric_limits<float>::quiet_NaN());
  add_output(m, "g");
  add_output(m, "l");
  onnx::Model model = import(m);
  Tensor x = random_tensor({2, 3}, DType::f32, 3) + 0.5;  // some negative entries reach the NaN slope
  std::vector<Tensor> out = ir::run(model.graph, {x});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(std::isnan(out[0].to(DType::f64).sum().item<double>()));
  Tensor xc = x.contiguous(), lc = out[1].contiguous();
  for (int64_t i = 0; i < 6; ++i) {
    if (xc.data<float>()[i] >= 0) EXPECT_EQ(lc.data<float>()[i], xc.data<float>()[i]);
    else EXPECT_TRUE(std::isnan(lc.data<float>()[i])) << "x = " << xc.data<float>()[i];
  }
}

// ---- unknown ops, domains, opsets -------------------------------------------------------------------------

TEST(OnnxHostile, UnknownOpDomainAndOpset) {
  ModelProto m = new_model();
  add_input(m, "x", TensorProto::FLOAT, {2});
  add_node(m, "FrobnicateV2", {"x"}, {"y"}, "mystery");
  add_output(m, "y");
  EXPECT_KILN_ERROR(import(m), "node #0 'mystery' (FrobnicateV2)", "unsupported operator FrobnicateV2 (opset 17)");

  ModelProto d = new_model();
  add_input(d, "x", TensorProto::FLOAT, {2});
  add_node(d, "FusedGelu", {"x"}, {"y"}, "ms")->set_domain("com.microsoft");
  add_output(d, "y");
  EXPECT_KILN_ERROR(import(d), "node #0 'ms' (FusedGelu)", "operator domain 'com.microsoft' is not supported");

  for (int64_t opset : {99, 1000000}) {
    ModelProto o = new_model(opset);
    add_input(o, "x", TensorProto::FLOAT, {2});
    add_node(o, "Relu", {"x"}, {"y"});
    add_output(o, "y");
    EXPECT_KILN_ERROR(import(o), "unsupported opset " + std::to_string(opset), "up to");
  }
  ModelProto z = new_model(-3);
  add_input(z, "x", TensorProto::FLOAT, {2});
  add_node(z, "Relu", {"x"}, {"y"});
  add_output(z, "y");
  EXPECT_KILN_ERROR(import(z), "invalid ai.onnx opset version -3");

  ModelProto none = new_model();
  none.clear_opset_import();
  add_input(none, "x", TensorProto::FLOAT, {2});
  add_node(none, "Relu", {"x"}, {"y"}, "r");
  add_output(none, "y");
  EXPECT_KILN_ERROR(import(none), "node #0 'r' (Relu)", "imports no ai.onnx opset");

  ModelProto old = new_model();
  old.set_ir_version(2);
  EXPECT_KILN_ERROR(import(old), "unsupported ONNX IR version 2");
  ModelProto empty_model;
  EXPECT_KILN_ERROR(onnx::import_bytes(""), "the model has no graph");
  (void)empty_model;
}

// ---- external data ---------------------------------------------------------------------------------------

TEST(OnnxHostile, ExternalDataStaysInsideTheModelFolder) {
  TempDir dir("kiln_onnx_hostile_ext");
  const fs::path model_dir = dir.path() / "model";
  fs::create_directories(model_dir);
  Tensor w = random_tensor({4}, DType::f32, 3);
  const std::string w_bytes(static_cast<const char*>(w.data_ptr()), w.nbytes());
  write_file(dir.path() / "secret.bin", w_bytes);
  write_file(model_dir / "w.bin", w_bytes);
  write_file(model_dir / "short.bin", w_bytes.substr(0, 10));
  std::error_code link_error;
  fs::create_symlink(dir.path() / "secret.bin", model_dir / "link.bin", link_error);

  // y = x + w, w from external data at `location`; returns the model's path.
  auto write_model = [&](const std::string& location, const std::string& length = "") {
    ModelProto m = new_model();
    add_input(m, "x", TensorProto::FLOAT, {4});
    TensorProto* t = m.mutable_graph()->add_initializer();
    t->set_name("w");
    t->set_data_type(TensorProto::FLOAT);
    t->add_dims(4);
    t->set_data_location(TensorProto::EXTERNAL);
    auto* loc = t->add_external_data();
    loc->set_key("location");
    loc->set_value(location);
    if (!length.empty()) {
      auto* len = t->add_external_data();
      len->set_key("length");
      len->set_value(length);
    }
    add_node(m, "Add", {"x", "w"}, {"y"});
    add_output(m, "y");
    const fs::path path = model_dir / "model.onnx";
    write_file(path, bytes_of(m));
    return path.string();
  };

  // The honest case imports and reads the weights.
  onnx::Model ok = onnx::import_model(write_model("w.bin"));
  Tensor x = random_tensor({4}, DType::f32, 4);
  EXPECT_TRUE(testing::all_close(ir::run(ok.graph, {x})[0], x + w));

  const std::string path = write_model("../secret.bin");
  EXPECT_KILN_ERROR(onnx::import_model(path), path, "tensor 'w'", "'../secret.bin' escapes the model's folder");
  EXPECT_KILN_ERROR(onnx::import_model(write_model("sub/../../secret.bin")), "escapes the model's folder");
  EXPECT_KILN_ERROR(onnx::import_model(write_model((dir.path() / "secret.bin").string())), "tensor 'w'",
                    "is absolute; it must be relative to the model's folder");
  if (!link_error) {
    EXPECT_KILN_ERROR(onnx::import_model(write_model("link.bin")), "tensor 'w'", "'link.bin'",
                      "resolves outside the model's folder");
  }
  EXPECT_KILN_ERROR(onnx::import_model(write_model("missing.bin")), "tensor 'w'", "missing.bin", "does not exist");
  EXPECT_KILN_ERROR(onnx::import_model(write_model("short.bin")), "tensor 'w'", "has 10 bytes",
                    "the tensor needs 16");
  EXPECT_KILN_ERROR(onnx::import_model(write_model("w.bin", "1000000")), "tensor 'w'", "length 1000000",
                    "does not match");
  EXPECT_KILN_ERROR(onnx::import_model(write_model(".")), "tensor 'w'", "does not exist");

  // From bytes there is no folder to read from.
  ModelProto m;
  std::ifstream in(write_model("w.bin"), std::ios::binary);
  ASSERT_TRUE(m.ParseFromIstream(&in));
  EXPECT_KILN_ERROR(import(m), "tensor 'w'", "external data 'w.bin' is not allowed here");
}

// ---- model-local functions ---------------------------------------------------------------------------------

// "t3" (GCC 12 warns falsely on `"t" + std::to_string(i)` at -O2).
std::string numbered(const char* stem, size_t i) {
  std::string s = stem;
  s += std::to_string(i);
  return s;
}

// A model calling local function `entry`; functions are given as (name, body op types calling by
// name) and each body chains its calls: out = callN(...call1(in)).
ModelProto with_functions(const std::vector<std::pair<std::string, std::vector<std::string>>>& functions,
                          const std::string& entry) {
  ModelProto m = new_model();
  auto* os = m.add_opset_import();
  os->set_domain("local");
  os->set_version(1);
  for (const auto& [name, calls] : functions) {
    auto* f = m.add_functions();
    f->set_name(name);
    f->set_domain("local");
    f->add_input("in");
    f->add_output("out");
    f->add_opset_import()->set_version(17);
    auto* local = f->add_opset_import();
    local->set_domain("local");
    local->set_version(1);
    std::string prev = "in";
    for (size_t i = 0; i < calls.size(); ++i) {
      auto* n = f->add_node();
      n->set_op_type(calls[i]);
      bool is_local = std::any_of(functions.begin(), functions.end(), [&](const auto& fn) { return fn.first == calls[i]; });
      if (is_local) n->set_domain("local");
      n->add_input(prev);
      if (calls[i] == "Add") n->add_input(prev);
      prev = i + 1 == calls.size() ? std::string("out") : numbered("t", i);
      n->add_output(prev);
    }
  }
  add_input(m, "x", TensorProto::FLOAT, {3});
  add_node(m, entry, {"x"}, {"y"}, "call")->set_domain("local");
  add_output(m, "y");
  return m;
}

TEST(OnnxHostile, RecursiveFunctions) {
  EXPECT_KILN_ERROR(import(with_functions({{"F", {"Relu", "F"}}}, "F")), "node #0 'call' (F)",
                    "model-local function 'F' calls itself");
  EXPECT_KILN_ERROR(import(with_functions({{"F", {"G"}}, {"G", {"Neg", "F"}}}, "F")), "node #0 'call' (F)",
                    "'F' calls itself");

  // Not recursive, but exponential: F_k calls F_{k-1} twice, 40 levels deep (2^40 nodes).
  std::vector<std::pair<std::string, std::vector<std::string>>> bomb{{"F0", {"Relu"}}};
  for (size_t k = 1; k <= 40; ++k) {
    const std::string prev = numbered("F", k - 1);
    bomb.push_back({numbered("F", k), {prev, prev}});
  }
  expect_fast_bounded_error([&] { import(with_functions(bomb, "F40")); },
                            {"node #0 'call' (F40)", "expands the model past"}, 20.0);

  // The same function called twice in one body: each call gets its own values.
  onnx::Model twice = import(with_functions({{"Double", {"Add"}}, {"Quad", {"Double", "Double"}}}, "Quad"));
  Tensor x = random_tensor({3}, DType::f32, 5);
  EXPECT_TRUE(testing::all_close(ir::run(twice.graph, {x})[0], x * 4.0));
}

}  // namespace
}  // namespace kiln
