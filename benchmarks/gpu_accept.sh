#!/usr/bin/env bash
# GPU acceptance in one command (benchmarks/gpu_accept.py). Two steps, on two machines:
#
#   bash benchmarks/gpu_accept.sh --fetch    # where pip reaches PyPI: the wheels the GPU machine lacks, and
#                                            # t2i-audit's own wheel, into .whl/ (ignored by git; ~20 MB)
#   bash benchmarks/gpu_accept.sh [ARGS]     # on the GPU machine (no internet; .whl/ carried along):
#                                            # pip install t2i-audit[open-clip] into ITS python from .whl/ —
#                                            # the "installs beside a user's torch" test — then every section
#
# The GPU machine's python (3.12, torch 2.11, transformers 5.17 …; ../shared/ENVIRONMENT.md) has no diffusers,
# open_clip_torch, ftfy, wcwidth, pydantic, inflect, lemminflect, importlib_metadata: those travel. If that
# install fails, its log goes into the result JSON and the wheels are unpacked beside it (--no-deps) instead,
# so the measurements still run. ARGS go to gpu_accept.py (--budget, --sections, --out …).
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS="${WHEELS:-.whl}"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1

# what travels: the versions constraints.txt tests with; pydantic_core, wcwidth's neighbours, protobuf and
# charset_normalizer are binary (cp312, manylinux x86_64)
TRAVEL=(diffusers==0.42.1 open_clip_torch==3.3.0 ftfy==6.3.1 wcwidth==0.9.4 pydantic==2.14.4 pydantic_core==2.50.5
        annotated-types==0.8.0 typing-inspection==0.4.5 inflect==7.6.0 typeguard==4.6.1 more-itertools==11.2.1
        jaraco.functools==4.6.0 lemminflect==0.2.3 importlib_metadata==10.2.0 lazy-importer==0.1.0 zipp==4.1.2
        protobuf==7.36.2 requests==2.34.2 charset-normalizer==3.5.3 idna==3.20 urllib3==2.8.0 certifi==2026.10.19.post1)

if [ "${1:-}" = "--fetch" ]; then
  set -e
  mkdir -p "$WHEELS"
  for n in 17 24 27 28 31 34; do plats+=(--platform "manylinux_2_${n}_x86_64"); done
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${plats[@]}" --platform manylinux2014_x86_64 -d "$WHEELS" "${TRAVEL[@]}"
  "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WHEELS" .
  du -sh "$WHEELS"; ls "$WHEELS"
  exit 0
fi

WORK="${TMPDIR:-/tmp}/gpu_accept"
mkdir -p "$WORK"
t0=$(date +%s)
if ls "$WHEELS"/t2i_audit-*.whl >/dev/null 2>&1; then
  "$PY" -m pip install --no-index --find-links "$WHEELS" --no-cache-dir "t2i-audit[open-clip]" >"$WORK/install.log" 2>&1
  rc=$?
  how="pip install --no-index --find-links $WHEELS t2i-audit[open-clip] into $("$PY" -c 'import sys; print(sys.prefix)')"
  if [ $rc -ne 0 ]; then  # keep measuring: the wheels beside the machine's packages, the repo's own source
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      $(ls "$WHEELS"/*.whl | grep -v t2i_audit) >>"$WORK/install.log" 2>&1
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    how="$how FAILED; fell back to --target /tmp/site --no-deps + the repo's source"
  fi
else
  rc=-1
  how="no wheels in $WHEELS (run --fetch where pip reaches PyPI): using what is installed"
  touch "$WORK/install.log"
fi
"$PY" - "$WORK" "$rc" "$how" "$(( $(date +%s) - t0 ))" <<'EOF'
import json, sys
work, rc, how, seconds = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
log = open(f"{work}/install.log", errors="replace").read()
json.dump({"exit_code": rc, "how": how, "seconds": seconds, "log_tail": log[-3000:]},
          open(f"{work}/install.json", "w"), indent=1)
EOF
"$PY" benchmarks/gpu_accept.py --work "$WORK" "$@"
