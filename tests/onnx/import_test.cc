// The ONNX importer on models built here with ONNX's protobuf classes: folding at import, known
// inputs, symbolic shapes, old opset forms, model-local functions, and errors that name the node.
// (Hostile files are tests/onnx/hostile_test.cc; ONNX's own test data runs as onnx.Conformance.)
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "kiln/onnx.h"
#include "onnx/tensor_proto.h"
#include "support/testing.h"

// GCC 12 misreads protobuf's string setters inlined into these tests as overlapping copies of
// 2^63 bytes (-Wrestrict; GCC bug 105329), depending on what else the file inlines.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace kiln {
namespace {

using testing::all_close;
using testing::random_tensor;

// A small builder for ModelProtos.
struct ModelBuilder {
  ::onnx::ModelProto m;
  ::onnx::GraphProto* g;
  explicit ModelBuilder(int64_t opset = 17) {
    m.set_ir_version(8);
    auto* os = m.add_opset_import();
    os->set_domain("");
    os->set_version(opset);
    g = m.mutable_graph();
    g->set_name("test");
  }
  static void set_type(::onnx::ValueInfoProto* vi, const std::string& name, DType dt, const std::vector<ir::Dim>& dims) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::to_onnx_dtype(dt));
    auto* shape = tt->mutable_shape();
    for (const auto& d : dims) {
      auto* dim = shape->add_dim();
      if (d.is_symbolic()) dim->set_dim_param(d.symbol);
      else dim->set_dim_value(d.size);
    }
  }
  ModelBuilder& input(const std::string& name, DType dt, const std::vector<ir::Dim>& dims) {
    set_type(g->add_input(), name, dt, dims);
    return *this;
  }
  ModelBuilder& output(const std::string& name) {
    g->add_output()->set_name(name);
    return *this;
  }
  ModelBuilder& init(const std::string& name, const Tensor& t) {
    auto* tp = g->add_initializer();
    onnx::tensor_to_proto(t, tp);
    tp->set_name(name);
    return *this;
  }
  ::onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& ins,
                          const std::vector<std::string>& outs, const std::string& name = "") {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
  }
  static void attr_int(::onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_ints(::onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void attr_float(::onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  onnx::Model import(const onnx::ImportOptions& opt = {}) const {
    std::string bytes;
    EXPECT_TRUE(m.SerializeToString(&bytes));
    return onnx::import_bytes(bytes, "", opt);
  }
};

Tensor i64(const std::vector<int64_t>& v) { return from_vector(v); }

std::vector<Tensor> run(const onnx::Model& m, const std::vector<Tensor>& inputs) { return ir::run(m.graph, inputs); }

TEST(OnnxImport, FoldsShapeSubgraphsIntoAttributes) {
  // Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write a flatten.
  ModelBuilder b;
  b.input("x", DType::f32, {2, 3, 4}).output("y");
  b.init("zero", full({}, 0, TensorOptions(DType::i64))).init("ax", i64({0})).init("m1", i64({-1}));
  b.node("Shape", {"x"}, {"s"});
  ModelBuilder::attr_int(b.node("Gather", {"s", "zero"}, {"n"}), "axis", 0);
  b.node("Unsqueeze", {"n", "ax"}, {"nu"});
  ModelBuilder::attr_int(b.node("Concat", {"nu", "m1"}, {"tgt"}), "axis", 0);
  b.node("Reshape", {"x", "tgt"}, {"y"});
  onnx::Model m = b.import();
  ASSERT_EQ(m.graph.num_nodes(), 1u) << ir::print(m.graph);  // only the reshape is left
  EXPECT_EQ(m.graph.nodes()[0]->op().name(), "reshape");
  EXPECT_EQ(m.graph.nodes()[0]->attrs().get_ints("shape"), (std::vector<int64_t>{2, -1}));
  Tensor x = random_tensor({2, 3, 4}, DType::f32, 1);
  Tensor y = run(m, {x})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_TRUE(testing::all_close(y, x.reshape({2, 12}), {0, 0}));
}

TEST(OnnxImport, KnownInputsBecomeConstantsOnlyWhereNeeded) {
  // `shape` feeds Reshape's attribute position; `x` stays an input.
  ModelBuilder b;
  b.input("x", DType::f32, {6}).input("shape", DType::i64, {2}).output("y");
  b.node("Reshape", {"x", "shape"}, {"y"}, "reshape_node");
  try {
    (void)b.import();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("node #0 'reshape_node' (Reshape)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'shape'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("known"), std::string::npos) << msg;
  }
  onnx::ImportOptions opt;
  opt.known_inputs["shape"] = i64({3, 2});
  opt.known_inputs["x"] = random_tensor({6}, DType::f32, 2);  // given but not needed: stays an input
  onnx::Model m = b.import(opt);
  ASSERT_EQ(m.input_names, (std::vector<std::string>{"x"}));
  Tensor x = random_tensor({6}, DType::f32, 3);
  EXPECT_EQ(run(m, {x})[0].shape(), (Shape{3, 2}));
}

TEST(OnnxImport, SymbolicBatchFlowsThroughShapeArithmetic) {
  ModelBuilder b;
  b.input("x", DType::f32, {ir::Dim::sym("batch"), 4, 6}).output("y");
  b.init("zero", full({}, 0, TensorOptions(DType::i64))).init("ax", i64({0})).init("rest", i64({2, 12}));
  b.node("Shape", {"x"}, {"s"});
  ModelBuilder::attr_int(b.node("Gather", {"s", "zero"}, {"n"}), "axis", 0);
  b.node("Unsqueeze", {"n", "ax"}, {"nu"});
  ModelBuilder::attr_int(b.node("Concat", {"nu", "rest"}, {"tgt"}), "axis", 0);
  b.node("Reshape", {"x", "tgt"}, {"y"});
  onnx::Model m = b.import();
  EXPECT_EQ(ir::type_str(m.graph.outputs()[0]->type()), "f32[batch, 2, 12]");
  for (int64_t batch : {1, 5}) {
    Tensor x = random_tensor({batch, 4, 6}, DType::f32, 4);
    Tensor y = run(m, {x})[0];
    EXPECT_EQ(y.shape(), (Shape{batch, 2, 12}));
  }
}

// The dynamo exporter's position ids in a BERT: Shape(input_ids, start=1, end=2) of [batch, seq]
// with seq bound (or static) is [seq], an ordinary value Slice may read as its end.
TEST(OnnxImport, TheStaticPartOfAPartlySymbolicShapeIsAValue) {
  ModelBuilder b(18);
  b.input("ids", DType::f32, {ir::Dim::sym("batch"), ir::Dim::sym("seq")}).output("y");
  b.init("positions", i64({0, 1, 2, 3, 4, 5, 6, 7, 8})).init("zero", i64({0}));
  auto* shape = b.node("Shape", {"ids"}, {"len"});
  ModelBuilder::attr_int(shape, "start", 1);
  ModelBuilder::attr_int(shape, "end", 2);
  b.node("Slice", {"positions", "zero", "len"}, {"y"}, "positions_of_seq");
  onnx::ImportOptions opt;
  opt.dim_values["seq"] = 5;
  onnx::Model m = b.import(opt);
  EXPECT_EQ(ir::type_str(m.graph.outputs()[0]->type()), "i64[5]");
  EXPECT_TRUE(all_close(run(m, {random_tensor({3, 5}, DType::f32, 7)})[0], i64({0, 1, 2, 3, 4})));
  // Unbound, the slice's end is the symbol itself: an error that names it, not an empty list.
  EXPECT_KILN_ERROR(b.import(), "'positions_of_seq'", "symbolic dim(s) seq");
}

// The dynamo exporter's GPT-2 takes the sequence length as attention_mask.numel() // batch: a
// symbolic dim over its own symbol is a number (and batch - batch is 0).
TEST(OnnxImport, ASymbolicDimOverItsOwnSymbolIsANumber) {
  ModelBuilder b(18);
  b.input("mask", DType::f32, {ir::Dim::sym("batch"), 6}).output("y");
  b.init("i0", full({}, 0, TensorOptions(DType::i64))).init("i1", full({}, 1, TensorOptions(DType::i64)));
  b.init("ax", i64({0})).init("minus1", i64({-1}));
  b.node("Shape", {"mask"}, {"s"});
  ModelBuilder::attr_int(b.node("Gather", {"s", "i0"}, {"n"}), "axis", 0);
  ModelBuilder::attr_int(b.node("Gather", {"s", "i1"}, {"len"}), "axis", 0);
  b.node("Mul", {"n", "len"}, {"numel"});
  b.node("Div", {"numel", "n"}, {"per_sample"});  // 6
  b.node("Sub", {"n", "n"}, {"none"});            // 0
  b.node("Add", {"per_sample", "none"}, {"cols"});
  b.node("Unsqueeze", {"cols", "ax"}, {"colsu"});
  ModelBuilder::attr_int(b.node("Concat", {"minus1", "colsu"}, {"tgt"}), "axis", 0);
  b.node("Reshape", {"mask", "tgt"}, {"y"}, "rows_of_len");
  onnx::Model m = b.import();
  EXPECT_EQ(ir::type_str(m.graph.outputs()[0]->type()), "f32[batch, 6]");
  for (int64_t batch : {1, 4}) {
    Tensor x = random_tensor({batch, 6}, DType::f32, 8);
    EXPECT_TRUE(all_close(run(m, {x})[0], x));
  }
}

// What tf2onnx writes for a BERT's token types (tf.fill(shape(ids), 0)): Shape -> Cast(int32) ->
// Slice -> Concat -> Cast(int64) -> Expand; the symbolic dims survive the int32 round trip (Note
// [Symbolic shape values]). And tf2onnx names every input's dims on its own: the mask's leading
// dim is a second symbol, the same batch (Note [One batch symbol]); bound dims stay bound.
TEST(OnnxImport, TensorFlowsInt32ShapesAndPerInputBatchSymbols) {
  ModelBuilder b;
  b.input("ids", DType::i32, {ir::Dim::sym("unk__1"), ir::Dim::sym("unk__2")});
  b.input("mask", DType::f32, {ir::Dim::sym("unk__3"), ir::Dim::sym("unk__4")}).output("y");
  b.init("zero", full({}, 0.0, TensorOptions(DType::f32))).init("a0", i64({0})).init("a1", i64({1}))
      .init("a2", i64({2}));
  b.node("Shape", {"ids"}, {"s"});
  ModelBuilder::attr_int(b.node("Cast", {"s"}, {"s32"}), "to", ::onnx::TensorProto::INT32);
  b.node("Slice", {"s32", "a0", "a1", "a0"}, {"n"});
  b.node("Slice", {"s32", "a1", "a2", "a0"}, {"len"});
  ModelBuilder::attr_int(b.node("Concat", {"n", "len"}, {"dims32"}), "axis", 0);
  ModelBuilder::attr_int(b.node("Cast", {"dims32"}, {"dims"}), "to", ::onnx::TensorProto::INT64);
  b.node("Expand", {"zero", "dims"}, {"types"}, "fill");
  b.node("Add", {"types", "mask"}, {"y"}, "with_mask");
  onnx::ImportOptions opt;
  opt.dim_values["unk__2"] = 5;
  opt.dim_values["unk__4"] = 5;
  onnx::Model m = b.import(opt);
  EXPECT_EQ(ir::type_str(m.graph.inputs()[1]->type()), "f32[unk__1, 5]");
  EXPECT_EQ(ir::type_str(m.graph.outputs()[0]->type()), "f32[unk__1, 5]");
  for (int64_t batch : {1, 3}) {
    Tensor ids = zeros({batch, 5}, TensorOptions(DType::i32));
    Tensor mask = random_tensor({batch, 5}, DType::f32, 9);
    EXPECT_TRUE(all_close(run(m, {ids, mask})[0], mask));
  }
}

// An image model exported with dynamic height and width: a stride-2 convolution's output is
// (h - 1) / 2 + 1, no multiple of h. The error names the inputs' symbols and how to bind them;
// bound, the model imports with the batch alone symbolic.
TEST(OnnxImport, UnboundImageDimsAreNamedWithTheFlagThatBindsThem) {
  ModelBuilder b;
  b.input("x", DType::f32, {ir::Dim::sym("batch"), 3, ir::Dim::sym("h"), ir::Dim::sym("w")}).output("y");
  b.init("W", random_tensor({8, 3, 3, 3}, DType::f32, 9));
  auto* conv = b.node("Conv", {"x", "W"}, {"y"}, "stem");
  ModelBuilder::attr_ints(conv, "kernel_shape", {3, 3});
  ModelBuilder::attr_ints(conv, "strides", {2, 2});
  ModelBuilder::attr_ints(conv, "pads", {1, 1, 1, 1});
  EXPECT_KILN_ERROR(b.import(), "'stem'", "symbolic dims batch, h, w", "--dim h=SIZE");
  onnx::ImportOptions opt;
  opt.dim_values = {{"h", 9}, {"w", 7}};
  onnx::Model m = b.import(opt);
  EXPECT_EQ(ir::type_str(m.graph.outputs()[0]->type()), "f32[batch, 8, 5, 4]");
}

// Note [Tiling by the batch]: DeBERTa's relative-position keys, Tile(pos [3, 2, 4], [batch, 1, 1])
// with the count from Shape(x): [3 * batch, 2, 4], each batch index a copy of pos. Two symbolic
// counts, or a symbolic input, are refused by name.
TEST(OnnxImport, TileByTheBatchRepeatsForEveryImage) {
  auto model = [](bool twice) {
    ModelBuilder b(17);
    b.input("x", DType::f32, {ir::Dim::sym("batch"), 5}).output("y");
    b.init("pos", random_tensor({3, 2, 4}, DType::f32, 13)).init("i0", full({}, 0, TensorOptions(DType::i64)));
    b.init("ax", i64({0})).init("one", i64({1}));
    b.node("Shape", {"x"}, {"s"});
    ModelBuilder::attr_int(b.node("Gather", {"s", "i0"}, {"n"}), "axis", 0);
    b.node("Unsqueeze", {"n", "ax"}, {"nu"});
    ModelBuilder::attr_int(b.node("Concat", {"nu", twice ? "nu" : "one", "one"}, {"reps"}), "axis", 0);
    b.node("Tile", {"pos", "reps"}, {"y"}, "repeat_keys");
    return b;
  };
  onnx::Model m = model(false).import();
  EXPECT_EQ(ir::type_str(m.graph.outputs()[0]->type()), "f32[3*batch, 2, 4]");
  Tensor pos = random_tensor({3, 2, 4}, DType::f32, 13);
  for (int64_t batch : {1, 3}) {
    Tensor y = run(m, {random_tensor({batch, 5}, DType::f32, 14)})[0];
    ASSERT_EQ(y.shape(), (Shape{3 * batch, 2, 4}));
    for (int64_t r = 0; r < batch; ++r) EXPECT_TRUE(all_close(y.slice(0, 3 * r, 3 * r + 3), pos, {0, 0})) << r;
  }
  EXPECT_KILN_ERROR(model(true).import(), "'repeat_keys'", "more than one symbolic repeat count");
}

// Instance and group norms normalize over trailing axes: one layer_norm (no weights) each, not
// mean, var, sub and mul, with the per-channel affine after it; numerics against float64 by hand.
TEST(OnnxImport, InstanceAndGroupNormsNormalizeThroughLayerNorm) {
  for (const char* kind : {"InstanceNormalization", "GroupNormalization"}) {
    const bool group = std::string(kind) == "GroupNormalization";
    ModelBuilder b(group ? 18 : 17);
    b.input("x", DType::f32, {ir::Dim::sym("batch"), 6, 5, 7}).output("y");
    b.init("scale", random_tensor({group ? 3 : 6}, DType::f32, 15)).init("bias", random_tensor({group ? 3 : 6}, DType::f32, 16));
    auto* n = b.node(kind, {"x", "scale", "bias"}, {"y"});
    ModelBuilder::attr_float(n, "epsilon", 1e-3f);
    if (group) ModelBuilder::attr_int(n, "num_groups", 3);
    onnx::Model m = b.import();
    int norms = 0, stats = 0;
    for (const ir::Node* nd : m.graph.nodes()) {
      norms += nd->op().name() == "layer_norm";
      stats += nd->op().name() == "var" || nd->op().name() == "mean";
    }
    EXPECT_EQ(norms, 1) << kind;
    EXPECT_EQ(stats, 0) << kind;
    Tensor x = random_tensor({2, 6, 5, 7}, DType::f32, 17);
    Tensor got = run(m, {x})[0].to(DType::f64).contiguous();
    Tensor x64 = x.to(DType::f64).contiguous(), w = random_tensor({group ? 3 : 6}, DType::f32, 15).to(DType::f64);
    Tensor bb = random_tensor({group ? 3 : 6}, DType::f32, 16).to(DType::f64);
    const int64_t per = group ? 2 * 35 : 35;  // values a statistic covers
    for (int64_t i = 0; i < 2 * 6 * 35; i += per) {
      const double* v = x64.data<double>() + i;
      double mean = 0, var = 0;
      for (int64_t j = 0; j < per; ++j) mean += v[j] / static_cast<double>(per);
      for (int64_t j = 0; j < per; ++j) var += (v[j] - mean) * (v[j] - mean) / static_cast<double>(per);
      for (int64_t j = 0; j < per; ++j) {
        const int64_t ch = (i + j) / 35 % 6, p = group ? ch / 2 : ch;
        const double want = (v[j] - mean) / std::sqrt(var + 1e-3) * w.data<double>()[p] + bb.data<double>()[p];
        EXPECT_NEAR(got.data<double>()[i + j], want, 1e-4 * (1 + std::abs(want))) << kind << " " << i + j;
      }
    }
  }
}

// RMSNormalization (opset 23) imports as one rms_norm: its scale joins the op when it has the
// normalized shape and X's dtype; a scale that only broadcasts to that shape, or one of another
// dtype (Y takes the scale's), multiplies the result. Numerics against ref::rms_norm.
TEST(OnnxImport, RmsNormalizationIsOneRmsNorm) {
  struct Case {
    Shape scale;
    DType scale_dtype;
    bool joins;
  };
  for (const Case& c :
       {Case{{5, 7}, DType::f32, true}, Case{{1, 7}, DType::f32, false}, Case{{5, 7}, DType::f64, false}}) {
    SCOPED_TRACE(shape_str(c.scale) + " " + std::string(dtype_name(c.scale_dtype)));
    ModelBuilder b(23);
    b.input("x", DType::f32, {ir::Dim::sym("batch"), 5, 7}).output("y");
    Tensor scale = random_tensor(c.scale, c.scale_dtype, 18);
    b.init("scale", scale);
    auto* n = b.node("RMSNormalization", {"x", "scale"}, {"y"});
    ModelBuilder::attr_int(n, "axis", -2);
    ModelBuilder::attr_float(n, "epsilon", 1e-3f);
    onnx::Model m = b.import();
    int norms = 0, muls = 0, means = 0;
    for (const ir::Node* nd : m.graph.nodes()) {
      norms += nd->op().name() == "rms_norm";
      muls += nd->op().name() == "mul";
      means += nd->op().name() == "mean";
    }
    EXPECT_EQ(norms, 1);
    EXPECT_EQ(means, 0);
    EXPECT_EQ(muls, c.joins ? 0 : 1);
    EXPECT_EQ(m.graph.outputs()[0]->type().dtype, c.scale_dtype);
    Tensor x = random_tensor({3, 5, 7}, DType::f32, 19);
    Tensor want = ref::rms_norm(x, 1, {}, static_cast<double>(1e-3f)) * scale.to(DType::f64);
    EXPECT_TRUE(all_close(run(m, {x})[0], want, testing::Tol{1e-5, 1e-6}));  // f32 statistics
  }
}

TEST(OnnxImport, SymbolicShapeArithmeticIsAnErrorNotAWrongNumber) {
  // batch * batch and batch + 1 are not scale * batch; Max of shape values is not followed at all.
  for (const char* op : {"Mul", "Add", "Max"}) {
    ModelBuilder b;
    b.input("x", DType::f32, {ir::Dim::sym("batch"), 4}).output("y");
    b.init("one", i64({1, 0}));
    b.node("Shape", {"x"}, {"s"});
    b.node(op, {"s", std::string(op) == "Add" ? "one" : "s"}, {"s2"}, "combine");
    b.node("Reshape", {"x", "s2"}, {"y"});
    if (std::string(op) != "Max") {
      EXPECT_KILN_ERROR(b.import(), "'combine'", "not a whole multiple of one symbol");
      continue;
    }
    EXPECT_KILN_ERROR(b.import(), "'combine'", "symbolic dim(s) batch", "Max on it");
    onnx::ImportOptions opt;
    opt.dim_values["batch"] = 3;  // binding the dim makes it static: folds
    onnx::Model m = b.import(opt);
    EXPECT_EQ(run(m, {random_tensor({3, 4}, DType::f32, 5)})[0].shape(), (Shape{3, 4}));
  }
}

// What PyTorch's exporters write for attention with a dynamic batch (Note [Symbolic shape
// arithmetic]): [L, N * heads, E / heads] from Mul and Div of gathered dims, and zeros_like /
// expand of a scalar to Shape(x) (ConstantOfShape, Expand to a symbolic dim the input lacks).
TEST(OnnxImport, SymbolicShapeArithmeticScalesTheBatch) {
  ModelBuilder b;
  b.input("x", DType::f32, {6, ir::Dim::sym("batch"), 8}).output("y").output("back").output("zeros").output("filled");
  b.output("pos").output("pos2");
  b.init("i0", full({}, 0, TensorOptions(DType::i64))).init("i1", full({}, 1, TensorOptions(DType::i64)));
  b.init("i2", full({}, 2, TensorOptions(DType::i64))).init("heads", full({}, 4, TensorOptions(DType::i64)));
  b.init("ax", i64({0})).init("fill", full({}, 2.5, TensorOptions(DType::f32)));
  b.node("Shape", {"x"}, {"s"});
  ModelBuilder::attr_int(b.node("Gather", {"s", "i0"}, {"l"}), "axis", 0);
  ModelBuilder::attr_int(b.node("Gather", {"s", "i1"}, {"n"}), "axis", 0);
  ModelBuilder::attr_int(b.node("Gather", {"s", "i2"}, {"e"}), "axis", 0);
  b.node("Mul", {"n", "heads"}, {"nh"});
  b.node("Div", {"e", "heads"}, {"dh"});
  b.node("Unsqueeze", {"l", "ax"}, {"lu"});
  b.node("Unsqueeze", {"nh", "ax"}, {"nhu"});
  b.node("Unsqueeze", {"dh", "ax"}, {"dhu"});
  ModelBuilder::attr_int(b.node("Concat", {"lu", "nhu", "dhu"}, {"tgt"}), "axis", 0);
  b.node("Reshape", {"x", "tgt"}, {"y"});
  b.node("Reshape", {"y", "s"}, {"back"});
  b.node("ConstantOfShape", {"s"}, {"zeros"});
  b.node("Expand", {"fill", "s"}, {"filled"});
  b.node("Range", {"i0", "n", "i1"}, {"pos"});    // arange(batch)
  b.node("Range", {"i0", "nh", "i2"}, {"pos2"});  // arange(0, 4 * batch, 2)
  onnx::Model m = b.import();
  EXPECT_EQ(ir::type_str(m.graph.outputs()[4]->type()), "i64[batch]");
  EXPECT_EQ(ir::type_str(m.graph.outputs()[5]->type()), "i64[2*batch]");
  EXPECT_EQ(ir::type_str(m.graph.outputs()[0]->type()), "f32[6, 4*batch, 2]");
  EXPECT_EQ(ir::type_str(m.graph.outputs()[1]->type()), "f32[6, batch, 8]");
  EXPECT_EQ(ir::type_str(m.graph.outputs()[2]->type()), "f32[6, batch, 8]");
  EXPECT_EQ(ir::type_str(m.graph.outputs()[3]->type()), "f32[6, batch, 8]");
  for (int64_t batch : {1, 3}) {
    Tensor x = random_tensor({6, batch, 8}, DType::f32, 6);
    auto outs = run(m, {x});
    EXPECT_TRUE(all_close(outs[0], x.reshape({6, 4 * batch, 2})));
    EXPECT_TRUE(all_close(outs[1], x));
    EXPECT_TRUE(all_close(outs[2], zeros({6, batch, 8})));
    EXPECT_TRUE(all_close(outs[3], full({6, batch, 8}, 2.5)));
    std::vector<int64_t> pos, pos2;
    for (int64_t i = 0; i < batch; ++i) pos.push_back(i);
    for (int64_t i = 0; i < 2 * batch; ++i) pos2.push_back(2 * i);
    EXPECT_TRUE(all_close(outs[4], i64(pos)));
    EXPECT_TRUE(all_close(outs[5], i64(pos2)));
  }
  // A Range whose length is not a whole multiple of the symbol is refused, naming the node.
  ModelBuilder r;
  r.input("x", DType::f32, {ir::Dim::sym("batch"), 3}).output("p");
  r.init("i0", full({}, 0, TensorOptions(DType::i64))).init("one", full({}, 1, TensorOptions(DType::i64)));
  r.node("Shape", {"x"}, {"s"});
  ModelBuilder::attr_int(r.node("Gather", {"s", "i0"}, {"n"}), "axis", 0);
  r.node("Range", {"one", "n", "one"}, {"p"}, "from_one");
  EXPECT_KILN_ERROR(r.import(), "'from_one'", "Range(1, batch, 1)", "not a whole multiple");
}

// PyTorch's x.expand(n, -1, -1) with n = input.size(0), as ViT's class token is exported (Note
// [Symbolic shape selection]): the target [n, -1, -1] reshaped, its Shape (static: 3), then
// Where(Equal(target, -1), ones, target) before the Expand. The batch stays symbolic; an Equal
// whose answer depends on the batch's value is refused.
TEST(OnnxImport, SymbolicShapeSelectionExpandsAClassToken) {
  ModelBuilder b;
  b.input("x", DType::f32, {ir::Dim::sym("batch"), 5, 8}).output("y").output("len");
  b.init("i0", full({}, 0, TensorOptions(DType::i64))).init("ax", i64({0})).init("m1", i64({-1}));
  b.init("ones", i64({1, 1, 1})).init("neg", full({}, -1, TensorOptions(DType::i64)));
  const Tensor tok = random_tensor({1, 1, 8}, DType::f32, 11);
  b.init("tok", tok);
  b.node("Shape", {"x"}, {"s"});
  ModelBuilder::attr_int(b.node("Gather", {"s", "i0"}, {"n"}), "axis", 0);
  b.node("Unsqueeze", {"n", "ax"}, {"nu"});
  ModelBuilder::attr_int(b.node("Concat", {"nu", "m1", "m1"}, {"tgt"}), "axis", 0);
  b.node("Reshape", {"tgt", "m1"}, {"flat"});
  b.node("Shape", {"flat"}, {"len"});
  b.node("Mul", {"ones", "neg"}, {"minus"});
  b.node("Equal", {"flat", "minus"}, {"is_keep"});
  b.node("Where", {"is_keep", "ones", "flat"}, {"target"});
  b.node("Expand", {"tok", "target"}, {"toks"});
  ModelBuilder::attr_int(b.node("Concat", {"toks", "x"}, {"y"}), "axis", 1);
  onnx::Model m = b.import();
  EXPECT_EQ(ir::type_str(m.graph.outputs()[0]->type()), "f32[batch, 6, 8]");
  for (int64_t batch : {1, 3}) {
    Tensor x = random_tensor({batch, 5, 8}, DType::f32, 12);
    auto outs = run(m, {x});
    ASSERT_EQ(outs[0].shape(), (Shape{batch, 6, 8}));
    EXPECT_TRUE(all_close(outs[0].slice(1, 1, 6), x));
    for (int64_t i = 0; i < batch; ++i) EXPECT_TRUE(all_close(outs[0].slice(0, i, i + 1).slice(1, 0, 1), tok));
    EXPECT_TRUE(all_close(outs[1], i64({3})));
  }
  // batch == 3 is not known until the batch is.
  ModelBuilder e;
  e.input("x", DType::f32, {ir::Dim::sym("batch"), 4}).output("y");
  e.init("three", i64({3, 4})).init("ones", i64({1, 1}));
  e.node("Shape", {"x"}, {"s"});
  e.node("Equal", {"s", "three"}, {"eq"}, "is_three");
  e.node("Where", {"eq", "ones", "s"}, {"t"});
  e.node("Expand", {"x", "t"}, {"y"});
  EXPECT_KILN_ERROR(e.import(), "'is_three'", "Equal of shape values batch and 3", "depends on the symbol");
}

// A decoder with a dynamic batch (torch's ConvTranspose2d, F.interpolate by scale and to a size
// built from Shape(x), GroupNorm): the batch stays symbolic and every batch matches the model
// imported with the batch bound.
TEST(OnnxImport, SymbolicBatchThroughConvTransposeResizeGroupNorm) {
  ModelBuilder b(18);
  b.input("x", DType::f32, {ir::Dim::sym("batch"), 2, 3, 3}).output("up").output("sized").output("gn");
  b.init("w", random_tensor({2, 3, 2, 2}, DType::f32, 11)).init("bias", random_tensor({3}, DType::f32, 12));
  b.init("scales", from_vector(std::vector<float>{1, 1, 2, 2})).init("hw", i64({5, 4}));
  b.init("start", i64({0})).init("two", i64({2}));
  b.init("gscale", random_tensor({2}, DType::f32, 13)).init("gbias", random_tensor({2}, DType::f32, 14));
  ModelBuilder::attr_ints(b.node("ConvTranspose", {"x", "w", "bias"}, {"ct"}), "strides", {2, 2});
  b.node("Resize", {"ct", "", "scales"}, {"up"});  // nearest
  b.node("Shape", {"x"}, {"s"});
  b.node("Slice", {"s", "start", "two"}, {"nc"});
  ModelBuilder::attr_int(b.node("Concat", {"nc", "hw"}, {"size"}), "axis", 0);
  auto* lin = b.node("Resize", {"x", "", "", "size"}, {"sized"});
  auto* mode = lin->add_attribute();
  mode->set_name("mode");
  mode->set_type(::onnx::AttributeProto::STRING);
  mode->set_s("linear");
  ModelBuilder::attr_int(b.node("GroupNormalization", {"x", "gscale", "gbias"}, {"gn"}), "num_groups", 2);
  onnx::Model m = b.import();
  EXPECT_EQ(ir::type_str(m.graph.outputs()[0]->type()), "f32[batch, 3, 12, 12]");
  EXPECT_EQ(ir::type_str(m.graph.outputs()[1]->type()), "f32[batch, 2, 5, 4]");
  EXPECT_EQ(ir::type_str(m.graph.outputs()[2]->type()), "f32[batch, 2, 3, 3]");
  for (int64_t batch : {1, 3}) {
    onnx::ImportOptions bound;
    bound.dim_values["batch"] = batch;
    onnx::Model fixed = b.import(bound);
    Tensor x = random_tensor({batch, 2, 3, 3}, DType::f32, 15);
    auto got = run(m, {x});
    auto want = run(fixed, {x});
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(all_close(got[i], want[i])) << "output " << i;
  }
  // Resizing the symbolic dim itself is refused.
  ModelBuilder r(18);
  r.input("x", DType::f32, {ir::Dim::sym("batch"), 2}).output("y");
  r.init("scales", from_vector(std::vector<float>{2, 1}));
  r.node("Resize", {"x", "", "scales"}, {"y"}, "grow_batch");
  EXPECT_KILN_ERROR(r.import(), "'grow_batch'", "resizing symbolic dim batch");
}

TEST(OnnxImport, OldOpsetAttributeForms) {
  // Opset 9: Slice takes attributes, Upsample scales as an input, Unsqueeze axes as an attribute.
  ModelBuilder b(9);
  b.input("x", DType::f32, {4, 6}).output("y");
  auto* s = b.node("Slice", {"x"}, {"sl"});
  ModelBuilder::attr_ints(s, "starts", {1, 0});
  ModelBuilder::attr_ints(s, "ends", {3, 6});
  ModelBuilder::attr_ints(b.node("Unsqueeze", {"sl"}, {"y"}), "axes", {0});
  onnx::Model m = b.import();
  Tensor x = random_tensor({4, 6}, DType::f32, 6);
  Tensor y = run(m, {x})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 2, 6}));
  EXPECT_TRUE(testing::all_close(y, x.slice(0, 1, 3).unsqueeze(0), {0, 0}));
}

