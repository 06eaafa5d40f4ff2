#!/usr/bin/env bash
# Regenerate the published example board (CPU, no download; about 8 minutes on 2 quiet cores): a leaderboard of
# models from four kinds of source, each at its own settings, on the same 40 mini-world prompts and seeds —
#   the shipped mini generator (a diffusers pipeline) on 40 and on 60 prompts; the same generator with a random
#   LoRA at 0.8; an early checkpoint of a mini generator (3 training steps, made here; a pipeline folder); the mini
#   world's renders handed over as an ImageFolder (`prompts export --layout imagefolder`, then `run --images`); and
#   the mini generator served over HTTP at guidance 5 (reports/serve_mini.py, `run --model endpoint:URL`) —
# plus the shipped generator at guidance 3: ranked with the others, flagged as a settings study of mini.
# The runs stay in reports/board-runs/ (only their report/ folders are committed: the board links to them).
set -euo pipefail
cd "$(dirname "$0")/.."
R=reports/board-runs
rm -rf reports/board "$R"
mkdir -p "$R"
t2i-audit mini train-generator --smoke --out "$R/checkpoint-3" -q
python -c "from t2i_audit.tiny.lora import build_lora; build_lora('mini', '$R/mini-lora')"
run() { t2i-audit run --prompts mini -n 2 -q "$@"; }
JUDGES=(--scorer mini-pixel --scorer mini-judge)  # the mini card's judges, named for the models without that card
run --model mini --limit 40 --out "$R/mini-40"
run --model mini --limit 60 --out "$R/mini-60"
run --model mini --limit 40 --guidance 3 --out "$R/mini-40-guidance3"
run --model mini --limit 40 --lora "$R/mini-lora:0.8" --out "$R/mini-40-lora"
# a pipeline folder defaults to its own settings (50 steps, guidance 7.5, float16): give the mini card's
run --model "$R/checkpoint-3" --limit 40 --steps 20 --guidance 7 --dtype float32 "${JUDGES[@]}" --out "$R/checkpoint-3-run"
# images made elsewhere: the renderer draws each caption exactly, at each image's seed (its ceiling)
t2i-audit prompts export mini --limit 40 -n 2 --layout imagefolder --out "$R/renders-folder"
python -c "import json, random, sys; from t2i_audit.mini.world import parse_caption, render; d = sys.argv[1]; [render(parse_caption(r['prompt'], random.Random(r['seed']))).save(f'{d}/{r[\"file_name\"]}') for r in map(json.loads, open(f'{d}/metadata.jsonl'))]" "$R/renders-folder"
t2i-audit run --images "$R/renders-folder" --prompts "$R/renders-folder/prompts.jsonl" -n 2 -q --name renders "${JUDGES[@]}" \
    --out "$R/renders"
# a hosted model: the mini generator behind a local endpoint, at the server's own guidance (5)
python reports/serve_mini.py "$R/port" 5 & server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 300); do [ -s "$R/port" ] && break; sleep 0.1; done
run --model "endpoint:http://127.0.0.1:$(cat "$R/port")" --name mini-endpoint --limit 40 --concurrency 4 "${JUDGES[@]}" \
    --out "$R/mini-endpoint"
kill $server; rm -f "$R/port"
t2i-audit board "$R/mini-40" "$R/mini-60" "$R/mini-40-lora" "$R/checkpoint-3-run" "$R/renders" "$R/mini-endpoint" \
    "$R/mini-40-guidance3" --out reports/board --title "mini world: a leaderboard from four sources" "$@"
echo "open reports/board/index.html"
