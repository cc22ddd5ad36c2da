// N-dimensional indexing, as ONNX GatherND and ScatterND: the last dim of `indices` holds m
// coordinates into x's dims [batch_dims, batch_dims + m), and each index tuple selects (gather_nd)
// or writes (scatter_nd) the slice of x's remaining dims. Negative coordinates count from the end;
// one out of range is a kiln::Error naming the value, its position in indices and the dim.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kiln/ops/index.h"
#include "ops/defs/common.h"
#include "ops/defs/index/indices.h"
#include "ops/defs/register_all.h"
#include "ops/defs/shape/movement.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace {

using defs::contiguous_data;

// The layout both ops share: x = [batch dims (b)] + [indexed dims (m)] + [slice dims];
// indices = [batch dims] + [tuple dims] + [m].
struct NdLayout {
  int64_t batch = 1;   // product of the batch dims
  int64_t tuples = 1;  // index tuples per batch element
  int64_t m = 0;       // coordinates per tuple
  int64_t slice = 1;   // elements per selected slice
};

NdLayout nd_layout(const Shape& x, const Shape& indices, int64_t batch_dims) {
  NdLayout l;
  l.m = indices.back();
  for (int64_t d = 0; d < batch_dims; ++d) l.batch *= x[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(batch_dims); d + 1 < indices.size(); ++d) l.tuples *= indices[d];
  for (size_t d = static_cast<size_t>(batch_dims + l.m); d < x.size(); ++d) l.slice *= x[d];
  return l;
}

// Checks ranks, batch dims and m; returns the shape of the selected part
// indices.shape[:-1] + x.shape[b + m:] (gather_nd's output, scatter_nd's updates).
Shape nd_selected_shape(const InferCtx& c, const char* op, const TensorMeta& x, const TensorMeta& ind, int64_t b) {
  defs::check_index_dtype(op, "indices", ind);
  const int64_t r = static_cast<int64_t>(x.shape.size()), q = static_cast<int64_t>(ind.shape.size());
  if (r < 1) c.fail("x must have rank >= 1, got " + meta_str(x));
  if (q < 1) c.fail("indices must have rank >= 1, got " + meta_str(ind));
  if (b < 0 || b >= std::min(r, q))
    c.fail("batch_dims = " + std::to_string(b) + " must be in [0, min(rank of x, rank of indices)) = [0, " +
           std::to_string(std::min(r, q)) + ") (x " + meta_str(x) + ", indices " + meta_str(ind) + ")");
  for (int64_t d = 0; d < b; ++d)
    if (x.shape[static_cast<size_t>(d)] != ind.shape[static_cast<size_t>(d)])
      c.fail("the batch dims of x (" + meta_str(x) + ") and indices (" + meta_str(ind) + ") differ at dim " +
             std::to_string(d));
  const int64_t m = ind.shape.back();
  if (m < 1 || m > r - b)
    c.fail("the last dim of indices (" + meta_str(ind) + ") holds " + std::to_string(m) +
           " coordinates, but x (" + meta_str(x) + ") has " + std::to_string(r - b) +
           " dims after the batch dims; it must be 1 to " + std::to_string(r - b));
  Shape out(ind.shape.begin(), ind.shape.end() - 1);
  out.insert(out.end(), x.shape.begin() + b + m, x.shape.end());
  return out;
}

// Element offset (into contiguous x) of every index tuple's slice, in tuple order, with negative
// coordinates wrapped and each checked against its dim.
std::vector<int64_t> slice_offsets(const char* op, const Tensor& x, const Tensor& indices, int64_t b) {
  const NdLayout l = nd_layout(x.shape(), indices.shape(), b);
  Tensor ic = contiguous_data(indices);
  std::vector<int64_t> raw(static_cast<size_t>(ic.numel()));
  visit_dtype(ic.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const T* p = static_cast<const T*>(ic.data_ptr());
      for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<int64_t>(p[i]);
    } else {
      KILN_ASSERT(false, op, ": indices of dtype ", dtype_name(ic.dtype()), " reached the kernel");
    }
  });
  // Contiguous element strides of x's indexed dims and the size of one batch element.
  std::vector<int64_t> stride(static_cast<size_t>(l.m));
  int64_t s = l.slice;
  for (int64_t j = l.m - 1; j >= 0; --j) {
    stride[static_cast<size_t>(j)] = s;
    s *= x.shape()[static_cast<size_t>(b + j)];
  }
  const int64_t per_batch = s;
  std::vector<int64_t> offsets(static_cast<size_t>(l.batch * l.tuples));
  for (int64_t t = 0; t < l.batch * l.tuples; ++t) {
    int64_t off = (t / l.tuples) * per_batch;
    for (int64_t j = 0; j < l.m; ++j) {
      const size_t pos = static_cast<size_t>(t * l.m + j);
      const int64_t size = x.shape()[static_cast<size_t>(b + j)];
      int64_t v = raw[pos];
      if (v < -size || v >= size) [[unlikely]]
        KILN_FAIL(op, ": index ", v, " at position ", shape_str(defs::unravel(static_cast<int64_t>(pos), ic.shape())),
                  " of indices (shape ", shape_str(ic.shape()), ") is out of range for dim ", b + j, " of x (shape ",
                  shape_str(x.shape()), "); valid indices are ", -size, " to ", size - 1);
      if (v < 0) v += size;
      off += v * stride[static_cast<size_t>(j)];
    }
    offsets[static_cast<size_t>(t)] = off;
  }
  return offsets;
}

