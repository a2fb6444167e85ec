#!/usr/bin/env bash
# One prepared run on a lent GPU machine (one H200): train.py trains a small model for about 60 s
# behind a deliberately slow DataLoader; 20 s into it witty-profiler collects a window scoped to
# the trainer (its loader workers are its children), an NVML recording is taken alongside, and the
# graph is diagnosed. Expected: dataplane.data_loading_bottleneck and/or compute.accelerator_idle.
#
# Before it, where a package index is reachable (the GPU machine reaches none):
#   benchmarks/gpu_session/fetch_wheels.sh      (into .whl/, which .gitignore keeps out of the repository)
# then, through the device tool:  command "bash benchmarks/gpu_session/run.sh", carry [".whl"], timeout_s 600 (about 3 min of training and collection, then gpm.sh: about 2 min)
#
# Everything lands in $OUT (run.log, env.txt, train.log, graph.json, diagnosis.json, diagnosis.md,
# nvml-h200.json, then gpm.sh's files: see there; SKIP_GPM=1 skips that part); without $OUT, in
# /tmp/witty-gpu-session. Exit 0 once the graph and the
# diagnosis are written, whatever they found (run.log says whether the expected findings came);
# 2 when a prerequisite is missing; anything else is a failure of a step, named in run.log.
#
# To check the script's steps on a host without torch or GPU: TRAIN_SCRIPT=benchmarks/gpu_session/stub_train.py
# (the same shape of input pipeline, without torch), e.g. with TRAIN_SECONDS=25 COLLECT_SECONDS=5.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
out=${OUT:-/tmp/witty-gpu-session}
mkdir -p "$out"
exec > >(tee -a "$out/run.log") 2>&1

py=${PYTHON:-python3}
train=${TRAIN_SCRIPT:-benchmarks/gpu_session/train.py}
train_s=${TRAIN_SECONDS:-60}
collect_s=${COLLECT_SECONDS:-20}
export PYTHONUNBUFFERED=1
step() { echo "== $(date -u +%H:%M:%S) $*"; }

train_pid="" rec_pid=""
cleanup() {
    for pid in $rec_pid $train_pid; do
        kill "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT

step "environment -> env.txt"
{
    uname -a; echo "cpus: $(nproc)"; "$py" --version
    "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" || true
    nvidia-smi -L || true
    nvidia-smi topo -m || true
    nvidia-smi -q || true
} > "$out/env.txt" 2>&1 || true

step "python packages"
# shellcheck source=benchmarks/gpu_session/python_env.sh
source benchmarks/gpu_session/python_env.sh
if [ "$train" = benchmarks/gpu_session/train.py ] && ! "$py" -c "import torch" 2>/dev/null; then
    step "no torch here: trying pip install torch"
    timeout 300 "$py" -m pip install -q torch || { echo "run.sh: torch is missing and pip could not install it"; exit 2; }
fi
wp() { "$py" -m witty_profiler "$@"; }

step "training ${train_s} s in the background -> train.log"
"$py" "$train" --seconds "$train_s" --workers "${TRAIN_WORKERS:-4}" --burn-ms 200 --sleep-ms 10 \
    > "$out/train.log" 2>&1 &
train_pid=$!
for _ in $(seq 1 240); do  # torch import, CUDA start and the first batch: up to 2 minutes
    grep -q '^READY' "$out/train.log" && break
    if ! kill -0 "$train_pid" 2>/dev/null; then
        echo "run.sh: train.py ended before its first step:"; cat "$out/train.log"; exit 1
    fi
    sleep 0.5
done
grep -q '^READY' "$out/train.log" || { echo "run.sh: train.py did not reach its first step in 120 s"; exit 1; }
sleep 3  # past the first batches, which the workers had prefetched
ps -o pid,ppid,comm,args --ppid "$train_pid" -p "$train_pid" || true

step "NVML recording alongside the collection -> nvml-h200.json"
timeout 90 "$py" -m benchmarks.record_nvml -o "$out/nvml-h200.json" --duration 15 --interval 1 \
    --source "benchmarks/gpu_session/train.py, 4 DataLoader workers x 200 ms CPU per batch" &
rec_pid=$!

step "collect ${collect_s} s, scoped to the trainer (pid $train_pid) -> graph.json"
timeout $((collect_s + 120)) "$py" -m witty_profiler collect --duration "$collect_s" --interval 1 \
    --pid "$train_pid" -o "$out/graph.json"
if wait "$rec_pid"; then rec_status=ok; else rec_status="failed ($?)"; fi
rec_pid=""
echo "NVML recording: $rec_status"

step "diagnose -> diagnosis.json, diagnosis.md"
timeout 120 "$py" -m witty_profiler diagnose "$out/graph.json" --pid "$train_pid" --format json -o "$out/diagnosis.json"
timeout 120 "$py" -m witty_profiler diagnose "$out/graph.json" --pid "$train_pid" --format md -o "$out/diagnosis.md"

step "waiting for the training to end"
if ! timeout $((train_s + 60)) tail --pid="$train_pid" -f /dev/null; then
    echo "run.sh: train.py overran its time: stopping it"
    kill "$train_pid" 2>/dev/null || true
fi
if wait "$train_pid"; then train_status=0; else train_status=$?; fi
train_pid=""
tail -n 3 "$out/train.log"

step "summary"
"$py" - "$out/diagnosis.json" "$out/graph.json" <<'EOF'
import json
import sys

diagnosis, graph = (json.load(open(p)) for p in sys.argv[1:3])
found = {f["pattern"]: f for f in diagnosis["findings"]}
for f in diagnosis["findings"]:
    print(f"{f['priority']} {f['pattern']}: {f['title']}")
for pid in ("dataplane.data_loading_bottleneck", "compute.accelerator_idle"):
    print(f"expected {pid}: {'FOUND ' + found[pid]['severity'] if pid in found else 'missing'}")
gpus = [e for e in graph["entities"] if e["type"] == "gpu"]
for g in gpus:
    m = g["metrics"]
    print(f"{g['id']}: util {m.get('util_pct')} %, mem clock {m.get('mem_clock_mhz')} MHz, "
          f"nvlink links {m.get('nvlink_links_up')}/{m.get('nvlink_links')}")
print("collectors:", {k: v["status"] for k, v in graph["meta"]["collectors"].items()})
uses = [e for e in graph["edges"] if e["type"] == "uses_device"]
print(f"{len(gpus)} gpu entities, {len(uses)} uses_device edges")
EOF
echo "train.py exit status: $train_status"
if [ "${SKIP_GPM:-0}" != 1 ]; then
    step "GPM against loads of known shape (gpm.sh) -> gpm.log"
    bash benchmarks/gpu_session/gpm.sh || echo "gpm.sh exit status: $?"
fi
ls -l "$out"
