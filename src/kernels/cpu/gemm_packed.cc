// The packed f32 GEMM driver behind gemm_f32: cache blocking, packing, threading, epilogues and
// the pre-packed-B entry point. The register-tiled micro-kernels live in gemm_f32_<isa>.cc.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/chunks.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_ukernel.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/vmath.h"
#include "kiln/core/error.h"
#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

// Note [Packed GEMM]
// The Goto/BLIS scheme. For each nc-wide block of C's columns and each kc-deep slice of K, B's
// kc x nc block is packed into nr-wide panels (each kc x nr panel is contiguous); for each
// mc-tall block of rows, A's mc x kc block is packed into mr-tall micro-panels (the block stays
// in L2; block sizes per ISA are in gemm_f32_<isa>.cc). The micro-kernel then multiplies one A
// micro-panel by one B panel into an mr x nr tile of C held in registers, adding to C (beta on
// the first k-slice only). Packing is what makes any layout fast: transposes and strides cost one
// strided read during packing, and the hot loop always sees unit-stride panels. Edge tiles: packed
// A is zero-padded to mr rows, packed B to nr columns, and the micro-kernel stores only the valid
// m x n.
//
// Skinny products (m <= kGemmSkinnyRows) do not pack B: packing a 4096 x 4096 B to multiply it by a
// handful of rows would cost as much as the product. The micro-kernel then reads full nr-wide
// column panels of B in place (ldb = B's row stride); only the ragged right edge is packed. That
// makes M = 1 a streaming pass over B (GEMV) at memory bandwidth.
//
// Threads: C is cut along the longer side. Rows: as many row chunks (multiples of mr) as there
// are threads, each running the whole blocked loop with its own pack buffers (every thread packs
// the B it shares: k*nc floats per nc block, small against the flops it feeds). Columns: A is
// packed once, its row panels split between the threads, and the column panels then go out in
// chunks from a two-ended queue (Note [Column chunks taken, not dealt] in gemm_run), each chunk
// running the blocked loop on its columns against the shared packed A.
//
// The epilogue runs on each tile right after its last k-slice, while the tile is in L1.

