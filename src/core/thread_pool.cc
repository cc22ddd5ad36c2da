// Note [Thread pool]
// One pool for all of kiln's CPU work: on a 2-core machine two pools that both spin starve each
// other. The calling thread is worker 0 and takes the first chunk itself, then spins briefly until
// the workers are done (Note [The caller spins before it yields]). Workers spin briefly
// on a generation counter after finishing (a burst of small ops then costs no futex wake-up),
// then sleep on a condition variable, so an idle kiln takes no CPU. A worker found on the caller's
// CPU is pinned to a free one (Note [Workers kept off the caller's CPU]). Parallel regions do not
// nest: a parallel_for inside one runs inline. One job runs at a time; a second caller thread runs
// its loop inline rather than waiting.
#include "kiln/core/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/chunks.h"
#include "kiln/core/error.h"

namespace kiln {

namespace {

thread_local bool t_in_parallel = false;

// Note [Loops by reference]
// parallel_for and parallel_run took std::function, which keeps a lambda of more than two captures
// on the heap: every parallel loop allocated and freed its closure, and a worker starting a region
// went from the job to the std::function, to the heap closure, to the variables it refers to, one
// cache miss after another (each a trip to the caller's core, ~100-400 ns here). They take a
// FunctionRef instead (thread_pool.h: a pointer to the caller's lambda and a function to call it),
// and the job line holds its two pointers, so a worker reads the lambda itself, on the caller's
// stack beside the variables it captures, straight from the job. At batch 1 on two threads,
// medians by distance against the build before: MobileNetV4-Small 0.5% faster near, 0.9% far;
// MobileNetV3-Large 0.8% near.
// What a region runs: fn(thread index, threads).
using Task = FunctionRef<void(int, int)>;

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

// Note [The caller's frames fetched at once]
// A worker starting a region reads the task, which is a lambda on the caller's stack; the lambda
// refers to the chunk queue and to the kernel's own lambda, a frame or two up the same stack, and
// that one to the kernel's locals. Each is a line the caller wrote last, so each is a miss, and
// each address comes from the line before it: one trip to the caller's core after another,
// ~100 ns apiece at the near distance and ~400-800 at the far (Note [One line hands out a job]).
// So the worker first asks for the kFrameLines lines from the task up (the frames of the loop
// and of the kernel that called it) all at once, and the chain then finds them on their way. No
// line below the task: that is where the caller is running its own chunk. The chunk shares moved
// off the stack for this, into the pool (shares_), since they are the lines of that window the
// caller keeps writing (taking its chunks): in the window, a worker's read of the caller's share
// took the line from under the caller's next take. bench/region_bench.cc, an empty loop over 2
// units and kernel-like loops over 2 and 16 reading their arguments through a struct on the
// caller's stack, us a region against the build before (medians of 21 rounds): 0.248 / 0.238 /
// 0.384 -> 0.227 / 0.208 / 0.351 near; 1.07-1.09 / 1.11-1.12 / 1.15-1.17 -> 0.93-0.99 / 1.00-1.07
// / 1.08-1.13 at ~365 ns. MobileNetV4-Small at batch 1 on two threads, by distance (300 s,
// `bench/by_distance_vs_ort.py --other-kiln`): 0.927 -> 0.922 ms near (ONNX Runtime 0.926),
// 1.286 -> 1.266 far (ONNX Runtime 1.278).
constexpr int kFrameLines = 16;

inline void fetch_frames(const void* task) {
  const auto* line = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(task) & ~uintptr_t{63});
  for (int i = 0; i < kFrameLines; ++i) __builtin_prefetch(line + 64 * i, 0, 3);
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
  void run(int n, Task fn) {
    std::unique_lock<std::mutex> job(job_mu_, std::try_to_lock);
    if (!job.owns_lock() || n <= 1 || size_ <= 1) {
      run_inline(n, fn);
      return;
    }
    run_locked(std::min(n, size_), fn);
  }

