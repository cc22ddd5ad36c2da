// Work handed out in chunks from both ends of one queue (Note [Shares taken, not dealt] in
// conv_direct.cc): even threads take chunks from the front, odd ones from the back, so each
// starts where a fixed split would have put it and only the last chunks cross over to whichever
// thread is ahead. On shared cores one thread often runs 10-20% slower than the other for a while,
// and fixed halves then leave the faster one waiting.
#pragma once

#include <atomic>
#include <cstdint>

namespace kiln {

class TwoEndedChunks {
 public:
  explicit TwoEndedChunks(int64_t chunks) : left_(static_cast<uint64_t>(chunks)) {}

  // The next chunk for thread t, or -1 when none is left. Front and back are one word, so the two
  // ends never hand out the same chunk.
  int64_t take(int t) {
    const bool front = t % 2 == 0;
    uint64_t cur = left_.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t f = cur >> 32, b = cur & 0xffffffffu;
      if (f >= b) return -1;
      const uint64_t next = front ? ((f + 1) << 32 | b) : (f << 32 | (b - 1));
      if (left_.compare_exchange_weak(cur, next, std::memory_order_relaxed)) return static_cast<int64_t>(front ? f : b - 1);
    }
  }

 private:
  std::atomic<uint64_t> left_;  // chunks [front, back): front in the high half
};

}  // namespace kiln
