// ONNX export: traced graphs (an MLP, a CNN, graphs using most of kiln's ops) written at opset 17
// pass ONNX's checker (full_check) and ONNX Runtime reproduces kiln's outputs on the same inputs
// (tests/onnx/check_export.py, max relative error 1e-4 in f32); the model's structure; errors
// naming the node for ops without an ONNX form.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <onnx/onnx_pb.h>
#include <unistd.h>

#include "kiln/fn.h"
#include "kiln/onnx.h"
#include "support/testing.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::random_positive;
using testing::random_tensor;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Exports `g`, runs it in kiln on `inputs`, and has check_export.py run the file in ONNX Runtime
// on the same inputs. The folder stays for inspection when the check fails.
::testing::AssertionResult matches_onnxruntime(const ir::Graph& g, const std::vector<Tensor>& inputs,
                                               const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_export_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  onnx::save(g, (dir / "model.onnx").string());
  std::vector<Tensor> outputs = ir::run(g, inputs);
  for (size_t i = 0; i < inputs.size(); ++i)
    onnx::save_tensor(inputs[i], (dir / ("input_" + std::to_string(i) + ".pb")).string(), g.inputs()[i]->name());
  for (size_t i = 0; i < outputs.size(); ++i)
    onnx::save_tensor(outputs[i], (dir / ("output_" + std::to_string(i) + ".pb")).string());
  const std::string log = (dir / "check.log").string();
  const std::string cmd = "python3 '" KILN_ONNX_DATA_SCRIPT "/check_export.py' '" + dir.string() + "' > '" + log +
                          "' 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string text = read_file(log);
  if (rc != 0) return ::testing::AssertionFailure() << "check_export.py failed (" << rc << "):\n" << text;
  std::cout << text;
  fs::remove_all(dir);
  return ::testing::AssertionSuccess();
}

fn::TraceOptions names(std::vector<std::string> in, std::vector<std::string> out, bool batch = false) {
  fn::TraceOptions o;
  o.input_names = std::move(in);
  o.output_names = std::move(out);
  if (batch) o.batch_inputs = {0};
  return o;
}

TEST(OnnxExport, MlpWithSymbolicBatch) {
  Generator gen(5);
  nn::Sequential mlp;
  mlp.add(std::make_shared<nn::Linear>(13, 32, true, &gen))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::Linear>(32, 24, true, &gen))
      .add(std::make_shared<nn::GELU>())
      .add(std::make_shared<nn::Linear>(24, 16, true, &gen))
      .add(std::make_shared<nn::Tanh>())
      .add(std::make_shared<nn::Linear>(16, 5, true, &gen));
  mlp.eval();
  ir::Graph g = fn::trace(
      [&](const std::vector<Tensor>& x) {
        Tensor logits = mlp(x[0]);
        return std::vector<Tensor>{logits, softmax(logits, -1), log_softmax(logits, 1)};
      },
      {random_tensor({4, 13}, DType::f32, 1)}, names({"x"}, {"logits", "probs", "logp"}, true));
  EXPECT_EQ(ir::type_str(g.inputs()[0]->type()), "f32[batch, 13]");
  // Run with a batch size other than the traced one: the batch dim is symbolic in the file.
  EXPECT_TRUE(matches_onnxruntime(g, {random_tensor({7, 13}, DType::f32, 2)}, "mlp"));
}

