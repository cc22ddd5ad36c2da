// Channel-blocked ("NCHWc") inference ops the compiler's layout pass emits
// (src/compiler/passes/layout.cc; Note [Blocked channels] in kernels/cpu/conv_nchwc.cc):
//   to_nchwc(x)                 [N, C, H, W] -> [N, ceil(C/16), H, W, 16], lanes past C zero
//   from_nchwc(x, channels)     [N, ceil(channels/16), H, W, 16] -> [N, channels, H, W]
//   max_pool2d_nchwc(x, ...)    max_pool2d on blocked x
//   avg_pool2d_nchwc(x, ...)    avg_pool2d on blocked x
//   global_avg_pool_nchwc(x)    [N, C/16, H, W, 16] -> [N, C/16, 1, 1, 16]: global_avg_pool on
//                               blocked x
//   global_norm_nchwc(x)        the same shapes: norm over H and W (each plane's L2 norm)
//   layer_norm_nchwc(x, w, b, channels, eps)
//                               layer_norm over each pixel's channels on blocked x (ConvNeXt's
//                               channels-last norm), w and b [C/16 * 16]
//   scale_shift_nchwc(x, scale, shift, activation)
//                               activation(x * scale + shift) per channel on blocked x, scale and
//                               shift [C/16 * 16] (a batch norm no convolution precedes)
//   fused_conv2d_nchwc(x, w, bias?, residual?)
//                               fused_conv2d (src/ops/defs/fused/fused.cc) on blocked x, residual
//                               and output, one group or depthwise (groups = C); x may be NCHW with
//                               at most 16 channels (a stem); w stays [K, C, R, S] (a constant:
//                               packed once)
// Like the other fused ops they exist for engines: no derivative, batching rule or ONNX form.
#include <functional>

#include "kernels/cpu/conv_nchwc.h"
#include "kernels/cpu/loops.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/op_def.h"
#include "ops/defs/conv/conv_common.h"
#include "ops/tactics.h"