  // parallel_for's chunks of [begin, begin + total) for `threads` (> 1) threads, taken from shares
  // on the pool's own lines (Note [The caller's frames fetched at once]).
  void loop(int64_t begin, int64_t total, int64_t grain, int threads, FunctionRef<void(int64_t, int64_t)> fn) {
    std::unique_lock<std::mutex> job(job_mu_, std::try_to_lock);
    if (!job.owns_lock() || size_ <= 1) {  // the pool (and its shares) busy with another caller's job
      run_inline(1, [&](int, int) { fn(begin, begin + total); });
      return;
    }
    threads = std::min(threads, size_);
    OwnedChunks queue(total, grain, threads, 8, shares_.get());
    run_locked(threads, [&](int i, int) {
      for (int64_t u0, u1; queue.take(i, u0, u1);) fn(begin + u0, begin + u1);
    });
  }

 private:
  // The job lock held; n > 1.
  void run_locked(int n, Task fn) {
    done_.pending.store(n - 1, std::memory_order_relaxed);
    publish(fn, n, false);
    call(0, n, fn);
    // Workers finish quickly in the common case: spin, then yield, never sleep (Note [The caller
    // spins before it yields]).
    for (int spin = 0; done_.pending.load(std::memory_order_acquire) != 0; ++spin) {
      if (spin < kSpin) pause();
      else std::this_thread::yield();
    }
    std::exception_ptr error;
    if (done_.failed.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> g(mu_);
      error = std::exchange(error_, nullptr);
      done_.failed.store(false, std::memory_order_relaxed);
    }
    keep_workers_apart(n);
    if (error) std::rethrow_exception(error);
  }

