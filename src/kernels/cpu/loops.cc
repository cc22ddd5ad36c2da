#include "kernels/cpu/loops.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kiln::kernels::cpu {

namespace {

template <class T>
void transpose_scalar(const T* src, int64_t lds, T* dst, int64_t ldd, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[i * ldd + j] = src[i + j * lds];
}

// 4-byte elements: 4x4 blocks through SSE registers (the baseline ISA), the edges scalar.
void transpose_4byte(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols) {
#if defined(__SSE2__)
  const int64_t rows4 = rows / 4 * 4, cols4 = cols / 4 * 4;
  for (int64_t i = 0; i < rows4; i += 4)
    for (int64_t j = 0; j < cols4; j += 4) {
      const float* s = src + i + j * lds;
      __m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + lds), r2 = _mm_loadu_ps(s + 2 * lds),
             r3 = _mm_loadu_ps(s + 3 * lds);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      float* d = dst + i * ldd + j;
      _mm_storeu_ps(d, r0);
      _mm_storeu_ps(d + ldd, r1);
      _mm_storeu_ps(d + 2 * ldd, r2);
      _mm_storeu_ps(d + 3 * ldd, r3);
    }
  transpose_scalar(src + rows4, lds, dst + rows4 * ldd, ldd, rows - rows4, cols);
  transpose_scalar(src + cols4 * lds, lds, dst + cols4, ldd, rows4, cols - cols4);
#else
  transpose_scalar(src, lds, dst, ldd, rows, cols);
#endif
}

}  // namespace

void transpose_tile(const char* src, int64_t lds, char* dst, int64_t ldd, int64_t rows, int64_t cols, int64_t es) {
  switch (es) {
    case 1: return transpose_scalar(reinterpret_cast<const uint8_t*>(src), lds, reinterpret_cast<uint8_t*>(dst), ldd,
                                    rows, cols);
    case 2: return transpose_scalar(reinterpret_cast<const uint16_t*>(src), lds, reinterpret_cast<uint16_t*>(dst),
                                    ldd, rows, cols);
    case 4: return transpose_4byte(reinterpret_cast<const float*>(src), lds, reinterpret_cast<float*>(dst), ldd, rows,
                                   cols);
    case 8: return transpose_scalar(reinterpret_cast<const uint64_t*>(src), lds, reinterpret_cast<uint64_t*>(dst),
                                    ldd, rows, cols);
    default: KILN_FAIL("transpose_tile: elements of ", es, " bytes");
  }
}

std::vector<int64_t> broadcast_byte_strides(const Tensor& t, const Shape& shape) {
  const Shape& ts = t.shape();
  const Strides& tst = t.strides();
  KILN_ASSERT(ts.size() <= shape.size(), "operand of rank ", ts.size(), " broadcast to rank ", shape.size());
  std::vector<int64_t> out(shape.size(), 0);
  size_t lead = shape.size() - ts.size();
  int64_t es = static_cast<int64_t>(t.element_size());
  for (size_t d = 0; d < ts.size(); ++d) {
    KILN_ASSERT(ts[d] == shape[lead + d] || ts[d] == 1, "operand shape ", shape_str(ts), " does not broadcast to ",
                shape_str(shape));
    out[lead + d] = ts[d] == 1 ? 0 : tst[d] * es;
  }
  return out;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  visit_dtype(dst.dtype(), [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    visit_dtype(src.dtype(), [&](auto stag) {
      using S = typename decltype(stag)::type;
      if constexpr (std::is_same_v<D, S>) {
        const Tensor ops[2] = {dst, src};
        const LoopPlan<2> plan = plan_loop<2>(ops);
        constexpr int64_t es = sizeof(D);
        // Note [Transposed operands] in loops.h: straight into dst, a tile at a time.
        if (const TransposedOperand t = find_transposed_operand<2>(plan, {es, es}); t.operand == 1) {
          for_each_transposed_tile<2>(plan, t, [&](const std::array<char*, 2>& at, int64_t rows, int64_t cols) {
            transpose_tile(at[1], plan.strides[1].back() / es, at[0], plan.strides[0][t.dim] / es, rows, cols, es);
          });
          return;
        }
        for_each_run<2>(plan, [&](char** p, const int64_t* s, int64_t n) {
          if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
            std::memcpy(p[0], p[1], static_cast<size_t>(n) * sizeof(D));
          } else {
            for (int64_t i = 0; i < n; ++i)
              *reinterpret_cast<D*>(p[0] + i * s[0]) = *reinterpret_cast<const S*>(p[1] + i * s[1]);
          }
        });
      } else {
        unary_loop<D, S>(dst, src, [](compute_t<S> v) { return convert<D>(v); });
      }
    });
  });
}

}  // namespace kiln::kernels::cpu
