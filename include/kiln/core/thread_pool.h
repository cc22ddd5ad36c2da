// The one CPU thread pool. Every parallel loop in kiln runs here, so two pools never fight for
// the same cores. See Note [Thread pool] in src/core/thread_pool.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace kiln {

// A callable referred to, not owned, for the length of a call: what parallel_for and parallel_run
// take (Note [Loops by reference] in src/core/thread_pool.cc). Two pointers, copied freely; the
// callable must outlive every call through it (a lambda passed straight to the call does).
template <class Sig>
class FunctionRef;
template <class R, class... A>
class FunctionRef<R(A...)> {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, A...>)
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): a lambda converts in place
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* obj, A... a) -> R { return (*static_cast<std::remove_reference_t<F>*>(obj))(std::forward<A>(a)...); }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

  // Its two pointers, and a reference made of them again (to keep one in atomics).
  using Call = R (*)(void*, A...);
  FunctionRef(void* obj, Call call) noexcept : obj_(obj), call_(call) {}
  void* object() const { return obj_; }
  Call call() const { return call_; }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

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
void parallel_for(int64_t begin, int64_t end, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn);

// Runs fn(thread_index, num_threads) once on each of `n` workers (n <= get_num_threads()).
void parallel_run(int n, FunctionRef<void(int, int)> fn);

bool in_parallel_region();

}  // namespace kiln