namespace {

constexpr int64_t kSerialFlops = int64_t{1} << 21;  // m*n*k below this: one thread...
// ...unless B alone outgrows L2: a skinny product (a classifier's GEMV at batch 1, 1280 x 1000
// floats) is a pass over B at memory speed, and two threads stream it faster than one
// (MobileNetV2's classifier on 2 threads, Zen 3: 0.33-0.39 -> 0.22-0.26 ms).
constexpr int64_t kSerialBFloats = int64_t{1} << 18;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Note [Balanced k-slices]
// K is cut into ceil(k / kc) slices of equal depth (rounded up to 8) rather than full kc slices and
// a short remainder: each slice costs one read-modify-write pass over C, and a 1024-deep product
// with kc = 768 would otherwise pay a second full pass for a 256-deep tail. The driver and the
// pre-packed B layout both take their slice depth from here.
int64_t k_slice(int64_t kc, int64_t k) {
  if (k <= kc) return std::max<int64_t>(k, 1);
  const int64_t slices = (k + kc - 1) / kc;
  return std::min(kc, round_up((k + slices - 1) / slices, 8));
}

// A grow-only 64-byte-aligned scratch buffer, one per thread and purpose.
struct Scratch {
  float* p = nullptr;
  size_t cap = 0;
  float* get(size_t n) {
    if (n > cap) {
      std::free(p);
      size_t bytes = static_cast<size_t>(round_up(static_cast<int64_t>(n * sizeof(float)), 64));
      p = static_cast<float*>(std::aligned_alloc(64, bytes));
      KILN_CHECK(p != nullptr, "GEMM: out of memory allocating a ", bytes, "-byte pack buffer");
      cap = n;
    }
    return p;
  }
  ~Scratch() { std::free(p); }
};
thread_local Scratch t_pack_a, t_pack_b, t_pack_edge;
thread_local Scratch t_shared_a;  // A packed once for all column chunks (Note [Column chunks taken, not dealt])

// Note [Packing A row-major]
// A row-major A block is a transpose: mr short rows (kc floats, a few cache lines each, one page
// apart for wide A) become one interleaved panel. Reading one row at a time left each load waiting
// on memory (the prefetcher never ramps up on a 1 KiB stream; 90% of pack time sat on the load);
// walking all mr rows together in chunks of 16 columns keeps mr streams in flight, writes the panel
// sequentially, and prefetches each row a few lines ahead. (A kernel set may pack with its own
// vectors instead, GemmKernelF32::pack_a_rows: AVX-512's, Note [Packing A in registers].)
template <int MR>
void pack_a_rows(int64_t mv, int64_t kc, const float* src, int64_t a_rs, float* dst) {
  constexpr int64_t kChunk = 16, kAhead = 64;
  const float* rows[MR];
  for (int i = 0; i < MR; ++i) rows[i] = src + std::min<int64_t>(i, mv - 1) * a_rs;
  int64_t p0 = 0;
  for (; p0 + kChunk <= kc; p0 += kChunk) {
    for (int i = 0; i < MR; ++i) __builtin_prefetch(rows[i] + p0 + kAhead);
    for (int64_t p = p0; p < p0 + kChunk; ++p)
      for (int i = 0; i < MR; ++i) dst[p * MR + i] = rows[i][p];
  }
  for (int64_t p = p0; p < kc; ++p)
    for (int i = 0; i < MR; ++i) dst[p * MR + i] = rows[i][p];
  // Rows past mv duplicated row mv-1 above (a valid address); the padding must be zero.
  for (int64_t i = mv; i < MR; ++i)
    for (int64_t p = 0; p < kc; ++p) dst[p * MR + i] = 0.0f;
}

// A[0:mc, 0:kc] (strides a_rs, a_cs) -> kk.mr-row micro-panels, each kc steps of mr floats.
void pack_a(const GemmKernelF32& kk, int64_t mc, int64_t kc, const float* a, int64_t a_rs, int64_t a_cs, float* out) {
  const int mr = kk.mr;
  for (int64_t ir = 0; ir < mc; ir += mr) {
    const int64_t mv = std::min<int64_t>(mr, mc - ir);
    float* dst = out + ir * kc;
    const float* src = a + ir * a_rs;
    if (a_cs == 1 && kk.pack_a_rows != nullptr) {
      kk.pack_a_rows(mv, kc, src, a_rs, dst);
      continue;
    }
    if (a_cs == 1 && mr == 6) {
      pack_a_rows<6>(mv, kc, src, a_rs, dst);
      continue;
    }
    if (a_cs == 1) {
      for (int64_t i = 0; i < mv; ++i)
        for (int64_t p = 0; p < kc; ++p) dst[p * mr + i] = src[i * a_rs + p];
    } else {
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t i = 0; i < mv; ++i) dst[p * mr + i] = src[i * a_rs + p * a_cs];
    }
    for (int64_t i = mv; i < mr; ++i)
      for (int64_t p = 0; p < kc; ++p) dst[p * mr + i] = 0.0f;
  }
}

// B[0:kc, 0:nc] -> nr-column panels, each kc rows of nr floats; panel q starts at out + q*nr*kc.
void pack_b(int nr, int64_t kc, int64_t nc, const float* b, int64_t b_rs, int64_t b_cs, float* out) {
  for (int64_t jr = 0; jr < nc; jr += nr) {
    const int64_t nv = std::min<int64_t>(nr, nc - jr);
    float* dst = out + jr * kc;
    if (b_cs == 1) {
      for (int64_t p = 0; p < kc; ++p) {
        std::memcpy(dst + p * nr, b + p * b_rs + jr, static_cast<size_t>(nv) * sizeof(float));
        for (int64_t j = nv; j < nr; ++j) dst[p * nr + j] = 0.0f;
      }
    } else {
      for (int64_t j = 0; j < nv; ++j)
        for (int64_t p = 0; p < kc; ++p) dst[p * nr + j] = b[p * b_rs + (jr + j) * b_cs];
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t j = nv; j < nr; ++j) dst[p * nr + j] = 0.0f;
    }
  }
}

// The epilogue on tile C[i0:i0+mv, j0:j0+nv] (global indices; c points at its corner), right after
// the micro-kernel, while the tile is in L1: vmath's block epilogue for the active ISA (bias,
// residual and activation vectorized, kernels/cpu/vmath.h).
VmathAct vmath_act(GemmActivation a) {
  switch (a) {
    case GemmActivation::none: return VmathAct::none;
    case GemmActivation::relu: return VmathAct::relu;
    case GemmActivation::relu6: return VmathAct::relu6;
    case GemmActivation::gelu: return VmathAct::gelu;
    case GemmActivation::gelu_tanh: return VmathAct::gelu_tanh;
    case GemmActivation::sigmoid: return VmathAct::sigmoid;
    case GemmActivation::tanh: return VmathAct::tanh;
    case GemmActivation::silu: return VmathAct::silu;
    case GemmActivation::hardswish: return VmathAct::hardswish;
  }
  return VmathAct::none;
}

