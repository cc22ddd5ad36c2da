// fused_attention: softmax(scale * q @ k^T + mask) @ v in one kernel, the op the compiler's
// attention pass (src/compiler/passes/attention_fusion.cc) emits for matmul -> [scale] -> [+ mask]
// -> softmax(last axis) -> matmul.
//   q    [..., Sq, D]
//   k    [..., Sk, D]   (k_transposed = false)   or   [..., D, Sk]   (k_transposed = true)
//   v    [..., Sk, Dv]
//   mask broadcastable to the scores [..., Sq, Sk] (additive: 0 keeps, -inf or a large negative
//        value masks), or absent
//   out  [..., Sq, Dv], or that permuted by out_dims (a permutation that keeps Dv last; e.g.
//        [0, 2, 1, 3]: [B, Sq, H, Dv]): the layout an encoder's head merge wants, written in
//        place of its permute's copy (Note [Attention output layout] in
//        src/compiler/passes/attention_fusion.cc)
//   zero_nan_rows: a query row whose probabilities are NaN (every key masked by -inf, a NaN or
//        +inf score) gets zeros for them, so its output is 0 * v: where(isnan(p), 0, p) @ v, the
//        form of PyTorch's scaled_dot_product_attention export (Note [NaN rows to zero] in
//        attention_fusion.cc). Without it such a row is NaN, as in the unfused softmax.
// The leading dims of q, k and v must be equal (no matmul broadcasting); any strides are read in
// place (permuted heads need no copy).
//
// Note [Fused attention kernel]: the [..., Sq, Sk] score tensor is never materialized. The work
// splits into tasks of (batch entry, block of query rows), run in parallel on kiln's pool; each
// task computes its block's scores with one GEMM into a buffer of block x Sk, adds the mask rows,
// replaces each row by exp(s - rowmax) in place (the row sums kept aside), multiplies the
// unnormalized probabilities by v with a second GEMM straight into the output rows and scales
// each output row by 1 / rowsum. Deferring the normalization to the Dv-wide output row saves a
// pass over the Sk-wide probabilities. Numerics follow the unfused graph: a row whose mask is all
// -inf gives NaN there as here (softmax of all -inf is 0/0), NaNs propagate, and a finite large
// negative mask (-1e9, f32's lowest) weights its columns by exp(-huge) = 0. f32 rows use vmath's
// vector exp on the active ISA; f64 uses std::exp.
// On AVX-512 machines, f32 calls whose q, v and output rows are unit-stride along D (the BERT
// layouts) run kernels/cpu/attention_f32.h instead: the same algorithm with register-tiled
// products that read q and v in place and pack k^T once per task (Note [Attention rows in
// registers] in attention_f32_avx512.cc); the GEMM-based loop below serves everything else.
//
// Compiler-emitted inference op: no derivative (differentiate the unfused graph), no batching
// rule and no ONNX form (export the unfused graph).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/attention_f32.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/vmath.h"
#include "kiln/core/thread_pool.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/op_def.h"

