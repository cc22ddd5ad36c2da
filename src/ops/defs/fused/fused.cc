// Fused inference ops the compiler's epilogue pass emits (src/compiler/passes/epilogue.cc):
//   fused_gemm(a, b, bias?, residual?)   y = act(alpha * op(a) @ op(b) + bias [+ residual]) [+ residual]
//   fused_conv2d(x, w, bias?, residual?) y = act(conv2d(x, w, bias) [+ residual]) [+ residual]
// `residual_before_activation` says on which side of the activation the residual is added.
// Activations: none, relu, relu6, sigmoid, tanh, silu, gelu (erf), gelu_tanh, hardswish.
//
// Note [Fused kernels]: f32 fused_gemm and fused_conv2d run bias, residual and the activation as
// the packed GEMM's tile epilogue (kernels/cpu/vmath.h's block epilogue, vectorized per ISA) while
// each output tile is still in cache: no extra pass over memory (Note [Fused GEMM epilogue]); a
// depthwise fused_conv2d runs the direct kernel with the same epilogue on each output plane as it
// is written. f64 runs the GEMM/conv kernel, then one templated pass over the output. Against the unfused ops this saves the intermediate tensors and their passes.
// These ops exist for engines: no derivative (differentiate
// the unfused graph), no batching rule and no ONNX form (export the unfused graph).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/loops.h"
#include "kiln/core/thread_pool.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/op_def.h"
#include "ops/defs/conv/conv_common.h"

