#!/usr/bin/env bash
# One training step (forward, backward, SGD) in kiln and in PyTorch CPU, each in its own process
# (two busy thread pools on the same cores starve each other), alternated per case and thread count:
# kiln, torch, kiln, torch. Prints per case the best wall time per step of the two runs of each, the
# ratio kiln / torch (below 1: kiln is faster), the four single runs so the spread is visible, and
# the process CPU time per step of the best runs (CPU well below wall x threads means the process
# waited for cores other processes held: the machine was loaded and the wall times are suspect).
#   bench/run_train_step_vs_torch.sh [build-dir] [python]     KILN_BENCH_MIN_TIME=seconds (default 1)
# PyTorch in its best configuration here: torch.set_num_threads(n) (bench/torch_train_step.py),
# OMP_WAIT_POLICY=PASSIVE, and OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset for both processes (a
# forced core type would slow a BLAS that reads them). torch is a benchmark-only dependency.
set -euo pipefail
build=${1:-build}
python=${2:-python3}
here=$(cd "$(dirname "$0")" && pwd)
kiln_exe="$build/bench/kiln_bench_train_step"
[[ -x $kiln_exe ]] || { echo "build $kiln_exe first (KILN_BUILD_BENCH=ON)" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { echo "$python cannot import torch (pip install torch)" >&2; exit 1; }
min_time=${KILN_BENCH_MIN_TIME:-1}
run_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE)
kiln_us() {  # case threads -> "wall_us cpu_us" per step (CSV columns real_time, cpu_time)
  "${run_env[@]}" "$kiln_exe" --benchmark_filter="^BM_train_step_$1/threads:$2/process_time/real_time\$" \
    --benchmark_min_time="$min_time" --benchmark_format=csv 2>/dev/null |
    awk -F, '/^"BM_train_step/ { print $3, $4 }'
}
torch_us() {
  "${run_env[@]}" "$python" "$here/torch_train_step.py" --case "$1" --threads "$2" --min-time "$min_time" |
    awk '{ print $3, $4 }'
}
echo "kiln $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'), torch $("$python" -c 'import torch; print(torch.__version__)'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %7s %10s %10s %6s   %-34s %s\n' case threads 'kiln us' 'torch us' ratio 'runs: kiln1 torch1 kiln2 torch2' 'cpu us: kiln torch'
for case in mlp cnn; do
  for t in 1 2; do
    k1=$(kiln_us $case $t); p1=$(torch_us $case $t)
    k2=$(kiln_us $case $t); p2=$(torch_us $case $t)
    echo "$case $t $k1 $p1 $k2 $p2" | awk '{
      kb = ($3 < $7 ? 3 : 7); pb = ($5 < $9 ? 5 : 9)
      printf "%-5s %7d %10.1f %10.1f %6.2f   %8.1f %8.1f %8.1f %8.1f   %8.1f %8.1f\n",
        $1, $2, $kb, $pb, $kb / $pb, $3, $5, $7, $9, $(kb + 1), $(pb + 1) }'
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
