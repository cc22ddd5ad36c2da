// Seedable random numbers for rand/randn and initializers (Philox-free and simple: a 64-bit
// splitmix-seeded xoshiro256**). One default generator per process; pass your own for isolation.
#pragma once

#include <cstdint>

namespace kiln {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x6b696c6eULL) { seed_(seed); }
  void manual_seed(uint64_t seed) { seed_(seed); }
  uint64_t next_u64();
  double uniform();  // [0, 1) with 53 random bits
  double normal();   // standard normal (Box-Muller, caches the second value)

 private:
  void seed_(uint64_t seed);
  uint64_t s_[4] = {};
  bool has_spare_ = false;
  double spare_ = 0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace kiln
