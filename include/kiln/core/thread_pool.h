// The one CPU thread pool. Every parallel loop in kiln runs here, so two pools never fight for
// the same cores. See Note [Thread pool] in src/core/thread_pool.cc.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln {

// Sets the number of threads kiln's CPU kernels use (the caller counts as one). n >= 1. The
// default is available_cores(), or KILN_NUM_THREADS. A worker thread that keeps landing on the
// caller's CPU is pinned to a free one; KILN_PIN_THREADS=0 turns that off (the caller's own
// affinity is never changed).
void set_num_threads(int n);
int get_num_threads();
// The cores this process may run on (sched_getaffinity), the default thread count.
int available_cores();

// Calls fn(begin, end) on disjoint chunks covering [begin, end) with at least `grain` items per
// chunk, in parallel on the pool. Runs inline when the range is small, when there is one thread,
// or when already inside a parallel region. Exceptions from fn are rethrown in the caller.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

// Runs fn(thread_index, num_threads) once on each of `n` workers (n <= get_num_threads()).
void parallel_run(int n, const std::function<void(int, int)>& fn);

bool in_parallel_region();

}  // namespace kiln
