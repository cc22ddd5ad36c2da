// The IR: building graphs, the text form's exact round trip and parse errors, the verifier on
// broken graphs, the reference executor's input checks, DCE/CSE and DOT output.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/kiln.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::random_tensor;

ir::Graph small_graph() {
  ir::Graph g;
  ir::Value* x = g.add_input("x", {DType::f32, {ir::Dim::sym("batch"), 4}});
  ir::Value* w = g.add_constant("w", random_tensor({4, 3}, DType::f32, 1));
  ir::Value* b = g.add_constant("b", from_vector<float>({0.5f, -1.25f, 1e-7f}));
  ir::Value* h = g.add_node(op("matmul"), {x, w})->output();
  ir::Value* y = g.add_node(op("add"), {h, b}, {}, {"y"})->output();
  ir::Node* tk = g.add_node(op("topk"), {y}, {{"k", int64_t{2}}});
  g.add_output(y);
  g.add_output(tk->output(1));
  return g;
}

TEST(IrText, PrintsReadably) {
  ir::Graph g = small_graph();
  std::string t = ir::print(g);
  EXPECT_NE(t.find("graph main(%x: f32[batch, 4]) {"), std::string::npos) << t;
  EXPECT_NE(t.find("%b: f32[3] = constant [0.5, -1.25, 1e-07]"), std::string::npos) << t;
  EXPECT_NE(t.find("%w: f32[4, 3] = constant ["), std::string::npos) << t;
  EXPECT_NE(t.find("%y: f32[batch, 3] = add(%v0, %b)"), std::string::npos) << t;
  EXPECT_NE(t.find("= topk(%y) {axis=-1, k=2, largest=true, sorted=true}"), std::string::npos) << t;
  EXPECT_NE(t.find("return %y, %v2"), std::string::npos) << t;
}

TEST(IrText, RoundTripIsExact) {
  std::vector<ir::Graph> graphs;
  graphs.push_back(small_graph());
  {
    ir::Graph g;  // large constants (hex), f16/bf16/bool/int constants, absent optional input, float attrs
    ir::Value* x = g.add_input("x", {DType::f32, {2, 3, 8, 8}});
    ir::Value* w = g.add_constant("w", random_tensor({5, 3, 3, 3}, DType::f32, 2));
    ir::Value* y = g.add_node(op("conv2d"), {x, w, nullptr}, {{"padding", std::vector<int64_t>{1, 1, 1, 1}}})->output();
    ir::Value* c = g.add_node(op("clip"), {y}, {{"min", -0.5}, {"max", 0.75}})->output();
    g.add_constant("h", random_tensor({3}, DType::f16, 3));
    g.add_constant("bf", random_tensor({2, 2}, DType::bf16, 4));
    g.add_constant("m", from_vector<bool>({true, false, true}));
    g.add_constant("i", from_vector<int64_t>({-9223372036854775807LL, 0, 42}));
    g.add_constant("tiny", from_vector<double>({5e-324, 1.0 / 3.0}));
    g.add_output(c);
    graphs.push_back(std::move(g));
  }
  for (const ir::Graph& g : graphs) {
    ir::verify(g);
    std::string t = ir::print(g);
    ir::Graph back = ir::parse(t);
    ir::verify(back);
    EXPECT_EQ(ir::print(back), t);
    for (size_t i = 0; i < g.constants().size(); ++i) {
      const Tensor& a = g.constants()[i]->constant();
      const Tensor& b = back.constants()[i]->constant();
      ASSERT_EQ(a.nbytes(), b.nbytes());
      EXPECT_EQ(0, std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes())) << g.constants()[i]->name();
    }
    EXPECT_EQ(ir::print(g.clone()), t);
  }
}

TEST(IrText, ParserFillsDefaultsAndAcceptsComments) {
  ir::Graph g = ir::parse(R"(// a comment
graph f(%a: f32[2, 3]) {
  %s: f32[2] = sum(%a) {axes=[1]}   // keepdim defaults to false
  return %s
})");
  ir::verify(g);
  EXPECT_NE(ir::print(g).find("sum(%a) {axes=[1], keepdim=false}"), std::string::npos) << ir::print(g);
}