  void run_inline(int n, Task fn) {
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

  void call(int i, int n, Task fn) {
    t_in_parallel = true;
    try {
      fn(i, n);
    } catch (...) {
      std::lock_guard<std::mutex> g(mu_);
      if (!error_) error_ = std::current_exception();
      done_.failed.store(true, std::memory_order_release);
    }
    t_in_parallel = false;
  }

  // Note [Workers kept off the caller's CPU]
  // The worker sometimes shared the caller's CPU for a whole process while the other CPU sat idle:
  // woken on the waker's CPU, it ran its chunk while the caller waited, spun, slept, and the caller
  // ran its own; two threads were rarely runnable at once, so the load balancer never split them.
  // perf's sched_switch showed the pair alternating on CPU 0, and a one-layer engine (a 2048 ->
  // 1000 GEMV) ran at 0.17-0.20 ms instead of 0.05-0.06 (0.10 on one thread) in about one process
  // in five. Pinning the workers up front did not help (the caller then settled on the worker's
  // CPU), nor did workers yielding for 2 ms before they sleep. So each worker notes the CPU it ran
  // its chunk on, and after a region the caller, finding a worker on its own CPU or on another
  // worker's, pins that worker to a CPU nobody is using. The caller, the user's thread, is never
  // pinned. Only when the process may use at least as many CPUs as there are threads; never with
  // KILN_PIN_THREADS=0.
  void keep_workers_apart(int n) {
    if (cpus_.empty()) return;
    const int me = sched_getcpu();
    if (me < 0) return;
    auto cpu_of = [&](int j) { return worker_cpu_[static_cast<size_t>(j)].load(std::memory_order_relaxed); };
    for (int i = 1; i < n; ++i) {
      const int cpu = cpu_of(i);
      if (cpu < 0) continue;
      bool shared = cpu == me;
      for (int j = 1; j < i && !shared; ++j) shared = cpu_of(j) == cpu;
      if (!shared) continue;
      for (int c : cpus_) {
        bool used = c == me;
        for (int j = 1; j < n && !used; ++j) used = j != i && cpu_of(j) == c;
        if (used) continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(c, &one);
        if (pthread_setaffinity_np(workers_[static_cast<size_t>(i - 1)].native_handle(), sizeof(one), &one) == 0)
          worker_cpu_[static_cast<size_t>(i)].store(c, std::memory_order_relaxed);
        break;
      }
    }
  }

  // The CPUs the workers may be pinned to (Note [Workers kept off the caller's CPU]); none: never pin.
  static std::vector<int> pinnable_cpus(int threads) {
    if (const char* env = std::getenv("KILN_PIN_THREADS"); env != nullptr && std::string(env) == "0") return {};
    cpu_set_t set;
    CPU_ZERO(&set);
    if (threads <= 1 || sched_getaffinity(0, sizeof(set), &set) != 0) return {};
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    if (static_cast<int>(cpus.size()) < threads) return {};
    return cpus;
  }

  void start(int n) {
    size_ = std::max(1, n);
    cpus_ = pinnable_cpus(size_);
    worker_cpu_ = std::vector<std::atomic<int>>(static_cast<size_t>(size_));
    for (auto& c : worker_cpu_) c.store(-1, std::memory_order_relaxed);
    // Each worker starts from the generation current now, not when its thread first runs: a
    // stop() that bumps the generation before then must still wake it.
    const uint64_t gen = job_.generation.load(std::memory_order_acquire);
    shares_ = std::make_unique<ChunkShare[]>(static_cast<size_t>(size_));
    for (int i = 1; i < size_; ++i) workers_.emplace_back([this, i, gen] { worker(i, gen); });
  }

  void stop() {
    publish(std::nullopt, 0, true);
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  // Note [One line hands out a job]
  // A region costs the cache lines that cross between the cores, and they cross at two speeds
  // here: this VM's two vCPUs are at times ~90 ns apart for a round trip of a shared flag and at
  // times ~350-400 ns (the host moves them; minutes of each, flipping often). The pool used to
  // hand out a job under a mutex (its line crossing twice a region), kept the job's fields and
  // the done count on one line with the condition variable, and had the worker record its CPU
  // every region. Now the caller writes the job (function, width, quit flag) on a line of its
  // own as a sequence lock: the generation goes odd, the fields are written, the generation goes
  // even; a worker that saw the generation change reads the fields and keeps them only if the
  // generation is the same after. The done count and the error flag share another line; the
  // mutex and condition variable are touched only where a worker sleeps (the sleepers' count on a
  // line of its own says so). An empty region (parallel_for over 2 units, median of 200000):
  // 0.36-0.44 -> 0.22-0.25 us at the short distance, 1.16-1.30 -> 1.05-1.18 at the long one;
  // MNASNet at batch 1 on two threads ~1% faster at the short distance and ~2.5% at the long one
  // (medians, alternating builds, bench/RESULTS.md 2026-12-06 14:43).
  void publish(std::optional<Task> fn, int n, bool quit) {
    const uint64_t g = job_.generation.load(std::memory_order_relaxed);
    job_.generation.store(g + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    job_.fn_object.store(fn ? fn->object() : nullptr, std::memory_order_relaxed);
    job_.fn_call.store(fn ? fn->call() : nullptr, std::memory_order_relaxed);
    job_.n.store(n, std::memory_order_relaxed);
    job_.quit.store(quit, std::memory_order_relaxed);
    // seq_cst: either a worker counting itself a sleeper sees the new generation, or this sees it.
    job_.generation.store(g + 2, std::memory_order_seq_cst);
    if (sleepers_.count.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> g2(mu_);
      cv_.notify_all();
    }
  }

  void worker(int index, uint64_t seen) {
    for (;;) {
      // Spin a little before sleeping (kSpin pauses); an odd generation is a job being written.
      uint64_t g = job_.generation.load(std::memory_order_acquire);
      for (int spin = 0; spin < kSpin && (g == seen || g % 2 == 1); ++spin) {
        pause();
        g = job_.generation.load(std::memory_order_acquire);
      }
      if (g == seen || g % 2 == 1) {
        sleepers_.count.fetch_add(1, std::memory_order_seq_cst);
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] {
            g = job_.generation.load(std::memory_order_seq_cst);
            return g != seen && g % 2 == 0;
          });
        }
        sleepers_.count.fetch_sub(1, std::memory_order_relaxed);
      }
      void* const fn_object = job_.fn_object.load(std::memory_order_relaxed);
      const Task::Call fn_call = job_.fn_call.load(std::memory_order_relaxed);
      const int n = job_.n.load(std::memory_order_relaxed);
      const bool quit = job_.quit.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (job_.generation.load(std::memory_order_relaxed) != g) continue;  // rewritten meanwhile: read again
      seen = g;
      if (quit) return;
      if (fn_call != nullptr && index < n) {
        fetch_frames(fn_object);
        // Stored only when it changed, so the caller's read of it stays a local hit.
        const int cpu = sched_getcpu();
        auto& mine = worker_cpu_[static_cast<size_t>(index)];
        if (mine.load(std::memory_order_relaxed) != cpu) mine.store(cpu, std::memory_order_relaxed);
        call(index, n, Task(fn_object, fn_call));
        done_.pending.fetch_sub(1, std::memory_order_acq_rel);
      }
    }
  }