TEST(OnnxExport, CnnWithBatchNormInEvalMode) {
  Generator gen(7);
  nn::Sequential cnn;
  cnn.add(std::make_shared<nn::Conv2d>(3, 8, 3, 1, 1, true, &gen))
      .add(std::make_shared<nn::BatchNorm2d>(8))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Conv2d>(8, 12, 3, 2, 1, false, &gen))
      .add(std::make_shared<nn::BatchNorm2d>(12))
      .add(std::make_shared<nn::SiLU>())
      .add(std::make_shared<nn::AvgPool2d>(2))
      .add(std::make_shared<nn::Flatten>())
      .add(std::make_shared<nn::Linear>(12 * 2 * 2, 10, true, &gen))
      .add(std::make_shared<nn::Sigmoid>());
  {  // running statistics that are not the initial 0 / 1
    NoGradGuard ng;
    cnn(random_tensor({6, 3, 15, 15}, DType::f32, 8));
    cnn(random_tensor({6, 3, 15, 15}, DType::f32, 9));
  }
  cnn.eval();
  ir::Graph g = fn::trace([&](const std::vector<Tensor>& x) { return cnn(x[0]); },
                          {random_tensor({2, 3, 15, 15}, DType::f32, 10)}, names({"image"}, {"scores"}, true));
  EXPECT_TRUE(matches_onnxruntime(g, {random_tensor({5, 3, 15, 15}, DType::f32, 11)}, "cnn"));
}

TEST(OnnxExport, DigitsCnnAsKilnTrainBuildsIt) {
  Generator gen(2);
  nn::Sequential net;
  net.add(std::make_shared<nn::Conv2d>(1, 32, 3, 1, 1, true, &gen))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Conv2d>(32, 64, 3, 1, 1, true, &gen))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Flatten>())
      .add(std::make_shared<nn::Linear>(64 * 2 * 2, 10, true, &gen));
  net.eval();
  ir::Graph g = fn::trace([&](const std::vector<Tensor>& x) { return net(x[0]); },
                          {random_tensor({3, 1, 8, 8}, DType::f32, 12)}, names({"image"}, {"logits"}, true));
  EXPECT_TRUE(matches_onnxruntime(g, {random_tensor({9, 1, 8, 8}, DType::f32, 13)}, "digits"));
}

TEST(OnnxExport, ElementwiseOps) {
  const std::vector<Tensor> in = {random_tensor({3, 17}, DType::f32, 20), random_tensor({3, 17}, DType::f32, 21),
                                  random_positive({3, 17}, DType::f32, 22),
                                  random_tensor({3, 17}, DType::i32, 23, -9, 9)};
  std::vector<std::string> outs;
  ir::Graph g = fn::trace(
      [&](const std::vector<Tensor>& x) {
        const Tensor &a = x[0], &b = x[1], &p = x[2], &i = x[3];
        std::vector<std::pair<std::string, Tensor>> r = {
            {"exp", exp(a)}, {"log", log(p)}, {"sqrt", sqrt(p)}, {"rsqrt", rsqrt(p)}, {"sin", sin(a)},
            {"cos", cos(a)}, {"tanh", tanh(a)}, {"sigmoid", sigmoid(a)}, {"gelu", gelu(a)},
            {"gelu_tanh", gelu(a, "tanh")}, {"silu", silu(a)}, {"softplus", softplus(a)},
            {"softplus_beta", softplus(a, 2.0, 1.5)}, {"elu", elu(a, 0.7)}, {"leaky_relu", leaky_relu(a, 0.2)},
            {"hardsigmoid", hardsigmoid(a)}, {"hardswish", hardswish(a * 2.0)}, {"erf", erf(a)}, {"abs", abs(a)},
            {"neg", neg(i)}, {"reciprocal", reciprocal(p)}, {"floor", floor(a * 3.0)}, {"ceil", ceil(a * 3.0)},
            {"round", round(a * 3.0)}, {"sign", sign(a)}, {"clip", clip(a, -0.5, 0.75)}, {"clip_lo", clip(a, -0.5, std::nullopt)},
            {"clip_hi", clip(i, std::nullopt, 3)}, {"pow", pow(p, b)}, {"maximum", maximum(a, b)},
            {"minimum", minimum(a, b)}, {"mod", mod(a, b)}, {"fmod", mod(a, b, true)}, {"imod", mod(i, i + 20)},
            {"add_mixed", a + i}, {"sub", a - b}, {"mul", a * b}, {"div", a / p}, {"idiv", i / (i * i + 1)},
            {"eq", eq(i, i * 0 + 3)}, {"ne", ne(a, b)}, {"lt", lt(a, b)}, {"le", le(i, b)}, {"gt", gt(a, b)},
            {"ge", ge(a, b)}, {"and", logical_and(gt(a, b), lt(a, p))}, {"or", logical_or(gt(a, b), i)},
            {"xor", logical_xor(gt(a, b), gt(b, p))}, {"not", logical_not(i)}, {"where", where(gt(a, b), a, i)},
            {"bool_add", gt(a, b) + gt(p, b)}, {"bool_mul", gt(a, b) * gt(p, b)},
            {"cast_i64", cast(a * 4.0, DType::i64)}, {"cast_f64", cast(i, DType::f64)},
            {"cast_bool", cast(i, DType::boolean)}, {"exp_int", exp(cast(i, DType::i32) * 0)}};
        std::vector<Tensor> ys;
        outs.clear();
        for (auto& [n, y] : r) {
          outs.push_back(n);
          ys.push_back(y);
        }
        return ys;
      },
      in, names({"a", "b", "p", "i"}, {}));
  ASSERT_EQ(g.outputs().size(), outs.size());
  for (size_t k = 0; k < outs.size(); ++k) g.rename(g.outputs()[k], outs[k]);
  EXPECT_TRUE(matches_onnxruntime(g, in, "elementwise"));
}