// The residual is read in tile order (mr short rows, each in its own page for wide C), which the
// hardware prefetcher does not follow: each tile also prefetches the residual of the tile below
// it, the one gemm_block computes next, so those lines arrive while the micro-kernel runs.
void apply_epilogue(const GemmEpilogue& ep, float* c, int64_t ldc, int64_t i0, int64_t j0, int64_t mv, int64_t nv) {
  const VmathEpilogueF32 tile = vmath_kernels_f32(active_isa()).epilogue[static_cast<int>(vmath_act(ep.activation))];
  const float* res = nullptr;
  if (ep.residual != nullptr) {
    res = ep.residual + i0 * ep.ldr + j0;
    // The tile below may lie past the matrix: prefetch_rows takes it as an integer address.
    prefetch_rows(reinterpret_cast<uintptr_t>(res) + static_cast<uintptr_t>(mv * ep.ldr) * sizeof(float), ep.ldr, mv,
                  nv);
  }
  tile(c, ldc, mv, nv, ep.bias_kind == GemmBias::per_row ? ep.bias + i0 : nullptr,
       ep.bias_kind == GemmBias::per_col ? ep.bias + j0 : nullptr, res, ep.ldr, ep.residual_before_activation);
}

// Where B comes from: strided memory (packed per block, or read in place when `direct`), or a
// PackedGemmB (`packed`, with its padded width `npad`).
struct BSource {
  const float* b = nullptr;
  int64_t b_rs = 0, b_cs = 0;
  bool direct = false;
  const float* packed = nullptr;
  int64_t npad = 0;
};

struct Problem {
  const GemmKernelF32* kk;
  int64_t m, n, k;
  float alpha, beta;
  const float* a;
  int64_t a_rs, a_cs;
  BSource b;
  float* c;
  int64_t ldc;
  const GemmEpilogue* ep;
  const float* a_packed = nullptr;  // A packed by pack_a_f32 (then a, a_rs, a_cs are unused)
  int64_t a_mpad = 0;               // its rows rounded up to mr
};

// Note [Few rows read in place]
// A product of one to four rows (a classifier at batch 1-4) is a pass over B, and packing A for it
// cost more than the pass: the 1 x k row became a 12-row micro-panel (eleven rows of zeros written
// on every call, then read back at a 48-byte stride by every B panel), in a parallel region of its
// own, and the 12 x 32 tile ran its single row as two dependent FMA chains. Where the ISA has a
// rows kernel (GemmKernelF32::rows_ukernel) and A's rows are unit-stride, A is read where it lies.
// A 2048 -> 1000 classifier at batch 1 (ResNet-50's), minima over 500 runs, 3 alternations: one
// thread 0.143-0.161 -> 0.096-0.099 ms, two 0.092-0.135 -> 0.053-0.059 (ONNX Runtime 0.062-0.075).
// Decided for the whole product, not per row block, so that every row is summed the same way
// whatever the number of threads.
bool reads_a_in_place(const Problem& pr) {
  return pr.a_packed == nullptr && pr.a_cs == 1 && pr.kk->rows_ukernel != nullptr && pr.m <= pr.kk->rows_max;
}

// Note [The next B panel]
// A layer's weights are read once per inference, so at batch 1 a transformer's B panels come from
// memory: in BERT's 768 -> 3072 product (128 rows, one 768-deep slice) the first tile of every
// 96 KiB panel stalled on its B loads, 14% of the micro-kernel's samples on the two loads (the
// panel is then in L2 for the other ten tiles), and the hardware prefetcher does not follow from
// one panel to the next. So while one panel's tiles run, they fetch the panel gemm_block
// multiplies next into L2, its lines shared out between them, each tile's share spread over its
// k-steps (Note [An even L2 stream] in prefetch.h). The next panel is the next one in this block
// and slice, else (pre-packed B, whose slices and blocks all lie in one buffer) the first of the
// next slice or of the next column block within [j0, j1), else the first of the thread's next
// column chunk (the queue's guess, `after`: Note [Column chunks taken, not dealt]). Without that
// last one the column chunks of a 768 -> 768 product on two threads (one or two panels each) ran
// with hardly a panel fetched ahead.
// hf_bert at batch 1 on two threads (the Xeon): that layer 2.75-2.84 -> 2.48-2.54 ms, the model
// 91.7 -> 87.2 ms (minima of medians over four alternations).
struct NextPanel {
  uintptr_t at = 0, bytes = 0;
};