namespace kiln {
namespace {

// ---- inference ---------------------------------------------------------------------------------

// Why out_dims is no permutation of rank r keeping the last dim last; empty when it is one.
std::string out_dims_error(const std::vector<int64_t>& od, size_t r) {
  if (od.size() != r) return "must list all " + std::to_string(r) + " dims of the result";
  std::vector<bool> seen(r, false);
  for (int64_t d : od) {
    if (d < 0 || d >= static_cast<int64_t>(r) || seen[static_cast<size_t>(d)])
      return "must be a permutation of 0.." + std::to_string(r - 1);
    seen[static_cast<size_t>(d)] = true;
  }
  if (od.back() != static_cast<int64_t>(r) - 1) return "must keep the last (Dv) dim last";
  return "";
}

std::vector<TensorMeta> infer_fused_attention(const InferCtx& c) {
  const TensorMeta& q = c.in(0);
  const TensorMeta& k = c.in(1);
  const TensorMeta& v = c.in(2);
  const bool kt = c.attrs.get_bool("k_transposed");
  if (q.dtype != DType::f32 && q.dtype != DType::f64)
    c.fail("q must be f32 or f64, got " + meta_str(q));
  for (size_t i = 1; i < 4; ++i)
    if (c.has(i) && c.in(i).dtype != q.dtype)
      c.fail("'" + c.arg_name(i) + "' is " + meta_str(c.in(i)) + " but q is " + meta_str(q) + "; all must share a dtype");
  const size_t r = q.shape.size();
  if (r < 2) c.fail("q must have shape [..., Sq, D], got " + meta_str(q));
  if (k.shape.size() != r || v.shape.size() != r)
    c.fail("q, k and v must have the same rank, got q " + meta_str(q) + ", k " + meta_str(k) + ", v " + meta_str(v));
  for (size_t d = 0; d + 2 < r; ++d)
    if (k.shape[d] != q.shape[d] || v.shape[d] != q.shape[d])
      c.fail("the leading (batch, head) dims of q, k and v must be equal, got q " + meta_str(q) + ", k " +
             meta_str(k) + ", v " + meta_str(v));
  const int64_t dh = q.shape[r - 1];
  const int64_t k_seq = k.shape[kt ? r - 1 : r - 2], k_dim = k.shape[kt ? r - 2 : r - 1];
  if (k_dim != dh)
    c.fail("k " + meta_str(k) + " must have " + std::to_string(dh) + " (q's last dim) in dim " +
           std::to_string(kt ? r - 2 : r - 1) + (kt ? " (k_transposed: k is [..., D, Sk])" : " (k is [..., Sk, D])"));
  if (v.shape[r - 2] != k_seq)
    c.fail("v " + meta_str(v) + " must have " + std::to_string(k_seq) + " rows (k's sequence length)");
  Shape scores(q.shape.begin(), q.shape.end() - 1);
  scores.push_back(k_seq);
  if (c.has(3)) {
    const Shape& m = c.in(3).shape;
    bool ok = m.size() <= r;
    for (size_t i = 0; ok && i < m.size(); ++i) {
      const int64_t want = scores[r - m.size() + i];
      ok = m[i] == want || m[i] == 1;
    }
    if (!ok)
      c.fail("mask " + meta_str(c.in(3)) + " must broadcast to the scores' shape " + shape_str(scores) +
             " without changing it");
  }
  if (!std::isfinite(c.attrs.get_float("scale"))) c.fail("scale must be finite");
  Shape out(q.shape.begin(), q.shape.end() - 1);
  out.push_back(v.shape[r - 1]);
  const std::vector<int64_t>& od = c.attrs.get_ints("out_dims");
  if (!od.empty()) {
    std::string why = out_dims_error(od, r);
    if (!why.empty()) c.fail("out_dims " + shape_str(Shape(od.begin(), od.end())) + " " + why);
    Shape permuted;
    for (int64_t d : od) permuted.push_back(out[static_cast<size_t>(d)]);
    return {TensorMeta{q.dtype, permuted}};
  }
  return {TensorMeta{q.dtype, out}};
}

// ---- softmax rows ----------------------------------------------------------------------------------

// row[j] = exp(row[j] - max(row)) in place; returns the sum. A NaN anywhere in the row (or a
// max of +-inf, whose differences are NaN) makes the whole row NaN, as in the unfused softmax.
// f32 rows run vmath's vector max and exp-and-sum (kernels/cpu/vmath.h: the subtraction carried
// exactly into exp, the sum in f64) on the active ISA.
float exp_row(float* row, int64_t n, const kernels::cpu::VmathKernelsF32& vm) {
  return static_cast<float>(vm.exp_shift_sum(row, row, n, vm.max(row, n)));
}

double exp_row(double* row, int64_t n, const kernels::cpu::VmathKernelsF32&) {
  double m = -std::numeric_limits<double>::infinity();
  bool nan = false;
  for (int64_t j = 0; j < n; ++j) {
    m = row[j] > m ? row[j] : m;
    nan = nan || row[j] != row[j];
  }
  if (nan) m = std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    row[j] = std::exp(row[j] - m);
    sum += row[j];
  }
  return sum;
}

// ---- kernel --------------------------------------------------------------------------------------

// Element offsets of each leading-dims entry (row-major order) of t, rank r.
std::vector<int64_t> batch_offsets(const Tensor& t, size_t r) {
  int64_t count = 1;
  for (size_t d = 0; d + 2 < r; ++d) count *= t.shape()[d];
  std::vector<int64_t> offs(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) {
    int64_t rem = b, off = 0;
    for (size_t d = r - 2; d-- > 0;) {
      off += (rem % t.shape()[d]) * t.strides()[d];
      rem /= t.shape()[d];
    }
    offs[static_cast<size_t>(b)] = off;
  }
  return offs;
}

// Query rows per task: the score buffer (rows x Sk) stays within about 128 KiB (L2), and blocks
// have at least 8 rows. Each block packs k^T for its first GEMM, so fewer, taller blocks pack less:
// at BERT-base's shape (12 heads, Sq = Sk = 128, D = 64, one thread) the q @ k^T GEMMs took
// 0.66 ms in 32-row blocks, 0.39 ms in 64-row blocks and 0.23 ms in whole-head (128-row) blocks.
int64_t rows_per_block(int64_t sq, int64_t sk, size_t elem) {
  const int64_t rows = std::clamp<int64_t>(static_cast<int64_t>(131072 / elem) / std::max<int64_t>(sk, 1), 8, 128);
  return std::min(rows, std::max<int64_t>(sq, 1));
}

// Note [Transposed queries and values]
// The register-tiled kernel reads q and v rows in place, unit-stride along D. SqueezeBERT's
// heads come from its grouped 1x1 convolutions' [N, C, S] output: q and v are [S, D] views with
// stride 1 along S, which sent every head through the GEMM loop below (1.74 ms a layer at batch
// 8 against ONNX Runtime's 1.26 for its two products and softmax). Copying such a q or v
// contiguous first (a tiled transpose, Note [Transposed operands] in loops.h) costs less than
// the slower loop.
Tensor rows_unit_stride(const Tensor& t) {
  const size_t r = static_cast<size_t>(t.dim());
  return t.strides()[r - 1] == 1 || t.shape()[r - 1] == 1 ? t : t.contiguous();
}

template <class T>
void attention(const Tensor& q_in, const Tensor& k, const Tensor& v_in, const Tensor& mask, bool kt, T scale,
               bool zero_nan_rows, Tensor& y) {
  const bool tiled_rows = std::is_same_v<T, float> && y.strides().back() == 1 &&
                          kernels::cpu::attention_rows_f32(kernels::cpu::active_isa()) != nullptr;
  const Tensor q = tiled_rows ? rows_unit_stride(q_in) : q_in, v = tiled_rows ? rows_unit_stride(v_in) : v_in;
  const size_t r = static_cast<size_t>(q.dim());
  const int64_t sq = q.shape()[r - 2], dh = q.shape()[r - 1];
  const int64_t sk = v.shape()[r - 2], dv = v.shape()[r - 1];
  const std::vector<int64_t> qo = batch_offsets(q, r), ko = batch_offsets(k, r), vo = batch_offsets(v, r);
  const std::vector<int64_t> yo = batch_offsets(y, r);
  Tensor m;
  std::vector<int64_t> mo;
  if (mask.defined()) {
    Shape scores(q.shape().begin(), q.shape().end() - 1);
    scores.push_back(sk);
    m = mask.broadcast_to(scores);  // a view: broadcast dims have stride 0
    mo = batch_offsets(m, r);
  }
  const T* qp = static_cast<const T*>(q.data_ptr());
  const T* kp = static_cast<const T*>(k.data_ptr());
  const T* vp = static_cast<const T*>(v.data_ptr());
  const T* mp = m.defined() ? static_cast<const T*>(m.data_ptr()) : nullptr;
  T* yp = static_cast<T*>(y.data_ptr());
  const int64_t q_rs = q.strides()[r - 2], q_cs = q.strides()[r - 1];
  const int64_t v_rs = v.strides()[r - 2], v_cs = v.strides()[r - 1];
  const int64_t y_rs = y.strides()[r - 2];
  // B = k^T as a D x Sk matrix: (p, j) is k[j, p], or kt[p, j] when k is given transposed.
  const int64_t b_rs = kt ? k.strides()[r - 2] : k.strides()[r - 1];
  const int64_t b_cs = kt ? k.strides()[r - 1] : k.strides()[r - 2];
  const int64_t m_rs = m.defined() ? m.strides()[r - 2] : 0, m_cs = m.defined() ? m.strides()[r - 1] : 0;
  if constexpr (std::is_same_v<T, float>) {
    const kernels::cpu::AttentionRowsF32 rows_f32 = kernels::cpu::attention_rows_f32(kernels::cpu::active_isa());
    if (rows_f32 != nullptr && (q_cs == 1 || dh == 1) && (v_cs == 1 || dv == 1) && (y.strides()[r - 1] == 1 || dv == 1)) {
      kernels::cpu::AttentionF32Args a;
      a.sq = sq, a.sk = sk, a.d = dh, a.dv = dv, a.q_rs = q_rs, a.v_rs = v_rs, a.y_rs = y_rs, a.scale = scale;
      a.k_js = kt ? k.strides()[r - 1] : k.strides()[r - 2];
      a.k_ps = kt ? k.strides()[r - 2] : k.strides()[r - 1];
      a.m_rs = m_rs, a.m_cs = m_cs;
      a.zero_nan_rows = zero_nan_rows;
      // Note [Attention tasks]: whole (batch, head) entries when there are enough of them to
      // keep every thread busy (k^T is packed once per task), else each entry's rows cut in
      // blocks of a multiple of 6 (the kernel's register block); the score rows of a task stay
      // within 256 KiB.
      const int64_t entries = static_cast<int64_t>(qo.size()), skp = (sk + 15) / 16 * 16;
      const int64_t want = (2 * get_num_threads() + entries - 1) / entries;
      int64_t block = (sq + want - 1) / want;
      block = std::min(block, std::max<int64_t>(6, 65536 / skp));
      block = std::max<int64_t>(6, (block + 5) / 6 * 6);
      const int64_t blocks = (sq + block - 1) / block;
      parallel_for(0, entries * blocks, 1, [&](int64_t t0, int64_t t1) {
        thread_local std::vector<float> ws;
        ws.resize(std::max(ws.size(), kernels::cpu::attention_f32_workspace(block, sk, dh, dv)));
        for (int64_t t = t0; t < t1; ++t) {
          const size_t b = static_cast<size_t>(t / blocks);
          const int64_t i0 = (t % blocks) * block, i1 = std::min(sq, i0 + block);
          kernels::cpu::AttentionF32Args e = a;
          e.q = qp + qo[b], e.k = kp + ko[b], e.v = vp + vo[b], e.y = yp + yo[b];
          e.mask = mp != nullptr ? mp + mo[b] : nullptr;
          rows_f32(e, i0, i1, ws.data());
        }
      });
      return;
    }
  }
  const int64_t block = rows_per_block(sq, sk, sizeof(T));
  const int64_t blocks = (sq + block - 1) / block;
  const int64_t tasks = static_cast<int64_t>(qo.size()) * blocks;
  const kernels::cpu::VmathKernelsF32& vm = kernels::cpu::vmath_kernels_f32(kernels::cpu::active_isa());
  parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<T> s(static_cast<size_t>(block * sk));
    std::vector<T> inv(static_cast<size_t>(block));
    for (int64_t t = t0; t < t1; ++t) {
      const size_t b = static_cast<size_t>(t / blocks);
      const int64_t i0 = (t % blocks) * block, rows = std::min(block, sq - i0);
      kernels::cpu::gemm(rows, sk, dh, scale, qp + qo[b] + i0 * q_rs, q_rs, q_cs, kp + ko[b], b_rs, b_cs, T(0),
                         s.data(), sk);
      for (int64_t i = 0; i < rows; ++i) {
        T* row = s.data() + i * sk;
        if (mp) {
          const T* mrow = mp + mo[b] + (i0 + i) * m_rs;
          if (m_cs == 1) {
            for (int64_t j = 0; j < sk; ++j) row[j] += mrow[j];
          } else {
            for (int64_t j = 0; j < sk; ++j) row[j] += mrow[j * m_cs];
          }
        }
        const T sum = exp_row(row, sk, vm);
        if (zero_nan_rows && std::isnan(sum)) {  // the whole row is NaN: zeros, and 0 * v
          std::fill(row, row + sk, T(0));
          inv[static_cast<size_t>(i)] = T(0);
        } else {
          inv[static_cast<size_t>(i)] = T(1) / sum;
        }
      }
      T* out = yp + yo[b] + i0 * y_rs;
      kernels::cpu::gemm(rows, dv, sk, T(1), s.data(), sk, 1, vp + vo[b], v_rs, v_cs, T(0), out, y_rs);
      for (int64_t i = 0; i < rows; ++i) {
        const T w = inv[static_cast<size_t>(i)];
        for (int64_t j = 0; j < dv; ++j) out[i * y_rs + j] *= w;
      }
    }
  });
}