TEST(IrText, ParseErrorsGiveLineAndColumn) {
  EXPECT_KILN_ERROR(ir::parse("graph f(%a: f32[2]) {\n  %b: f32[2] = nosuchop(%a)\n  return %b\n}", "t.kir"),
                    "t.kir:2:16", "unknown op 'nosuchop'");
  EXPECT_KILN_ERROR(ir::parse("graph f(%a: f32[2]) {\n  %b: f32[2] = relu(%zz)\n  return %b\n}"), "2:21",
                    "undefined value %zz");
  EXPECT_KILN_ERROR(ir::parse("graph f(%a: q32[2]) {\n  return %a\n}"), "1:13", "unknown dtype 'q32'");
  EXPECT_KILN_ERROR(ir::parse("graph f(%a: f32[2]) {\n  %c: f32[3] = constant [1, 2]\n  return %c\n}"), "2:25",
                    "needs 3 elements");
  EXPECT_KILN_ERROR(ir::parse("graph f(%a: f32[2]) {\n  %a: f32[2] = relu(%a)\n  return %a\n}"), "2:3",
                    "defined twice");
  EXPECT_KILN_ERROR(ir::parse("graph f(%a: f32[2]) {\n  return %a\n"), "3:1", "expected '}'");
}

TEST(IrVerifier, RejectsBrokenGraphsNamingTheNode) {
  {  // wrong declared output type
    ir::Graph g = ir::parse("graph f(%a: f32[2, 3]) {\n  %b: f32[3, 2] = relu(%a)\n  return %b\n}");
    EXPECT_KILN_ERROR(ir::verify(g), "node #0 '%b = relu(%a)'", "declared f32[3, 2]", "infers f32[2, 3]");
  }
  {  // op rejects its inputs
    ir::Graph g = ir::parse("graph f(%a: f32[2, 3], %b: f32[4, 5]) {\n  %c: f32[2, 5] = matmul(%a, %b)\n  return %c\n}");
    EXPECT_KILN_ERROR(ir::verify(g), "node #0 '%c = matmul(%a, %b)'", "rejects its inputs");
  }
  {  // unknown attribute / wrong attribute type / missing required attribute
    ir::Graph g = ir::parse("graph f(%a: f32[2]) {\n  %b: f32[2] = relu(%a) {alpha=1}\n  return %b\n}");
    EXPECT_KILN_ERROR(ir::verify(g), "node #0 '%b = relu(%a)'", "unknown attribute 'alpha'");
    ir::Graph g2 = ir::parse("graph f(%a: f32[2, 2]) {\n  %b: f32[2, 2] = softmax(%a) {axis=\"x\"}\n  return %b\n}");
    EXPECT_KILN_ERROR(ir::verify(g2), "softmax", "attribute 'axis' expects int");
    ir::Graph g3 = ir::parse("graph f(%a: f32[4, 2]) {\n  %b: f32[2, 2] = topk(%a)\n  return %b\n}");
    EXPECT_KILN_ERROR(ir::verify(g3), "node #0", "required attribute 'k'");
  }
  {  // use before definition (topological order) and a dangling use
    ir::Graph g;
    ir::Value* a = g.add_input("a", {DType::f32, {2}});
    ir::Node* n1 = g.add_node(op("relu"), {a}, {}, {"r"});
    ir::Node* n2 = g.add_node(op("exp"), {a}, {}, {"e"});
    n1->set_input(0, n2->output());
    g.add_output(n1->output());
    EXPECT_KILN_ERROR(ir::verify(g), "node #0 '%r = relu(%e)'", "before its definition");
    ir::Graph other;
    ir::Value* foreign = other.add_input("foreign", {DType::f32, {2}});
    n1->set_input(0, foreign);
    EXPECT_KILN_ERROR(ir::verify(g), "node #0 '%r = relu(%foreign)'", "dangling");
    n1->set_input(0, a);
    g.add_output(foreign);
    EXPECT_KILN_ERROR(ir::verify(g), "graph output 1 (%foreign)", "dangling");
  }
  {  // a required input left absent; an attribute not in bound form
    ir::Graph g;
    ir::Value* a = g.add_input("a", {DType::f32, {2, 2}});
    ir::Node* n = g.add_node(op("matmul"), {a, a}, {}, {"m"});
    n->set_input(1, nullptr);
    g.add_output(n->output());
    EXPECT_KILN_ERROR(ir::verify(g), "node #0 '%m = matmul(%a, _)'", "'b') is required but absent");
    ir::Graph g2;
    ir::Value* a2 = g2.add_input("a", {DType::f32, {2, 2}});
    ir::Node* s = g2.add_node(op("sum"), {a2}, {{"axes", std::vector<int64_t>{0}}});
    s->set_attrs(Attrs{{"axes", std::vector<int64_t>{0}}});  // keepdim missing
    g2.add_output(s->output());
    EXPECT_KILN_ERROR(ir::verify(g2), "node #0", "not in bound form", "keepdim");
  }
  {  // a constant whose tensor does not match its declared type
    ir::Graph g;
    ir::Value* c = g.add_constant("c", from_vector<float>({1, 2}));
    c->set_type({DType::f64, {2}});
    g.add_output(c);
    EXPECT_KILN_ERROR(ir::verify(g), "constant %c", "declared f64[2]");
  }
}