NextPanel next_b_panel(const Problem& pr, const float* bblock, int64_t j1, int64_t after, int64_t jc, int64_t ncur,
                       int64_t pc, int64_t kcur, int64_t kslice, int64_t jr) {
  const int nr = pr.kk->nr;
  auto panel = [&](const float* p, int64_t depth) {
    return NextPanel{reinterpret_cast<uintptr_t>(p), static_cast<uintptr_t>(depth * nr) * sizeof(float)};
  };
  if (bblock == nullptr) return {};                                    // B read in place: a stream
  if (jr + nr < ncur) return panel(bblock + (jr + nr) * kcur, kcur);  // the next in this block
  if (pr.b.packed == nullptr) return {};                               // packed per block: not yet
  if (pc + kcur < pr.k) {
    const int64_t depth = std::min(kslice, pr.k - pc - kcur);
    return panel(pr.b.packed + (pc + kcur) * pr.b.npad + jc * depth, depth);
  }
  const int64_t first_depth = std::min(kslice, pr.k);
  if (jc + ncur < j1) return panel(pr.b.packed + (jc + ncur) * first_depth, first_depth);
  if (after >= 0) return panel(pr.b.packed + after * first_depth, first_depth);
  return {};
}

// Rows [i0, i1) x columns [j0, j1) of C, all of K, on the calling thread. j0 is a multiple of nr;
// so is `after`, the column where the thread's next range likely begins (-1: none).
void gemm_block(const Problem& pr, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t after = -1) {
  const GemmKernelF32& kk = *pr.kk;
  const int mr = kk.mr, nr = kk.nr;
  const bool epilogue = !pr.ep->empty();
  const bool a_in_place = reads_a_in_place(pr);
  for (int64_t jc = j0; jc < j1; jc += kk.nc) {
    const int64_t ncur = std::min(kk.nc, j1 - jc);
    const int64_t kslice = k_slice(kk.kc, pr.k);
    for (int64_t pc = 0; pc < pr.k; pc += kslice) {
      const int64_t kcur = std::min(kslice, pr.k - pc);
      const bool last = pc + kcur == pr.k;
      const float beta = pc == 0 ? pr.beta : 1.0f;
      const float* bblock = nullptr;
      if (pr.b.packed != nullptr) {
        bblock = pr.b.packed + pc * pr.b.npad + jc * kcur;
      } else if (!pr.b.direct) {
        float* buf = t_pack_b.get(static_cast<size_t>(kcur * round_up(ncur, nr)));
        pack_b(nr, kcur, ncur, pr.b.b + pc * pr.b.b_rs + jc * pr.b.b_cs, pr.b.b_rs, pr.b.b_cs, buf);
        bblock = buf;
      }
      for (int64_t ic = i0; ic < i1; ic += kk.mc) {
        const int64_t mcur = std::min(kk.mc, i1 - ic);
        const float* abuf = nullptr;
        if (a_in_place) {
          // rows_max <= mc: this is the only row block, read by the rows kernel below
        } else if (pr.a_packed != nullptr) {
          abuf = pr.a_packed + pc * pr.a_mpad + ic * kcur;  // ic is a multiple of mr
        } else {
          float* buf = t_pack_a.get(static_cast<size_t>(round_up(mcur, mr) * kcur));
          pack_a(kk, mcur, kcur, pr.a + ic * pr.a_rs + pc * pr.a_cs, pr.a_rs, pr.a_cs, buf);
          abuf = buf;
        }
        for (int64_t jr = 0; jr < ncur; jr += nr) {
          const int nv = static_cast<int>(std::min<int64_t>(nr, ncur - jr));
          const float* bp;
          int64_t ldb = nr;
          if (bblock != nullptr) {
            bp = bblock + jr * kcur;
          } else if (nv == nr) {
            bp = pr.b.b + pc * pr.b.b_rs + (jc + jr);
            ldb = pr.b.b_rs;
          } else {
            float* edge = t_pack_edge.get(static_cast<size_t>(kcur * nr));
            pack_b(nr, kcur, nv, pr.b.b + pc * pr.b.b_rs + (jc + jr), pr.b.b_rs, 1, edge);
            bp = edge;
          }
          if (a_in_place) {
            float* cp = pr.c + ic * pr.ldc + jc + jr;
            kk.rows_ukernel(kcur, pr.a + ic * pr.a_rs + pc, pr.a_rs, bp, ldb, cp, pr.ldc, static_cast<int>(mcur), nv,
                            pr.alpha, beta);
            if (last && epilogue) apply_epilogue(*pr.ep, cp, pr.ldc, ic, jc + jr, mcur, nv);
            continue;
          }
          // The next panel's lines, shared out between this panel's tiles (Note [The next B panel]).
          const NextPanel next = next_b_panel(pr, bblock, j1, after, jc, ncur, pc, kcur, kslice, jr);
          const int64_t tiles = (mcur + mr - 1) / mr;
          const uintptr_t share = (next.bytes / static_cast<uintptr_t>(tiles) + 127) / 128 * 128;
          for (int64_t ir = 0; ir < mcur; ir += mr) {
            const int mv = static_cast<int>(std::min<int64_t>(mr, mcur - ir));
            float* cp = pr.c + (ic + ir) * pr.ldc + jc + jr;
            const uintptr_t from = next.at + static_cast<uintptr_t>(ir / mr) * share;
            kk.ukernel(kcur, abuf + ir * kcur, bp, ldb, cp, pr.ldc, mv, nv, pr.alpha, beta, from,
                       std::min(from + share, next.at + next.bytes));
            if (last && epilogue) apply_epilogue(*pr.ep, cp, pr.ldc, ic + ir, jc + jr, mv, nv);
          }
        }
      }
    }
  }
}

