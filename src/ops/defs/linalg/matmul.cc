// Matrix products: matmul (NumPy semantics, ONNX MatMul) and gemm (ONNX Gemm). Both run the
// blocked GEMM of kernels/cpu/gemm.h; 16-bit floats compute in f32, i32 in i64 (wrapping).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/loops.h"
#include "kiln/ops/linalg.h"
#include "ops/defs/common.h"
#include "ops/defs/register_all.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace {

const DTypeSet kMatmulDTypes = DTypeSet::floating() | DTypeSet{DType::i32, DType::i64};

// The dtype the GEMM runs in for a tensor dtype.
DType gemm_compute_dtype(DType t) {
  if (t == DType::f16 || t == DType::bf16) return DType::f32;
  if (t == DType::i32) return DType::i64;
  return t;
}

// `t` in dtype `to`: t itself when it already is, else a contiguous converted copy. Kernels do not
// call ops (that would re-enter the dispatcher), so this goes through copy_into directly.
Tensor as_dtype(const Tensor& t, DType to) {
  if (t.dtype() == to) return t;
  Tensor out = empty(t.shape(), TensorOptions(to, t.device()));
  kernels::cpu::copy_into(out, t);
  return out;
}

// ---- matmul shapes ---------------------------------------------------------------------------------

struct MatmulPlan {
  Shape batch;          // broadcast batch dims
  int64_t m = 1, k = 1, n = 1;
  Shape out;            // NumPy result shape (vector dims removed)
};