TEST(IrInfer, SymbolicDims) {
  auto t = [](ir::ValueType v) { return std::optional<ir::ValueType>(std::move(v)); };
  ir::ValueType a{DType::f32, {ir::Dim::sym("n"), 3}}, b{DType::f32, {3, ir::Dim::sym("m")}};
  auto out = ir::infer_types(op("matmul"), {t(a), t(b)}, op("matmul").bind_attrs({}));
  EXPECT_EQ(ir::type_str(out[0]), "f32[n, m]");
  // concat along the symbolic dim is 2*n, a scaled symbol; n + m is not expressible: an error, not a guess.
  auto twice = ir::infer_types(op("concat"), {t(a), t(a)}, op("concat").bind_attrs({{"axis", int64_t{0}}}));
  EXPECT_EQ(ir::type_str(twice[0]), "f32[2*n, 3]");
  ir::ValueType am{DType::f32, {ir::Dim::sym("m"), 3}};
  EXPECT_KILN_ERROR(ir::infer_types(op("concat"), {t(a), t(am)}, op("concat").bind_attrs({{"axis", int64_t{0}}})),
                    "concat", "cannot express");
  // A scaled symbol goes in and comes back: [4*n, 3] reshaped to [n, 12] and back.
  ir::ValueType a4{DType::f32, {ir::Dim::sym("n", 4), 3}};
  auto flat = ir::infer_types(op("reshape"), {t(a4)}, op("reshape").bind_attrs({{"shape", std::vector<int64_t>{-1, 12}}}));
  EXPECT_EQ(ir::type_str(flat[0]), "f32[n, 12]");
  auto back = ir::infer_types(op("reshape"), {t(flat[0])}, op("reshape").bind_attrs({{"shape", std::vector<int64_t>{-1, 3}}}));
  EXPECT_EQ(back[0], a4);
  auto r = ir::infer_types(op("concat"), {t(a), t(a)}, op("concat").bind_attrs({{"axis", int64_t{1}}}));
  EXPECT_EQ(ir::type_str(r[0]), "f32[n, 6]");
}

TEST(IrExecutor, RunsAndValidatesInputs) {
  ir::Graph g = small_graph();
  Tensor x = random_tensor({5, 4}, DType::f32, 7);
  auto outs = ir::run(g, {{"x", x}});
  Tensor y = x.matmul(g.find("w")->constant()) + g.find("b")->constant();
  EXPECT_TRUE(all_close(outs[0], y));
  EXPECT_TRUE(all_close(outs[1], topk(y, 2).second));
  EXPECT_KILN_ERROR(ir::run(g, std::map<std::string, Tensor>{}), "input 'x' (f32[batch, 4]) was not given");
  EXPECT_KILN_ERROR(ir::run(g, {{"x", x}, {"z", x}}), "no input named 'z'", "x");
  EXPECT_KILN_ERROR(ir::run(g, {{"x", x.to(DType::f64)}}), "input 'x'", "expected dtype f32");
  EXPECT_KILN_ERROR(ir::run(g, {{"x", random_tensor({5, 3}, DType::f32, 1)}}), "input 'x'", "dim 1 must be 4");
  ir::Graph two = ir::parse("graph f(%a: f32[n, 2], %b: f32[n, 2]) {\n  %c: f32[n, 2] = add(%a, %b)\n  return %c\n}");
  EXPECT_KILN_ERROR(ir::run(two, std::vector<Tensor>{random_tensor({3, 2}, DType::f32, 1), random_tensor({4, 2}, DType::f32, 2)}),
                    "input 'b'", "symbol 'n', already bound to 3", "here it is 4");
  // Scaled symbols: 2*n binds n to half the dim, and must divide.
  ir::Graph scaled = ir::parse(
      "graph f(%a: f32[2*n, 3], %b: f32[n, 3]) {\n  %c: f32[3*n, 3] = concat(%a, %b) {axis=0}\n  return %c\n}");
  EXPECT_EQ(ir::print(ir::parse(ir::print(scaled))), ir::print(scaled));
  auto sc = ir::run(scaled, std::vector<Tensor>{random_tensor({4, 3}, DType::f32, 1), random_tensor({2, 3}, DType::f32, 2)});
  EXPECT_EQ(sc[0].shape(), (Shape{6, 3}));
  EXPECT_KILN_ERROR(ir::run(scaled, std::vector<Tensor>{random_tensor({3, 3}, DType::f32, 1), random_tensor({2, 3}, DType::f32, 2)}),
                    "input 'a'", "not a multiple of 2");
  EXPECT_KILN_ERROR(ir::run(scaled, std::vector<Tensor>{random_tensor({4, 3}, DType::f32, 1), random_tensor({3, 3}, DType::f32, 2)}),
                    "input 'b'", "already bound to 2", "here it is 3");
}

