#!/usr/bin/env bash
# One prepared GPU check (fits in 10 minutes on one H200, no internet): see benchmarks/gpu.py.
set -euo pipefail
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python gpu.py "$@"