MatmulPlan plan_matmul(const Shape& a, const Shape& b, const char* op) {
  KILN_CHECK(!a.empty() && !b.empty(), op, ": operands must be at least 1-D, got a of shape ", shape_str(a),
             " and b of shape ", shape_str(b), " (use mul for scalars)");
  MatmulPlan p;
  Shape a_batch(a.begin(), a.end() - std::min<size_t>(a.size(), 2));
  Shape b_batch(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
  p.m = a.size() == 1 ? 1 : a[a.size() - 2];
  p.k = a.back();
  int64_t kb = b.size() == 1 ? b[0] : b[b.size() - 2];
  p.n = b.size() == 1 ? 1 : b.back();
  KILN_CHECK(p.k == kb, op, ": inner dimensions differ: a has shape ", shape_str(a), " (K = ", p.k,
             ") but b has shape ", shape_str(b), " (K = ", kb, ")");
  // Batch dims broadcast like NumPy; the message names the full operand shapes.
  size_t nb = std::max(a_batch.size(), b_batch.size());
  p.batch.assign(nb, 1);
  for (size_t i = 0; i < nb; ++i) {
    int64_t da = i < nb - a_batch.size() ? 1 : a_batch[i - (nb - a_batch.size())];
    int64_t db = i < nb - b_batch.size() ? 1 : b_batch[i - (nb - b_batch.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, op, ": batch dimensions do not broadcast: a has shape ", shape_str(a),
               " and b has shape ", shape_str(b));
    p.batch[i] = da == 1 ? db : da;
  }
  p.out = p.batch;
  if (a.size() > 1) p.out.push_back(p.m);
  if (b.size() > 1) p.out.push_back(p.n);
  return p;
}

std::vector<TensorMeta> infer_matmul(const InferCtx& c) {
  const TensorMeta& a = c.in(0);
  const TensorMeta& b = c.in(1);
  MatmulPlan p = plan_matmul(a.shape, b.shape, "matmul");
  return {{promote_types(a.dtype, b.dtype), p.out}};
}

// Element strides of operand `t` seen as batch + [rows, cols] (`vec_as_row`: a 1-D t is a row
// [1, K]; otherwise a column [K, 1]); broadcast batch dims get stride 0.
struct OperandLayout {
  std::vector<int64_t> batch_strides;
  int64_t rs = 0, cs = 0;
};
OperandLayout layout_of(const Tensor& t, size_t batch_rank, bool vec_as_row) {
  OperandLayout l;
  const Shape& s = t.shape();
  const Strides& st = t.strides();
  size_t r = s.size();
  if (r == 1) {
    if (vec_as_row) { l.rs = 0; l.cs = st[0]; }
    else { l.rs = st[0]; l.cs = 0; }
  } else {
    l.rs = st[r - 2];
    l.cs = st[r - 1];
  }
  size_t own = r >= 2 ? r - 2 : 0;
  l.batch_strides.assign(batch_rank, 0);
  for (size_t i = 0; i < own; ++i)
    l.batch_strides[batch_rank - own + i] = s[i] == 1 ? 0 : st[i];
  return l;
}

// Note [Matrix-vector products in batches]
// ConvBERT's span-based convolution weighs each head's unfolded values by its kernel: 768 products
// of [64, 9] @ [9, 1] a layer at batch 1, each a GEMM call that packed a and ran a 12 x 32 register
// tile for one column (0.66 ms a layer on one thread, about 1 GFLOP/s). A short product of one
// column is a weighted sum of a's columns, computed here directly, eight rows at a time (eight
// independent sums: a K-long chain per row would wait on each add).
constexpr int64_t kDirectMatvecWork = int64_t{1} << 14;  // M x K at most

template <class T>
void matvec(int64_t m, int64_t k, const T* a, int64_t rs, int64_t cs, const T* b, int64_t b_rs, T* out) {
  int64_t i = 0;
  for (; i + 8 <= m; i += 8) {
    T acc[8] = {};
    for (int64_t l = 0; l < k; ++l) {
      const T bl = b[l * b_rs];
      for (int64_t r = 0; r < 8; ++r) acc[r] += a[(i + r) * rs + l * cs] * bl;
    }
    std::copy(acc, acc + 8, out + i);
  }
  for (; i < m; ++i) {
    T acc = T(0);
    for (int64_t l = 0; l < k; ++l) acc += a[i * rs + l * cs] * b[l * b_rs];
    out[i] = acc;
  }
}

// out[i] = a[i] @ b[i] over every batch index; all three in the GEMM dtype T; out contiguous.
template <class T>
void batched_matmul(const MatmulPlan& p, const Tensor& out, const Tensor& a, const Tensor& b) {
  const size_t nb = p.batch.size();
  OperandLayout la = layout_of(a, nb, true), lb = layout_of(b, nb, false);
  const T* ap = static_cast<const T*>(a.data_ptr());
  const T* bp = static_cast<const T*>(b.data_ptr());
  T* op = static_cast<T*>(out.data_ptr());
  const int64_t batches = numel_of(p.batch);
  const int64_t mn = p.m * p.n;

  // Note [Folding batch into rows]: when b is the same matrix for every batch (all its batch
  // strides 0) and a's batch and row dims collapse into one strided dim, the whole product is one
  // (batch * M) x K GEMM, which is how [batch, seq, d] @ [d, e] runs.
  bool b_shared = std::all_of(lb.batch_strides.begin(), lb.batch_strides.end(), [](int64_t s) { return s == 0; });
  if (batches > 1 && b_shared) {
    std::vector<std::pair<int64_t, int64_t>> dims;  // (size, stride) of batch dims then M, size-1 dims dropped
    for (size_t i = 0; i < nb; ++i)
      if (p.batch[i] != 1) dims.push_back({p.batch[i], la.batch_strides[i]});
    if (p.m != 1) dims.push_back({p.m, la.rs});
    bool merges = true;
    for (size_t i = 0; i + 1 < dims.size(); ++i)
      if (dims[i].second != dims[i + 1].second * dims[i + 1].first) merges = false;
    if (merges) {
      int64_t row_stride = dims.empty() ? 0 : dims.back().second;
      kernels::cpu::gemm(batches * p.m, p.n, p.k, T(1), ap, row_stride, la.cs, bp, lb.rs, lb.cs, T(0), op, p.n);
      return;
    }
    // Note [Gathering rows before a shared B]: rows that do not collapse (a permuted a, as
    // PyTorch's seq-first attention feeds its input projection: [seq, batch, d] over a [batch,
    // seq, d] buffer) are copied into one contiguous (batch * M) x K matrix first. The copy reads
    // and writes M x K values once; the GEMM per batch index it saves would each have packed all
    // of b again for a few rows (128 products of 8 x 768 @ 768 x 2304 ran 3x slower than one).
    // Only where a holds every row itself: a broadcast over the batch has fewer values.
    if (p.n >= 16 && a.numel() == batches * p.m * p.k) {
      Tensor rows = a.contiguous();
      kernels::cpu::gemm(batches * p.m, p.n, p.k, T(1), static_cast<const T*>(rows.data_ptr()), p.k, 1, bp, lb.rs,
                         lb.cs, T(0), op, p.n);
      return;
    }
  }

  // Note [Matrix-vector products in batches]
  // (Floating types only: the integer GEMM wraps around in unsigned arithmetic.)
  const bool direct_matvec = std::is_floating_point_v<T> && p.n == 1 && p.m * p.k <= kDirectMatvecWork;
  auto run = [&](int64_t i0, int64_t i1) {
    std::vector<int64_t> idx(nb, 0);
    int64_t rem = i0;
    for (size_t d = nb; d-- > 0;) {
      idx[d] = rem % p.batch[d];
      rem /= p.batch[d];
    }
    for (int64_t i = i0; i < i1; ++i) {
      int64_t oa = 0, ob = 0;
      for (size_t d = 0; d < nb; ++d) {
        oa += idx[d] * la.batch_strides[d];
        ob += idx[d] * lb.batch_strides[d];
      }
      if (direct_matvec)
        matvec(p.m, p.k, ap + oa, la.rs, la.cs, bp + ob, lb.rs, op + i * mn);
      else
        kernels::cpu::gemm(p.m, p.n, p.k, T(1), ap + oa, la.rs, la.cs, bp + ob, lb.rs, lb.cs, T(0), op + i * mn, p.n);
      for (size_t d = nb; d-- > 0;) {
        if (++idx[d] < p.batch[d]) break;
        idx[d] = 0;
      }
    }
  };
  // Note [Products side by side]: small products in many batches run in parallel over the batches
  // (each GEMM then runs inline, on one thread). A product is threaded on its own only from 2^21
  // multiply-adds (kSerialFlops in gemm_packed.cc), and even then pays a shared packing of A and
  // two parallel regions for a few panels, so batches of products up to 2^24 also go side by
  // side where the batches share out evenly between the threads: attention's QK^T and PV
  // products (12 heads of 128 x 128 x 64, 1M each) had run one after another on one thread, 2x
  // the time ONNX Runtime took, and DeBERTa's 128 x 512 x 64 position products each threaded.
  const int64_t work = mn * std::max<int64_t>(p.k, 1);
  const int64_t threads = get_num_threads();
  const bool even = batches % threads == 0 || batches >= 4 * threads;
  if (batches > 1 && (work < (int64_t{1} << 18) || (work < (int64_t{1} << 24) && even)))
    parallel_for(0, batches, std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(work, 1)), run);
  else
    run(0, batches);
}

// Runs `fn` with the GEMM element type of dtype t (float, double or int64_t).
template <class F>
void visit_gemm_dtype(DType t, F&& fn) {
  switch (t) {
    case DType::f32: fn(TypeTag<float>{}); return;
    case DType::f64: fn(TypeTag<double>{}); return;
    case DType::i64: fn(TypeTag<int64_t>{}); return;
    default: KILN_ASSERT(false, "no GEMM for dtype ", dtype_name(t));
  }
}

// Note [In-place matmul]
// a.matmul_(b) computes A <- A·B for a square B. An element-wise in-place product cannot work:
// A'[i][j] = sum_l A[i][l]·B[l][j] reads the whole old row i, so writing A'[i][j] destroys A[i][j]
// while A'[i][j+1..] still need it. Rows are independent, though: copying an r-row panel of A
// aside (O(r·k) extra memory) and letting the GEMM write the panel's product straight back into
// those rows of A is exact, and runs the same blocked GEMM as the out-of-place product.
constexpr int64_t kInplacePanelRows = 256;

template <class T>
void matmul_rows_inplace(T* a, int64_t m, int64_t k, int64_t lda, const T* b, int64_t b_rs, int64_t b_cs) {
  const int64_t r = std::min<int64_t>(m, kInplacePanelRows);
  Tensor panel_t = empty({r, k}, TensorOptions(dtype_of<T>));
  T* panel = panel_t.data<T>();
  for (int64_t i0 = 0; i0 < m; i0 += r) {
    const int64_t rows = std::min(r, m - i0);
    for (int64_t i = 0; i < rows; ++i) std::copy_n(a + (i0 + i) * lda, k, panel + i * k);
    kernels::cpu::gemm(rows, k, k, T(1), panel, k, 1, b, b_rs, b_cs, T(0), a + i0 * lda, lda);
  }
}

// The in-place form (out aliases a): row panels when a's rows are unit-stride and evenly spaced
// and the dtype has a native GEMM; otherwise (rare layouts, 16-bit floats) through a temporary.
bool matmul_inplace_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  const Tensor& a = k.in(0);
  if (out.storage() != a.storage() || out.data_ptr() != a.data_ptr()) return false;
  Tensor b = k.in(1);
  const int64_t kk = a.shape().back();
  const DType ct = gemm_compute_dtype(out.dtype());
  bool rows_ok = ct == out.dtype() && b.dim() == 2 && a.dim() >= 1 && a.strides().back() == 1;
  // Leading dims must fold into one row dim of constant stride.
  int64_t m = 1;
  for (int64_t d = a.dim() - 2; rows_ok && d >= 0; --d) {
    const size_t u = static_cast<size_t>(d);
    if (a.shape()[u] != 1 && a.strides()[u] != a.strides()[static_cast<size_t>(a.dim() - 2)] * m) rows_ok = false;
    m *= a.shape()[u];
  }
  if (!rows_ok || a.numel() == 0) {
    if (a.numel() == 0) return true;
    MatmulPlan p = plan_matmul(a.shape(), b.shape(), "matmul");
    Tensor ac = as_dtype(a, ct), bc = as_dtype(b, ct);
    Tensor res = empty(out.shape(), TensorOptions(ct));
    visit_gemm_dtype(ct, [&](auto tag) {
      using T = typename decltype(tag)::type;
      batched_matmul<T>(p, res, ac, bc);
    });
    kernels::cpu::copy_into(out, res);
    return true;
  }
  if (b.storage() == a.storage()) {  // a.matmul_(a): B must survive the writes
    Tensor copy = empty(b.shape(), TensorOptions(b.dtype()));
    kernels::cpu::copy_into(copy, b);
    b = copy;
  }
  const int64_t lda = a.dim() >= 2 ? a.strides()[static_cast<size_t>(a.dim() - 2)] : kk;
  visit_gemm_dtype(ct, [&](auto tag) {
    using T = typename decltype(tag)::type;
    matmul_rows_inplace<T>(static_cast<T*>(a.data_ptr()), m, kk, lda, static_cast<const T*>(b.data_ptr()),
                           b.strides()[0], b.strides()[1]);
  });
  return true;
}

