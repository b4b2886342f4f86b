#!/usr/bin/env bash
# The GPU check (issue 7): kernel correctness on the device, kernel and model-shape timings vs
# their floors. Needs only PyTorch + Triton on a CUDA machine; writes latency_bench/results/.
# Usage: latency_bench/gpu_check.sh [--sections NAME,...] [--out-dir DIR]     (PYTHON=... to pick one; --help)
# GPU_CHECK_TIMEOUT (seconds, default 290): then the check is sent SIGTERM; it writes what it measured, names
# the section it cut and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET DLM_KERNELS  # compiled kernels; the check picks each path itself
PY="${PYTHON:-$(command -v python3 || command -v python)}"
exec timeout "${GPU_CHECK_TIMEOUT:-290}" "$PY" -m latency_bench.gpu_check "$@"
