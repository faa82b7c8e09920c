#!/usr/bin/env bash
# The short GPU check (a few minutes) for a machine with CUDA, torch >= 2.11 and torchvision; no network and
# no pip install needed: it runs from the source tree. Usage: bash scripts/gpu_check.sh [OUT_DIR]
# 1. the injected OOM and a REAL CUDA OOM on rank 1 of a 2-rank run (both ranks on GPU 0, gloo): no hang,
#    equal steps (split on), every rank stopped (split off);
# 2. the `gpu` scenario (every visible GPU) over storage x precision x preprocess, pixels (ResNet-50 CLIP)
#    and features, few samples and steps so that it fits the budget.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/gpu-check}
DATA=${DATA_DIR:-/tmp/dlbench-data}
mkdir -p "$OUT"
export PYTHONPATH=.
python - <<'PY' | tee "$OUT/versions.txt"
import json, torch
from harness.measure import gpuinfo
print("torch", torch.__version__)
try:
    import torchvision; print("torchvision", torchvision.__version__)
except ImportError:
    print("torchvision MISSING: preprocess = device will be refused")
print(json.dumps(gpuinfo.environment(), indent=1))
PY
echo "== OOM on one rank: injected, then real" | tee -a "$OUT/oom.txt"
timeout 300 python -m harness.commands.oomcheck 2>&1 | tee -a "$OUT/oom.txt"
timeout 300 python -m harness.commands.oomcheck --real 2>&1 | tee -a "$OUT/oom.txt"
for WL in pixels features; do
  echo "== gpu scenario, workload $WL" | tee -a "$OUT/run.txt"
  timeout 900 python run_bench.py --scenario gpu --workload "$WL" --samples 1200 --steps 12 --warmup-steps 3 \
      $([ "$WL" = features ] && echo --exclude preprocess=device) --data-dir "$DATA" --out "$OUT/runs" 2>&1 | tee -a "$OUT/run.txt"
done
echo "done: $OUT"