void matmul_kernel(const KernelCall& k) {
  if (matmul_inplace_kernel(k)) return;
  const Tensor& out = k.out(0);
  MatmulPlan p = plan_matmul(k.in(0).shape(), k.in(1).shape(), "matmul");
  const DType ct = gemm_compute_dtype(out.dtype());
  Tensor a = as_dtype(k.in(0), ct), b = as_dtype(k.in(1), ct);
  Tensor res = ct == out.dtype() && out.is_contiguous() ? out : empty(out.shape(), TensorOptions(ct, out.device()));
  if (res.numel() > 0) {
    visit_gemm_dtype(ct, [&](auto tag) {
      using T = typename decltype(tag)::type;
      batched_matmul<T>(p, res, a, b);
    });
  }
  if (!res.is_same(out)) kernels::cpu::copy_into(out, res);
}

// ---- gemm ------------------------------------------------------------------------------------------

std::vector<TensorMeta> infer_gemm(const InferCtx& c) {
  const TensorMeta& a = c.in(0);
  const TensorMeta& b = c.in(1);
  bool ta = c.attrs.get_bool("trans_a"), tb = c.attrs.get_bool("trans_b");
  if (a.shape.size() != 2 || b.shape.size() != 2)
    c.fail("a and b must be 2-D, got a of shape " + shape_str(a.shape) + " and b of shape " + shape_str(b.shape));
  int64_t m = ta ? a.shape[1] : a.shape[0], ka = ta ? a.shape[0] : a.shape[1];
  int64_t kb = tb ? b.shape[1] : b.shape[0], n = tb ? b.shape[0] : b.shape[1];
  if (ka != kb)
    c.fail("inner dimensions differ: op(a) is " + std::to_string(m) + " x " + std::to_string(ka) + " (a of shape " +
           shape_str(a.shape) + (ta ? ", transposed" : "") + ") but op(b) is " + std::to_string(kb) + " x " +
           std::to_string(n) + " (b of shape " + shape_str(b.shape) + (tb ? ", transposed" : "") + ")");
  DType dt = promote_types(a.dtype, b.dtype);
  if (c.has(2)) {
    const TensorMeta& cm = c.in(2);
    Shape mn{m, n};
    bool ok = cm.shape.size() <= 2;
    for (size_t i = 0; ok && i < cm.shape.size(); ++i) {
      int64_t d = cm.shape[i], want = mn[2 - cm.shape.size() + i];
      ok = d == 1 || d == want;
    }
    if (!ok)
      c.fail("c of shape " + shape_str(cm.shape) + " does not broadcast to the " + std::to_string(m) + " x " +
             std::to_string(n) + " result [" + std::to_string(m) + ", " + std::to_string(n) + "]");
    dt = promote_types(dt, cm.dtype);
  }
  if (!is_floating(dt)) {
    double alpha = c.attrs.get_float("alpha"), beta = c.attrs.get_float("beta");
    if (alpha != std::trunc(alpha) || beta != std::trunc(beta))
      c.fail("integer operands (" + std::string(dtype_name(dt)) + ") need whole-number alpha and beta, got alpha=" +
             std::to_string(alpha) + ", beta=" + std::to_string(beta));
  }
  return {{dt, {m, n}}};
}

