#!/usr/bin/env bash
# NVML GPM on a lent Hopper (H100/H200) machine, checked against loads of known shape: for each
# phase of gpm_load.py (tensor: BF16 matrix products; memory: buffer copies) witty-profiler collects
# a window scoped to the load and benchmarks.record_nvml records NVML's answers (GPM samples
# included) alongside; the recording is then replayed through the collector, and the graph diagnosed.
#
# Expected on an H200: tensor phase tensor_active_pct and tensor_hmma_active_pct high (> 30 %), while
# util_pct says ~100 either way; memory phase hbm_bw_util_pct near the load's own GB/s over the
# board's peak (4.8 TB/s for an H200 SXM, GPM_PEAK_GBS to change it), and memory.hbm_bandwidth_limit
# found when it is above 85 %.
#
# Run by run.sh after its training step (SKIP_GPM=1 skips it), or alone through the device tool:
#   command "bash benchmarks/gpu_session/gpm.sh", carry [".whl"], timeout_s 300
# Files in $OUT (default /tmp/witty-gpu-session): gpm.log, gpm-{tensor,memory}.log (the load),
# graph-gpm-{tensor,memory}.json, nvml-gpm-{tensor,memory}.json (NVML recordings, the replay format
# of tests/fixtures/gpu), diagnosis-gpm-memory.json. Exit 0 once every phase was collected, whatever
# it found (gpm.log says); 2 when a prerequisite is missing; other codes name the failed step.
#
# Checked without a GPU: GPM_SECONDS=8 COLLECT_SECONDS=3 bash benchmarks/gpu_session/gpm.sh
# (the load falls back to numpy on the CPU, NVML is unavailable and says so; the steps still run).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
out=${OUT:-/tmp/witty-gpu-session}
mkdir -p "$out"
exec > >(tee -a "$out/gpm.log") 2>&1

py=${PYTHON:-python3}
load_s=${GPM_SECONDS:-30}
collect_s=${COLLECT_SECONDS:-8}
export PYTHONUNBUFFERED=1
step() { echo "== $(date -u +%H:%M:%S) $*"; }

load_pid="" rec_pid=""
cleanup() {
    for pid in $rec_pid $load_pid; do
        kill "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT

step "python packages"
# shellcheck source=benchmarks/gpu_session/python_env.sh
source benchmarks/gpu_session/python_env.sh

for phase in tensor memory; do
    step "$phase load for ${load_s} s -> gpm-$phase.log"
    "$py" benchmarks/gpu_session/gpm_load.py --phase "$phase" --seconds "$load_s" > "$out/gpm-$phase.log" 2>&1 &
    load_pid=$!
    for _ in $(seq 1 240); do  # torch import, CUDA start, allocation and warm-up: up to 2 minutes
        grep -q '^READY' "$out/gpm-$phase.log" && break
        if ! kill -0 "$load_pid" 2>/dev/null; then
            echo "gpm.sh: gpm_load.py ended before it was ready:"; cat "$out/gpm-$phase.log"; exit 1
        fi
        sleep 0.5
    done
    grep -q '^READY' "$out/gpm-$phase.log" || { echo "gpm.sh: gpm_load.py not ready in 120 s"; exit 1; }

    step "NVML recording alongside -> nvml-gpm-$phase.json"
    timeout 90 "$py" -m benchmarks.record_nvml -o "$out/nvml-gpm-$phase.json" --duration "$collect_s" --interval 1 \
        --source "benchmarks/gpu_session/gpm_load.py --phase $phase" &
    rec_pid=$!

    step "collect ${collect_s} s scoped to the load (pid $load_pid) -> graph-gpm-$phase.json"
    timeout $((collect_s + 120)) "$py" -m witty_profiler collect --duration "$collect_s" --interval 1 \
        --pid "$load_pid" -o "$out/graph-gpm-$phase.json"
    if wait "$rec_pid"; then echo "NVML recording: ok"; else echo "NVML recording: failed ($?)"; fi
    rec_pid=""

    step "waiting for the load to end"
    timeout $((load_s + 60)) tail --pid="$load_pid" -f /dev/null || kill "$load_pid" 2>/dev/null || true
    wait "$load_pid" || echo "gpm_load.py exit status: $?"
    load_pid=""
    tail -n 1 "$out/gpm-$phase.log"
done

step "diagnose the memory phase -> diagnosis-gpm-memory.json"
timeout 120 "$py" -m witty_profiler diagnose "$out/graph-gpm-memory.json" --format json \
    -o "$out/diagnosis-gpm-memory.json"

step "summary"
"$py" benchmarks/gpu_session/gpm_summary.py "$out" "${GPM_PEAK_GBS:-4800}"
ls -l "$out"