TEST(OnnxImport, ConvBatchNormReluMatchesEagerOps) {
  ModelBuilder b(13);
  b.input("x", DType::f32, {2, 3, 9, 9}).output("y");
  Tensor w = random_tensor({4, 3, 3, 3}, DType::f32, 7), bias = random_tensor({4}, DType::f32, 8);
  Tensor scale = random_tensor({4}, DType::f32, 9), shift = random_tensor({4}, DType::f32, 10);
  Tensor mean = random_tensor({4}, DType::f32, 11), var = abs(random_tensor({4}, DType::f32, 12)) + full({}, 0.5f);
  b.init("w", w).init("b", bias).init("scale", scale).init("shift", shift).init("mean", mean).init("var", var);
  auto* conv = b.node("Conv", {"x", "w", "b"}, {"c"});
  ModelBuilder::attr_ints(conv, "pads", {1, 1, 1, 1});
  ModelBuilder::attr_ints(conv, "strides", {2, 2});
  ModelBuilder::attr_float(b.node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"bn"}), "epsilon", 1e-3f);
  b.node("Relu", {"bn"}, {"y"});
  onnx::Model m = b.import();
  Tensor x = random_tensor({2, 3, 9, 9}, DType::f32, 13);
  Tensor want = relu(batch_norm(conv2d(x, w, bias, Conv2dOptions{{2, 2}, {1, 1, 1, 1}, {1, 1}, 1}), mean, var, scale, shift, 1e-3));
  EXPECT_TRUE(testing::all_close(run(m, {x})[0], want, {1e-5, 1e-5}));
}

