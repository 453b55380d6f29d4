#!/usr/bin/env bash
# The GPU checks of issue 9 in one go, in-process (no Ray needed), within about 8 minutes:
#   1. scripts/gpu_check.py: the seed experiments, a compile.mode sweep timed by both CUDA
#      methods, foo3's bandwidth against a copy (at most 360 s);
#   2. benchmarks/fidelity.py timers: compilebench's timers against Triton's do_bench (at most 150 s).
# Markdown goes to stdout and, with $OUT set, to $OUT/gpu-results.md and $OUT/fidelity.md, raw
# results to $OUT/results.jsonl. Extra arguments go to gpu_check.py (e.g. --skip-seed).
#
# The GPU machine may lack pydantic and PyYAML: wheels for its Python in .whl/ are installed
# into /tmp/site first (see docs/gpu-results.md for how to fetch them).
set -uo pipefail
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
missing=$(python3 - <<'EOF'
import importlib.util
print(" ".join(m for m in ("torch", "numpy", "pydantic", "yaml") if importlib.util.find_spec(m) is None))
EOF
)
if [ -n "$missing" ]; then
  echo "missing Python packages: $missing (put their wheels in .whl/)" >&2
  exit 3
fi
OUT=${OUT:-}
status=0
timeout 360 python3 scripts/gpu_check.py "$@" || status=$?
if [ -n "$OUT" ]; then
  timeout 150 python3 benchmarks/fidelity.py timers | tee "$OUT/fidelity.md" || status=$?
else
  timeout 150 python3 benchmarks/fidelity.py timers || status=$?
fi
exit $status
