// Work handed out in chunks from both ends of one queue (Note [Shares taken, not dealt] in
// conv_direct.cc): even threads take chunks from the front, odd ones from the back, so each
// starts where a fixed split would have put it and only the last chunks cross over to whichever
// thread is ahead. On shared cores one thread often runs 10-20% slower than the other for a while,
// and fixed halves then leave the faster one waiting.
//
// Note [Chunks that shrink]
// Chunks are a fixed fraction of each thread's part (1 / per_thread of it) until what is left
// gets small; from then on each is a 1 / (2 * threads) share of what is left, never under `min`
// units. With fixed chunks alone, the thread that finished first waited for half a chunk on
// average: in ResNet-18 at batch 1 on 2 threads each 3x3 layer's region ended with one thread
// idle for ~30 us (of ~1 ms), its chunks being 16 tiles of ~4 us. The early chunks stay small
// because a thread descheduled in the middle of one holds up the other until it is back.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace kiln {

namespace detail {

// Units [0, n) counted in slots of `step` units (1 unless n exceeds what 32 bits count), and the
// bounds of a chunk in slots: at least `min` units, at most 1 / per_thread of a thread's part (or
// `min`). Shared by the two queues below.
struct ChunkSlots {
  static constexpr int64_t kMaxSlots = int64_t{1} << 31;  // front and back fit 32 bits each
  static constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
  static uint64_t pack(int64_t f, int64_t b) { return static_cast<uint64_t>(f) << 32 | static_cast<uint64_t>(b); }

  ChunkSlots(int64_t units, int64_t min, int threads, int per_thread)
      : n(std::max<int64_t>(0, units)),
        step(std::max<int64_t>(1, ceil_div(n, kMaxSlots))),
        slots(ceil_div(n, step)),
        min_slots(std::max<int64_t>(1, ceil_div(std::max<int64_t>(1, min), step))),
        max_slots(std::max(min_slots, ceil_div(slots, int64_t{std::max(1, threads)} * std::max(1, per_thread)))) {}

  // The next chunk's size out of `left` slots: a 1 / parts share of them within the bounds, or all
  // of them where less than `min` would remain.
  int64_t chunk(int64_t left, int64_t parts) const {
    const int64_t size = std::clamp(ceil_div(left, parts), min_slots, max_slots);
    return left - size < min_slots ? left : size;
  }
  // Slots [s0, s0 + size) as units [u0, u1).
  void units(int64_t s0, int64_t size, int64_t& u0, int64_t& u1) const {
    u0 = s0 * step;
    u1 = std::min(n, (s0 + size) * step);
  }

  const int64_t n, step, slots, min_slots, max_slots;
};

}  // namespace detail

class TwoEndedChunks {
 public:
  // Units [0, n) for `threads`, in chunks of at least `min` units (unless n is smaller) and at
  // most 1 / per_thread of a thread's part (or `min`, or what is left when less than `min` would
  // remain).
  TwoEndedChunks(int64_t n, int64_t min, int threads, int per_thread)
      : c_(n, min, threads, per_thread), parts_(2 * std::max(1, threads)), left_(static_cast<uint64_t>(c_.slots)) {}

  // The next chunk [u0, u1) for thread t; false when none is left. Front and back are one word, so
  // the two ends never hand out the same units. With `after`, also where the chunk that t would
  // take next begins if the other end took nothing in between (-1: none would be left), for a
  // thread that fetches its next chunk's data ahead (Note [The next B panel] in gemm_packed.cc).
  bool take(int t, int64_t& u0, int64_t& u1, int64_t* after = nullptr) {
    const bool front = t % 2 == 0;
    uint64_t cur = left_.load(std::memory_order_relaxed);
    for (;;) {
      const int64_t f = static_cast<int64_t>(cur >> 32), b = static_cast<int64_t>(cur & 0xffffffffu);
      if (f >= b) return false;
      const int64_t size = c_.chunk(b - f, parts_);  // no piece under `min` left between the ends
      const int64_t s0 = front ? f : b - size;
      const uint64_t next = front ? detail::ChunkSlots::pack(f + size, b) : detail::ChunkSlots::pack(f, b - size);
      if (left_.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
        c_.units(s0, size, u0, u1);
        if (after != nullptr) {
          const int64_t rest = b - f - size;  // slots left between the ends
          int64_t unused = 0;
          *after = -1;
          if (rest > 0) c_.units(front ? f + size : b - size - c_.chunk(rest, parts_), 1, *after, unused);
        }
        return true;
      }
    }
  }

 private:
  const detail::ChunkSlots c_;
  const int64_t parts_;
  std::atomic<uint64_t> left_;  // slots [front, back): front in the high half
};

// Note [Chunks on lines of their own]
// In TwoEndedChunks both ends share one word, so every take after the other thread's misses on
// that line: perf on MobileNetV4-Small at batch 1 on two threads put 4% of all samples on that
// load (its layers are 5-30 us, a dozen takes each). Here each thread owns an equal share of the
// units on a cache line of its own and takes from its front, in chunks that shrink as the share
// empties (as in Note [Chunks that shrink], relative to the share); only a thread whose share is
// empty touches another's line, taking half of what is left there from its back. Unless a thread
// falls behind, a region's takes never leave their core.

// One thread's share: a cache line of its own.
struct alignas(64) ChunkShare {
  std::atomic<uint64_t> range{0};  // slots [front, back): front in the high half
};

class OwnedChunks {
 public:
  // Units [0, n) for `threads`, in chunks of at least `min` units (unless fewer are left) and at
  // most 1 / per_thread of a share, the shares kept in `shares` (at least `threads` of them, used
  // by nothing else while this lives: the pool's own, Note [The caller's frames fetched at once]
  // in core/thread_pool.cc).
  OwnedChunks(int64_t n, int64_t min, int threads, int per_thread, ChunkShare* shares)
      : c_(n, min, threads, per_thread), threads_(std::max(1, threads)), shares_(shares) {
    // Shares start at multiples of `min`, so that only a piece ending at n is ever shorter.
    auto start = [&](int t) {
      return t == threads_ ? c_.slots : c_.slots * t / threads_ / c_.min_slots * c_.min_slots;
    };
    for (int t = 0; t < threads_; ++t)
      shares_[t].range.store(detail::ChunkSlots::pack(start(t), start(t + 1)), std::memory_order_relaxed);
  }
  OwnedChunks(const OwnedChunks&) = delete;
  OwnedChunks& operator=(const OwnedChunks&) = delete;

  // The next chunk [u0, u1) for thread t: from the front of its own share, else from the back of
  // another's; false when every share is empty.
  bool take(int t, int64_t& u0, int64_t& u1) {
    for (int k = 0; k < threads_; ++k) {
      const bool own = k == 0;
      std::atomic<uint64_t>& range = shares_[(t + k) % threads_].range;
      uint64_t cur = range.load(std::memory_order_relaxed);
      for (;;) {
        const int64_t f = static_cast<int64_t>(cur >> 32), b = static_cast<int64_t>(cur & 0xffffffffu);
        if (f >= b) break;
        const int64_t size = c_.chunk(b - f, 2);  // no piece under `min` left behind
        const int64_t s0 = own ? f : b - size;
        const uint64_t next = own ? detail::ChunkSlots::pack(f + size, b) : detail::ChunkSlots::pack(f, b - size);
        if (range.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
          c_.units(s0, size, u0, u1);
          return true;
        }
      }
    }
    return false;
  }

 private:
  const detail::ChunkSlots c_;
  const int threads_;
  ChunkShare* const shares_;
};

}  // namespace kiln