TEST(OnnxImport, ModelLocalFunctionsAreInlined) {
  ModelBuilder b;
  b.input("x", DType::f32, {5}).output("y");
  auto* os = b.m.add_opset_import();
  os->set_domain("custom");
  os->set_version(1);
  auto* f = b.m.add_functions();
  f->set_name("Square");
  f->set_domain("custom");
  f->add_input("a");
  f->add_output("out");
  auto* fo = f->add_opset_import();
  fo->set_domain("");
  fo->set_version(17);
  auto* body = f->add_node();
  body->set_op_type("Mul");
  body->add_input("a");
  body->add_input("a");
  body->add_output("out");
  auto* call = b.node("Square", {"x"}, {"y"});
  call->set_domain("custom");
  onnx::Model m = b.import();
  Tensor x = random_tensor({5}, DType::f32, 14);
  EXPECT_TRUE(testing::all_close(run(m, {x})[0], x * x, {0, 0}));
}

// The sum an explicit equation of letters ("bij,bjk->bik") defines, in float64, by brute force over
// every assignment of the letters; a size-1 dim broadcasts against the letter's size elsewhere.
Tensor einsum_reference(const std::string& eq, const std::vector<Tensor>& ins) {
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = eq.find(',', start);
    terms.push_back(eq.substr(start, std::min(comma, arrow) - start));
    if (comma == std::string::npos || comma > arrow) break;
    start = comma + 1;
  }
  const std::string rhs = eq.substr(arrow + 2);
  std::map<char, int64_t> size;
  for (size_t i = 0; i < ins.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) size[terms[i][d]] = std::max(size[terms[i][d]], ins[i].shape()[d]);
  std::vector<char> letters;
  for (const auto& [l, n] : size) letters.push_back(l);
  Shape out_shape;
  for (char l : rhs) out_shape.push_back(size[l]);
  std::vector<double> out(static_cast<size_t>(numel_of(out_shape)), 0.0);
  std::vector<std::vector<double>> vals;
  for (const Tensor& t : ins) vals.push_back(ref::values(t));
  std::map<char, int64_t> at;
  for (char l : letters) at[l] = 0;
  for (;;) {
    double prod = 1;
    for (size_t i = 0; i < ins.size(); ++i) {
      int64_t idx = 0;
      for (size_t d = 0; d < terms[i].size(); ++d) {
        const int64_t n = ins[i].shape()[d];
        idx = idx * n + (n == 1 ? 0 : at[terms[i][d]]);
      }
      prod *= vals[i][static_cast<size_t>(idx)];
    }
    int64_t o = 0;
    for (char l : rhs) o = o * size[l] + at[l];
    out[static_cast<size_t>(o)] += prod;
    size_t k = letters.size();
    while (k > 0 && ++at[letters[k - 1]] == size[letters[k - 1]]) at[letters[--k]] = 0;
    if (k == 0) break;
  }
  return ref::from_values(out, out_shape);
}