void fused_attention_kernel(const KernelCall& k) {
  if (k.out(0).numel() == 0) return;
  // The result as [..., Sq, Dv]: the output itself, or (out_dims) the output viewed through the
  // inverse permutation. Rows must be unit-stride along Dv.
  Tensor out = k.out(0);
  if (const std::vector<int64_t>& od = k.attrs.get_ints("out_dims"); !od.empty()) {
    std::vector<int64_t> inverse(od.size());
    for (size_t i = 0; i < od.size(); ++i) inverse[static_cast<size_t>(od[i])] = static_cast<int64_t>(i);
    out = out.permute(inverse);
  }
  const DType dt = out.dtype();
  const bool rows_ok = out.strides().back() == 1 || out.shape().back() == 1;
  Tensor y = rows_ok ? out : empty(out.shape(), TensorOptions(dt, out.device()));
  Tensor mask = k.inputs.size() > 3 ? k.in(3) : Tensor();
  const bool kt = k.attrs.get_bool("k_transposed");
  const double scale = k.attrs.get_float("scale");
  const bool zero_nan_rows = k.attrs.get_bool("zero_nan_rows");
  if (k.in(2).shape()[static_cast<size_t>(k.in(2).dim()) - 2] == 0) {
    // Sk = 0: softmax over nothing times an empty v is the empty sum.
    y.fill_(0.0);
  } else if (dt == DType::f32) {
    attention<float>(k.in(0), k.in(1), k.in(2), mask, kt, static_cast<float>(scale), zero_nan_rows, y);
  } else {
    KILN_ASSERT(dt == DType::f64, "fused_attention: kernel registered for f32/f64 only, got ", dtype_name(dt));
    attention<double>(k.in(0), k.in(1), k.in(2), mask, kt, scale, zero_nan_rows, y);
  }
  if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
}

