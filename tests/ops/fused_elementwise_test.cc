// fused_elementwise's block walk (src/ops/defs/fused/elementwise.cc, Note [Elementwise blocks
// without copies]) against the same chain of unfused ops in float64: one long row split over
// threads, broadcasts along the last and the leading dims, strided inputs, an output that is
// not contiguous, the f32 transcendental ops (vmath), and f64.
#include <gtest/gtest.h>

#include <string>

#include "kiln/kiln.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::random_tensor;

Tensor run(const std::vector<Tensor>& xs, const std::string& prog) {
  return dispatch1(op("fused_elementwise"), xs, {{"program", prog}});
}

// The program "mul 0 1; add 2 1; relu 3; gelu 4; mul 5 0; sigmoid 6; tanh 7; add 8 2" unfused.
Tensor chain(const Tensor& x, const Tensor& y) {
  Tensor m = mul(x, y);
  Tensor t = relu(add(m, y));
  t = mul(gelu(t), x);
  return add(tanh(sigmoid(t)), m);
}
const char* kProg = "mul 0 1; add 2 1; relu 3; gelu 4; mul 5 0; sigmoid 6; tanh 7; add 8 2";

Tensor f64(const Tensor& t) { return t.to(DType::f64); }

TEST(FusedElementwise, MatchesTheUnfusedChain) {
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    struct Case {
      Shape x, y;
    };
    const Case cases[] = {{{1000003}, {1000003}},  // one long row: blocks split over threads
                          {{7, 300}, {300}},       // y broadcast over rows
                          {{7, 300}, {7, 1}},      // y broadcast along the last dim
                          {{3, 5, 257}, {1, 5, 1}},
                          {{1}, {1}}};
    uint64_t seed = 1;
    for (const Case& c : cases)
      for (DType dt : {DType::f32, DType::f64}) {
        Tensor x = random_tensor(c.x, dt, seed++), y = random_tensor(c.y, dt, seed++);
        Tensor want = chain(f64(x), f64(y));
        EXPECT_TRUE(testing::all_close(run({x, y}, kProg), want)) << shape_str(c.x) << " threads " << threads;
        if (c.x.size() == 2) {  // a strided (transposed) x
          Tensor xt = random_tensor({c.x[1], c.x[0]}, dt, seed++).transpose(0, 1);
          EXPECT_TRUE(testing::all_close(run({xt, y}, kProg), chain(f64(xt), f64(y)))) << "strided x";
        }
      }
  }
  set_num_threads(saved);
}

TEST(FusedElementwise, TranscendentalsAndSpecialValues) {
  Tensor x = from_vector<float>({-INFINITY, -100.f, -5.f, -0.f, 0.f, 1e-30f, 0.5f, 3.f, 90.f, INFINITY, NAN});
  for (const char* fn : {"exp", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh", "erf"}) {
    Tensor got = run({x}, std::string(fn) + " 0");
    Tensor want = dispatch1(op(fn == std::string("gelu_tanh") ? "gelu" : fn), {x},
                            fn == std::string("gelu_tanh") ? Attrs{{"approximate", std::string("tanh")}} : Attrs{});
    EXPECT_TRUE(testing::all_close(got, want)) << fn;
  }
  Tensor pos = from_vector<float>({0.f, 1e-40f, 1.f, 3e38f, INFINITY, -1.f});
  EXPECT_TRUE(testing::all_close(run({pos}, "log 0"), log(pos)));
}

}  // namespace
}  // namespace kiln