TEST(IrPasses, DceAndCse) {
  ir::Graph g = ir::parse(R"(graph f(%a: f32[2, 3]) {
  %c1: f32[3] = constant [1, 2, 3]
  %c2: f32[3] = constant [1, 2, 3]
  %unused: f32[3] = constant [4, 5, 6]
  %x: f32[2, 3] = add(%a, %c1)
  %y: f32[2, 3] = add(%a, %c2)
  %dead: f32[2, 3] = exp(%x)
  %z: f32[2, 3] = mul(%x, %y)
  return %z
})");
  ir::verify(g);
  Tensor a = random_tensor({2, 3}, DType::f32, 3);
  Tensor before = ir::run(g, {a})[0];
  auto r = ir::run_passes(g, {"cse", "dce"}, true);
  EXPECT_TRUE(r[0].changed);
  EXPECT_NE(r[0].report.find("%c2 -> %c1"), std::string::npos) << r[0].report;
  EXPECT_NE(r[0].report.find("%y -> %x"), std::string::npos) << r[0].report;
  EXPECT_TRUE(r[1].changed);
  EXPECT_NE(r[1].report.find("%dead = exp(%x)"), std::string::npos) << r[1].report;
  EXPECT_EQ(g.num_nodes(), 2u);
  EXPECT_EQ(g.constants().size(), 1u);
  EXPECT_TRUE(all_close(ir::run(g, {a})[0], before));
  auto again = ir::run_passes(g, {"cse", "dce", "verify"}, true);
  for (const auto& p : again) EXPECT_FALSE(p.changed) << p.report;
  EXPECT_KILN_ERROR(ir::make_pass("fold"), "unknown pass 'fold'", "cse, dce, verify");
}

TEST(IrDot, DrawsSvg) {
  ir::Graph g = small_graph();
  std::string dot = ir::to_dot(g);
  EXPECT_NE(dot.find("digraph"), std::string::npos);
  EXPECT_NE(dot.find("f32[batch, 3]"), std::string::npos);  // shapes on edges
  EXPECT_NE(dot.find("%w: f32[4, 3]"), std::string::npos);   // constants collapsed into labels
  std::string path = ::testing::TempDir() + "kiln_ir_dot_test.svg";
  ir::draw(g, path);
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("<svg"), std::string::npos);
  EXPECT_NE(ss.str().find("</svg>"), std::string::npos);
  std::remove(path.c_str());
  EXPECT_KILN_ERROR(ir::draw(g, "x.bmp"), "unsupported picture format");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Every parseable graph in tests/ir/*.kir round-trips exactly through the text form.
TEST(IrText, KirFilesRoundTrip) {
  const char* data = std::getenv("KILN_TEST_DATA");
  if (!data) GTEST_SKIP() << "KILN_TEST_DATA is not set (run through ctest)";
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(data) / ".." / "ir")) {
    if (e.path().extension() != ".kir" || e.path().filename() == "parse_error.kir") continue;
    ir::Graph g = ir::load(e.path().string());
    std::string t = ir::print(g);
    EXPECT_EQ(ir::print(ir::parse(t)), t) << e.path();
    ++count;
  }
  EXPECT_GE(count, 8);
}

}  // namespace
}  // namespace kiln