// ---- gather_nd ------------------------------------------------------------------------------------------------

std::vector<TensorMeta> infer_gather_nd(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  return {{x.dtype, nd_selected_shape(c, "gather_nd", x, c.in(1), c.attrs.get_int("batch_dims"))}};
}

void gather_nd_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  KILN_ASSERT(out.numel() == 0 || out.is_contiguous(), "gather_nd: output must be contiguous");
  if (out.numel() == 0) return;
  const int64_t b = k.attrs.get_int("batch_dims");
  Tensor x = contiguous_data(k.in(0));
  const std::vector<int64_t> offsets = slice_offsets("gather_nd", x, k.in(1), b);
  const int64_t slice = nd_layout(x.shape(), k.in(1).shape(), b).slice;
  const size_t es = x.element_size(), bytes = static_cast<size_t>(slice) * es;
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  parallel_for(0, static_cast<int64_t>(offsets.size()), std::max<int64_t>(1, kernels::cpu::kGrain / std::max<int64_t>(1, slice)),
               [&](int64_t t0, int64_t t1) {
                 for (int64_t t = t0; t < t1; ++t)
                   std::memcpy(dst + static_cast<size_t>(t) * bytes, src + static_cast<size_t>(offsets[static_cast<size_t>(t)]) * es, bytes);
               });
}

// ---- scatter_nd -----------------------------------------------------------------------------------------------

template <class C>
bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) return std::isnan(v);
  else return false;
}

bool valid_reduction(const std::string& r) {
  return r == "none" || r == "add" || r == "mul" || r == "max" || r == "min";
}

std::vector<TensorMeta> infer_scatter_nd(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  const TensorMeta& upd = c.in(2);
  const std::string& red = c.attrs.get_string("reduction");
  if (!valid_reduction(red))
    c.fail("attribute 'reduction' must be \"none\", \"add\", \"mul\", \"max\" or \"min\", got \"" + red + "\"");
  if (red != "none" && x.dtype == DType::boolean)
    c.fail("reduction \"" + red + "\" needs a numeric dtype, but x is " + meta_str(x));
  const Shape want = nd_selected_shape(c, "scatter_nd", x, c.in(1), 0);
  if (upd.dtype != x.dtype) c.fail("updates (" + meta_str(upd) + ") must have the dtype of x (" + meta_str(x) + ")");
  if (upd.shape != want)
    c.fail("updates has shape " + shape_str(upd.shape) + " but must be indices.shape[:-1] + x.shape[m:] = " +
           shape_str(want) + " (x " + meta_str(x) + ", indices " + meta_str(c.in(1)) + ")");
  return {x};
}

// Note [ScatterND order]: tuples are applied in index order, so with reduction "none" a repeated
// index keeps the last update (deterministic; ONNX leaves it undefined) and the reductions combine
// every update. Each slice's elements run in parallel when the slice is large.
void scatter_nd_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  KILN_ASSERT(out.numel() == 0 || out.is_contiguous(), "scatter_nd: output must be contiguous");
  kernels::cpu::copy_into(out, k.in(0));
  if (out.numel() == 0) return;
  const std::vector<int64_t> offsets = slice_offsets("scatter_nd", out, k.in(1), 0);
  const int64_t slice = nd_layout(out.shape(), k.in(1).shape(), 0).slice;
  Tensor upd = contiguous_data(k.in(2));
  const std::string& red = k.attrs.get_string("reduction");
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    T* dst = static_cast<T*>(out.data_ptr());
    const T* src = static_cast<const T*>(upd.data_ptr());
    auto apply = [&](auto combine) {
      for (size_t t = 0; t < offsets.size(); ++t) {
        T* d = dst + offsets[t];
        const T* s = src + static_cast<int64_t>(t) * slice;
        parallel_for(0, slice, kernels::cpu::kGrain, [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) d[i] = combine(d[i], s[i]);
        });
      }
    };
    if (red == "none") {
      apply([](T, T u) { return u; });
    } else if constexpr (std::is_same_v<T, bool>) {
      KILN_ASSERT(false, "scatter_nd: bool with reduction ", red);
    } else if (red == "add") {
      apply([](T a, T u) { return convert<T>(static_cast<C>(static_cast<C>(a) + static_cast<C>(u))); });
    } else if (red == "mul") {
      apply([](T a, T u) { return convert<T>(static_cast<C>(static_cast<C>(a) * static_cast<C>(u))); });
    } else if (red == "max") {  // NaN propagates
      apply([](T a, T u) {
        const C x = static_cast<C>(a), y = static_cast<C>(u);
        return is_nan(x) ? a : (is_nan(y) || y > x ? u : a);
      });
    } else {
      apply([](T a, T u) {
        const C x = static_cast<C>(a), y = static_cast<C>(u);
        return is_nan(x) ? a : (is_nan(y) || y < x ? u : a);
      });
    }
  });
}

