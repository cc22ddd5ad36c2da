// rotary_embedding: rotary position embeddings (RoPE) on the last dim,
//   y = x * cos + R(x) * sin
// with cos and sin broadcast to x (full width: a pair's two elements each read their own column,
// which in a RoPE cache hold the same angle) and R the rotation by a quarter turn of each pair:
//   interleaved = false (GPT-NeoX, LLaMA: rotate_half)  pairs (i, i + D/2): R(x)_i = -x_{i+D/2},
//                                                       R(x)_{i+D/2} = x_i
//   interleaved = true  (GPT-J)                          pairs (2i, 2i+1):  R(x)_2i = -x_2i+1,
//                                                       R(x)_2i+1 = x_2i
// ONNX RotaryEmbedding (opset 23) imports to it (its half-width caches gathered by position and
// repeated to full width, src/onnx/convert_nn.cc), and the compiler's rotary_fusion pass makes it
// from the rotate_half formula exporters write (Note [Rotary embeddings from their parts] in
// src/compiler/passes/rotary_fusion.cc).
//
// R is linear with R^T = -R, so dx = g * cos - R(g * sin), dcos = g * x and dsin = g * R(x)
// (summed to their shapes), R(u) being rotary_embedding(u, 0, 1): the rule is made of ops with
// rules of their own, so it differentiates again.
#include <algorithm>

#include "kiln/ops/norm.h"
#include "ops/defs/common.h"
#include "ops/defs/norm/norm_common.h"
#include "ops/defs/reduce/row_loop.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace {

std::vector<TensorMeta> infer_rotary(const InferCtx& c) {
  defs::check_floating_input(c, 0);
  const TensorMeta& x = c.in(0);
  if (x.shape.empty() || x.shape.back() % 2 != 0)
    c.fail("input 'x' " + meta_str(x) + " must have an even last dim (pairs of elements to rotate)");
  for (size_t i : {1, 2}) {
    const TensorMeta& t = c.in(i);
    if (t.dtype != x.dtype)
      c.fail("'" + c.arg_name(i) + "' is " + meta_str(t) + " but 'x' is " + meta_str(x) + "; they must share a dtype");
    bool fits = t.shape.size() <= x.shape.size();
    for (size_t j = 1; fits && j <= t.shape.size(); ++j) {
      const int64_t td = t.shape[t.shape.size() - j], xd = x.shape[x.shape.size() - j];
      fits = td == xd || td == 1;
    }
    if (!fits)
      c.fail("'" + c.arg_name(i) + "' " + shape_str(t.shape) + " must broadcast to the shape of 'x' " +
             shape_str(x.shape));
  }
  return {x};
}

// The partner of element i in a row of d and the sign R gives it: R(x)_i = sign * x_partner.
inline int64_t partner(int64_t i, int64_t d, bool interleaved, bool& negate) {
  if (interleaved) {
    negate = i % 2 == 0;
    return i ^ 1;
  }
  negate = i < d / 2;
  return negate ? i + d / 2 : i - d / 2;
}

template <class T>
void rotate_row(char* const* p, const int64_t* st, int64_t d, bool interleaved) {
  auto at = [&](int k, int64_t i) { return reinterpret_cast<const T*>(p[k] + i * st[k]); };
  T* y = reinterpret_cast<T*>(p[3]);
  const int64_t ys = st[3] / static_cast<int64_t>(sizeof(T));
  if constexpr (std::is_same_v<T, float>) {
    const int64_t one = static_cast<int64_t>(sizeof(float));
    if (st[0] == one && st[1] == one && st[2] == one && ys == 1) {
      // Unit-stride rows: loops the compiler vectorizes.
      const float *x = at(0, 0), *c = at(1, 0), *s = at(2, 0);
      if (interleaved) {
        for (int64_t i = 0; i < d; i += 2) {
          y[i] = x[i] * c[i] - x[i + 1] * s[i];
          y[i + 1] = x[i + 1] * c[i + 1] + x[i] * s[i + 1];
        }
        return;
      }
      const int64_t h = d / 2;
      for (int64_t i = 0; i < h; ++i) y[i] = x[i] * c[i] - x[i + h] * s[i];
      for (int64_t i = h; i < d; ++i) y[i] = x[i] * c[i] + x[i - h] * s[i];
      return;
    }
  }
  using Acc = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>, T, double>;
  for (int64_t i = 0; i < d; ++i) {
    bool negate = false;
    const int64_t j = partner(i, d, interleaved, negate);
    const Acc xj = static_cast<Acc>(*at(0, j));
    y[i * ys] = convert<T>(static_cast<Acc>(*at(0, i)) * static_cast<Acc>(*at(1, i)) +
                           (negate ? -xj : xj) * static_cast<Acc>(*at(2, i)));
  }
}

