#!/usr/bin/env bash
# The GPU kit's rehearsal on a machine without a GPU (ctest GpuKit.RehearsalWithoutGpu):
# packs the kit from BUILD_DIR's programs (scripts/gpu_kit.sh --pack-only, a
# fast xz level), unpacks it as the device would, and runs its run.sh with
# TG_KIT_REHEARSE=1: every library must come from the kit, glibc or the CUDA
# toolkit, and every CUDA test must report its no-device skip.
#
#   bash scripts/gpu_kit_rehearse.sh BUILD_DIR
#
# Exit 77 (ctest SKIP) where a GPU is visible: there, run the kit itself
# (scripts/gpu_kit.sh's header).
set -euo pipefail
build_dir=${1:?usage: gpu_kit_rehearse.sh BUILD_DIR}
cd "$(dirname "$0")/.."
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_kit_rehearse: a GPU is visible here: run the kit itself, not its rehearsal"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tg-kit-rehearsal.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The real kit must fit 40 MiB at xz -9; the rehearsal packs fast instead.
bash scripts/gpu_kit.sh --pack-only "$build_dir" --out "$tmp/kit" --xz-level 0 --size-limit-mib 1024
TMPDIR=$tmp TG_KIT_REHEARSE=1 bash "$tmp/kit/run-kit.sh" "$tmp/kit/terngrad-gpu-kit.tar.xz" "$tmp/out" "machine test python"