namespace kiln {
namespace {

using kernels::cpu::kChannelBlock;
using kernels::cpu::nchwc_blocks;

void check_f32(const InferCtx& c, size_t i) {
  if (c.has(i) && c.in(i).dtype != DType::f32)
    c.fail(c.arg_name(i) + " is " + std::string(dtype_name(c.in(i).dtype)) + "; the blocked layout is for f32 only");
}

// Runs `write` on the output's floats: out's own where it is contiguous, else a contiguous
// temporary's, copied into out after.
template <class Write>
void write_output(const Tensor& out, Write&& write) {
  Tensor y = out.is_contiguous() ? out : empty(out.shape(), TensorOptions(DType::f32, out.device()));
  write(static_cast<float*>(y.data_ptr()));
  if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
}

// x's shape (input 0), which must be blocked: [N, C/16, H, W, 16].
const Shape& blocked_shape(const InferCtx& c) {
  const Shape& xs = c.in(0).shape;
  if (xs.size() != 5 || xs[4] != kChannelBlock)
    c.fail("x of shape " + shape_str(xs) + " must be blocked, [N, C/16, H, W, 16]");
  return xs;
}

// Inputs 1 and 2 (named `first` and `second`): a value per lane of x's blocks, [C/16 * 16].
void check_lane_vectors(const InferCtx& c, const Shape& xs, const char* first, const char* second) {
  for (size_t i : {size_t{1}, size_t{2}})
    if (c.in(i).shape != Shape{xs[1] * kChannelBlock})
      c.fail(std::string(i == 1 ? first : second) + " of shape " + shape_str(c.in(i).shape) + " must be [" +
             std::to_string(xs[1] * kChannelBlock) + "], a value per lane of x's " + std::to_string(xs[1]) +
             " blocks");
}

std::vector<TensorMeta> infer_to_nchwc(const InferCtx& c) {
  check_f32(c, 0);
  const Shape& s = c.in(0).shape;
  if (s.size() != 4) c.fail("x of shape " + shape_str(s) + " must be [N, C, H, W]");
  return {TensorMeta{DType::f32, {s[0], nchwc_blocks(s[1]), s[2], s[3], kChannelBlock}}};
}

std::vector<TensorMeta> infer_from_nchwc(const InferCtx& c) {
  check_f32(c, 0);
  const Shape& s = blocked_shape(c);
  const int64_t ch = c.attrs.get_int("channels");
  if (ch < 1 || nchwc_blocks(ch) != s[1])
    c.fail("channels = " + std::to_string(ch) + " does not fit x of shape " + shape_str(s) + ", which holds " +
           std::to_string(s[1]) + " blocks of 16 (channels " + std::to_string(16 * s[1] - 15) + " to " +
           std::to_string(16 * s[1]) + ")");
  return {TensorMeta{DType::f32, {s[0], ch, s[2], s[3]}}};
}

Attrs conv_attrs_of(const Attrs& a) {
  return op("conv2d").bind_attrs({{"stride", a.get_ints("stride")},
                                  {"padding", a.get_ints("padding")},
                                  {"dilation", a.get_ints("dilation")},
                                  {"groups", a.get_int("groups")}});
}

const char* kActs = "none, relu, relu6, hardswish, sigmoid, silu, gelu";
// Filters [C, 1, R, S] with groups = C: the blocked depthwise kernel's (other groups run in block
// groups, Note [Grouped blocks] in kernels/cpu/conv_nchwc.cc).
bool depthwise_filters(int64_t groups, const Shape& ws) { return groups > 1 && groups == ws[0] && ws[1] == 1; }

bool blocked_act(const std::string& a) {
  return a == "none" || a == "relu" || a == "relu6" || a == "hardswish" || a == "sigmoid" || a == "silu" ||
         a == "gelu";
}

std::vector<TensorMeta> infer_conv_nchwc(const InferCtx& c) {
  for (size_t i = 0; i < 4; ++i) check_f32(c, i);
  if (!blocked_act(c.attrs.get_string("activation")))
    c.fail("activation '" + c.attrs.get_string("activation") + "' is not one of the blocked kernel's (" + kActs + ")");
  const Shape& xs = c.in(0).shape;
  const Shape& ws = c.in(1).shape;
  if (ws.size() != 4) c.fail("w of shape " + shape_str(ws) + " must be [K, C, R, S]");
  const int64_t groups = c.attrs.get_int("groups");
  const int64_t channels = ws[1] * groups;  // the input's
  const bool plain_x = xs.size() == 4;      // a stem's NCHW input (NchwcInput::plain)
  const bool depthwise = depthwise_filters(groups, ws);
  if (groups != 1 && !depthwise && kernels::cpu::nchwc_group_span(channels, ws[0], groups) == 0)
    c.fail("groups = " + std::to_string(groups) + " with w of shape " + shape_str(ws) +
           ": the blocked kernels take one group, depthwise filters [C, 1, R, S] with groups = C, or groups of which "
           "at most " + std::to_string(kernels::cpu::kMaxGroupSpan) +
           " consecutive ones fill whole blocks of 16 input and output channels");
  if (plain_x) {
    if (groups != 1)
      c.fail(std::string(depthwise ? "a depthwise" : "a grouped") + " convolution needs blocked x, got x of shape " +
             shape_str(xs));
    if (channels != xs[1])
      c.fail("w of shape " + shape_str(ws) + " has " + std::to_string(ws[1]) + " input channels but x of shape " +
             shape_str(xs) + " has " + std::to_string(xs[1]));
    if (xs[1] > kChannelBlock)
      c.fail("x of shape " + shape_str(xs) + " is NCHW with more than 16 channels; block it first (to_nchwc)");
  } else {
    if (xs.size() != 5 || xs[4] != kChannelBlock)
      c.fail("x of shape " + shape_str(xs) + " must be blocked, [N, C/16, H, W, 16], or NCHW with at most 16 channels");
    if (nchwc_blocks(channels) != xs[1])
      c.fail("w of shape " + shape_str(ws) + (depthwise ? " (depthwise)" : groups > 1 ? " (grouped)" : "") + " reads " +
             std::to_string(channels) +
             " input channels but x of shape " + shape_str(xs) + " holds " + std::to_string(xs[1]) +
             " blocks of 16");
  }
  const TensorMeta plain{DType::f32, {xs[0], channels, xs[2], xs[3]}};
  std::vector<std::optional<TensorMeta>> ins{plain, c.in(1), c.has(2) ? c.inputs[2] : std::nullopt};
  auto out = op("conv2d").infer_meta(ins, conv_attrs_of(c.attrs));
  const Shape& o = out[0].shape;
  TensorMeta y{DType::f32, {o[0], nchwc_blocks(o[1]), o[2], o[3], kChannelBlock}};
  if (c.has(3) && c.in(3).shape != y.shape)
    c.fail("residual of shape " + shape_str(c.in(3).shape) + " must have the output's shape " + shape_str(y.shape));
  return {y};
}

void to_nchwc_kernel(const KernelCall& k) {
  // A channels-last view ([N, C, H, W] over NHWC memory: attention's output permuted back to an
  // image) blocks by pixel, 16 consecutive floats at a time; anything else through NCHW. MobileNetV4-
  // Hybrid-Medium's eight attention outputs (256 x 7 x 7) took 0.043 ms each through a strided copy
  // to NCHW first.
  const Tensor& in = k.in(0);
  const Shape& is = in.shape();
  const auto& st = in.strides();
  if (is.size() == 4 && is[1] > 1 && st[1] == 1 && st[3] == is[1] && st[2] == is[3] * is[1] &&
      (is[0] == 1 || st[0] == is[2] * is[3] * is[1])) {
    kernels::cpu::nhwc_to_nchwc_f32(is[0], is[1], is[2] * is[3], static_cast<const float*>(in.data_ptr()),
                                    static_cast<float*>(k.out(0).data_ptr()));
    return;
  }
  Tensor x = in.contiguous();
  const Shape& s = x.shape();
  kernels::cpu::nchw_to_nchwc_f32(s[0], s[1], s[2] * s[3], static_cast<const float*>(x.data_ptr()),
                                  static_cast<float*>(k.out(0).data_ptr()));
}

void from_nchwc_kernel(const KernelCall& k) {
  Tensor x = k.in(0).contiguous();
  const Shape& s = k.out(0).shape();
  kernels::cpu::nchwc_to_nchw_f32(s[0], s[1], s[2] * s[3], static_cast<const float*>(x.data_ptr()),
                                  static_cast<float*>(k.out(0).data_ptr()));
}

// What a blocked convolution call derives from its shapes, attributes and filters alone: made on
// every eager call, once for a resolved engine step (Note [Prepared kernels] in op_def.h).
struct PreparedConvNchwc {
  enum class Kind { blocked, depthwise, winograd } kind = Kind::blocked;
  kernels::cpu::Conv2dParams p;
  kernels::cpu::NchwcInput input = kernels::cpu::NchwcInput::blocked;
  kernels::cpu::GemmActivation activation = kernels::cpu::GemmActivation::none;
  bool residual_before_activation = false;
  const void* filters = nullptr;  // the filters' data, which `packed` was packed from
  std::shared_ptr<const float> packed;
  std::shared_ptr<const kernels::cpu::NchwcPlan> plan;  // Kind::blocked
  int winograd_tile = 0;                                  // Kind::winograd: 2 or 4
};

// The packed filters' size in floats: Winograd's transformed ones, the depthwise kernel's, or the
// blocked kernel's.
size_t packed_filter_floats(const kernels::cpu::Conv2dParams& p, kernels::cpu::NchwcInput input, bool depthwise,
                            int winograd_tile) {
  if (winograd_tile != 0) return kernels::cpu::conv2d_nchwc_winograd_packed_weight_f32_floats(p, winograd_tile);
  if (depthwise) return kernels::cpu::depthwise_nchwc_packed_weight_f32_floats(p);
  return kernels::cpu::conv2d_nchwc_packed_weight_f32_floats(p, input);
}

// panel_blocks: the blocked convolution's panel width (Note [Panels as tactics] in
// conv_nchwc.cc), 0 for its own choice; depthwise layers have no panels (grouped ones do: Note
// [Grouped blocks] in conv_nchwc.cc). winograd_tile: 2 or 4 for Winograd's F(2x2, 3x3) or
// F(4x4, 3x3) (Note [Winograd tiles] in conv_nchwc.cc) where the layer allows it, 0 for none. x: the
// input's shape, w: the filters (contiguous), y: the output's shape.
PreparedConvNchwc prepare_conv_nchwc(const Shape& x, const Tensor& w, const Shape& y, const Attrs& attrs,
                                     int panel_blocks, int winograd_tile) {
  PreparedConvNchwc c;
  c.input = x.size() == 4 ? kernels::cpu::NchwcInput::plain : kernels::cpu::NchwcInput::blocked;
  const int64_t groups = attrs.get_int("groups");
  kernels::cpu::Conv2dParams& p = c.p;
  p = defs::conv2d_params("fused_conv2d_nchwc", x, w.shape(), y, attrs);
  const bool depthwise = depthwise_filters(groups, w.shape());
  p.nchwc_panel_blocks = depthwise ? 0 : panel_blocks;
  c.activation = parse_activation(attrs.get_string("activation"));
  c.residual_before_activation = attrs.get_bool("residual_before_activation");
  c.filters = w.data_ptr();
  const float* wp = static_cast<const float*>(w.data_ptr());
  // Filters packed once per weight (Note [Prepacked tactics]), keyed by what the packing follows.
  if (winograd_tile != 0 && c.input == kernels::cpu::NchwcInput::blocked &&
      kernels::cpu::conv2d_nchwc_winograd_supported(p)) {
    c.kind = PreparedConvNchwc::Kind::winograd;
    c.winograd_tile = winograd_tile;
    c.packed = cached_packed_weight_f32(
        w, {5, p.k, p.c, p.r, p.s, winograd_tile, p.groups}, packed_filter_floats(p, c.input, false, winograd_tile),
        [&](float* buf) { kernels::cpu::pack_conv2d_nchwc_winograd_weight_f32(p, winograd_tile, wp, buf); });
  } else if (depthwise) {
    c.kind = PreparedConvNchwc::Kind::depthwise;
    c.packed = cached_packed_weight_f32(w, {4, p.k, p.r, p.s}, packed_filter_floats(p, c.input, true, 0),
                                        [&](float* buf) { kernels::cpu::pack_depthwise_nchwc_weight_f32(p, wp, buf); });
  } else {
    const kernels::cpu::NchwcTiling tiling = kernels::cpu::conv2d_nchwc_tiling(p);
    c.packed = cached_packed_weight_f32(
        w, {3, p.k, p.c, p.r, p.s, tiling.panel_blocks, static_cast<int64_t>(c.input), groups},
        packed_filter_floats(p, c.input, false, 0),
        [&](float* buf) { kernels::cpu::pack_conv2d_nchwc_weight_f32(p, wp, buf, c.input); });
    c.plan = kernels::cpu::conv2d_nchwc_plan(p, c.input);
  }
  return c;
}

template <int PanelBlocks, int WinogradTile>
std::shared_ptr<const void> conv_nchwc_prepare(std::span<const Tensor> in, const Attrs& attrs,
                                               std::span<const TensorMeta> out) {
  if (in.size() < 2 || !in[0].defined() || !in[1].defined() || !in[1].is_contiguous() || out.empty() ||
      out[0].shape.size() != 5 || std::find(out[0].shape.begin(), out[0].shape.end(), 0) != out[0].shape.end())
    return nullptr;
  return std::make_shared<const PreparedConvNchwc>(
      prepare_conv_nchwc(in[0].shape(), in[1], out[0].shape, attrs, PanelBlocks, WinogradTile));
}

template <int PanelBlocks, int WinogradTile>
void conv_nchwc_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  if (out.numel() == 0) return;
  Tensor x = k.in(0).contiguous(), w = k.in(1).contiguous();
  Tensor bias = k.inputs.size() > 2 && k.in(2).defined() ? k.in(2).contiguous() : Tensor();
  Tensor res = k.inputs.size() > 3 && k.in(3).defined() ? k.in(3).contiguous() : Tensor();
  // The call's preparation, where it was made for these filters and shapes; else made now.
  const auto* ready = static_cast<const PreparedConvNchwc*>(k.prepared);
  auto made_for_this = [&](const PreparedConvNchwc& c) {
    const Shape& xs = x.shape();
    return c.filters == w.data_ptr() && (x.dim() == 4) == (c.input == kernels::cpu::NchwcInput::plain) &&
           xs[0] == c.p.n && xs[2] == c.p.h && xs[3] == c.p.w && out.shape()[2] == c.p.ho && out.shape()[3] == c.p.wo;
  };
  PreparedConvNchwc own;
  if (ready == nullptr || !made_for_this(*ready)) {
    own = prepare_conv_nchwc(x.shape(), w, out.shape(), k.attrs, PanelBlocks, WinogradTile);
    ready = &own;
  }
  const kernels::cpu::Conv2dParams& p = ready->p;
  kernels::cpu::Conv2dEpilogue ep;
  ep.activation = ready->activation;
  ep.residual = res.defined() ? static_cast<const float*>(res.data_ptr()) : nullptr;
  ep.residual_before_activation = ready->residual_before_activation;
  const float* xp = static_cast<const float*>(x.data_ptr());
  const float* bp = bias.defined() ? static_cast<const float*>(bias.data_ptr()) : nullptr;
  write_output(out, [&](float* yp) {
    switch (ready->kind) {
      case PreparedConvNchwc::Kind::winograd:
        kernels::cpu::conv2d_nchwc_winograd_f32(p, ready->winograd_tile, xp, ready->packed.get(), bp, yp, ep);
        break;
      case PreparedConvNchwc::Kind::depthwise:
        kernels::cpu::depthwise_conv2d_nchwc_f32(p, xp, ready->packed.get(), bp, yp, ep);
        break;
      case PreparedConvNchwc::Kind::blocked:
        kernels::cpu::conv2d_nchwc_f32(p, xp, ready->packed.get(), bp, yp, ep, ready->input, ready->plan.get());
        break;
    }
  });
}

// max_pool2d_nchwc (max) and avg_pool2d_nchwc: the NCHW op's own shape rule on the unblocked shape.
std::vector<TensorMeta> infer_pool_nchwc(const InferCtx& c, bool max) {
  check_f32(c, 0);
  const Shape& xs = blocked_shape(c);
  auto out = op(max ? "max_pool2d" : "avg_pool2d")
                 .infer_meta({TensorMeta{DType::f32, {xs[0], xs[1] * kChannelBlock, xs[2], xs[3]}}}, c.attrs);
  const Shape& o = out[0].shape;
  return {TensorMeta{DType::f32, {o[0], xs[1], o[2], o[3], kChannelBlock}}};
}

void pool_nchwc_kernel(const KernelCall& k, bool max) {
  const Tensor& out = k.out(0);
  if (out.numel() == 0) return;
  Tensor x = k.in(0).contiguous();
  const Shape& xs = x.shape();
  auto p = defs::pool_params(max ? "max_pool2d_nchwc" : "avg_pool2d_nchwc", {xs[0], xs[1], xs[2], xs[3]}, k.attrs, max);
  p.ho = out.shape()[2], p.wo = out.shape()[3];
  write_output(out, [&](float* y) {
    (max ? kernels::cpu::max_pool2d_nchwc_f32 : kernels::cpu::avg_pool2d_nchwc_f32)(
        p, static_cast<const float*>(x.data_ptr()), y);
  });
}

// global_avg_pool_nchwc and global_norm_nchwc: [N, C/16, H, W, 16] -> [N, C/16, 1, 1, 16]; a mean
// needs pixels, a norm of none is 0.
template <bool kNorm>
std::vector<TensorMeta> infer_global_nchwc(const InferCtx& c) {
  check_f32(c, 0);
  const Shape& xs = blocked_shape(c);
  if (!kNorm && xs[2] * xs[3] == 0 && xs[0] * xs[1] > 0)
    c.fail("x of shape " + shape_str(xs) + " has no pixels to average");
  return {TensorMeta{DType::f32, {xs[0], xs[1], 1, 1, kChannelBlock}}};
}

template <bool kNorm>
void global_nchwc_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  if (out.numel() == 0) return;
  Tensor x = k.in(0).contiguous();
  const Shape& xs = x.shape();
  write_output(out, [&](float* y) {
    (kNorm ? kernels::cpu::global_norm_nchwc_f32 : kernels::cpu::global_avg_pool_nchwc_f32)(
        xs[0] * xs[1], xs[2] * xs[3], static_cast<const float*>(x.data_ptr()), y);
  });
}

