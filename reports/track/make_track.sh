#!/usr/bin/env bash
# Regenerate the mini track (reports/track/, CPU, no download): two mini generators trained with the sweep's recipe
# at coverage 0.5 and 1 (diffusers-layout checkpoints every 200 steps; ~3 CPU-minutes each on an idle core), each
# tracked by `t2i-audit track` (14 checkpoints x 24 prompts x 8 seeds), then the test pre-registered in
# t2i_audit/mini/track_preregistered.py. Models and runs stay in $WORK (default runs/track-demo); pages, tables and
# test.json land here. Resumable: rerun to continue.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=$(realpath -m "${WORK:-runs/track-demo}")
python -m t2i_audit.mini.track_demo train "$WORK"
python -m t2i_audit.mini.track_demo suites reports/track/suites
for cov in cov050 cov100; do
  t2i-audit track "$WORK/$cov/train" --model "$WORK/$cov/train_initial" --prompts "reports/track/suites/$cov.yaml" \
    --out "$WORK/$cov/track" --ema -n 8 --steps 10 --guidance 3 --size 16 --scorer mini-pixel --seed 0 \
    --denoiser-samples 8 --folds 6 --chance 0.041666666666666664 --final-step 2500 --batch-size 48 --device cpu "$@"
done
python -m t2i_audit.mini.track_demo summary "$WORK" reports/track
echo "open reports/track/index.html"