void gemm_run(const Problem& pr) {
  const int64_t m = pr.m, n = pr.n;
  if (m <= 0 || n <= 0) return;
  if (pr.k <= 0) {  // C = beta * C, then the epilogue
    for (int64_t i = 0; i < m; ++i) {
      float* cr = pr.c + i * pr.ldc;
      for (int64_t j = 0; j < n; ++j) cr[j] = pr.beta == 0.0f ? 0.0f : pr.beta * cr[j];
      if (!pr.ep->empty()) apply_epilogue(*pr.ep, cr, pr.ldc, i, 0, 1, n);
    }
    return;
  }
  const GemmKernelF32& kk = *pr.kk;
  int threads = in_parallel_region() ? 1 : get_num_threads();
  if (m * n * pr.k < kSerialFlops && n * pr.k < kSerialBFloats) threads = 1;
  const int64_t col_blocks = (n + kk.nr - 1) / kk.nr, row_blocks = (m + kk.mr - 1) / kk.mr;
  const bool split_cols = col_blocks >= threads && (n >= m || row_blocks < threads);
  const int64_t blocks = split_cols ? col_blocks : row_blocks;
  threads = static_cast<int>(std::min<int64_t>(threads, blocks));
  if (threads <= 1) {
    gemm_block(pr, 0, m, 0, n);
    return;
  }
  if (!split_cols) {
    parallel_run(threads, [&](int t, int nt) {
      const int64_t b0 = blocks * t / nt, b1 = blocks * (t + 1) / nt;
      gemm_block(pr, b0 * kk.mr, std::min(m, b1 * kk.mr), 0, n);
    });
    return;
  }
  // Note [Column chunks taken, not dealt]: the column panels go in chunks that shrink as the
  // queue empties, from its two ends (Note [Chunks that shrink] in core/chunks.h), so a thread
  // slowed by a neighbour on a shared core does not hold the other up at the end. A, shared by
  // every chunk, is packed once first (its row panels split between the threads) instead of by
  // every chunk.
  Problem q = pr;
  if (q.a_packed == nullptr && !reads_a_in_place(pr)) {
    const int64_t mpad = round_up(m, kk.mr), kslice = k_slice(kk.kc, pr.k), panels = mpad / kk.mr;
    float* abuf = t_shared_a.get(static_cast<size_t>(mpad * pr.k));
    parallel_run(threads, [&](int t, int nt) {
      const int64_t r0 = panels * t / nt * kk.mr, r1 = std::min(m, panels * (t + 1) / nt * kk.mr);
      if (r0 >= r1) return;
      for (int64_t pc = 0; pc < pr.k; pc += kslice)
        pack_a(kk, r1 - r0, std::min(kslice, pr.k - pc), pr.a + r0 * pr.a_rs + pc * pr.a_cs, pr.a_rs, pr.a_cs,
               abuf + pc * mpad + r0 * std::min(kslice, pr.k - pc));
    });
    q.a_packed = abuf;
    q.a_mpad = mpad;
  }
  TwoEndedChunks queue(blocks, 1, threads, 8);
  parallel_run(threads, [&](int t, int) {
    for (int64_t b0, b1, after; queue.take(t, b0, b1, &after);)
      gemm_block(q, 0, m, b0 * kk.nr, std::min(n, b1 * kk.nr), after < 0 ? -1 : after * kk.nr);
  });
}

