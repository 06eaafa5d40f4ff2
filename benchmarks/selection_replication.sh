#!/usr/bin/env bash
# The replication registered in t2i_audit/probes/studies/preregistered_replication.py (issue 35), end to end, on the
# CPU: a mini run of base seed 20261206 (every seed of every prompt generated and judged), the early probes, the
# selection study with the binding capture, and the committed summary. Resumable: each command resumes its folder.
#   bash benchmarks/selection_replication.sh [RUN_DIR]      (default runs/replication_20261206)
# Heavy on a shared machine: run under `nice -n 19`, one job at a time.
set -euo pipefail
RUN=${1:-runs/replication_20261206}
export OMP_NUM_THREADS=1
py() { python -m t2i_audit "$@"; }
py run --model mini --prompts mini -n 8 --seed 20261206 --out "$RUN" -q
py probe "$RUN" --early --at 0.05,0.1,0.2,0.3,0.5
py select --from "$RUN" --study --binding
python benchmarks/selection_summary.py "$RUN" --out benchmarks/results/selection_mini.json --key replication
