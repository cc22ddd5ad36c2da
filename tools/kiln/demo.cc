// `kiln demo`: a short tour of the array layer.
#include <chrono>
#include <iostream>

#include "kiln/kiln.h"

int run_demo() {
  using namespace kiln;
  Tensor a = arange(6).reshape({2, 3});
  std::cout << "a = arange(6).reshape({2, 3})\n" << a << "\n";
  return 0;
}