const GemmEpilogue kNoEpilogue{};

void check_epilogue(const GemmEpilogue& ep, int64_t n) {
  KILN_CHECK(ep.bias_kind == GemmBias::none || ep.bias != nullptr, "GEMM epilogue: a bias kind is set but bias is null");
  KILN_CHECK(ep.residual == nullptr || ep.ldr >= n, "GEMM epilogue: residual leading dimension ", ep.ldr,
             " is smaller than n = ", n);
}

}  // namespace

void gemm_epilogue_f32(const GemmEpilogue& ep, float* c, int64_t ldc, int64_t i0, int64_t j0, int64_t m, int64_t n) {
  check_epilogue(ep, j0 + n);
  apply_epilogue(ep, c, ldc, i0, j0, m, n);
}

void gemm_f32(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
              const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc,
              const GemmEpilogue& epilogue) {
  check_epilogue(epilogue, n);
  Problem pr{&gemm_kernel_f32(active_isa()), m, n, k, alpha, beta, a, a_rs, a_cs, {}, c, ldc, &epilogue};
  pr.b.b = b;
  pr.b.b_rs = b_rs;
  pr.b.b_cs = n == 1 ? 1 : b_cs;  // one column: its stride is never walked
  pr.b.direct = pr.b.b_cs == 1 && m <= kGemmSkinnyRows;
  gemm_run(pr);
}

void gemm_f32(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
              const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc) {
  gemm_f32(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc, kNoEpilogue);
}

void PackedGemmB::Free::operator()(float* p) const { std::free(p); }

// Layout: for each kc-slice starting at row pc, the slice's nr-wide panels side by side, the
// slice at pc * npad (npad = n rounded up to nr), panel q at q * nr * kc_slice within it: the same
// panels gemm_block packs per block, so it can index them directly.
PackedGemmB pack_gemm_b_f32(int64_t k, int64_t n, const float* b, int64_t b_rs, int64_t b_cs) {
  KILN_CHECK(k >= 0 && n >= 0, "pack_gemm_b_f32: negative size k = ", k, ", n = ", n);
  const Isa isa = active_isa();
  PackedGemmB out;
  out.k_ = k;
  out.n_ = n;
  out.isa_ = static_cast<int>(isa);
  out.size_ = packed_b_f32_floats(k, n);
  // Huge pages for large weights: a layer's prefetches and streams walk them without a TLB miss
  // every 4 KiB.
  out.data_.reset(static_cast<float*>(aligned_alloc_large(out.size_ * sizeof(float))));
  KILN_CHECK(out.data_ != nullptr, "pack_gemm_b_f32: out of memory for ", out.size_ * sizeof(float), " bytes");
  pack_b_f32(k, n, b, b_rs, b_cs, out.data_.get());
  return out;
}

// Note [Packed operands in caller memory]
// The same panel layouts as PackedGemmB, written into memory the caller owns (a kernel's reused
// workspace), for an operand that one call multiplies many times: a convolution's filters across
// the images of a batch (A, NCHW) or its row blocks (B, NHWC). A fresh allocation per call would
// pay the page faults of a multi-megabyte buffer every time.
//   A: for each k-slice at pc, the slice at pc * mpad (mpad = m rounded up to mr), the mr-row
//      micro-panel of rows [ir, ir + mr) at ir * kslice within it.
//   B: as PackedGemmB.
size_t packed_a_f32_floats(int64_t m, int64_t k) {
  const GemmKernelF32& kk = gemm_kernel_f32(active_isa());
  return static_cast<size_t>(round_up(std::max<int64_t>(m, 1), kk.mr) * std::max<int64_t>(k, 1));
}