void gemm_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  const DType ct = gemm_compute_dtype(out.dtype());
  Tensor a = as_dtype(k.in(0), ct), b = as_dtype(k.in(1), ct);
  const Tensor& c = k.inputs.size() > 2 ? k.in(2) : Tensor();
  double alpha = k.attrs.get_float("alpha"), beta = k.attrs.get_float("beta");
  bool ta = k.attrs.get_bool("trans_a"), tb = k.attrs.get_bool("trans_b");
  Tensor res = ct == out.dtype() && out.is_contiguous() ? out : empty(out.shape(), TensorOptions(ct, out.device()));
  const bool use_c = c.defined() && beta != 0.0;
  if (use_c) kernels::cpu::copy_into(res, c);  // broadcasts C to M x N and converts
  const int64_t m = out.shape()[0], n = out.shape()[1], kk = ta ? a.shape()[0] : a.shape()[1];
  const int64_t a_rs = ta ? a.strides()[1] : a.strides()[0], a_cs = ta ? a.strides()[0] : a.strides()[1];
  const int64_t b_rs = tb ? b.strides()[1] : b.strides()[0], b_cs = tb ? b.strides()[0] : b.strides()[1];
  if (res.numel() > 0) {
    visit_gemm_dtype(ct, [&](auto tag) {
      using T = typename decltype(tag)::type;
      kernels::cpu::gemm(m, n, kk, static_cast<T>(alpha), static_cast<const T*>(a.data_ptr()), a_rs, a_cs,
                         static_cast<const T*>(b.data_ptr()), b_rs, b_cs, use_c ? static_cast<T>(beta) : T(0),
                         static_cast<T*>(res.data_ptr()), n);
    });
  }
  if (!res.is_same(out)) kernels::cpu::copy_into(out, res);
}

