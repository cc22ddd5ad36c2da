#!/usr/bin/env bash
# kiln's SGEMM against OpenBLAS cblas_sgemm (and oneDNN's dnnl_sgemm when kiln_bench_gemm_onednn
# was built), each in its own process (two busy-waiting thread pools on the same cores starve each
# other), alternated per shape, 1 and 2 threads. Prints one line per shape with each library's
# GFLOP/s (best of two alternated runs each), kiln / OpenBLAS, kiln / the better peer, and the runs.
#   bench/run_gemm_vs_openblas.sh [build-dir] [filter-regex]
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for the OpenBLAS process only: a forced core type
# (e.g. Haswell) halves its speed on AVX-512 machines and would flatter kiln.
set -euo pipefail
build=${1:-build}
filter=${2:-'BM_sgemm/m:(1024|2048)/n:\1/k:\1/.*'}
kiln_exe="$build/bench/kiln_bench_gemm"
blas_exe="$build/bench/kiln_bench_gemm_openblas"
dnnl_exe="$build/bench/kiln_bench_gemm_onednn"
[[ -x $kiln_exe && -x $blas_exe ]] || { echo "build $kiln_exe and $blas_exe first (KILN_BUILD_BENCH=ON, libopenblas-dev)" >&2; exit 1; }
[[ -x $dnnl_exe ]] || { echo "($dnnl_exe not built: no oneDNN column; apt-get install libdnnl-dev)" >&2; dnnl_exe=; }
names=$("$kiln_exe" --benchmark_list_tests --benchmark_filter="BM_sgemm/.*" | grep -E "$filter" || true)
[[ -n $names ]] || { echo "no benchmark matches $filter" >&2; exit 1; }
gflops() { sed -n 's/.*GFLOPS=\([0-9.]*\)\([kMG]\?\).*/\1 \2/p' | awk '{v=$1; if($2=="k")v*=1e3; if($2=="M")v*=1e6; if($2=="G")v*=1e9; print v}' | head -1; }
run() { "$@" --benchmark_filter="$pat" --benchmark_min_time=1 | gflops; }
printf '%-44s %8s %9s %7s %10s %11s   %s\n' shape kiln openblas onednn kiln/blas kiln/best 'runs: kiln blas dnnl, twice'
for name in $names; do
  pat="^${name}\$"
  k1=$(run "$kiln_exe"); b1=$(run env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$blas_exe"); d1=$([[ -n $dnnl_exe ]] && run "$dnnl_exe" || echo 0)
  k2=$(run "$kiln_exe"); b2=$(run env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$blas_exe"); d2=$([[ -n $dnnl_exe ]] && run "$dnnl_exe" || echo 0)
  awk -v n="$name" -v k1="$k1" -v k2="$k2" -v b1="$b1" -v b2="$b2" -v d1="$d1" -v d2="$d2" 'BEGIN {
    k = (k1 > k2 ? k1 : k2); b = (b1 > b2 ? b1 : b2); d = (d1 > d2 ? d1 : d2); best = (b > d ? b : d)
    printf "%-44s %8.1f %9.1f %7.1f %10.2f %11.2f   %.1f %.1f %.1f, %.1f %.1f %.1f\n", n, k, b, d, k / b, k / best, k1, b1, d1, k2, b2, d2 }'
done
