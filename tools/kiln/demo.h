// `kiln demo`: options and entry point.
#pragma once

#include <cstdint>

struct DemoOptions {
  int64_t matmul_size = 512;  // the timed matmul is [n, n] x [n, n], f32
  uint64_t seed = 0;
  int threads = 0;  // 0: kiln's default (the cores the process may use)
};

int run_demo(const DemoOptions& opt);