TEST(OnnxExport, ReductionsAndNormalization) {
  Tensor w = random_tensor({9}, DType::f32, 30), bias = random_tensor({9}, DType::f32, 31);
  Tensor w2 = random_tensor({5, 9}, DType::f32, 32);
  Tensor c = random_tensor({5, 8}, DType::f32, 35), sn = random_tensor({5, 8}, DType::f32, 36);
  const std::vector<Tensor> in = {random_tensor({4, 5, 9}, DType::f32, 33), random_tensor({4, 5, 9}, DType::i32, 34)};
  ir::Graph g = fn::trace(
      [&](const std::vector<Tensor>& x) {
        const Tensor &a = x[0], &i = x[1];
        return std::vector<Tensor>{sum(a, {1}), sum(a, {}, false), mean(a, {0, 2}, true), max(a, {-1}),
                                   min(a, {1}, true), prod(a * 0.5 + 1.0, {2}), var(a, {2}), std_dev(a, {0, 1}, 0, true),
                                   var(a), norm(a, {2}), logsumexp(a, {1}), argmax(a, 2), argmin(a, 1, true),
                                   cumsum(a, 1), cumsum(a, 2, true, true), sum(i, {2}), mean(i, {1}), cumsum(i, 0),
                                   prod(i, {0}), softmax(a, 1), log_softmax(a, 0), layer_norm(a, -1, w, bias),
                                   layer_norm(a, 1, w2), layer_norm(a, 2), rms_norm(a, -1, w), rms_norm(a, 1, w2, 1e-3),
                                   rms_norm(a, 2), rotary_embedding(a.slice(2, 0, 8), c, sn),
                                   rotary_embedding(a.slice(2, 1, 9), c, sn.slice(0, 1, 2), true)};
      },
      in, names({"a", "i"}, {}));
  EXPECT_TRUE(matches_onnxruntime(g, in, "reductions"));
}

