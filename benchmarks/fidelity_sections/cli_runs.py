"""A spec run through the real command line (``python -m orchestrator run``), and the seed.foo3 spec
that the stability and neighbours sections both run: what those two sections share."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

FOO3_SPEC = """
    name: {name}
    defaults:
      device: cpu
      timing: {{warmup: 5, repeats: 200}}
    experiments:
      - target: seed.foo3
        params: {{shape: [2048, 2048]}}
        {resources}
    {neighbours}
"""


def run_cli(spec_text: str, out_dir: Path, name: str) -> dict[str, Any]:
    """Write ``spec_text`` (dedented) to ``out_dir`` and run it through the CLI; its report as JSON data."""
    spec = out_dir / f"{name}.yaml"
    spec.write_text(textwrap.dedent(spec_text))
    out = out_dir / f"{name}.json"
    cmd = [sys.executable, "-m", "orchestrator", "run", str(spec), "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True)
    return json.loads(out.read_text())
