#!/usr/bin/env bash
# CI's brief fuzzing of the ONNX importer: builds fuzz/onnx_import_fuzz (ASan+UBSan, libFuzzer) in
# its own build dir, writes the seed corpus with
# fuzz/make_seeds.py and fuzzes for KILN_FUZZ_SECONDS (default 60). Exits non-zero when the build
# fails or the fuzzer finds a crash, leak, timeout or sanitizer report; the reproducer is left in
# BUILD/crashes/ (replay: BUILD/fuzz/onnx_import_fuzz FILE).
#
#   fuzz/run_ci.sh [BUILD]      BUILD (the CMake build dir; seeds, corpus and crashes go inside it)
#                               defaults to build-ci/fuzz; KILN_CI_JOBS (2) build jobs. At the same depth
#                               as CI's ASan build dir, so ccache (CCACHE_BASEDIR) shares their objects.
#
# The compiler is the default one (GCC: libFuzzer's mutations without coverage feedback, the
# libFuzzer archive of an installed clang; Note [Fuzzing with clang or GCC] in fuzz/CMakeLists.txt)
# with the flags of CI's ASan build, so the two can share objects through ccache. KILN_FUZZ_CC and
# KILN_FUZZ_CXX pick another: clang-16/clang++-16 gives coverage-guided fuzzing at the price of a
# full clang build of libkiln.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
BUILD=${1:-$ROOT/build-ci/fuzz}
FUZZ_SECONDS=${KILN_FUZZ_SECONDS:-60}
JOBS=${KILN_CI_JOBS:-2}

COMPILERS=()
if [[ -n "${KILN_FUZZ_CXX:-}" ]]; then
  COMPILERS=(-DCMAKE_C_COMPILER="${KILN_FUZZ_CC:-cc}" -DCMAKE_CXX_COMPILER="$KILN_FUZZ_CXX")
fi
GENERATOR=()
if command -v ninja >/dev/null 2>&1; then GENERATOR=(-G Ninja); fi
LAUNCHER=()
if command -v ccache >/dev/null 2>&1; then
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT}  # build-dir paths relative, so other build dirs can share
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}  # and -g objects not keyed on the build dir
fi

mkdir -p "$BUILD"
if [[ -f "$BUILD/CMakeCache.txt" ]] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${GENERATOR[1]:-Unix Makefiles}\$" "$BUILD/CMakeCache.txt"; then
  rm -rf "$BUILD"
fi
cmake -S "$ROOT" -B "$BUILD" "${GENERATOR[@]}" "${LAUNCHER[@]}" "${COMPILERS[@]}" -DKILN_WERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DKILN_FUZZ=ON -DKILN_SANITIZE=ON -DKILN_CUDA=OFF -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF \
  >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
cmake --build "$BUILD" -j "$JOBS" --target onnx_import_fuzz

rm -rf "$BUILD/seeds" "$BUILD/corpus" "$BUILD/crashes"
mkdir -p "$BUILD/corpus" "$BUILD/crashes"
python3 fuzz/make_seeds.py "$BUILD/seeds"

export KILN_FUZZ_BASE_DIR="$BUILD/seeds/data"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
# abort_on_error: the sanitizers abort, so libFuzzer writes the input that caused the report.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:abort_on_error=1}
# New inputs go to corpus/ (the seeds stay as written); -timeout flags a single input running
# longer than 20 s, -rss_limit_mb an allocation the importer should have refused.
"$BUILD/fuzz/onnx_import_fuzz" "$BUILD/corpus" "$BUILD/seeds/corpus" \
  -max_total_time="$FUZZ_SECONDS" -max_len=16384 -timeout=20 -rss_limit_mb=3072 \
  -artifact_prefix="$BUILD/crashes/" -print_final_stats=1
echo "fuzz/run_ci.sh: no findings in ${FUZZ_SECONDS} s"