TEST(OnnxExport, ShapeAndIndexOps) {
  Tensor idx = from_vector<int64_t>({2, 0, -1, 3});
  Tensor idx_e = randint(0, 5, {3, 5}, DType::i64);
  Tensor labels = from_vector<int64_t>({0, 3, 1, 4, -1});
  // distinct per row: with repeated indices scatter's result depends on the write order
  Tensor idx_s = from_vector<int64_t>({4, 0, 1, 3, 0, 2}, Shape{3, 2});
  const std::vector<Tensor> in = {random_tensor({3, 5, 4}, DType::f32, 40), random_tensor({4, 6}, DType::f32, 41),
                                  random_tensor({2, 3, 6, 4}, DType::f32, 42)};
  ir::Graph g = fn::trace(
      [&](const std::vector<Tensor>& x) {
        const Tensor &a = x[0], &m = x[1], &b4 = x[2];
        auto parts = split(a, {1, 3, 1}, 1);
        auto [tv, ti] = topk(a, 2, 1, true, true);
        auto [sv, si] = topk(a, 3, -1, false, true);
        Tensor a2 = a.reshape({3, 20});
        return std::vector<Tensor>{
            a.reshape({5, -1}), a.permute({2, 0, 1}), slice(a, {4, 0}, {0, 3}, {1, 2}, {-2, 1}), a.select(1, -2),
            m.slice(0, 0, 1).expand({3, 4, 6}), m.unsqueeze(0).unsqueeze(2), a.slice(1, 0, 1).squeeze(),
            squeeze(a.slice(2, 1, 2), {2}), tile(m, {2, 1}), tile(m, {2, 1, 3}),
            pad(a, {0, 1, 2, 1, 0, 2}), pad(a, {0, 2, 1, 0, 1, 3}, "reflect"), pad(a, {1, 1, 1, 1, 1, 1}, "edge"),
            pad(a, {0, 1, 1, 0, 0, 1}, "constant", 2.5), concat({a, a * 2.0}, 1), parts[0], parts[1], parts[2],
            trilu(m, 1, true), trilu(m, -1, false), tv, ti, sv, si, gather(a, idx, 1), gather_elements(a2.slice(1, 0, 5), idx_e, 1),
            scatter(a2.slice(1, 0, 5), 1, idx_s, a2.slice(1, 5, 7)), scatter_add(a2.slice(1, 0, 5), 1, idx_e, a2.slice(1, 5, 10)),
            one_hot(labels, 5), one_hot(labels, 5, 0, DType::i64), matmul(b4, m), matmul(m, m.t().unsqueeze(0)),
            gemm(m, m, random_tensor({4}, DType::f32, 43), 0.5, 2.0, false, true), gemm(m.t(), m.t(), {}, 1.0, 1.0, true, false),
            flatten(b4, 1), transpose(b4, 1, 3)};
      },
      in, names({"a", "m", "b4"}, {}));
  EXPECT_TRUE(matches_onnxruntime(g, in, "shape_index"));
}

TEST(OnnxExport, ConvAndPoolVariants) {
  Tensor w = random_tensor({6, 2, 3, 3}, DType::f32, 50), b = random_tensor({6}, DType::f32, 51);
  Tensor mean = random_tensor({4}, DType::f32, 52), var = random_positive({4}, DType::f32, 53);
  Tensor dw = random_tensor({4, 1, 3, 3}, DType::f32, 54);
  const std::vector<Tensor> in = {random_tensor({2, 4, 11, 10}, DType::f32, 55)};
  ir::Graph g = fn::trace(
      [&](const std::vector<Tensor>& x) {
        const Tensor& a = x[0];
        Conv2dOptions grouped;
        grouped.stride = {2, 1};
        grouped.padding = {1, 0, 2, 1};
        grouped.dilation = {2, 1};
        grouped.groups = 2;
        Conv2dOptions depthwise;
        depthwise.padding = {1, 1, 1, 1};
        depthwise.groups = 4;
        Pool2dOptions mp;
        mp.kernel = {3, 2};
        mp.stride = {2, 2};
        mp.padding = {1, 0, 1, 1};
        mp.dilation = {1, 2};
        Pool2dOptions ap;
        ap.kernel = {3, 3};
        ap.stride = {2, 2};
        ap.padding = {1, 1, 1, 1};
        ap.count_include_pad = true;
        Pool2dOptions ap2 = ap;
        ap2.count_include_pad = false;
        return std::vector<Tensor>{conv2d(a, w, b, grouped), conv2d(a, dw, {}, depthwise), max_pool2d(a, mp),
                                   avg_pool2d(a, ap), avg_pool2d(a, ap2), global_avg_pool(a), lrn(a, 3, 1e-3, 0.75, 2.0),
                                   batch_norm(a, mean, var), relu(batch_norm(a, mean, var, var, mean, 1e-3))};
      },
      in, names({"x"}, {}));
  EXPECT_TRUE(matches_onnxruntime(g, in, "conv_pool"));
}