// Note [Einsum as products] (convert_nn.cc): attention scores over a symbolic batch, a product with
// weights, an ellipsis that broadcasts, three operands, labels summed out of one operand, the
// implicit output, a bilinear form, a size-1 batch dim broadcast, a transposed output; against the
// brute-force sum. A diagonal and a wrong number of terms are refused by name.
TEST(OnnxImport, EinsumMatchesTheBruteForceSum) {
  struct Case {
    std::string eq, ref_eq;
    std::vector<std::vector<ir::Dim>> dims;
    std::vector<Shape> shapes;  // the inputs fed
  };
  const ir::Dim batch = ir::Dim::sym("batch");
  const std::vector<Case> cases = {
      {"bhid,bhjd->bhij", "bhid,bhjd->bhij", {{batch, 2, 5, 4}, {batch, 2, 6, 4}}, {{3, 2, 5, 4}, {3, 2, 6, 4}}},
      {"bij,jk->bik", "bij,jk->bik", {{batch, 3, 4}, {4, 5}}, {{2, 3, 4}, {4, 5}}},
      {"...ij,...jk->...ik", "abij,bjk->abik", {{2, 3, 4, 5}, {3, 5, 6}}, {{2, 3, 4, 5}, {3, 5, 6}}},
      {"ij,jk,kl->il", "ij,jk,kl->il", {{3, 4}, {4, 5}, {5, 2}}, {{3, 4}, {4, 5}, {5, 2}}},
      {"bij->bj", "bij->bj", {{batch, 7, 3}}, {{2, 7, 3}}},
      {"ij,jk", "ij,jk->ik", {{3, 4}, {4, 5}}, {{3, 4}, {4, 5}}},
      {"bn,anm,bm->ba", "bn,anm,bm->ba", {{2, 3}, {4, 3, 5}, {2, 5}}, {{2, 3}, {4, 3, 5}, {2, 5}}},
      {"bij,bjk->bik", "bij,bjk->bik", {{1, 3, 4}, {2, 4, 5}}, {{1, 3, 4}, {2, 4, 5}}},
      {"bij,bkj->bjik", "bij,bkj->bjik", {{2, 3, 4}, {2, 5, 4}}, {{2, 3, 4}, {2, 5, 4}}},
      {"ijk,k->", "ijk,k->", {{2, 3, 4}, {4}}, {{2, 3, 4}, {4}}}};
  uint64_t seed = 40;
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.eq);
    ModelBuilder b;
    std::vector<std::string> names;
    for (size_t i = 0; i < cs.dims.size(); ++i) {
      names.push_back("x" + std::to_string(i));
      b.input(names.back(), DType::f32, cs.dims[i]);
    }
    b.output("y");
    auto* a = b.node("Einsum", names, {"y"}, "e")->add_attribute();
    a->set_name("equation");
    a->set_type(::onnx::AttributeProto::STRING);
    a->set_s(cs.eq);
    onnx::Model m = b.import();
    std::vector<Tensor> ins;
    for (const Shape& s : cs.shapes) ins.push_back(random_tensor(s, DType::f32, ++seed, -1, 1));
    Tensor got = run(m, ins)[0];
    Tensor want = einsum_reference(cs.ref_eq, ins);
    EXPECT_EQ(got.shape(), want.shape());
    EXPECT_TRUE(all_close(got, want, {1e-5, 1e-5}));
  }
  for (const auto& [eq, msg] : std::vector<std::pair<std::string, std::string>>{
           {"ii->i", "label 'i' repeats within input #0 ('ii'): diagonals are not supported"},
           {"ij,jk->ik", "equation 'ij,jk->ik' has 2 input term(s) for 1 input(s)"},
           {"ijk->i", "equation term 'ijk' names 3 dims but input #0 has rank 2"},
           {"ij->iz", "output label 'z' is in no input of 'ij->iz'"}}) {
    ModelBuilder b;
    b.input("x", DType::f32, {3, 3}).output("y");
    auto* a = b.node("Einsum", {"x"}, {"y"}, "e")->add_attribute();
    a->set_name("equation");
    a->set_type(::onnx::AttributeProto::STRING);
    a->set_s(eq);
    EXPECT_KILN_ERROR(b.import(), "node #0 'e' (Einsum)", msg);
  }
}

