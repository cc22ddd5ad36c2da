// An experiment, not part of kiln: an NCHW8c 3x3 stride-1 convolution tile (6 pixels x 16 output
// channels, every input channel accumulated in registers) on a pre-padded blocked input, to see what
// the blocked layout alone buys over kiln's NCHW pixel tiles (bench/RESULTS.md, 2026-12-03 20:25).
//   g++ -O3 -mavx2 -mfma -std=c++20 bench/nchw8c_tile.cc -o /tmp/nchw8c_tile
//   /tmp/nchw8c_tile C K HW [reps]      e.g. 64 64 56; compare kiln_bench_conv_layout BM_conv_direct_pixels
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
int main(int argc, char** argv) {
  const int C = atoi(argv[1]), K = atoi(argv[2]), H = atoi(argv[3]), W = H, reps = argc > 4 ? atoi(argv[4]) : 20;
  const int CB = C / 8, KP = K / 16, HP = H + 2, WP = W + 2;
  std::mt19937 g(1); std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(C * H * W), w(K * C * 9), bias(K);
  for (std::vector<float>* v : {&x, &w, &bias})
    for (float& e : *v) e = u(g);
  std::vector<float> xp(CB * HP * WP * 8, 0.f), wp(KP * CB * 9 * 8 * 16), y(K * H * W);
  for (int c = 0; c < C; ++c) for (int i = 0; i < H; ++i) for (int j = 0; j < W; ++j)
    xp[((c / 8 * HP + i + 1) * WP + j + 1) * 8 + c % 8] = x[(c * H + i) * W + j];
  for (int k = 0; k < K; ++k) for (int c = 0; c < C; ++c) for (int t = 0; t < 9; ++t)
    wp[((((k / 16) * CB + c / 8) * 9 + t) * 8 + c % 8) * 16 + k % 16] = w[(k * C + c) * 9 + t];
  auto run = [&]() {
    for (int oh = 0; oh < H; ++oh)
      for (int kp = 0; kp < KP; ++kp)
        for (int ow0 = 0; ow0 < W; ow0 += 6) {
          const int o = std::min(ow0, W - 6);
          __m256 acc[6][2];
          for (int p = 0; p < 6; ++p) acc[p][0] = acc[p][1] = _mm256_setzero_ps();
          for (int cb = 0; cb < CB; ++cb)
            for (int t = 0; t < 9; ++t) {
              const float* xr = xp.data() + ((cb * HP + oh + t / 3) * WP + o + t % 3) * 8;
              const float* wr = wp.data() + ((kp * CB + cb) * 9 + t) * 128;
#pragma GCC unroll 8
              for (int ci = 0; ci < 8; ++ci) {
                const __m256 b0 = _mm256_loadu_ps(wr + ci * 16), b1 = _mm256_loadu_ps(wr + ci * 16 + 8);
#pragma GCC unroll 6
                for (int p = 0; p < 6; ++p) {
                  const __m256 a = _mm256_broadcast_ss(xr + p * 8 + ci);
                  acc[p][0] = _mm256_fmadd_ps(a, b0, acc[p][0]);
                  acc[p][1] = _mm256_fmadd_ps(a, b1, acc[p][1]);
                }
              }
            }
          const __m256 bb0 = _mm256_loadu_ps(bias.data() + kp * 16), bb1 = _mm256_loadu_ps(bias.data() + kp * 16 + 8);
          float* y0 = y.data() + ((2 * kp) * H + oh) * W * 8 + o * 8;
          float* y1 = y.data() + ((2 * kp + 1) * H + oh) * W * 8 + o * 8;
          for (int p = 0; p < 6; ++p) {
            _mm256_storeu_ps(y0 + p * 8, _mm256_max_ps(_mm256_setzero_ps(), _mm256_add_ps(acc[p][0], bb0)));
            _mm256_storeu_ps(y1 + p * 8, _mm256_max_ps(_mm256_setzero_ps(), _mm256_add_ps(acc[p][1], bb1)));
          }
        }
  };
  run();
  // check a few outputs against a direct sum in double
  double maxerr = 0;
  for (int s = 0; s < 200; ++s) {
    int k = g() % K, i = g() % H, j = g() % W; double acc = bias[k];
    for (int c = 0; c < C; ++c) for (int r = 0; r < 3; ++r) for (int q = 0; q < 3; ++q) {
      int ii = i + r - 1, jj = j + q - 1; if (ii < 0 || jj < 0 || ii >= H || jj >= W) continue;
      acc += (double)w[(k * C + c) * 9 + r * 3 + q] * x[(c * H + ii) * W + jj]; }
    acc = std::max(acc, 0.0);
    maxerr = std::max(maxerr, std::fabs(acc - y[((k / 8 * H + i) * W + j) * 8 + k % 8]));
  }
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  const double fl = 2.0 * K * C * 9 * H * W;
  printf("NCHW8c 3x3 C%d K%d %dx%d: median %.3f ms min %.3f -> %.1f GFLOP/s (min), max err %.2e\n", C, K, H, W, t[reps / 2], t[0], fl / t[0] / 1e6, maxerr);
}