TEST(OnnxExport, PoolNdAndResample) {
  const std::vector<Tensor> in = {random_tensor({2, 3, 9, 8}, DType::f32, 100), random_tensor({2, 3, 10}, DType::f32, 101),
                                  random_tensor({1, 2, 5, 6, 4}, DType::f32, 102),
                                  random_tensor({2, 5, 4, 2}, DType::f32, 103, -1.1, 1.1)};
  ir::Graph g = fn::trace(
      [&](const std::vector<Tensor>& x) {
        const Tensor &x4 = x[0], &x3 = x[1], &x5 = x[2], &grid = x[3];
        PoolNdOptions mp{.kernel = {3, 2}, .stride = {2, 2}, .pads = {1, 0, 1, 1}, .dilation = {1, 2}};
        mp.ceil_mode = true;
        PoolNdOptions mp_col{.kernel = {2, 3}};
        PoolNdOptions mp1{.kernel = {3}, .stride = {2}};
        PoolNdOptions ap3{.kernel = {2, 3, 2}, .stride = {1, 2, 2}, .pads = {0, 1, 0, 1, 1, 1}};
        ap3.count_include_pad = true;
        PoolNdOptions ap1{.kernel = {4}, .stride = {3}, .pads = {1, 2}};
        PoolNdOptions lp{.kernel = {2, 2}, .stride = {2, 2}};
        PoolNdOptions lp_pad{.kernel = {3, 3}, .stride = {2, 1}, .pads = {1, 1, 1, 0}};
        auto [v0, i0] = max_pool(x4, mp);
        auto [v1, i1] = max_pool(x4, mp_col);
        auto [v2, i2] = max_pool(x3, mp1);
        ResizeOptions linear{.mode = "linear", .coordinate_transformation_mode = "align_corners"};
        ResizeOptions cubic{.mode = "cubic"};
        ResizeOptions asym{.coordinate_transformation_mode = "asymmetric", .nearest_mode = "floor"};
        asym.scales = {1.0, 1.0, 2.0, 2.0};
        ResizeOptions pytorch{.mode = "linear", .coordinate_transformation_mode = "pytorch_half_pixel"};
        return std::vector<Tensor>{v0, i0, v1, i1, v2, i2, avg_pool(x5, ap3), avg_pool(x3, ap1), lp_pool(x4, lp),
                                   lp_pool(x4, lp_pad, 3), resize(x4, {2, 3, 18, 16}), resize(x4, {2, 3, 5, 7}, linear),
                                   resize(x4, {2, 3, 12, 11}, cubic), resize(x4, {2, 3, 18, 16}, asym),
                                   resize(x4, {2, 3, 4, 13}, pytorch), grid_sample(x4, grid),
                                   grid_sample(x4, grid, "nearest", "border", true),
                                   grid_sample(x4, grid, "cubic", "reflection", false)};
      },
      in, names({"x4", "x3", "x5", "grid"}, {}));
  EXPECT_TRUE(matches_onnxruntime(g, in, "resample"));
}