  int size_ = 1;
  std::vector<std::thread> workers_;
  std::vector<int> cpus_;                     // Note [Workers kept off the caller's CPU]
  std::vector<std::atomic<int>> worker_cpu_;  // the CPU worker i last ran a chunk on (-1: none yet)
  std::unique_ptr<ChunkShare[]> shares_;      // parallel_for's, one a thread (Note [The caller's frames fetched at once])
  std::mutex job_mu_;  // one job at a time
  // Note [One line hands out a job]: the job, written by the caller, read by the workers.
  struct alignas(64) Job {
    std::atomic<uint64_t> generation{0};  // odd while the fields below are being written
    std::atomic<void*> fn_object{nullptr};  // the task's two pointers (no call: none, a quit)
    std::atomic<Task::Call> fn_call{nullptr};
    std::atomic<int> n{0};
    std::atomic<bool> quit{false};
  } job_;
  struct alignas(64) Done {
    std::atomic<int> pending{0};   // workers of the current job still running
    std::atomic<bool> failed{false};  // one threw: error_ holds the first exception
  } done_;
  struct alignas(64) Sleepers {
    std::atomic<int> count{0};
  } sleepers_;
  std::mutex mu_;  // error_, and the condition variable's sleeps
  std::condition_variable cv_;
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

void parallel_run(int n, Task fn) { pool().run(n, fn); }

void parallel_for(int64_t begin, int64_t end, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (end <= begin) return;
  int64_t total = end - begin;
  grain = std::max<int64_t>(grain, 1);
  int64_t max_chunks = total / grain + (total % grain != 0);  // no overflow for huge grains
  int threads = t_in_parallel ? 1 : static_cast<int>(std::min<int64_t>(pool().size(), max_chunks));
  if (threads <= 1) {
    fn(begin, end);
    return;
  }
  // Note [Loops taken, not dealt]: the range goes in chunks that shrink as it empties (never under
  // the grain), each thread taking from its own share on a cache line of its own (Note [Chunks on
  // lines of their own] in core/chunks.h): each thread starts on the part a fixed split would give
  // it, and a thread slowed by a neighbour on a shared core has its last chunks taken by the other
  // instead of holding it up. MNASNet at batch 1 on two threads, against the one two-ended queue
  // (Note [Chunks that shrink]), medians by distance: 2.0% faster near and far; MobileNetV4-Small
  // 1.1% near, 2.7% far; MobileNetV3-Large 1.6-2.0%; EfficientNet-B0 1.5% faster near, 0.8%
  // slower far (`bench/by_distance_vs_ort.py --other-kiln`, 200 s each).
  pool().loop(begin, total, grain, threads, fn);
}

}  // namespace kiln
