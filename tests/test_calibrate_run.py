"""``run --calibrate`` through the library on real workers: each worker probes its cores, the report lists it."""

from __future__ import annotations

from orchestrator import api
from orchestrator.report import read

SPEC = """
name: calibrated
defaults:
  device: cpu
  resources: {cpus: 1}
  compile: {backend: eager}
  timing: {warmup: 0, repeats: 3}
  check: {enabled: false}
experiments:
  - target: seed.foo
    replicates: 2
"""


def test_every_worker_probes_its_device_and_each_result_carries_its_entry(write_spec, tmp_path, ray_cluster):
    out = tmp_path / "r.json"
    report = api.run(write_spec(SPEC), out, calibrate=True)
    entries = {c.id: c for c in report.environment.calibration}
    assert entries and all(c.device == "cpu" and c.model.startswith("CPU") for c in entries.values())
    assert all(c.figures["matmul_gflops"] > 0 and c.figures["copy_gbps"] > 0 for c in entries.values())
    for r in report.results:
        assert r.status == "ok" and r.worker.calibration is not None
        assert r.worker.calibration == entries[r.worker.calibration.id]  # the entry, as judged
    assert read(out).environment.calibration == report.environment.calibration  # written with the report