namespace kiln {
namespace {

enum class Act { none, relu, relu6, sigmoid, tanh, silu, gelu, gelu_tanh, hardswish };

std::optional<Act> parse_act(const std::string& s) {
  if (s == "none") return Act::none;
  if (s == "relu") return Act::relu;
  if (s == "relu6") return Act::relu6;
  if (s == "sigmoid") return Act::sigmoid;
  if (s == "tanh") return Act::tanh;
  if (s == "silu") return Act::silu;
  if (s == "gelu") return Act::gelu;
  if (s == "gelu_tanh") return Act::gelu_tanh;
  if (s == "hardswish") return Act::hardswish;
  return std::nullopt;
}

constexpr const char* kActs = "none, relu, relu6, sigmoid, tanh, silu, gelu, gelu_tanh, hardswish";

template <Act A, class T>
inline T activate(T y) {
  if constexpr (A == Act::relu) return y > T(0) ? y : (y == y ? T(0) : y);  // NaN stays NaN
  else if constexpr (A == Act::relu6) return y != y ? y : std::min(std::max(y, T(0)), T(6));
  else if constexpr (A == Act::sigmoid) return T(1) / (T(1) + std::exp(-y));
  else if constexpr (A == Act::tanh) return std::tanh(y);
  else if constexpr (A == Act::silu) return y / (T(1) + std::exp(-y));
  else if constexpr (A == Act::gelu) return T(0.5) * y * (T(1) + std::erf(y * T(0.70710678118654752440)));
  else if constexpr (A == Act::gelu_tanh)
    return T(0.5) * y * (T(1) + std::tanh(T(0.79788456080286535588) * (y + T(0.044715) * y * y * y)));
  else if constexpr (A == Act::hardswish) {  // as the hardswish op: x * clamp(x + 3, 0, 6) / 6
    T t = y + T(3);
    t = t < T(0) ? T(0) : (t > T(6) ? T(6) : t);
    return y * t / T(6);
  } else return y;
}

// y[i] = act(y[i] (+ res[i])) (+ res[i]) over [b, e): the activation is a template argument so
// each loop is branch-free and vectorizable.
template <Act A, class T>
void epilogue_range(T* y, int64_t b, int64_t e, const T* res, bool res_before) {
  if (!res) {
    for (int64_t i = b; i < e; ++i) y[i] = activate<A>(y[i]);
  } else if (res_before) {
    for (int64_t i = b; i < e; ++i) y[i] = activate<A>(y[i] + res[i]);
  } else {
    for (int64_t i = b; i < e; ++i) y[i] = activate<A>(y[i]) + res[i];
  }
}

// One pass over a contiguous output: y = act(y + bias[col] (+ res)) (+ res), bias per column of
// an m x n matrix (n = bias_len) when given.
template <class T>
void epilogue_pass(T* y, int64_t total, const T* bias, int64_t bias_len, const T* res, bool res_before, Act act) {
  if (bias)
    for (int64_t i = 0; i < total; i += bias_len)
      for (int64_t j = 0; j < bias_len; ++j) y[i + j] += bias[j];
  if (act == Act::none && !res) return;
  parallel_for(0, total, 1 << 14, [&](int64_t b, int64_t e) {
    switch (act) {
      case Act::none: return epilogue_range<Act::none>(y, b, e, res, res_before);
      case Act::relu: return epilogue_range<Act::relu>(y, b, e, res, res_before);
      case Act::relu6: return epilogue_range<Act::relu6>(y, b, e, res, res_before);
      case Act::sigmoid: return epilogue_range<Act::sigmoid>(y, b, e, res, res_before);
      case Act::tanh: return epilogue_range<Act::tanh>(y, b, e, res, res_before);
      case Act::silu: return epilogue_range<Act::silu>(y, b, e, res, res_before);
      case Act::gelu: return epilogue_range<Act::gelu>(y, b, e, res, res_before);
      case Act::gelu_tanh: return epilogue_range<Act::gelu_tanh>(y, b, e, res, res_before);
      case Act::hardswish: return epilogue_range<Act::hardswish>(y, b, e, res, res_before);
    }
  });
}

Act act_of(const Attrs& a) {
  auto act = parse_act(a.get_string("activation"));
  KILN_ASSERT(act.has_value(), "fused op: activation '", a.get_string("activation"), "' passed inference");
  return *act;
}

void check_act(const InferCtx& c) {
  if (!parse_act(c.attrs.get_string("activation")))
    c.fail("unknown activation '" + c.attrs.get_string("activation") + "' (one of " + kActs + ")");
}

void check_residual(const InferCtx& c, const TensorMeta& out) {
  if (c.has(3) && c.in(3).shape != out.shape)
    c.fail("residual of shape " + shape_str(c.in(3).shape) + " must have the output's shape " + shape_str(out.shape));
}

Attrs gemm_attrs(const Attrs& a) {
  return op("gemm").bind_attrs({{"alpha", a.get_float("alpha")},
                                {"beta", 0.0},
                                {"trans_a", a.get_bool("trans_a")},
                                {"trans_b", a.get_bool("trans_b")}});
}

Attrs conv_attrs(const Attrs& a) {
  return op("conv2d").bind_attrs({{"stride", a.get_ints("stride")},
                                  {"padding", a.get_ints("padding")},
                                  {"dilation", a.get_ints("dilation")},
                                  {"groups", a.get_int("groups")}});
}

// Note [Fused GEMM over a sequence]
// `a` may have rank > 2 ([..., M, K], trans_a false): its leading dims are more rows, so a Linear
// layer over [batch, seq, hidden] (matmul by a 2-D weight, then bias and activation) is one GEMM
// of batch * seq rows with its epilogue, not a batched product with a separate pass.
std::vector<TensorMeta> infer_fused_gemm(const InferCtx& c) {
  check_act(c);
  TensorMeta a = c.in(0);
  Shape lead;  // a's dims but the last, when a has rank > 2
  if (a.shape.size() > 2) {
    if (c.attrs.get_bool("trans_a")) c.fail("a of shape " + shape_str(a.shape) + " has rank > 2, which needs trans_a = false");
    lead.assign(a.shape.begin(), a.shape.end() - 1);
    int64_t rows = 1;
    for (int64_t d : lead) rows *= d;
    a.shape = {rows, a.shape.back()};
  }
  auto out = op("gemm").infer_meta({a, c.in(1), std::nullopt}, gemm_attrs(c.attrs));
  const int64_t n = out[0].shape[1];
  if (!lead.empty()) {
    out[0].shape = lead;
    out[0].shape.push_back(n);
  }
  if (c.has(2)) {
    const Shape& bs = c.in(2).shape;
    bool ok = (bs.size() == 1 && bs[0] == n) || (bs.size() == 2 && bs[0] == 1 && bs[1] == n);
    if (!ok) c.fail("bias of shape " + shape_str(bs) + " must be [" + std::to_string(n) + "] (one per output column)");
  }
  for (size_t i = 2; i < 4; ++i)
    if (c.has(i)) out[0].dtype = promote_types(out[0].dtype, c.in(i).dtype);
  check_residual(c, out[0]);
  return out;
}

std::vector<TensorMeta> infer_fused_conv2d(const InferCtx& c) {
  check_act(c);
  std::vector<std::optional<TensorMeta>> ins{c.in(0), c.in(1), c.has(2) ? c.inputs[2] : std::nullopt};
  auto out = op("conv2d").infer_meta(ins, conv_attrs(c.attrs));
  if (c.has(3)) out[0].dtype = promote_types(out[0].dtype, c.in(3).dtype);
  check_residual(c, out[0]);
  return out;
}

kernels::cpu::GemmActivation gemm_act(Act a) {
  using kernels::cpu::GemmActivation;
  switch (a) {
    case Act::none: return GemmActivation::none;
    case Act::relu: return GemmActivation::relu;
    case Act::relu6: return GemmActivation::relu6;
    case Act::sigmoid: return GemmActivation::sigmoid;
    case Act::tanh: return GemmActivation::tanh;
    case Act::silu: return GemmActivation::silu;
    case Act::gelu: return GemmActivation::gelu;
    case Act::gelu_tanh: return GemmActivation::gelu_tanh;
    case Act::hardswish: return GemmActivation::hardswish;
  }
  return GemmActivation::none;
}

template <class T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

void fused_gemm_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  if (out.numel() == 0) return;
  const DType dt = out.dtype();
  // Rank > 2: the leading dims are rows (Note [Fused GEMM over a sequence]).
  const Tensor a = k.in(0).dim() > 2 ? k.in(0).contiguous().reshape({-1, k.in(0).shape().back()}) : k.in(0);
  const Tensor& b = k.in(1);
  Tensor bias = k.inputs.size() > 2 && k.in(2).defined() ? k.in(2).contiguous() : Tensor();
  Tensor res = k.inputs.size() > 3 && k.in(3).defined() ? k.in(3).contiguous() : Tensor();
  const bool ta = k.attrs.get_bool("trans_a"), tb = k.attrs.get_bool("trans_b");
  const bool before = k.attrs.get_bool("residual_before_activation");
  const double alpha = k.attrs.get_float("alpha");
  const Act act = act_of(k.attrs);
  const int64_t n = out.shape().back(), m = out.numel() / n, kk = ta ? a.shape()[0] : a.shape()[1];
  const int64_t a_rs = ta ? a.strides()[1] : a.strides()[0], a_cs = ta ? a.strides()[0] : a.strides()[1];
  const int64_t b_rs = tb ? b.strides()[1] : b.strides()[0], b_cs = tb ? b.strides()[0] : b.strides()[1];
  Tensor y = out.is_contiguous() ? out : empty(out.shape(), TensorOptions(dt, out.device()));
  if (dt == DType::f32) {
    // Note [Fused GEMM epilogue]: the GEMM's tile hook used to be a scalar loop calling std::erf/exp
    // per element and lost to a separate pass (1.7-2.8 ms vs 0.8 ms at 128x512x512). With vmath's
    // vectorized epilogue the hook and a separate vectorized pass cost the same within 2-4% at
    // 128x512x512 and 128x3072x768 on one thread, where C stays in L2/L3 (kiln_bench_fused,
    // BM_gemm_epilogue_hook); the hook also saves the pass's memory traffic where C does not.
    kernels::cpu::GemmEpilogue ep;
    if (bias.defined()) ep.bias_kind = kernels::cpu::GemmBias::per_col, ep.bias = ptr_or_null<float>(bias);
    ep.activation = gemm_act(act);
    ep.residual = ptr_or_null<float>(res);
    ep.ldr = n;
    ep.residual_before_activation = before;
    kernels::cpu::gemm_f32(m, n, kk, static_cast<float>(alpha), static_cast<const float*>(a.data_ptr()), a_rs, a_cs,
                           static_cast<const float*>(b.data_ptr()), b_rs, b_cs, 0.0f, static_cast<float*>(y.data_ptr()),
                           n, ep);
  } else {
    KILN_ASSERT(dt == DType::f64, "fused_gemm: kernel registered for f32/f64 only, got ", dtype_name(dt));
    double* yp = static_cast<double*>(y.data_ptr());
    kernels::cpu::gemm_f64(m, n, kk, alpha, static_cast<const double*>(a.data_ptr()), a_rs, a_cs,
                           static_cast<const double*>(b.data_ptr()), b_rs, b_cs, 0.0, yp, n);
    epilogue_pass<double>(yp, m * n, ptr_or_null<double>(bias), n, ptr_or_null<double>(res), before, act);
  }
  if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
}

// im2col + GEMM with bias, residual and activation in the GEMM's tile epilogue (depthwise: the direct
// kernel, the epilogue on each output plane).
void fused_conv2d_f32(const KernelCall& k, const Tensor& y, const Tensor& bias_in) {
  Tensor x = k.in(0).contiguous(), w = k.in(1).contiguous();
  Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
  Tensor res = k.inputs.size() > 3 && k.in(3).defined() ? k.in(3).contiguous() : Tensor();
  const kernels::cpu::Conv2dParams p = defs::conv2d_params("fused_conv2d", x.shape(), w.shape(), y.shape(), k.attrs);
  kernels::cpu::Conv2dEpilogue ep;
  ep.activation = gemm_act(act_of(k.attrs));
  ep.residual = ptr_or_null<float>(res);
  ep.residual_before_activation = k.attrs.get_bool("residual_before_activation");
  kernels::cpu::conv2d_nchw_f32(p, static_cast<const float*>(x.data_ptr()), static_cast<const float*>(w.data_ptr()),
                                ptr_or_null<float>(bias), static_cast<float*>(y.data_ptr()), ep);
}

void fused_conv2d_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  if (out.numel() == 0) return;
  const DType dt = out.dtype();
  Tensor y = out.is_contiguous() ? out : empty(out.shape(), TensorOptions(dt, out.device()));
  Tensor bias = k.inputs.size() > 2 ? k.in(2) : Tensor();
  if (dt == DType::f32) {  // any groups; depthwise runs the direct kernel with the epilogue per plane
    fused_conv2d_f32(k, y, bias);
    if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
    return;
  }
  OpCall conv{op("conv2d"), {k.in(0), k.in(1), bias}, conv_attrs(k.attrs), KILN_HERE, Tensor(), nullptr};
  run_kernel(conv, {y});
  Tensor res = k.inputs.size() > 3 && k.in(3).defined() ? k.in(3).contiguous() : Tensor();
  const bool before = k.attrs.get_bool("residual_before_activation");
  const Act act = act_of(k.attrs);
  if (act != Act::none || res.defined()) {
    if (dt == DType::f32)
      epilogue_pass<float>(static_cast<float*>(y.data_ptr()), y.numel(), nullptr, 1, ptr_or_null<float>(res), before,
                           act);
    else
      epilogue_pass<double>(static_cast<double*>(y.data_ptr()), y.numel(), nullptr, 1, ptr_or_null<double>(res),
                            before, act);
  }
  if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
}

