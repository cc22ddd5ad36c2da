// How far apart two CPUs are: the round trip of a flag bounced between two threads pinned to them
// (Note [One line hands out a job] in src/core/thread_pool.cc). This VM's two vCPUs measure ~90 ns
// at times and ~350-400 ns or more at others, for minutes each; multi-threaded runs slow down with
// the distance, so bench/by_distance_vs_ort.py labels every timed run with it.
//
//   ./build/bench/kiln_bench_core_distance [CPU_A CPU_B] [round trips]
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

alignas(64) std::atomic<long> flag{0};

}  // namespace

int main(int argc, char** argv) {
  const int a = argc > 2 ? std::atoi(argv[1]) : 0, b = argc > 2 ? std::atoi(argv[2]) : 1;
  const long trips = argc > 3 ? std::atol(argv[3]) : (argc == 2 ? std::atol(argv[1]) : 200000);
  if (trips < 1) {
    std::fprintf(stderr, "usage: %s [CPU_A CPU_B] [round trips >= 1]\n", argv[0]);
    return 2;
  }
  std::atomic<bool> pinned{true};
  std::thread other([&] {
    if (!pin(b)) pinned = false;
    for (long i = 0; i < trips; ++i) {
      while (flag.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      flag.store(2 * i + 2, std::memory_order_release);
    }
  });
  if (!pin(a)) pinned = false;
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < trips; ++i) {
    flag.store(2 * i + 1, std::memory_order_release);
    while (flag.load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  other.join();
  if (!pinned) {
    std::fprintf(stderr, "could not pin to CPUs %d and %d\n", a, b);
    return 1;
  }
  const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
  std::printf("round trip %.0f ns\n", ns / static_cast<double>(trips));
  return 0;
}
