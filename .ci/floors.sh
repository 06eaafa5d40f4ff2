#!/usr/bin/env bash
# Print the floor set: every dependency of t2i-audit[dev] at the LOWEST version pyproject.toml allows for it
# (uv's --resolution lowest-direct; what they pull in, at the newest versions those allow), one name==version
# a line, as a constraints file. torch and torchvision stay at constraints.txt's pins: the only builds on this
# machine's disk. Needs `uv` on PATH; uses the indexes pip is configured with (pip config), as pip would.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
grep -E '^(torch|torchvision)==' constraints.txt > "$pins"
index=()
for url in $("$python" -m pip config get global.extra-index-url 2>/dev/null || true); do index+=(--extra-index-url "$url"); done
for dir in $("$python" -m pip config get global.find-links 2>/dev/null || true); do index+=(--find-links "$dir"); done
# the extras the floors lane installs (.ci/run): every runtime extra and the test tools; not dev's datasets, which
# only the board tests use and which requires pyarrow/huggingface_hub far above the core floors
extras=()
IFS=, read -r -a names <<< "${FLOOR_EXTRAS:-open-clip,detect,vlm,lora,hosted,test}"
for e in "${names[@]}"; do extras+=(--extra "$e"); done
uv pip compile pyproject.toml "${extras[@]}" --resolution lowest-direct --python-version 3.11 -c "$pins" \
  "${index[@]}" --index-strategy unsafe-best-match --no-header --no-annotate --quiet