constexpr const char* kNoVjp = "compiler-emitted inference op: differentiate the unfused graph";
constexpr const char* kNoBatch = "compiler-emitted inference op: vmap the unfused graph";
constexpr const char* kNoOnnx = "compiler-emitted inference op: export the unfused graph";

}  // namespace

void register_fused_ops(OpRegistry& r) {
  r.add("fused_gemm(Tensor a, Tensor b, Tensor? bias, Tensor? residual, float alpha=1.0, bool trans_a=false, "
        "bool trans_b=false, str activation=\"none\", bool residual_before_activation=false) -> Tensor")
      .infer(infer_fused_gemm)
      .cast_inputs(InputCast::common)
      .kernel(DeviceType::cpu, DTypeSet{DType::f32, DType::f64}, fused_gemm_kernel, "epilogue")
      .no_vjp(kNoVjp)
      .no_batch(kNoBatch)
      .no_onnx(kNoOnnx)
      .doc("act(alpha * op(a) @ op(b) + bias (+ residual)) (+ residual); bias per column, residual M x N; "
           "a [..., M, K] of rank > 2 flattens its leading dims into rows.");
  r.add("fused_conv2d(Tensor x, Tensor w, Tensor? bias, Tensor? residual, int[] stride=[1,1], "
        "int[] padding=[0,0,0,0], int[] dilation=[1,1], int groups=1, str activation=\"none\", "
        "bool residual_before_activation=false) -> Tensor")
      .infer(infer_fused_conv2d)
      .cast_inputs(InputCast::common)
      .per_sample()
      .kernel(DeviceType::cpu, DTypeSet{DType::f32, DType::f64}, fused_conv2d_kernel)
      .no_vjp(kNoVjp)
      .no_batch(kNoBatch)
      .no_onnx(kNoOnnx)
      .doc("act(conv2d(x, w, bias) (+ residual)) (+ residual), NCHW; residual has the output's shape.");
}

}  // namespace kiln