// ---- derivative rules ------------------------------------------------------------------------------
// matmul: dA = dY @ Bᵀ, dB = Aᵀ @ dY on the operands promoted to matrices (1-D a gains a leading
// 1, 1-D b a trailing 1), then summed over broadcast batch dims and reshaped back.
std::vector<Tensor> matmul_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const Shape& as = c.in_shape(0);
  const Shape& bs = c.in_shape(1);
  Shape a2 = as.size() == 1 ? Shape{1, as[0]} : as;
  Shape b2 = bs.size() == 1 ? Shape{bs[0], 1} : bs;
  Shape batch = broadcast_shapes(Shape(a2.begin(), a2.end() - 2), Shape(b2.begin(), b2.end() - 2), "matmul");
  Shape g2 = batch;
  g2.push_back(a2[a2.size() - 2]);
  g2.push_back(b2.back());
  Tensor g = reshape(gs[0], g2);
  std::vector<Tensor> r(2);
  if (c.needs(0)) {
    Tensor b = reshape(c.inputs[1], b2);
    r[0] = reshape(defs::sum_to(matmul(g, b.transpose(-1, -2)), a2), as);
  }
  if (c.needs(1)) {
    Tensor a = reshape(c.inputs[0], a2);
    r[1] = reshape(defs::sum_to(matmul(a.transpose(-1, -2), g), b2), bs);
  }
  return r;
}