void rotary_kernel(const KernelCall& k) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out(0);
  const Tensor c = k.in(1).broadcast_to(x.shape()), s = k.in(2).broadcast_to(x.shape());
  const bool interleaved = k.attrs.get_bool("interleaved");
  const int64_t d = x.shape().back();
  std::array<std::vector<int64_t>, 4> st{defs::byte_strides(x), defs::byte_strides(c), defs::byte_strides(s),
                                         defs::byte_strides(out)};
  std::array<char*, 4> base{static_cast<char*>(x.data_ptr()), static_cast<char*>(c.data_ptr()),
                            static_cast<char*>(s.data_ptr()), static_cast<char*>(out.data_ptr())};
  // The last dim alone is a row's inner dim (never merged with another: one dim is listed).
  const defs::RowPlan<4> plan = defs::make_row_plan<4>(x.shape(), st, base, {x.dim() - 1});
  std::array<int64_t, 4> inner{};
  for (int j = 0; j < 4; ++j) inner[static_cast<size_t>(j)] = plan.inner_strides[static_cast<size_t>(j)].front();
  visit_floating(x.dtype(), "rotary_embedding", [&](auto tag) {
    using T = typename decltype(tag)::type;
    defs::for_each_row(plan, [&](int64_t, char** row) { rotate_row<T>(row, inner.data(), d, interleaved); });
  });
}

// R(u): the quarter turn of each pair, rotary_embedding with cos 0 and sin 1.
Tensor rotate(const Tensor& u, bool interleaved) {
  return rotary_embedding(u, zeros({}, TensorOptions(u.dtype())), ones({}, TensorOptions(u.dtype())), interleaved);
}

std::vector<Tensor> rotary_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const Tensor& x = c.inputs[0];
  const Tensor& cos = c.inputs[1];
  const Tensor& sin = c.inputs[2];
  const Tensor& g = gs[0];
  const bool interleaved = c.attrs.get_bool("interleaved");
  std::vector<Tensor> r(3);
  if (c.needs(0)) r[0] = g * cos - rotate(g * sin, interleaved);
  if (c.needs(1)) r[1] = defs::sum_to(g * x, c.in_shape(1));
  if (c.needs(2)) r[2] = defs::sum_to(g * rotate(x, interleaved), c.in_shape(2));
  return r;
}

}  // namespace

namespace defs {

void register_rotary_ops(OpRegistry& r) {
  rules_pending(r.add("rotary_embedding(Tensor x, Tensor cos, Tensor sin, bool interleaved=false) -> Tensor"),
                "RotaryEmbedding", 23)
      .infer(infer_rotary)
      .kernel(DeviceType::cpu, DTypeSet::floating(), rotary_kernel)
      .vjp(VjpRule{rotary_vjp, {0, 1, 2}, {}})
      .doc("x * cos + R(x) * sin on the last dim, R turning each pair (i, i + D/2), or (2i, 2i + 1) when "
           "interleaved, a quarter turn; cos and sin broadcast to x");
}

}  // namespace defs

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved, SourceLoc loc) {
  return dispatch1(op("rotary_embedding"), {x, cos, sin}, {{"interleaved", interleaved}}, loc);
}

}  // namespace kiln