TEST(OnnxExport, OpsAddedForImport) {
  Tensor wt = random_tensor({4, 3, 3, 2}, DType::f32, 110), bt = random_tensor({6}, DType::f32, 111);
  Tensor nd_idx = from_vector<int64_t>({0, 2, 2, -1, 1, 0}, Shape{3, 2});
  const std::vector<Tensor> in = {random_tensor({3, 7}, DType::f32, 112, -0.9, 0.9),
                                  random_positive({3, 7}, DType::f32, 113, 1.1, 3.0),
                                  random_tensor({2, 4, 5, 6}, DType::f32, 114),
                                  random_tensor({3, 7}, DType::u8, 115, 1, 255), random_tensor({3, 7}, DType::u8, 116, 0, 9)};
  ir::Graph g = fn::trace(
      [&](const std::vector<Tensor>& x) {
        const Tensor &a = x[0], &p = x[1], &img = x[2], &u = x[3], &sh = x[4];
        ConvTranspose2dOptions ct;
        ct.stride = {2, 3};
        ct.padding = {1, 0, 0, 2};
        ct.output_padding = {1, 2};
        ct.groups = 2;
        return std::vector<Tensor>{
            tan(a), asin(a), acos(a), atan(p), sinh(a), cosh(a), asinh(p), acosh(p), atanh(a), softsign(a),
            selu(a * 3.0), celu(a * 3.0, 0.7), thresholded_relu(a, 0.2), mish(a * 3.0), isnan(log(a)),
            isinf(exp(p * 40.0)), isinf(exp(p * 40.0) * -1.0, false, true), gather_nd(a, nd_idx),
            scatter_nd(a, nd_idx, p.slice(1, 0, 3).select(1, 0), "add"), conv_transpose2d(img, wt, bt, ct),
            bitwise_and(a.gt(p * 0.05), p.lt(p * 0.0 + 2.0)), bitwise_not(a.gt(p * 0.0)), bit_shift(u, sh, "left"),
            bit_shift(u, sh, "right")};
      },
      in, names({"a", "p", "img", "u", "sh"}, {}));
  EXPECT_TRUE(matches_onnxruntime(g, in, "import_ops"));

  // Forms opset 17 lacks.
  ir::Graph h;
  ir::Value* i8 = h.add_input("i", {DType::i32, {4}});
  h.add_output(h.add_node(op("bitwise_and"), {i8, i8})->output());
  EXPECT_KILN_ERROR(onnx::export_bytes(h), "node #0", "bitwise_and(%i, %i)", "on i32", "opset 18");
}

// kiln's own importer reads what the exporter wrote back into a graph computing the same values.
TEST(OnnxExport, RoundTripsThroughTheImporter) {
  Generator gen(120);
  nn::Sequential net;
  net.add(std::make_shared<nn::Conv2d>(2, 6, 3, 1, 1, true, &gen))
      .add(std::make_shared<nn::BatchNorm2d>(6))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Flatten>())
      .add(std::make_shared<nn::Linear>(6 * 3 * 3, 4, true, &gen))
      .add(std::make_shared<nn::GELU>());
  net.eval();
  ir::Graph g = fn::trace(
      [&](const std::vector<Tensor>& x) {
        Tensor y = net(x[0]);
        return std::vector<Tensor>{y, softmax(y, 1), var(y, {1}), y.slice(1, 1, 3).sum({1}).rsqrt()};
      },
      {random_tensor({3, 2, 6, 6}, DType::f32, 121)}, names({"image"}, {"y", "probs", "spread", "tail"}, true));
  onnx::Model m = onnx::import_bytes(onnx::export_bytes(g));
  EXPECT_EQ(m.opset, 17);
  EXPECT_EQ(m.producer, "kiln");
  EXPECT_EQ(m.input_names, (std::vector<std::string>{"image"}));
  EXPECT_EQ(m.output_names, (std::vector<std::string>{"y", "probs", "spread", "tail"}));
  EXPECT_EQ(ir::type_str(m.graph.inputs()[0]->type()), "f32[batch, 2, 6, 6]");
  Tensor x = random_tensor({5, 2, 6, 6}, DType::f32, 122);
  std::vector<Tensor> want = ir::run(g, {x}), got = ir::run(m.graph, {x});
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(testing::all_close(got[i], want[i], {1e-5, 1e-6})) << i;
}

TEST(OnnxExport, OutputsThatAreInputsOrRepeated) {
  const std::vector<Tensor> in = {random_tensor({2, 3}, DType::f32, 60)};
  Tensor c = random_tensor({2, 3}, DType::f32, 61);
  ir::Graph g = fn::trace(
      [&](const std::vector<Tensor>& x) {
        Tensor y = x[0] * c;
        return std::vector<Tensor>{y, x[0], y};
      },
      in, names({"x"}, {}));
  EXPECT_TRUE(matches_onnxruntime(g, in, "passthrough"));
}