// gemm: Y = alpha * op(A) op(B) + beta * C. Note [Dense gemm gradients]: a transposed operand's
// gradient is computed in its own layout (dB = g^T op(A) for trans_b, not (op(A)^T g)^T), so it is a
// dense tensor that autograd can keep without a copy (nn::Linear's weight), and a unit alpha or beta
// costs no extra pass.
std::vector<Tensor> gemm_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const double alpha = c.attrs.get_float("alpha"), beta = c.attrs.get_float("beta");
  const bool ta = c.attrs.get_bool("trans_a"), tb = c.attrs.get_bool("trans_b");
  const Tensor& g = gs[0];
  auto scaled = [](const Tensor& t, double s) { return s == 1.0 ? t : t * s; };
  std::vector<Tensor> r(3);
  if (c.needs(0)) {
    Tensor opb = tb ? c.inputs[1].t() : c.inputs[1];
    r[0] = scaled(ta ? matmul(opb, g.t()) : matmul(g, opb.t()), alpha);
  }
  if (c.needs(1)) {
    Tensor opa = ta ? c.inputs[0].t() : c.inputs[0];
    r[1] = scaled(tb ? matmul(g.t(), opa) : matmul(opa.t(), g), alpha);
  }
  if (c.needs(2)) r[2] = defs::sum_to(scaled(g, beta), c.in_shape(2));
  return r;
}

}  // namespace

void register_linalg_ops(OpRegistry& r) {
  defs::rules_pending(r.add("matmul(Tensor a, Tensor b) -> Tensor"), "MatMul", 13)
      .infer(infer_matmul)
      .cast_inputs(InputCast::common)
      .kernel(DeviceType::cpu, kMatmulDTypes, matmul_kernel)
      .vjp(VjpRule{matmul_vjp, {0, 1}, {}})
      .doc("NumPy matmul: 1-D operands are promoted to matrices and the added dim removed; batch dims "
           "broadcast. 16-bit floats accumulate in f32; integers wrap.");
  defs::rules_pending(r.add("gemm(Tensor a, Tensor b, Tensor? c, float alpha=1.0, float beta=1.0, bool trans_a=false, "
                            "bool trans_b=false) -> Tensor"),
                      "Gemm", 13)
      .infer(infer_gemm)
      .cast_inputs(InputCast::common)
      .kernel(DeviceType::cpu, kMatmulDTypes, gemm_kernel)
      .vjp(VjpRule{gemm_vjp, {0, 1}, {}})
      .doc("alpha * op(a) @ op(b) + beta * c with op = transpose when trans_*; a, b 2-D; c broadcasts to M x N.");
}

Tensor matmul(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("matmul"), {a, b}, {}, loc); }

Tensor& Tensor::matmul_(const Tensor& b, SourceLoc loc) {
  KILN_CHECK(b.dim() == 2 && b.shape()[0] == b.shape()[1], "matmul_: b must be a square matrix (A <- A @ B keeps A's "
             "shape), got b of shape ", shape_str(b.shape()), " for a of shape ", shape_str(shape()));
  KILN_CHECK(dim() >= 1 && shape().back() == b.shape()[0], "matmul_: a's last dim (", dim() ? shape().back() : 0,
             ", shape ", shape_str(shape()), ") must equal b's size ", b.shape()[0]);
  return dispatch_inplace(op("matmul"), "matmul_", *this, {b}, {}, loc);  // Note [In-place matmul]
}

Tensor gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta, bool trans_a, bool trans_b,
            SourceLoc loc) {
  return dispatch1(op("gemm"), {a, b, c},
                   {{"alpha", alpha}, {"beta", beta}, {"trans_a", trans_a}, {"trans_b", trans_b}}, loc);
}

}  // namespace kiln
