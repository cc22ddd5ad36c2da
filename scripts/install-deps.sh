#!/usr/bin/env bash
# Installs everything kiln needs to build and test on a fresh Debian 12 machine (run as root):
# the compiler toolchain and libraries from Debian's packages, and NumPy (for the .npy/.npz
# round-trip tests) from PyPI. Idempotent and quiet; when everything is present it only checks.
# The CUDA toolkit is not installed here: it is detected at /usr/local/cuda (or on PATH) by CMake.
set -euo pipefail

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
  libopenblas-dev  # kiln's optional "openblas" GEMM tactic (KILN_OPENBLAS) and a benchmark peer
  libdnnl-dev      # oneDNN: a peer in bench/run_gemm_vs_openblas.sh only; kiln never links it
  graphviz python3 python3-pip
  libonnx-dev libprotobuf-dev protobuf-compiler  # ONNX's protobuf classes and checker (src/onnx)
  libclang-rt-16-dev                             # libFuzzer for the ONNX importer's fuzz target (fuzz/)
)
NUMPY_VERSION=2.2.6
SAFETENSORS_VERSION=0.4.5  # the safetensors interop test (tests/nn/safetensors_test.cc)

log() { echo "[install-deps] $*"; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  apt_log=$(mktemp)
  if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$apt_log" 2>&1; then
    cat "$apt_log"; rm -f "$apt_log"; exit 1
  fi
  rm -f "$apt_log"
else
  log "Debian packages: all present"
fi

# Python packages the tests use, pinned, for whichever python3 the build will find first on PATH:
# NumPy (.npy/.npz round trips), safetensors (weights interop), onnx (its backend test data ship in
# the wheel; the checker judges kiln's exported files) and onnxruntime (the peer for ONNX models).
PIP_PINS=(numpy==2.2.6 safetensors==0.4.5 onnx==1.22.0 onnxruntime==1.32.0)
pip_flags=(--quiet --disable-pip-version-check --no-input --root-user-action=ignore)
# Debian's own python3 refuses pip installs into the system site without this flag.
if python3 -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
  if [[ -f "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]]; then
    pip_flags+=(--break-system-packages)
  fi
fi
for pin in "${PIP_PINS[@]}"; do
  pkg=${pin%%==*}; want=${pin##*==}
  if python3 -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('${pkg}') == '${want}' else 1)" 2>/dev/null; then
    log "${pin}: present"
  else
    log "pip install ${pin}"
    python3 -m pip install "${pip_flags[@]}" "${pin}"
    python3 -c "import importlib.metadata as m; m.version('${pkg}')" || { log "${pkg} did not install"; exit 1; }
  fi
done

if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  log "CUDA toolkit: found"
else
  log "CUDA toolkit: not found (kiln builds without CUDA)"
fi