constexpr const char* kNoVjp = "compiler-emitted inference op: differentiate the unfused graph";
constexpr const char* kNoBatch = "compiler-emitted inference op: vmap the unfused graph";
constexpr const char* kNoOnnx = "compiler-emitted inference op: export the unfused graph";

}  // namespace

void register_fused_attention_ops(OpRegistry& r) {
  r.add("fused_attention(Tensor q, Tensor k, Tensor v, Tensor? mask, float scale=1.0, bool k_transposed=false, "
        "int[] out_dims=[], bool zero_nan_rows=false) -> Tensor")
      .infer(infer_fused_attention)
      .kernel(DeviceType::cpu, DTypeSet{DType::f32, DType::f64}, fused_attention_kernel)
      .no_vjp(kNoVjp)
      .no_batch(kNoBatch)
      .no_onnx(kNoOnnx)
      .doc("softmax(scale * q @ k^T + mask, last axis) @ v without materializing the scores; q [..., Sq, D], "
           "k [..., Sk, D] (or [..., D, Sk] when k_transposed), v [..., Sk, Dv], mask broadcast to [..., Sq, Sk]; "
           "the output [..., Sq, Dv], or that permuted by out_dims (which keeps Dv last); zero_nan_rows: a row whose "
           "probabilities are NaN (every key masked by -inf) weighs v by zeros, as where(isnan(p), 0, p) @ v.");
}

}  // namespace kiln