TEST(OnnxImport, ErrorsNameTheNodeAndWhatIsWrong) {
  {
    ModelBuilder b;
    b.input("x", DType::f32, {2}).output("y");
    b.node("FancyNewOp", {"x"}, {"y"}, "mystery");
    EXPECT_KILN_ERROR(b.import(), "node #0 'mystery' (FancyNewOp): unsupported operator FancyNewOp");
  }
  {
    ModelBuilder b;
    b.input("x", DType::f32, {2, 3}).output("y");
    ModelBuilder::attr_int(b.node("Softmax", {"x"}, {"y"}, "sm"), "axis", 5);
    EXPECT_KILN_ERROR(b.import(), "node #0 'sm' (Softmax): axis 5 is out of range for rank 2");
  }
  {
    ModelBuilder b;
    b.input("x", DType::f32, {2, 3}).input("z", DType::f32, {4, 5}).output("y");
    b.node("Add", {"x", "z"}, {"y"}, "bad_add");
    EXPECT_KILN_ERROR(b.import(), "node #0 'bad_add' (Add)");
  }
  {
    ModelBuilder b;
    b.input("x", DType::f32, {2}).output("y");
    b.node("Relu", {"nowhere"}, {"y"}, "r");
    EXPECT_KILN_ERROR(b.import(), "input 'nowhere' is not defined");
  }
  {
    ModelBuilder b(30);
    b.input("x", DType::f32, {2}).output("y");
    b.node("Relu", {"x"}, {"y"});
    EXPECT_KILN_ERROR(b.import(), "unsupported opset 30");
  }
  {
    ModelBuilder b;
    b.input("x", DType::f32, {2}).output("y");
    auto* a = b.node("Transpose", {"x"}, {"y"}, "t")->add_attribute();
    a->set_name("perm");
    a->set_type(::onnx::AttributeProto::STRING);
    a->set_s("0");
    EXPECT_KILN_ERROR(b.import(), "attribute 'perm' must be INTS, got STRING");
  }
}

