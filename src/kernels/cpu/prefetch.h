// Software prefetch of a tile's rows, shared by the GEMM and convolution drivers and micro-kernels.
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu {

// Requests the lines of `rows` rows of n floats (n >= 1), ld floats apart, the first at address p:
// each row's first line, and its last when that is another. Addresses are integers because a row
// may lie past the buffer (a prefetch never faults, but a pointer past the end is undefined).
// Static and always inlined: the AVX2 files include this under their target pragma (Note [ISA code
// in one binary] in gemm_f32_avx512.cc), and a separate function holding only prefetches is one
// GCC may judge free of side effects and drop its calls (Note [Prefetching the tile's output] in
// conv_direct.cc).
[[gnu::always_inline]] static inline void prefetch_rows(uintptr_t p, int64_t ld, int64_t rows, int64_t n) {
  const uintptr_t step = static_cast<uintptr_t>(ld) * sizeof(float), span = static_cast<uintptr_t>(n - 1) * sizeof(float);
  for (int64_t i = 0; i < rows; ++i, p += step) {
    __builtin_prefetch(reinterpret_cast<const void*>(p));
    if ((p ^ (p + span)) >= 64) __builtin_prefetch(reinterpret_cast<const void*>(p + span));
  }
}

// A micro-kernel's share of the next B panel (Note [The next B panel] in gemm_packed.cc): the
// lines of [next, end) fetched into L2 evenly over the tile's k steps, one line every `every`
// steps, or two a step where the share has more lines than the tile has steps.
//
// Note [An even L2 stream]: the share used to go two lines a step from the first step, so a tile
// of 768 steps asked for its 140 lines in the first 70 (~40 GB/s while it lasted) and then nothing.
// Where the weights come from memory, that burst filled the core's line-fill buffers with misses
// to DRAM, and the tile's own A and B loads from L2 queued behind them. BERT's 768 -> 3072 tile
// pattern with its panels from memory, one thread on the Xeon 6 (Granite Rapids, ~13 GB/s a core
// from memory): 172-174 GFLOP/s as a burst, 196-197 spread evenly (245 peak; 211-212 either way
// with the panels in L3). hf_bert at batch 1 on two threads, six alternations with the burst:
// 68.9 -> 66.3 ms (median of the round medians; every round ahead); batch 8 even.
class L2Stream {
 public:
  [[gnu::always_inline]] L2Stream(uintptr_t next, uintptr_t end, int64_t steps) : next_(next), end_(end) {
    const int64_t lines = next < end ? static_cast<int64_t>((end - next + 63) / 64) : 0;
    two_ = lines > steps;
    every_ = two_ || lines == 0 ? 1 : steps / lines;
    count_ = 1;
  }
  // One k-step: the next line (or two) when this step's turn has come.
  [[gnu::always_inline]] void step() {
    if (--count_ != 0) return;
    count_ = every_;
    if (next_ >= end_) return;
    __builtin_prefetch(reinterpret_cast<const void*>(next_), 0, 2);
    if (two_) __builtin_prefetch(reinterpret_cast<const void*>(next_ + 64), 0, 2);
    next_ += two_ ? 128 : 64;
  }
  // Where the stream stands: the lines below this address have been asked for.
  uintptr_t next() const { return next_; }

 private:
  uintptr_t next_, end_;
  int64_t every_, count_;
  bool two_;
};

}  // namespace kiln::kernels::cpu
