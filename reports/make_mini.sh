#!/usr/bin/env bash
# Regenerate the published example report of the mini world (CPU, no download, a few minutes):
# the README quickstart into a fixed run directory, then its report folder copied here.
set -euo pipefail
cd "$(dirname "$0")/.."
t2i-audit run --model mini --prompts prompts/mini.yaml --out runs/mini-example "$@"
rm -rf reports/mini
cp -r runs/mini-example/report reports/mini
cp runs/mini-example/summary.json runs/mini-example/manifest.json reports/mini/
echo "open reports/mini/index.html"