// Decompositions that read a symbolic dim (var over the batch counts it with Shape/Gather), run
// at a batch size other than the traced one.
TEST(OnnxExport, SymbolicBatchDecompositions) {
  Tensor w = random_tensor({6}, DType::f32, 80);
  ir::Graph g = fn::trace(
      [&](const std::vector<Tensor>& x) {
        const Tensor& a = x[0];
        return std::vector<Tensor>{var(a, {0}), std_dev(a), var(a, {0, 1}, 0, true), mean(a, {0}),
                                   layer_norm(a, -1), layer_norm(a, -1, w), a.unsqueeze(2).flatten(1), squeeze(a.unsqueeze(1), {1}),
                                   softmax(a, 0), a.reshape({-1, 3, 2}).permute({1, 0, 2}), rms_norm(a, -1, w)};
      },
      {random_tensor({4, 6}, DType::f32, 81)}, names({"a"}, {}, true));
  EXPECT_TRUE(matches_onnxruntime(g, {random_tensor({11, 6}, DType::f32, 82)}, "symbolic"));
}

// Ops a traced function rarely emits (copy) and dtypes other than f32, on a hand-built graph.
TEST(OnnxExport, CopyAndOtherDTypes) {
  ir::Graph g;
  ir::Value* a = g.add_input("a", {DType::f64, {2, 3}});
  ir::Value* b = g.add_input("b", {DType::i64, {3}});
  ir::Value* u = g.add_input("u", {DType::u8, {2, 3}});
  auto node = [&](const char* name, std::vector<ir::Value*> ins, const Attrs& attrs = {}) {
    ir::Value* v = g.add_node(op(name), std::move(ins), attrs)->output();
    g.add_output(v);
    return v;
  };
  node("copy", {a, b});
  node("add", {a, a});
  node("sum", {b});
  node("sum", {u}, {{"axes", std::vector<int64_t>{1}}});
  node("mul", {b, b});
  node("max", {u}, {{"axes", std::vector<int64_t>{0}}});
  node("cast", {u}, {{"dtype", DType::f32}});
  node("where", {node("gt", {a, b}), a, b});
  node("exp", {a});
  node("cumsum", {b}, {{"axis", int64_t{0}}});
  node("rms_norm", {a});
  const std::vector<Tensor> in = {random_tensor({2, 3}, DType::f64, 90), random_tensor({3}, DType::i64, 91, -50, 50),
                                  random_tensor({2, 3}, DType::u8, 92, 1, 200)};
  EXPECT_TRUE(matches_onnxruntime(g, in, "dtypes"));
}

TEST(OnnxExport, ModelStructure) {
  Tensor w = random_tensor({3, 4}, DType::f32, 70);
  ir::Graph g = fn::trace([&](const std::vector<Tensor>& x) { return (x[0].matmul(w)).sum({1}).relu(); },
                          {random_tensor({2, 3}, DType::f32, 71)}, names({"x"}, {"y"}, true));
  g.name = "tiny";
  ::onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(onnx::export_bytes(g)));
  EXPECT_EQ(m.ir_version(), 8);
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).domain(), "");
  EXPECT_EQ(m.opset_import(0).version(), 17);
  EXPECT_EQ(m.producer_name(), "kiln");
  EXPECT_EQ(m.graph().name(), "tiny");
  ASSERT_EQ(m.graph().input_size(), 1);
  const auto& in = m.graph().input(0);
  EXPECT_EQ(in.name(), "x");
  EXPECT_EQ(in.type().tensor_type().elem_type(), ::onnx::TensorProto::FLOAT);
  ASSERT_EQ(in.type().tensor_type().shape().dim_size(), 2);
  EXPECT_EQ(in.type().tensor_type().shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(in.type().tensor_type().shape().dim(1).dim_value(), 3);
  ASSERT_EQ(m.graph().output_size(), 1);
  EXPECT_EQ(m.graph().output(0).name(), "y");
  // The weight is an initializer holding its values; ReduceSum takes its axes as an initializer.
  std::vector<std::string> ops;
  for (const auto& n : m.graph().node()) ops.push_back(n.op_type());
  EXPECT_EQ(ops, (std::vector<std::string>{"MatMul", "ReduceSum", "Relu"}));
  ASSERT_EQ(m.graph().initializer_size(), 2);
  EXPECT_EQ(m.graph().initializer(0).dims_size(), 2);
  EXPECT_EQ(m.graph().initializer(0).raw_data().size(), 12 * sizeof(float));
  EXPECT_EQ(m.graph().node(1).input_size(), 2);

  onnx::ExportOptions named;
  named.graph_name = "renamed";
  named.producer_name = "me";
  ASSERT_TRUE(m.ParseFromString(onnx::export_bytes(g, named)));
  EXPECT_EQ(m.graph().name(), "renamed");
  EXPECT_EQ(m.producer_name(), "me");
}

