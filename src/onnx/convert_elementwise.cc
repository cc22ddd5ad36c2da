// ONNX elementwise operators → kiln: unary math and activations, binary arithmetic and
// comparisons, variadic Sum/Mean/Max/Min, Where, Cast/CastLike, Clip, Identity and Dropout.
#include <cmath>

#include "onnx/convert.h"
#include "onnx/tensor_proto.h"

namespace kiln::onnx::detail {
namespace {

using V = std::vector<ir::Value*>;

bool registered(const std::string& kiln_op) { return OpRegistry::instance().find(kiln_op) != nullptr; }

Converter unary(std::string kiln_op) {
  return [kiln_op](ConvertCtx& c) -> V { return {c.emit(kiln_op, {c.in(0)})}; };
}

Converter binary(std::string kiln_op) {
  return [kiln_op](ConvertCtx& c) -> V {
    check_same_types(c);
    // Before opset 7, broadcasting was opt-in (broadcast=1) with an `axis` where b's dims start
    // inside a's; numpy-style trailing alignment is the case axis = rank(a) - rank(b).
    ir::Value* b = c.in(1);
    if (c.opset() < 7 && c.attr_int("broadcast", 0) != 0 && c.has_attr("axis")) {
      int64_t ra = c.rank(0), rb = c.rank(1);
      int64_t axis = c.axis(c.attr_int("axis"), ra);
      if (axis + rb > ra) c.fail("legacy broadcast: b (rank " + std::to_string(rb) + ") does not fit in a at axis " + std::to_string(axis));
      Shape bs = c.static_shape(1);
      for (int64_t i = axis + rb; i < ra; ++i) bs.push_back(1);
      b = c.emit("reshape", {b}, {{"shape", bs}});
    }
    return {c.emit(kiln_op, {c.in(0), b})};
  };
}

// Sum, Mean, Max, Min take any number of inputs (with broadcasting).
Converter variadic(std::string kiln_op, bool mean) {
  return [kiln_op, mean](ConvertCtx& c) -> V {
    check_same_types(c);
    ir::Value* acc = c.in(0);
    for (size_t i = 1; i < c.num_inputs(); ++i) acc = c.emit(kiln_op, {acc, c.in(i)});
    if (mean && c.num_inputs() > 1) acc = c.emit("div", {acc, c.scalar(static_cast<double>(c.num_inputs()), acc->type().dtype)});
    return {acc};
  };
}

// An activation whose ONNX attributes map one to one onto kiln attributes (with ONNX's defaults).
Converter activation(std::string kiln_op, std::vector<std::tuple<std::string, std::string, double>> attrs) {
  return [kiln_op, attrs](ConvertCtx& c) -> V {
    Attrs a;
    for (const auto& [onnx_name, kiln_name, dflt] : attrs) a.set(kiln_name, c.attr_float(onnx_name, dflt));
    return {c.emit(kiln_op, {c.in(0)}, a)};
  };
}

V clip(ConvertCtx& c) {
  Attrs a;
  if (c.opset() < 11) {
    if (c.has_attr("min")) a.set("min", c.attr_float("min", 0));
    if (c.has_attr("max")) a.set("max", c.attr_float("max", 0));
  } else {
    if (c.has_input(1)) a.set("min", c.const_floats(1, "min").at(0));
    if (c.has_input(2)) a.set("max", c.const_floats(2, "max").at(0));
  }
  return {c.emit("clip", {c.in(0)}, a)};
}

V cast(ConvertCtx& c) {
  DType to = from_onnx_dtype(static_cast<int32_t>(c.attr_int("to")), "Cast's 'to'");
  return {c.cast(c.in(0), to)};
}

V cast_like(ConvertCtx& c) { return {c.cast(c.in(0), c.dtype(1))}; }

V pow(ConvertCtx& c) {
  // ONNX Pow: the result has the base's type; the exponent may be of another numeric type.
  ir::Value* base = c.in(0);
  ir::Value* e = c.in(1);
  DType bt = base->type().dtype;
  if (is_floating(bt)) return {c.emit("pow", {base, c.cast(e, bt)})};
  // Integer base: compute in f64 and round back (ONNX's reference does the same through numpy).
  ir::Value* r = c.emit("pow", {c.cast(base, DType::f64), c.cast(e, DType::f64)});
  return {c.cast(r, bt)};
}

V mod(ConvertCtx& c) {
  bool fmod = c.attr_int("fmod", 0) != 0;
  if (!fmod && is_floating(c.dtype(0))) c.fail("fmod=0 is only defined for integer inputs");
  return {c.emit("mod", {c.in(0), c.in(1)}, {{"fmod", fmod}})};
}

V identity(ConvertCtx& c) { return {c.in(0)}; }

V dropout(ConvertCtx& c) {
  // Inference: the identity, and an all-true mask when asked for. Training mode is random.
  bool training = c.opset() >= 12 && c.has_input(2) && c.const_ints(2, "training_mode").at(0) != 0;
  if (c.opset() < 7 && c.attr_int("is_test", 0) == 0) training = true;
  if (training) {
    double ratio = c.has_input(1) ? c.const_floats(1, "ratio").at(0) : c.attr_float("ratio", 0.5);
    if (ratio != 0.0) c.fail("training-mode Dropout (random) is not supported; export the model in eval mode");
  }
  ir::Value* x = c.in(0);
  V out{x};
  if (c.node().output_size() > 1 && !c.node().output(1).empty())
    out.push_back(c.emit("expand", {c.constant(full({}, 1, TensorOptions(DType::boolean)))},
                         {{"shape", c.static_shape(0)}}));
  return out;
}

V prelu(ConvertCtx& c) {
  // PRelu: x < 0 ? slope * x : x, slope broadcast (unidirectionally) to x.
  ir::Value* x = c.in(0);
  ir::Value* slope = c.in(1);
  // Opset 6 and older: a 1-D slope of C values is per channel (dim 1), not numpy-aligned.
  if (c.opset() < 7 && c.rank(1) == 1 && c.rank(0) >= 3) {
    std::vector<int64_t> shape{-1};
    for (int64_t i = 2; i < c.rank(0); ++i) shape.push_back(1);
    slope = c.emit("reshape", {slope}, {{"shape", shape}});
  }
  ir::Value* neg = c.emit("lt", {x, c.scalar(0, x->type().dtype)});
  return {c.emit("where", {neg, c.emit("mul", {x, slope}), x})};
}

V shrink(ConvertCtx& c) {
  ir::Value* x = c.in(0);
  DType dt = x->type().dtype;
  double lambd = c.attr_float("lambd", 0.5), bias = c.attr_float("bias", 0.0);
  ir::Value* lo = c.emit("lt", {x, c.scalar(-lambd, dt)});
  ir::Value* hi = c.emit("gt", {x, c.scalar(lambd, dt)});
  ir::Value* zero = c.scalar(0, dt);
  ir::Value* r = c.emit("where", {hi, c.emit("sub", {x, c.scalar(bias, dt)}), zero});
  return {c.emit("where", {lo, c.emit("add", {x, c.scalar(bias, dt)}), r})};
}

V swish(ConvertCtx& c) {
  ir::Value* x = c.in(0);
  double alpha = c.attr_float("alpha", 1.0);
  ir::Value* ax = alpha == 1.0 ? x : c.emit("mul", {x, c.scalar(alpha, x->type().dtype)});
  return {c.emit("mul", {x, c.emit("sigmoid", {ax})})};
}

V gelu(ConvertCtx& c) {
  return {c.emit("gelu", {c.in(0)}, {{"approximate", c.attr_string("approximate", "none")}})};
}

V is_inf(ConvertCtx& c) {
  return {c.emit("isinf", {c.in(0)},
                 {{"detect_positive", c.attr_int("detect_positive", 1) != 0},
                  {"detect_negative", c.attr_int("detect_negative", 1) != 0}})};
}

V bit_shift(ConvertCtx& c) {
  return {c.emit("bit_shift", {c.in(0), c.in(1)}, {{"direction", c.attr_string("direction", "")}})};
}

V where(ConvertCtx& c) { return {c.emit("where", {c.in(0), c.in(1), c.in(2)})}; }

}  // namespace

void check_same_types(const ConvertCtx& c) {
  for (size_t i = 1; i < c.num_inputs(); ++i)
    if (c.has_input(i) && c.dtype(i) != c.dtype(0))
      c.fail("input #" + std::to_string(i) + " is " + std::string(dtype_name(c.dtype(i))) + " but input #0 is " +
             std::string(dtype_name(c.dtype(0))) + " (" + c.node().op_type() + " takes one element type)");
}

void add_elementwise_converters(std::map<std::string, Converter>& m) {
  const std::pair<const char*, const char*> unaries[] = {
      {"Abs", "abs"},       {"Neg", "neg"},       {"Exp", "exp"},         {"Log", "log"},
      {"Sqrt", "sqrt"},     {"Reciprocal", "reciprocal"}, {"Floor", "floor"}, {"Ceil", "ceil"},
      {"Round", "round"},   {"Sign", "sign"},     {"Sin", "sin"},         {"Cos", "cos"},
      {"Tan", "tan"},       {"Asin", "asin"},     {"Acos", "acos"},       {"Atan", "atan"},
      {"Sinh", "sinh"},     {"Cosh", "cosh"},     {"Asinh", "asinh"},     {"Acosh", "acosh"},
      {"Atanh", "atanh"},   {"Tanh", "tanh"},     {"Sigmoid", "sigmoid"}, {"Erf", "erf"},
      {"Relu", "relu"},     {"Not", "logical_not"}, {"HardSwish", "hardswish"}, {"Softsign", "softsign"},
      {"Mish", "mish"},     {"IsNaN", "isnan"},   {"BitwiseNot", "bitwise_not"},
  };
  for (const auto& [onnx_op, kiln_op] : unaries)
    if (registered(kiln_op)) m[onnx_op] = unary(kiln_op);
  const std::pair<const char*, const char*> binaries[] = {
      {"Add", "add"},          {"Sub", "sub"},        {"Mul", "mul"},          {"Div", "div"},
      {"Equal", "eq"},         {"Less", "lt"},        {"LessOrEqual", "le"},   {"Greater", "gt"},
      {"GreaterOrEqual", "ge"}, {"And", "logical_and"}, {"Or", "logical_or"},  {"Xor", "logical_xor"},
      {"BitwiseAnd", "bitwise_and"}, {"BitwiseOr", "bitwise_or"}, {"BitwiseXor", "bitwise_xor"},
  };
  for (const auto& [onnx_op, kiln_op] : binaries)
    if (registered(kiln_op)) m[onnx_op] = binary(kiln_op);
  m["Sum"] = variadic("add", false);
  m["Mean"] = variadic("add", true);
  m["Max"] = variadic("maximum", false);
  m["Min"] = variadic("minimum", false);
  m["Pow"] = pow;
  m["Mod"] = mod;
  m["Where"] = where;
  m["Cast"] = cast;
  m["CastLike"] = cast_like;
  m["Clip"] = clip;
  m["Identity"] = identity;
  m["Dropout"] = dropout;
  m["PRelu"] = prelu;
  m["Shrink"] = shrink;
  m["Swish"] = swish;
  m["Gelu"] = gelu;
  m["LeakyRelu"] = activation("leaky_relu", {{"alpha", "negative_slope", 0.01}});
  m["Elu"] = activation("elu", {{"alpha", "alpha", 1.0}});
  m["HardSigmoid"] = activation("hardsigmoid", {{"alpha", "alpha", 0.2}, {"beta", "beta", 0.5}});
  m["Softplus"] = [](ConvertCtx& c) -> V {
    // ONNX Softplus is log(exp(x) + 1) exactly; kiln's threshold switches to x for large inputs,
    // which agrees to float precision.
    return {c.emit("softplus", {c.in(0)})};
  };
  if (registered("selu"))
    m["Selu"] = activation("selu", {{"alpha", "alpha", 1.67326319217681884765625}, {"gamma", "gamma", 1.05070102214813232421875}});
  if (registered("celu")) m["Celu"] = activation("celu", {{"alpha", "alpha", 1.0}});
  if (registered("thresholded_relu")) m["ThresholdedRelu"] = activation("thresholded_relu", {{"alpha", "alpha", 1.0}});
  if (registered("isinf")) m["IsInf"] = is_inf;
  if (registered("bit_shift")) m["BitShift"] = bit_shift;
}

}  // namespace kiln::onnx::detail
