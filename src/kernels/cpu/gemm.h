// Raw CPU GEMM entry points: C = alpha * A @ B + beta * C on plain pointers. f32 runs the packed,
// cache-blocked GEMM with per-ISA register-tiled micro-kernels (Note [Packed GEMM] in gemm.cc),
// with an optional epilogue and a pre-packed-B entry point; f64 and i64 run a simpler blocked loop
// nest. matmul, gemm and conv2d (through im2col) all end here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kiln::kernels::cpu {

// A is M x K with element (i, p) at a[i * a_rs + p * a_cs]; B is K x N with element (p, j) at
// b[p * b_rs + j * b_cs] (strides in elements, any layout: transposes are just swapped strides).
// C is row-major with leading dimension ldc. beta == 0 overwrites C without reading it (so NaNs
// already in C do not leak through). Parallel over tiles of C on kiln's thread pool; runs inline
// when called inside a parallel region.
void gemm_f32(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
              const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc);
// Products of at most this many rows are skinny: B is streamed in place, not packed (Note [Packed
// GEMM] in gemm_packed.cc).
constexpr int64_t kGemmSkinnyRows = 16;
void gemm_f64(int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t a_rs, int64_t a_cs,
              const double* b, int64_t b_rs, int64_t b_cs, double beta, double* c, int64_t ldc);
// Integer GEMM with wrap-around (two's complement) arithmetic, as NumPy's integer matmul.
void gemm_i64(int64_t m, int64_t n, int64_t k, int64_t alpha, const int64_t* a, int64_t a_rs, int64_t a_cs,
              const int64_t* b, int64_t b_rs, int64_t b_cs, int64_t beta, int64_t* c, int64_t ldc);

// What happens to each f32 output tile after its last k-block, while it is still in L1:
//   y = alpha * A@B + beta * C + bias;  y += residual (if residual_before_activation);
//   y = act(y);  y += residual (otherwise).
// bias is per row (length m) or per column (length n); residual is m x n with leading dimension
// ldr (it may alias C only when it is exactly C).
enum class GemmBias { none, per_row, per_col };
enum class GemmActivation { none, relu, gelu, gelu_tanh, sigmoid, tanh, silu, relu6, hardswish };
struct GemmEpilogue {
  GemmBias bias_kind = GemmBias::none;
  const float* bias = nullptr;
  GemmActivation activation = GemmActivation::none;
  const float* residual = nullptr;
  int64_t ldr = 0;
  bool residual_before_activation = false;
  bool empty() const { return bias_kind == GemmBias::none && activation == GemmActivation::none && residual == nullptr; }
};

void gemm_f32(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
              const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc,
              const GemmEpilogue& epilogue);
// The epilogue alone on C[i0 : i0+m, j0 : j0+n] (c points at that corner; bias and residual are
// indexed by the global i, j), for a kernel that computes its product some other way (the direct
// depthwise convolution) but finishes it as the GEMM would.
void gemm_epilogue_f32(const GemmEpilogue& epilogue, float* c, int64_t ldc, int64_t i0, int64_t j0, int64_t m,
                       int64_t n);

// B (k x n, any strides) packed once into the micro-kernel layout of the ISA active at packing
// time, for weights reused across calls (the runtime packs constants at load). Using it after the
// active ISA changed is a kiln::Error (repack).
class PackedGemmB {
 public:
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int isa() const { return isa_; }
  const float* data() const { return data_.get(); }
  int64_t bytes() const { return static_cast<int64_t>(size_ * sizeof(float)); }

 private:
  friend PackedGemmB pack_gemm_b_f32(int64_t, int64_t, const float*, int64_t, int64_t);
  struct Free {
    void operator()(float* p) const;
  };
  int64_t k_ = 0, n_ = 0;
  int isa_ = 0;
  size_t size_ = 0;
  std::unique_ptr<float[], Free> data_;
};
PackedGemmB pack_gemm_b_f32(int64_t k, int64_t n, const float* b, int64_t b_rs, int64_t b_cs);
// C = alpha * A @ packed + beta * C, then the epilogue; m rows, packed.k() x packed.n().
void gemm_f32_prepacked(int64_t m, float alpha, const float* a, int64_t a_rs, int64_t a_cs, const PackedGemmB& b,
                        float beta, float* c, int64_t ldc, const GemmEpilogue& epilogue = {});

// Packed operands in caller memory (Note [Packed operands in caller memory] in gemm_packed.cc): A
// (m x k) or B (k x n) packed into `out` (packed_*_floats(...) floats, 64-byte aligned for speed)
// for the ISA active now; the product must run under the same ISA (one kernel call).
size_t packed_a_f32_floats(int64_t m, int64_t k);
void pack_a_f32(int64_t m, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, float* out);
void gemm_f32_packed_a(int64_t m, int64_t n, int64_t k, float alpha, const float* packed_a, const float* b,
                       int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc, const GemmEpilogue& epilogue = {});
size_t packed_b_f32_floats(int64_t k, int64_t n);
void pack_b_f32(int64_t k, int64_t n, const float* b, int64_t b_rs, int64_t b_cs, float* out);
void gemm_f32_packed_b(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
                       const float* packed_b, float beta, float* c, int64_t ldc, const GemmEpilogue& epilogue = {});

// `batch` independent products, operand i at a + i * a_bs, b + i * b_bs, c + i * c_bs (a batch
// stride of 0 shares the operand). Small products run in parallel over the batch.
void gemm_f32_batched(int64_t batch, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_bs,
                      int64_t a_rs, int64_t a_cs, const float* b, int64_t b_bs, int64_t b_rs, int64_t b_cs, float beta,
                      float* c, int64_t c_bs, int64_t ldc, const GemmEpilogue& epilogue = {});

// Overloads for templates that hold the element type.
inline void gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
                 const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc) {
  gemm_f32(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}
inline void gemm(int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t a_rs, int64_t a_cs,
                 const double* b, int64_t b_rs, int64_t b_cs, double beta, double* c, int64_t ldc) {
  gemm_f64(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}
inline void gemm(int64_t m, int64_t n, int64_t k, int64_t alpha, const int64_t* a, int64_t a_rs, int64_t a_cs,
                 const int64_t* b, int64_t b_rs, int64_t b_cs, int64_t beta, int64_t* c, int64_t ldc) {
  gemm_i64(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}

}  // namespace kiln::kernels::cpu