std::vector<TensorMeta> infer_scale_shift_nchwc(const InferCtx& c) {
  for (size_t i = 0; i < 3; ++i) check_f32(c, i);
  if (!blocked_act(c.attrs.get_string("activation")))
    c.fail("activation '" + c.attrs.get_string("activation") + "' is not one of the blocked kernels' (" + kActs + ")");
  const Shape& xs = blocked_shape(c);
  check_lane_vectors(c, xs, "scale", "shift");
  return {TensorMeta{DType::f32, xs}};
}

void scale_shift_nchwc_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  if (out.numel() == 0) return;
  Tensor x = k.in(0).contiguous(), scale = k.in(1).contiguous(), shift = k.in(2).contiguous();
  const Shape& xs = x.shape();
  write_output(out, [&](float* y) {
    kernels::cpu::scale_shift_nchwc_f32(xs[0], xs[1], xs[2] * xs[3], static_cast<const float*>(x.data_ptr()),
                                        static_cast<const float*>(scale.data_ptr()),
                                        static_cast<const float*>(shift.data_ptr()), y,
                                        parse_activation(k.attrs.get_string("activation")));
  });
}

std::vector<TensorMeta> infer_layer_norm_nchwc(const InferCtx& c) {
  for (size_t i = 0; i < 3; ++i) check_f32(c, i);
  const Shape& xs = blocked_shape(c);
  const int64_t ch = c.attrs.get_int("channels");
  if (ch < 1 || nchwc_blocks(ch) != xs[1])
    c.fail("channels = " + std::to_string(ch) + " does not fill x's " + std::to_string(xs[1]) + " blocks (shape " +
           shape_str(xs) + ")");
  check_lane_vectors(c, xs, "weight", "bias");
  return {TensorMeta{DType::f32, xs}};
}

