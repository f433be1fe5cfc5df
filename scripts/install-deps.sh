#!/usr/bin/env bash
# install-deps.sh — installs the Debian packages attn needs to build and test (idempotent:
# only missing packages are fetched). Used by scripts/demo.sh and scripts/test.sh.
set -euo pipefail
packages=(cmake make gcc clang pkg-config libcjson-dev libcairo2-dev libpango1.0-dev fonts-wqy-microhei
          libomp-dev libopenblas-dev libopenmpi-dev openmpi-bin
          libclang-rt-14-dev valgrind libsimde-dev)
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${missing[@]}"
fi
# The CLI tests build inputs and check outputs with NumPy.
if ! python3 -c "import numpy" >/dev/null 2>&1; then
  echo "install-deps: installing numpy (PyPI)"
  python3 -m pip install -q numpy
fi
