// The phased plane of kernels/cpu/window_f32.h, the scalar row primitives (KILN_ISA=scalar) and the
// per-ISA choice.
#include "kernels/cpu/window_f32.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::kernels::cpu {

namespace {

void max_taps__scalar(const float* base, int64_t base_step, const int64_t* off, int64_t taps, float* out,
                      int64_t out_step, int64_t n, int64_t rows) {
  for (int64_t j = 0; j < rows; ++j, base += base_step, out += out_step)
    for (int64_t i = 0; i < n; ++i) {
      float m = base[off[0] + i];
      for (int64_t t = 1; t < taps; ++t) {
        const float v = base[off[t] + i];
        if (v > m || v != v) m = v;
        if (m != m) break;
      }
      out[i] = m;
    }
}

void avg_taps__scalar(const float* base, int64_t base_step, const int64_t* off, int64_t taps, const float* rdiv,
                      const float* cdiv, float* out, int64_t out_step, int64_t n, int64_t rows) {
  for (int64_t j = 0; j < rows; ++j, base += base_step, out += out_step)
    for (int64_t i = 0; i < n; ++i) {
      float s = 0;
      for (int64_t t = 0; t < taps; ++t) s += base[off[t] + i];
      out[i] = s / (rdiv[j] * cdiv[i]);
    }
}

void fma_taps__scalar(const float* base, int64_t base_step, const int64_t* off, const float* w, int64_t taps,
                      float bias, float lo, float hi, float* out, int64_t out_step, int64_t n, int64_t rows) {
  for (int64_t j = 0; j < rows; ++j, base += base_step, out += out_step) {
    std::fill(out, out + n, bias);
    for (int64_t t = 0; t < taps; ++t) {
      const float* src = base + off[t];
      const float wt = w[t];
      for (int64_t i = 0; i < n; ++i) out[i] += wt * src[i];
    }
    for (int64_t i = 0; i < n; ++i) out[i] = out[i] < lo ? lo : out[i] > hi ? hi : out[i];  // NaN stays
  }
}

void deinterleave2__scalar(const float* in, float* even, float* odd, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    even[j] = in[2 * j];
    odd[j] = in[2 * j + 1];
  }
}

void pad_rows__scalar(const float* src, int64_t src_step, float* dst, int64_t rows, int64_t lo, int64_t n,
                      int64_t width) {
  for (int64_t r = 0; r < rows; ++r, src += src_step, dst += width) {
    std::fill(dst, dst + lo, 0.0f);
    std::copy(src, src + n, dst + lo);
    std::fill(dst + lo + n, dst + width, 0.0f);
  }
}

}  // namespace

WindowKernelsF32 window_kernels_f32_scalar() {
  WindowKernelsF32 k{max_taps__scalar, avg_taps__scalar, fma_taps__scalar, deinterleave2__scalar, nullptr};
  k.pad_rows = pad_rows__scalar;
  return k;
}

WindowKernelsF32 window_kernels_f32(Isa isa) {
  switch (isa) {
    case Isa::avx512: return window_kernels_f32_avx512();
    case Isa::avx2: return window_kernels_f32_avx2();
    case Isa::scalar: break;
  }
  return window_kernels_f32_scalar();
}

int64_t depthwise_block_floats(const WindowGeom& g) {
  return ((g.ho - 1) * g.sh + g.kh) * ((g.wo - 1) * g.sw + g.kw) * 16;
}

namespace {

// Note [A phased plane kept per thread] (window_f32.h): the last destroyed plane's buffer, its
// geometry and padding value (empty buffer: none kept).
struct KeptPlane {
  WindowGeom g;
  float pad = 0;
  std::vector<float> buf;
};
thread_local KeptPlane t_kept;

static_assert(sizeof(WindowGeom) == 12 * sizeof(int64_t), "WindowGeom is compared bytewise");
bool same_plane(const KeptPlane& k, const WindowGeom& g, float pad) {
  return !k.buf.empty() && std::memcmp(&k.g, &g, sizeof g) == 0 && std::memcmp(&k.pad, &pad, sizeof pad) == 0;
}

}  // namespace

PhasedPlane::~PhasedPlane() {
  t_kept.g = g_;
  t_kept.pad = pad_;
  t_kept.buf = std::move(buf_);
}

PhasedPlane::PhasedPlane(const WindowGeom& g, float pad_value) : g_(g), pad_(pad_value) {
  KILN_ASSERT(g.ho >= 1 && g.wo >= 1 && g.kh >= 1 && g.kw >= 1 && g.sh >= 1 && g.sw >= 1, "PhasedPlane: bad geometry");
  rows_ = (g.ho - 1) * g.sh + (g.kh - 1) * g.dh + 1;
  int64_t cols = std::max(g.pl + g.w, (g.wo - 1) * g.sw + (g.kw - 1) * g.dw + 1);
  phase_len_ = (cols + g.sw - 1) / g.sw;
  row_stride_ = phase_len_ * g.sw;
  if (same_plane(t_kept, g, pad_value)) buf_ = std::move(t_kept.buf);
  else buf_.assign(static_cast<size_t>(rows_ * row_stride_), pad_value);
  for (int64_t r = 0; r < g.kh; ++r)
    for (int64_t s = 0; s < g.kw; ++s) {
      const int64_t o = s * g.dw;
      offsets_.push_back(r * g.dh * row_stride_ + (o % g.sw) * phase_len_ + o / g.sw);
    }
}

void PhasedPlane::load(const float* x, const WindowKernelsF32& k) {
  const int64_t b0 = std::max<int64_t>(0, g_.pt), b1 = std::min(rows_, g_.pt + g_.h);
  for (int64_t b = b0; b < b1; ++b) {
    const float* xr = x + (b - g_.pt) * g_.w;
    float* dst = buf_.data() + b * row_stride_;
    if (g_.sw == 1) {
      std::memcpy(dst + g_.pl, xr, static_cast<size_t>(g_.w) * sizeof(float));
    } else if (g_.sw == 2) {
      // Input column c is padded column c + pl: x's even columns land in phase pl % 2.
      const int64_t pairs = g_.w / 2;
      float* ev = g_.pl % 2 == 0 ? dst + g_.pl / 2 : dst + phase_len_ + (g_.pl - 1) / 2;
      float* od = g_.pl % 2 == 0 ? dst + phase_len_ + g_.pl / 2 : dst + (g_.pl + 1) / 2;
      k.deinterleave2(xr, ev, od, pairs);
      if (g_.w % 2) ev[pairs] = xr[g_.w - 1];
    } else {
      for (int64_t c = 0; c < g_.w; ++c) {
        const int64_t j = c + g_.pl;
        dst[(j % g_.sw) * phase_len_ + j / g_.sw] = xr[c];
      }
    }
  }
}

bool window3x3_in_place(const WindowGeom& g) {
  return g.kh == 3 && g.kw == 3 && g.dh == 1 && g.dw == 1 && g.sh == 2 && g.sw == 2 && g.pt >= 0 &&
         g.pl >= 0 && g.pt <= 2 && g.pl <= 2 && g.wo <= 16 * kMaxInPlaceBlocks;
}

}  // namespace kiln::kernels::cpu
