"""``compilebench``: a thin command line over ``orchestrator.api``.

One module per side of the flow: ``running`` (run, validate, tasks, schema) and ``reading`` (report,
compare, history, export), both over ``common`` (the consoles and the one-line failure). The app lists the
commands here, in the order ``--help`` shows them. Heavy modules (torch, Ray, inductor) are imported inside
the commands that need them, so that ``--help`` and the report-reading commands start at once.
"""

from __future__ import annotations

import sys

import typer

from orchestrator.cli import reading, running

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Benchmark torch.compile against eager on every GPU of a Ray cluster (or on the CPU).",
)
for command in (
    running.run,
    running.validate,
    running.tasks,
    reading.report,
    reading.compare,
    reading.history,
    reading.export,
    running.schema,
):
    app.command()(command)


def main() -> None:
    import faulthandler
    import signal

    if hasattr(signal, "SIGUSR1"):  # kill -USR1 <pid>: every thread's stack on stderr, for a driver that seems stuck
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
