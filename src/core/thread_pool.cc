// Note [Thread pool]
// One pool for all of kiln's CPU work: on a 2-core machine two pools that both spin starve each
// other. The calling thread is worker 0 and takes the first chunk itself, then spins briefly until
// the workers are done (Note [The caller spins before it yields]). Workers spin briefly
// on a generation counter after finishing (a burst of small ops then costs no futex wake-up),
// then sleep on a condition variable, so an idle kiln takes no CPU. Parallel regions do not nest:
// a parallel_for inside one runs inline. One job runs at a time; a second caller thread runs its
// loop inline rather than waiting.
#include "kiln/core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/chunks.h"
#include "kiln/core/error.h"

namespace kiln {

namespace {

thread_local bool t_in_parallel = false;

// Note [The caller spins before it yields]
// After its own chunk the caller waits for the workers. It used to sched_yield from the first
// check, and a yield is a system call that in this VM returned after ~2.5 us: an empty parallel
// region took 2.75 us (median of 20000; 0.28 us when the caller spins first), and a chain of 100
// elementwise steps over 64K floats each, 2 threads, 0.424 ms at best against 0.388. So it spins
// first, as long as a worker spins before sleeping, then yields (a descheduled worker).
// 2000 pauses: 20 us where a pause takes 10 ns, ~100 us in this VM (50 ns).
constexpr int kSpin = 2000;

inline void pause() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

class ThreadPool {
 public:
  explicit ThreadPool(int n) { start(n); }
  ~ThreadPool() { stop(); }

  int size() const { return size_; }

  void resize(int n) {
    std::lock_guard<std::mutex> job(job_mu_);
    stop();
    start(n);
  }

  // Runs fn(i, n) for i in [0, n) with i == 0 on the caller.
  void run(int n, const std::function<void(int, int)>& fn) {
    std::unique_lock<std::mutex> job(job_mu_, std::try_to_lock);
    if (!job.owns_lock() || n <= 1 || size_ <= 1) {
      run_inline(n, fn);
      return;
    }
    n = std::min(n, size_);
    {
      std::lock_guard<std::mutex> g(mu_);
      fn_ = &fn;
      n_ = n;
      error_ = nullptr;
      pending_.store(n - 1, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    call(0, n, fn);
    // Workers finish quickly in the common case: spin, then yield, never sleep (Note [The caller
    // spins before it yields]).
    for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
      if (spin < kSpin) pause();
      else std::this_thread::yield();
    }
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> g(mu_);
      fn_ = nullptr;
      error = error_;
    }
    if (error) std::rethrow_exception(error);
  }

 private:
  void run_inline(int n, const std::function<void(int, int)>& fn) {
    bool was = t_in_parallel;
    t_in_parallel = true;
    try {
      for (int i = 0; i < n; ++i) fn(i, n);
    } catch (...) {
      t_in_parallel = was;
      throw;
    }
    t_in_parallel = was;
  }

  void call(int i, int n, const std::function<void(int, int)>& fn) {
    t_in_parallel = true;
    try {
      fn(i, n);
    } catch (...) {
      std::lock_guard<std::mutex> g(mu_);
      if (!error_) error_ = std::current_exception();
    }
    t_in_parallel = false;
  }

  void start(int n) {
    size_ = std::max(1, n);
    quit_ = false;
    // Each worker starts from the generation current now, not when its thread first runs: a
    // stop() that bumps the generation before then must still wake it.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 1; i < size_; ++i) workers_.emplace_back([this, i, gen] { worker(i, gen); });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      quit_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  void worker(int index, uint64_t seen) {
    for (;;) {
      // Spin a little before sleeping (kSpin pauses).
      for (int spin = 0; spin < kSpin && generation_.load(std::memory_order_acquire) == seen; ++spin) pause();
      const std::function<void(int, int)>* fn;
      int n;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        seen = generation_.load(std::memory_order_acquire);
        if (quit_) return;
        fn = fn_;
        n = n_;
      }
      if (fn && index < n) {
        call(index, n, *fn);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
      }
    }
  }

  int size_ = 1;
  std::vector<std::thread> workers_;
  std::mutex job_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  const std::function<void(int, int)>* fn_ = nullptr;
  int n_ = 0;
  bool quit_ = false;
  std::exception_ptr error_;
};

int default_threads() {
  if (const char* env = std::getenv("KILN_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n >= 1) return n;
  }
  return available_cores();
}

ThreadPool& pool() {
  static ThreadPool* p = new ThreadPool(default_threads());  // leaked: outlives static tensors
  return *p;
}

}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads: expected n >= 1, got ", n);
  KILN_CHECK(!t_in_parallel, "set_num_threads: cannot resize the pool from inside a parallel region");
  if (pool().size() != n) pool().resize(n);
}

int get_num_threads() { return pool().size(); }

bool in_parallel_region() { return t_in_parallel; }

void parallel_run(int n, const std::function<void(int, int)>& fn) { pool().run(n, fn); }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  int64_t total = end - begin;
  grain = std::max<int64_t>(grain, 1);
  int64_t max_chunks = total / grain + (total % grain != 0);  // no overflow for huge grains
  int threads = t_in_parallel ? 1 : static_cast<int>(std::min<int64_t>(pool().size(), max_chunks));
  if (threads <= 1) {
    fn(begin, end);
    return;
  }
  // Note [Loops taken, not dealt]: the range goes in chunks of about an eighth of each thread's
  // part (never under the grain) from a two-ended queue (core/chunks.h), as the convolution's and
  // GEMM's splits do: each thread starts on the part a fixed split would give it, and a thread
  // slowed by a neighbour on a shared core hands its last chunks to the other instead of holding
  // it up.
  const int64_t chunk = std::max(grain, (total + 8 * threads - 1) / (8 * threads));
  TwoEndedChunks queue((total + chunk - 1) / chunk);
  pool().run(threads, [&](int i, int) {
    for (int64_t c; (c = queue.take(i)) >= 0;) fn(begin + c * chunk, std::min(end, begin + (c + 1) * chunk));
  });
}

}  // namespace kiln