void layer_norm_nchwc_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  if (out.numel() == 0) return;
  Tensor x = k.in(0).contiguous(), w = k.in(1).contiguous(), b = k.in(2).contiguous();
  const Shape& xs = x.shape();
  write_output(out, [&](float* y) {
    kernels::cpu::layer_norm_channels_nchwc_f32(xs[0], xs[1], xs[2] * xs[3], k.attrs.get_int("channels"),
                                                static_cast<const float*>(x.data_ptr()),
                                                static_cast<const float*>(w.data_ptr()),
                                                static_cast<const float*>(b.data_ptr()),
                                                static_cast<float>(k.attrs.get_float("eps")), y);
  });
}

constexpr const char* kNoVjp = "compiler-emitted inference op: differentiate the unblocked graph";
constexpr const char* kNoBatch = "compiler-emitted inference op: vmap the unblocked graph";
constexpr const char* kNoOnnx = "compiler-emitted inference op: export the unblocked graph";

}  // namespace

namespace defs {

int64_t conv_nchwc_packed_bytes(size_t x_rank, const Shape& w, const Attrs& attrs, int winograd_tile) {
  KILN_ASSERT(w.size() == 4, "conv_nchwc_packed_bytes: filters of rank ", w.size());
  const kernels::cpu::Conv2dParams p = filter_params(w, attrs.get_int("groups"));
  const auto input = x_rank == 4 ? kernels::cpu::NchwcInput::plain : kernels::cpu::NchwcInput::blocked;
  const bool depthwise = depthwise_filters(p.groups, w);
  // As prepare_conv_nchwc: Winograd's tiles on blocked input only.
  const int tile = depthwise || input == kernels::cpu::NchwcInput::plain ? 0 : winograd_tile;
  return static_cast<int64_t>(packed_filter_floats(p, input, depthwise, tile) * sizeof(float));
}

}  // namespace defs

