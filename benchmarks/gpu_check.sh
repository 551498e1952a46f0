#!/usr/bin/env bash
# One GPU check (issue 23): the CUDA tests, the ResNet-18-GN round_speed rows (FedAvg, FedSAM, FedSMOO; loop, vmap,
# compile; compiled FedAvg in the papers' setting and at TF32/bf16), one round of training and the probe CLI
# (hessian, landscape) on its checkpoint, with each step's peak memory, in < 8 minutes on one H100; every step has its own timeout and a failing step is recorded, not fatal.
# Writes ONE Markdown table, $OUT/gpu_check.md (benchmarks/gpu_check.md without $OUT; with --smoke a new temporary
# folder, never the committed table), and the raw log beside it.
#
#   bash benchmarks/gpu_check.sh            # from the repository root, on the GPU machine
#   bash benchmarks/gpu_check.sh --smoke    # the same steps at tiny size on the CPU, <= 2 minutes
#
# Needs only torch, numpy, pytest and what the package imports (no install: PYTHONPATH=$PWD); $PYTHON picks the
# interpreter (default python3). The steps and their parsing live in benchmarks/gpu_check.py.
set -u
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" benchmarks/gpu_check.py "$@"