TEST(OnnxImport, ModelInfoListsInputsWithoutInitializers) {
  ModelBuilder b;
  b.input("x", DType::f32, {2}).input("w", DType::f32, {2}).output("y");
  b.init("w", random_tensor({2}, DType::f32, 15));
  b.node("Add", {"x", "w"}, {"y"});
  std::string path = ::testing::TempDir() + "/kiln_model_info.onnx";
  {
    std::string bytes;
    ASSERT_TRUE(b.m.SerializeToString(&bytes));
    std::ofstream(path, std::ios::binary) << bytes;
  }
  onnx::ModelInfo info = onnx::read_model_info(path);
  EXPECT_EQ(info.inputs, (std::vector<std::string>{"x"}));
  EXPECT_EQ(info.outputs, (std::vector<std::string>{"y"}));
  EXPECT_EQ(info.opset, 17);
  onnx::Model m = onnx::import_model(path);
  EXPECT_EQ(m.input_names, (std::vector<std::string>{"x"}));
  EXPECT_EQ(m.graph.constants().size(), 1u);
}

TEST(OnnxImport, SupportedOpsCoverTheModelFamilies) {
  auto ops = onnx::supported_ops();
  for (const char* op : {"Conv", "BatchNormalization", "Gemm", "MatMul", "LayerNormalization", "Softmax", "Erf",
                         "Where", "Expand", "Cast", "CastLike", "Slice", "Unsqueeze", "Squeeze", "Transpose", "Reshape",
                         "Concat", "Shape", "ConstantOfShape", "Range", "HardSigmoid", "HardSwish", "Sum", "Mean", "Max",
                         "LRN", "Dropout", "Identity", "Constant", "Size", "Mod", "GatherElements", "Trilu",
                         "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "Resize", "GlobalAveragePool"})
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
}

}  // namespace
}  // namespace kiln
