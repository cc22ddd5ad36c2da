#!/usr/bin/env bash
# kiln's SGEMM against OpenBLAS cblas_sgemm, each in its own process (two busy-waiting thread pools
# on the same cores starve each other), alternated per shape, 1 and 2 threads. Prints one line
# per shape with both GFLOP/s (best of two alternated runs each), the ratio, and the four runs.
#   bench/run_gemm_vs_openblas.sh [build-dir] [filter-regex]
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for the OpenBLAS process only: a forced core type
# (e.g. Haswell) halves its speed on AVX-512 machines and would flatter kiln.
set -euo pipefail
build=${1:-build}
filter=${2:-'BM_sgemm/m:(1024|2048)/n:\1/k:\1/.*'}
kiln_exe="$build/bench/kiln_bench_gemm"
blas_exe="$build/bench/kiln_bench_gemm_openblas"
[[ -x $kiln_exe && -x $blas_exe ]] || { echo "build $kiln_exe and $blas_exe first (KILN_BUILD_BENCH=ON, libopenblas-dev)" >&2; exit 1; }
names=$("$kiln_exe" --benchmark_list_tests --benchmark_filter="BM_sgemm/.*" | grep -E "$filter" || true)
[[ -n $names ]] || { echo "no benchmark matches $filter" >&2; exit 1; }
gflops() { sed -n 's/.*GFLOPS=\([0-9.]*\)\([kMG]\?\).*/\1 \2/p' | awk '{v=$1; if($2=="k")v*=1e3; if($2=="M")v*=1e6; if($2=="G")v*=1e9; print v}' | head -1; }
printf '%-44s %10s %10s %7s   %s\n' shape kiln openblas ratio 'runs: kiln1 blas1 kiln2 blas2'
for name in $names; do
  pat="^${name}\$"
  k1=$("$kiln_exe" --benchmark_filter="$pat" --benchmark_min_time=1 | gflops)
  b1=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$blas_exe" --benchmark_filter="$pat" --benchmark_min_time=1 | gflops)
  k2=$("$kiln_exe" --benchmark_filter="$pat" --benchmark_min_time=1 | gflops)
  b2=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$blas_exe" --benchmark_filter="$pat" --benchmark_min_time=1 | gflops)
  awk -v n="$name" -v k1="$k1" -v k2="$k2" -v b1="$b1" -v b2="$b2" \
    'BEGIN { k = (k1 > k2 ? k1 : k2); b = (b1 > b2 ? b1 : b2); printf "%-44s %10.1f %10.1f %7.2f   %.1f %.1f %.1f %.1f\n", n, k, b, k / b, k1, b1, k2, b2 }'
done
