"""benchmarks/distributed.py without running it: its spec loads as the sweep it claims, its plain script is
Python, and both ways are given the same experiments."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import distributed
from orchestrator.plan.spec import load_spec
from tasks.models import Experiment


def test_the_spec_is_n_ddp_experiments_at_the_world_size_and_the_floor_runs_the_same(tmp_path: Path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"name": "d", "experiments": distributed.spec_entries(10, 2)}))
    loaded = load_spec(path)
    assert len(loaded.experiments) == 10 and len({e.id for e in loaded.experiments}) == 10
    assert all(e.distributed.strategy == "ddp" and e.distributed.world_size == 2 for e in loaded.experiments)
    floor = [Experiment.model_validate(e) for e in distributed.spec_entries(10, 2)]
    assert [e.id for e in floor] == [e.id for e in loaded.experiments]
    compile(distributed.SPAWN_SCRIPT, "spawn.py", "exec")
