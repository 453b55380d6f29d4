#!/usr/bin/env bash
# Every seed experiment on the lent GPU, in-process (the GPU machine has torch but not Ray or
# pydantic; pydantic travels as wheels in .whl/, see the README's GPU section).
set -euo pipefail
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
timeout 280 python3 scripts/gpu_check.py "$@"