int64_t nchwc_conv_group_span(int64_t c, int64_t k, int64_t groups) {
  return groups == 1 ? 1 : kernels::cpu::nchwc_group_span(c, k, groups);
}

bool nchwc_winograd_offered(const Shape& weight, const Attrs& attrs, int tile) {
  const std::vector<int64_t> ones{1, 1};
  if (weight.size() != 4 || weight[2] != 3 || weight[3] != 3 || attrs.get_ints("stride") != ones ||
      attrs.get_ints("dilation") != ones)
    return false;
  // One group, or groups of at least two whole blocks in and out (Note [Winograd by groups] in
  // conv_nchwc.cc), offered by a group's C/G -> K/G: weight is [K, C/G, 3, 3]. A block a group is
  // too little work a position for the transforms: RegNetX-400MF's 16 -> 16 groups took 1.5x the
  // direct kernel's time in the engine.
  const int64_t groups = attrs.get_int("groups");
  const int64_t least = 2 * kChannelBlock;  // channels a group, in and out
  const bool block_groups = groups == 1 || (groups > 1 && weight[1] % kChannelBlock == 0 && weight[1] >= least &&
                                            weight[0] % (groups * kChannelBlock) == 0 && weight[0] / groups >= least);
  return block_groups && kernels::cpu::conv2d_nchwc_winograd_offered(weight[1], weight[0] / groups, tile);
}

