"""The library entry points the CLI calls; a Python user can call them the same way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchestrator.cluster import ClusterInfo, connect, environment
from orchestrator.journal import Journal, journal_path
from orchestrator.report import Report, build_report, write_report
from orchestrator.runner import OnResult, run_experiments
from orchestrator.spec import Spec, load_spec


def run(
    spec: Spec | str | Path,
    out: str | Path,
    address: str | None = None,
    num_gpus: int | None = None,
    num_cpus: int | None = None,
    on_start: Callable[[Spec, ClusterInfo], None] | None = None,
    on_result: OnResult | None = None,
) -> Report:
    """Run every experiment of ``spec`` on the cluster and write the report to ``out``.

    The spec is validated before anything starts; each result is appended to the journal
    next to the report as it arrives; the report is written atomically at the end.
    """
    spec = spec if isinstance(spec, Spec) else load_spec(spec)
    out = Path(out)
    cluster = connect(address, num_gpus=num_gpus, num_cpus=num_cpus)
    if on_start is not None:
        on_start(spec, cluster)
    with Journal(journal_path(out)) as journal:
        results = run_experiments(spec.experiments, cluster, journal=journal, on_result=on_result)
    report = build_report(spec.name, spec.source, results, environment(cluster))
    write_report(report, out)
    return report