TEST(OnnxExport, ErrorsNameTheNode) {
  ir::Graph g;
  ir::Value* grad = g.add_input("grad", {DType::f32, {1, 1, 2, 2}});
  ir::Value* x = g.add_input("x", {DType::f32, {1, 1, 4, 4}});
  ir::Value* r = g.add_node(op("max_pool2d_backward"), {grad, x}, {{"kernel", std::vector<int64_t>{2, 2}}})->output();
  g.add_output(r);
  EXPECT_KILN_ERROR(onnx::export_bytes(g), "node #0", "max_pool2d_backward(%grad, %x)", "has no ONNX form",
                    "training-only op");

  // Forms opset 17 lacks: antialiased resize, dilated average pooling, 5-D grid sampling.
  ir::Graph r1;
  ir::Value* x4 = r1.add_input("x", {DType::f32, {1, 2, 8, 8}});
  r1.add_output(r1.add_node(op("relu"), {x4})->output());
  r1.add_output(r1.add_node(op("resize"), {x4}, {{"sizes", std::vector<int64_t>{1, 2, 4, 4}}, {"mode", std::string("linear")},
                                                  {"antialias", true}})->output());
  EXPECT_KILN_ERROR(onnx::export_bytes(r1), "node #1", "resize(%x)", "antialias needs Resize 18");
  ir::Graph r2;
  ir::Value* y4 = r2.add_input("x", {DType::f32, {1, 2, 8, 8}});
  r2.add_output(r2.add_node(op("avg_pool"), {y4}, {{"kernel", std::vector<int64_t>{2, 2}},
                                                   {"dilation", std::vector<int64_t>{2, 1}}})->output());
  EXPECT_KILN_ERROR(onnx::export_bytes(r2), "node #0", "avg_pool(%x)", "dilations [2, 1]", "AveragePool");
  ir::Graph r3;
  ir::Value* x5 = r3.add_input("x", {DType::f32, {1, 1, 3, 3, 3}});
  ir::Value* grid = r3.add_input("grid", {DType::f32, {1, 2, 2, 2, 3}});
  r3.add_output(r3.add_node(op("grid_sample"), {x5, grid})->output());
  EXPECT_KILN_ERROR(onnx::export_bytes(r3), "grid_sample(%x, %grid)", "3 spatial dims needs GridSample 20");

  ir::Graph h;
  h.add_output(h.add_node(op("relu"), {h.add_input("x", {DType::f32, {2}})})->output());
  onnx::ExportOptions old;
  old.opset = 13;
  EXPECT_KILN_ERROR(onnx::export_bytes(h, old), "opset 13 is not supported", "opset 17");
  EXPECT_KILN_ERROR(onnx::save(h, "/nonexistent/kiln/dir/model.onnx"), "cannot write",
                    "/nonexistent/kiln/dir/model.onnx");
}

}  // namespace
}  // namespace kiln