void register_nchwc_ops(OpRegistry& r) {
  const DTypeSet f32{DType::f32};
  r.add("to_nchwc(Tensor x) -> Tensor")
      .infer(infer_to_nchwc)
      .kernel(DeviceType::cpu, f32, to_nchwc_kernel)
      .no_vjp(kNoVjp)
      .no_batch(kNoBatch)
      .no_onnx(kNoOnnx)
      .per_sample()
      .doc("[N, C, H, W] -> [N, ceil(C/16), H, W, 16]: channels blocked by 16, lanes past C zero.");
  r.add("from_nchwc(Tensor x, int channels) -> Tensor")
      .infer(infer_from_nchwc)
      .kernel(DeviceType::cpu, f32, from_nchwc_kernel)
      .no_vjp(kNoVjp)
      .no_batch(kNoBatch)
      .no_onnx(kNoOnnx)
      .per_sample()
      .doc("[N, ceil(channels/16), H, W, 16] -> [N, channels, H, W]: to_nchwc's inverse.");
  r.add("fused_conv2d_nchwc(Tensor x, Tensor w, Tensor? bias, Tensor? residual, int[] stride=[1,1], "
        "int[] padding=[0,0,0,0], int[] dilation=[1,1], int groups=1, str activation=\"none\", "
        "bool residual_before_activation=false) -> Tensor")
      .infer(infer_conv_nchwc)
      .kernel(DeviceType::cpu, f32, conv_nchwc_kernel<0, 0>, "default", conv_nchwc_prepare<0, 0>)
      // Note [Panels as tactics] (conv_nchwc.cc): offered where K is not a multiple of 64
      // (tactic_fits in src/ops/defs/linalg/matmul_tactics.cc).
      .kernel(DeviceType::cpu, f32, conv_nchwc_kernel<3, 0>, "panels3", conv_nchwc_prepare<3, 0>)
      .kernel(DeviceType::cpu, f32, conv_nchwc_kernel<4, 0>, "panels4", conv_nchwc_prepare<4, 0>)
      // Note [Winograd tiles] (conv_nchwc.cc): 3x3 filters of stride 1, one group; F(2x2, 3x3) and
      // F(4x4, 3x3).
      .kernel(DeviceType::cpu, f32, conv_nchwc_kernel<0, 2>, "winograd", conv_nchwc_prepare<0, 2>)
      .kernel(DeviceType::cpu, f32, conv_nchwc_kernel<0, 4>, "winograd4", conv_nchwc_prepare<0, 4>)
      .no_vjp(kNoVjp)
      .no_batch(kNoBatch)
      .no_onnx(kNoOnnx)
      .per_sample()
      // Note [Residual in place] (conv_nchwc.cc): one group, the residual added before the activation.
      .writes_over([](const Attrs& a, const std::vector<bool>& present) {
        const bool before = a.get_bool("residual_before_activation") || a.get_string("activation") == "none";
        return present.size() > 3 && present[3] && a.get_int("groups") == 1 && before ? 3 : -1;
      })
      .doc("fused_conv2d on channel-blocked residual and output [N, ceil(K/16), Ho, Wo, 16]; x blocked "
           "[N, ceil(C/16), H, W, 16], or NCHW with C <= 16 (a stem); w [K, C, R, S] (one group), [C, 1, R, S] "
           "(depthwise, groups = C) or [K, C / groups, R, S] with groups that fill whole blocks (Note [Grouped blocks] "
           "in kernels/cpu/conv_nchwc.cc).");
  r.add("scale_shift_nchwc(Tensor x, Tensor scale, Tensor shift, str activation=\"none\") -> Tensor")
      .infer(infer_scale_shift_nchwc)
      .kernel(DeviceType::cpu, f32, scale_shift_nchwc_kernel)
      .writes_over(0)  // each vector read before it is written (tests/ops/nchwc_test.cc)
      .no_vjp(kNoVjp)
      .no_batch(kNoBatch)
      .no_onnx(kNoOnnx)
      .per_sample()
      .doc("activation(x * scale + shift) on channel-blocked x [N, C/16, H, W, 16], scale and shift [C/16 * 16] "
           "(a batch norm after no convolution; Note [Blocked batch norm] in kernels/cpu/conv_nchwc.cc).");
  r.add("layer_norm_nchwc(Tensor x, Tensor weight, Tensor bias, int channels, float eps=1e-5) -> Tensor")
      .infer(infer_layer_norm_nchwc)
      .kernel(DeviceType::cpu, f32, layer_norm_nchwc_kernel)
      .writes_over(0)  // a pixel's values all read before it is written
      .no_vjp(kNoVjp)
      .no_batch(kNoBatch)
      .no_onnx(kNoOnnx)
      .per_sample()
      .doc("layer_norm over the channels of each pixel of channel-blocked x [N, C/16, H, W, 16] (the first "
           "`channels` lanes), weight and bias [C/16 * 16], zero past `channels` (Note [Blocked channel norm] in "
           "kernels/cpu/conv_nchwc.cc).");
  r.add("max_pool2d_nchwc(Tensor x, int[] kernel, int[] stride=[], int[] padding=[0,0,0,0], int[] dilation=[1,1], "
        "bool ceil_mode=false) -> Tensor")
      .infer([](const InferCtx& c) { return infer_pool_nchwc(c, true); })
      .kernel(DeviceType::cpu, f32, [](const KernelCall& k) { pool_nchwc_kernel(k, true); })
      .no_vjp(kNoVjp)
      .no_batch(kNoBatch)
      .no_onnx(kNoOnnx)
      .per_sample()
      .doc("max_pool2d on channel-blocked x [N, C/16, H, W, 16] -> [N, C/16, Ho, Wo, 16].");
  r.add("avg_pool2d_nchwc(Tensor x, int[] kernel, int[] stride=[], int[] padding=[0,0,0,0], bool ceil_mode=false, "
        "bool count_include_pad=false) -> Tensor")
      .infer([](const InferCtx& c) { return infer_pool_nchwc(c, false); })
      .kernel(DeviceType::cpu, f32, [](const KernelCall& k) { pool_nchwc_kernel(k, false); })
      .no_vjp(kNoVjp)
      .no_batch(kNoBatch)
      .no_onnx(kNoOnnx)
      .per_sample()
      .doc("avg_pool2d on channel-blocked x [N, C/16, H, W, 16] -> [N, C/16, Ho, Wo, 16] (Note [Blocked "
           "average pool] in kernels/cpu/conv_nchwc.cc).");
  r.add("global_avg_pool_nchwc(Tensor x) -> Tensor")
      .infer(infer_global_nchwc<false>)
      .kernel(DeviceType::cpu, f32, global_nchwc_kernel<false>)
      .no_vjp(kNoVjp)
      .no_batch(kNoBatch)
      .no_onnx(kNoOnnx)
      .per_sample()
      .doc("global_avg_pool on channel-blocked x [N, C/16, H, W, 16] -> [N, C/16, 1, 1, 16] (Note [Blocked "
           "global pool] in kernels/cpu/conv_nchwc.cc).");
  r.add("global_norm_nchwc(Tensor x) -> Tensor")
      .infer(infer_global_nchwc<true>)
      .kernel(DeviceType::cpu, f32, global_nchwc_kernel<true>)
      .no_vjp(kNoVjp)
      .no_batch(kNoBatch)
      .no_onnx(kNoOnnx)
      .per_sample()
      .doc("norm over H and W (the L2 norm of each channel's plane) on channel-blocked x [N, C/16, H, W, 16] -> "
           "[N, C/16, 1, 1, 16] (Note [Blocked spatial norm] in kernels/cpu/conv_nchwc.cc).");
}

}  // namespace kiln
