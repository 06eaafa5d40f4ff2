#!/usr/bin/env bash
# Regenerate the published example report of the mini world (CPU, no download, a few minutes):
# the README quickstart into a fixed run directory, then its report folder copied here.
set -euo pipefail
cd "$(dirname "$0")/.."
t2i-audit run --model mini --prompts prompts/mini.yaml --out runs/mini-example "$@"
rm -rf reports/mini
cp -r runs/mini-example/report reports/mini
cp runs/mini-example/summary.json reports/mini/
# the run's manifest keeps absolute paths (its resume command works from anywhere); the published copy names them
# relative to the run, the package's files by its name (t2i_audit/shareable.py), as the report page does
python - <<'PY'
import json
from pathlib import Path

from t2i_audit.shareable import shareable

run = Path("runs/mini-example").resolve()
manifest = json.loads((run / "manifest.json").read_text())
Path("reports/mini/manifest.json").write_text(json.dumps(shareable(manifest, run), indent=2, ensure_ascii=False) + "\n")
PY
echo "open reports/mini/index.html"
