"""The live line of a running sweep: done/total, failures so far by status, an estimate of the time left."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from tasks.models import Result

REFRESH_PER_S = 2  # redraws of the line a second (rich's default is 10): each costs about 0.3 ms of the driver's CPU


class TimeLeftColumn(ProgressColumn):
    """Time left at the average pace so far (elapsed / done x remaining).

    Experiments differ in length and run in parallel, so the pace over the whole run is steadier
    than rich's default estimate over the last 30 s.
    """

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text("done", style="progress.elapsed")
        if not task.completed or not task.elapsed or task.total is None:
            return Text("time left: -", style="progress.remaining")
        left = int(task.elapsed / task.completed * (task.total - task.completed))
        minutes, s = divmod(left, 60)
        hours, minutes = divmod(minutes, 60)
        shown = f"{hours}:{minutes:02d}:{s:02d}" if hours else f"{minutes}:{s:02d}"
        return Text(f"~{shown} left", style="progress.remaining")


class RunProgress:
    """``seed.foo3 ok ━━━━━━╸━━━ 5/9 · 1 failed: 1 compile_error · 0:42 · ~0:31 left``, on ``console``.

    ``start()`` when the cluster is up, ``on_result`` for each result as it arrives, ``stop()`` at the end.
    """

    def __init__(self, total: int, console: Console) -> None:
        self.failures: Counter[str] = Counter()
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failures]}"),
            TimeElapsedColumn(),
            TimeLeftColumn(),
            console=console,
            refresh_per_second=REFRESH_PER_S,
        )
        self.task = self.progress.add_task("experiments", total=total, start=False, failures="no failures")

    def start(self) -> None:
        self.progress.start()
        self.progress.start_task(self.task)

    def on_result(self, result: Result) -> None:
        if result.status != "ok":
            self.failures[result.status] += 1
        self.progress.update(
            self.task, advance=1, description=f"{result.target} {result.status}", failures=self.failures_text()
        )

    def failures_text(self) -> str:
        if not self.failures:
            return "no failures"
        by_status = ", ".join(f"{n} {status}" for status, n in self.failures.most_common())
        return f"[red]{sum(self.failures.values())} failed: {by_status}[/red]"

    def stop(self) -> None:
        self.progress.stop()
