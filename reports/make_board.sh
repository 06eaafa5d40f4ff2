#!/usr/bin/env bash
# Regenerate the published example board (CPU, no download; about 6 minutes on 2 quiet cores): mini-world runs
# ranked together — the shipped mini generator on 40 and on 60 prompts, and an early checkpoint of a mini
# generator (3 training steps, made here) on the same 40 prompts and seeds — plus the shipped generator at
# guidance 3, ranked with the others at its own settings and flagged as a settings study of the mini generator.
# The runs stay in reports/board-runs/ (only their report/ folders are committed: the board links to them).
set -euo pipefail
cd "$(dirname "$0")/.."
R=reports/board-runs
rm -rf reports/board "$R"
t2i-audit mini train-generator --smoke --out "$R/checkpoint-3"
run() { t2i-audit run --prompts mini -n 2 -q "$@"; }
run --model mini --limit 40 --out "$R/mini-40"
run --model mini --limit 60 --out "$R/mini-60"
# a pipeline folder defaults to its own settings (50 steps, guidance 7.5, float16): give the mini card's
run --model "$R/checkpoint-3" --limit 40 --steps 20 --guidance 7 --dtype float32 \
    --scorer mini-pixel --scorer mini-judge --out "$R/checkpoint-3-run"
run --model mini --limit 40 --guidance 3 --out "$R/mini-40-guidance3"
t2i-audit board "$R/mini-40" "$R/mini-60" "$R/checkpoint-3-run" "$R/mini-40-guidance3" --out reports/board \
    --title "mini world: one board" "$@"
echo "open reports/board/index.html"