// Note [ScatterND gradients]: with "none", x's gradient is g with the written slices zeroed and
// the updates' gradient is g gathered at the indices (a repeated index passes the gradient to
// every duplicate, though only the last was written); with "add", x's gradient is g and the
// updates' gather_nd(g). "mul", "max" and "min" have no rule yet: backward through them is a
// kiln::Error naming the reduction.
std::vector<Tensor> scatter_nd_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const Tensor& g = gs[0];
  const Tensor& indices = c.inputs[1];
  const std::string& red = c.attrs.get_string("reduction");
  KILN_CHECK(red == "none" || red == "add", "scatter_nd: the derivative with reduction \"", red,
             "\" is not implemented (only \"none\" and \"add\"); detach the inputs or use reduction \"add\"");
  std::vector<Tensor> r(3);
  if (c.needs(0)) r[0] = red == "add" ? g : scatter_nd(g, indices, zeros(c.in_shape(2), TensorOptions(g.dtype())), "none");
  if (c.needs(2)) r[2] = gather_nd(g, indices);
  return r;
}

// gather_nd's gradient scatters g back with reduction "add" (repeated tuples accumulate). With
// batch_dims b > 0, the batch dims are flattened into one and its index prepended to every tuple,
// which turns the batched gather into an unbatched one on x viewed as [B] + x.shape[b:].
std::vector<Tensor> gather_nd_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  std::vector<Tensor> res(2);
  if (!c.needs(0)) return res;
  const Tensor& g = gs[0];
  const Tensor& indices = c.inputs[1];
  const Shape& xs = c.in_shape(0);
  const int64_t b = c.attrs.get_int("batch_dims");
  if (b == 0) {
    res[0] = scatter_nd(zeros(xs, TensorOptions(g.dtype())), indices, g, "add");
    return res;
  }
  int64_t batch = 1;
  for (int64_t d = 0; d < b; ++d) batch *= xs[static_cast<size_t>(d)];
  const Shape& is = indices.shape();
  Shape flat_x{batch}, flat_i{batch}, iota_shape{batch}, flat_g{batch};
  flat_x.insert(flat_x.end(), xs.begin() + b, xs.end());
  flat_i.insert(flat_i.end(), is.begin() + b, is.end());
  for (size_t d = static_cast<size_t>(b); d < is.size(); ++d) iota_shape.push_back(1);
  flat_g.insert(flat_g.end(), g.shape().begin() + b, g.shape().end());
  Shape tuple_shape(flat_i.begin(), flat_i.end() - 1);
  tuple_shape.push_back(1);
  Tensor iota = expand(reshape(arange(batch, TensorOptions(DType::i64)), iota_shape), tuple_shape);
  Tensor aug = concat({iota, reshape(indices.to(DType::i64), flat_i)}, -1);
  Tensor dx = scatter_nd(zeros(flat_x, TensorOptions(g.dtype())), aug, reshape(g, flat_g), "add");
  res[0] = reshape(dx, xs);
  return res;
}

}  // namespace

void register_gather_nd_ops(OpRegistry& r) {
  defs::rules_pending(r.add("gather_nd(Tensor x, Tensor indices, int batch_dims=0) -> Tensor"), "GatherND", 12)
      .infer(infer_gather_nd)
      .kernel(DeviceType::cpu, DTypeSet::all(), gather_nd_kernel)
      .vjp(VjpRule{gather_nd_vjp, {1}, {}})
      .doc("out[b..., i...] = x[b..., indices[b..., i..., :]] (ONNX GatherND); negative indices count from the end");
  defs::rules_pending(r.add("scatter_nd(Tensor x, Tensor indices, Tensor updates, str reduction=\"none\") -> Tensor"),
                      "ScatterND", 11)
      .infer(infer_scatter_nd)
      .kernel(DeviceType::cpu, DTypeSet::all(), scatter_nd_kernel)
      .vjp(VjpRule{scatter_nd_vjp, {1}, {}})
      .doc("a copy of x with x[indices[i..., :]] replaced (\"none\") or combined (\"add\", \"mul\", \"max\", \"min\") "
           "with updates[i...] (ONNX ScatterND; Note [ScatterND order])");
}

Tensor gather_nd(const Tensor& x, const Tensor& indices, int64_t batch_dims, SourceLoc loc) {
  return dispatch1(op("gather_nd"), {x, indices}, {{"batch_dims", batch_dims}}, loc);
}
Tensor scatter_nd(const Tensor& x, const Tensor& indices, const Tensor& updates, const std::string& reduction,
                  SourceLoc loc) {
  return dispatch1(op("scatter_nd"), {x, indices, updates}, {{"reduction", reduction}}, loc);
}

}  // namespace kiln