void pack_a_f32(int64_t m, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, float* out) {
  const GemmKernelF32& kk = gemm_kernel_f32(active_isa());
  const int64_t mpad = round_up(std::max<int64_t>(m, 1), kk.mr), kslice = k_slice(kk.kc, k);
  for (int64_t pc = 0; pc < k; pc += kslice)
    pack_a(kk, m, std::min(kslice, k - pc), a + pc * a_cs, a_rs, a_cs, out + pc * mpad);
}

size_t packed_b_f32_floats(int64_t k, int64_t n) {
  const GemmKernelF32& kk = gemm_kernel_f32(active_isa());
  return static_cast<size_t>(std::max<int64_t>(k, 1) * round_up(std::max<int64_t>(n, 1), kk.nr));
}

void pack_b_f32(int64_t k, int64_t n, const float* b, int64_t b_rs, int64_t b_cs, float* out) {
  const GemmKernelF32& kk = gemm_kernel_f32(active_isa());
  const int64_t npad = round_up(std::max<int64_t>(n, 1), kk.nr), kslice = k_slice(kk.kc, k);
  if (n == 1) b_cs = 1;
  for (int64_t pc = 0; pc < k; pc += kslice)
    pack_b(kk.nr, std::min(kslice, k - pc), n, b + pc * b_rs, b_rs, b_cs, out + pc * npad);
}

void gemm_f32_packed_a(int64_t m, int64_t n, int64_t k, float alpha, const float* packed_a, const float* b,
                       int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc, const GemmEpilogue& epilogue) {
  check_epilogue(epilogue, n);
  const GemmKernelF32& kk = gemm_kernel_f32(active_isa());
  Problem pr{&kk, m, n, k, alpha, beta, nullptr, 0, 0, {}, c, ldc, &epilogue};
  pr.a_packed = packed_a;
  pr.a_mpad = round_up(std::max<int64_t>(m, 1), kk.mr);
  pr.b.b = b;
  pr.b.b_rs = b_rs;
  pr.b.b_cs = n == 1 ? 1 : b_cs;
  pr.b.direct = pr.b.b_cs == 1 && m <= kGemmSkinnyRows;
  gemm_run(pr);
}

void gemm_f32_packed_b(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
                       const float* packed_b, float beta, float* c, int64_t ldc, const GemmEpilogue& epilogue) {
  check_epilogue(epilogue, n);
  const GemmKernelF32& kk = gemm_kernel_f32(active_isa());
  Problem pr{&kk, m, n, k, alpha, beta, a, a_rs, a_cs, {}, c, ldc, &epilogue};
  pr.b.packed = packed_b;
  pr.b.npad = round_up(std::max<int64_t>(n, 1), kk.nr);
  gemm_run(pr);
}

void gemm_f32_prepacked(int64_t m, float alpha, const float* a, int64_t a_rs, int64_t a_cs, const PackedGemmB& b,
                        float beta, float* c, int64_t ldc, const GemmEpilogue& epilogue) {
  KILN_CHECK(b.data() != nullptr, "gemm_f32_prepacked: B was never packed");
  KILN_CHECK(b.isa() == static_cast<int>(active_isa()), "gemm_f32_prepacked: B was packed for ",
             isa_name(static_cast<Isa>(b.isa())), " kernels but the active ISA is ", isa_name(active_isa()),
             "; pack it again with pack_gemm_b_f32");
  gemm_f32_packed_b(m, b.n(), b.k(), alpha, a, a_rs, a_cs, b.data(), beta, c, ldc, epilogue);
}

void gemm_f32_batched(int64_t batch, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_bs,
                      int64_t a_rs, int64_t a_cs, const float* b, int64_t b_bs, int64_t b_rs, int64_t b_cs, float beta,
                      float* c, int64_t c_bs, int64_t ldc, const GemmEpilogue& epilogue) {
  if (batch <= 0) return;
  auto one = [&](int64_t i) {
    gemm_f32(m, n, k, alpha, a + i * a_bs, a_rs, a_cs, b + i * b_bs, b_rs, b_cs, beta, c + i * c_bs, ldc, epilogue);
  };
  // Products too small to thread on their own run side by side, one per thread.
  if (batch > 1 && m * n * std::max<int64_t>(k, 1) < 8 * kSerialFlops) {
    parallel_for(0, batch, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < batch; ++i) one(i);
  }
}

}  // namespace kiln::kernels::cpu
