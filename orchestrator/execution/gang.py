"""A gang: the k rank processes of distributed experiments, long-lived Ray actors on one node.

How it forms (as Ray Train's worker group and its torch backend set up a process group,
``ray/train/_internal/worker_group.py`` and ``ray/train/torch/config.py``): a placement group of k
bundles, one per rank (``{"GPU": 1, "CPU": c}``; ``{"CPU": c}`` on the CPU), ``STRICT_PACK``, each bundle
held to the node the policy chose by Ray's ``ray.io/node-id`` label, so that the gang stands where the
policy counted it; one actor per bundle (``PlacementGroupSchedulingStrategy``, bundle i for rank i), so
that Ray sets each rank's ``CUDA_VISIBLE_DEVICES`` once, before anything touches CUDA; then rank 0's
address (its node's IP and a free port) and ``join`` on every rank at once (``init_process_group``:
nccl on GPUs, gloo on the CPU, collectives timing out after the longest ``timeout_s`` of the
experiments it was started for). The gang is ready once every rank has joined.

Ray Train builds its group for one training run and tears it down with it; a gang is kept, as a worker
is: the next experiments of its shape on this node are sent to every rank (the payload, the experiment
as JSON, the same to each), and their outcomes combined into one result (``tasks.distributed.combine``)
once every rank has answered. It lives until a rank asks to be replaced (``RETIRE`` beside its outcome:
it ran ``max_experiments``, its memory grew, its reset raised; ``tasks.models.WorkerLimits``), until a
rank's process group breaks (``group_ok`` false in its outcome), or it dies; a gang is never joined
again: it is killed whole and the next one formed afresh.

Faults. A rank whose outcome is a failure may leave the others waiting in a collective that will not
complete: they get ``FAILURE_GRACE_S`` to answer, then the result is combined from what came, each
silent rank an outcome saying so (``NO_ANSWER``, a peer's failure), and the gang is retired.
A rank whose process dies, whose node is lost, or whose actor's own code raises, is the gang's death:
the pool kills every rank and reports one ``Died`` naming the rank. A gang past its experiment's
deadline is killed whole by the pool; ``silent`` says which ranks had not answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray
from ray.util.placement_group import NODE_ID_LABEL_KEY, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from orchestrator.execution.actors import RankActor, RankExecutor
from orchestrator.execution.events import Finished, Ready
from orchestrator.execution.policy import Start, failed_result
from tasks.models import ErrorInfo, Experiment, Result
from tasks.text import error_line
from tasks.worker import RETIRE

FAILURE_GRACE_S = 5.0  # after one rank's failure, how long the others may take to answer before the gang ends
NO_ANSWER = "NoAnswer"  # the error type of the outcome made for a rank that did not answer
DEFAULT_COLLECTIVE_TIMEOUT_S = 1800.0  # torch.distributed's default for gloo and NCCL (30 min)


# How the ranks' outcomes become the experiment's one result: ``tasks.distributed.combine`` by default.
Combine = Callable[[Experiment, list[dict[str, Any]], float, float], Result]

Call = tuple[ray.ObjectRef, str, int]  # a pending call: its reference, the method, the rank


def default_combine(exp: Experiment, outcomes: list[dict[str, Any]], started_at: float, finished_at: float) -> Result:
    """The ranks' outcomes as one result: ``tasks.distributed.combine``."""
    from tasks.distributed import combine

    return combine(exp, outcomes, started_at, finished_at)  # type: ignore[no-any-return]


class Gang:
    """The Ray side of one gang: its placement group, its rank actors, and where the current experiment
    stands (which ranks have answered). The pool keeps one per gang worker and turns what it returns into
    calls to wait for and events for the runner."""

    def __init__(
        self,
        worker_id: int,
        start: Start,
        executor: RankExecutor | None,
        combine: Combine | None,
        limits: dict[str, Any],
        compile_cache: str | None,
    ) -> None:
        assert start.ranks is not None
        self.worker_id, self.size = worker_id, start.ranks
        self.combine = combine or default_combine
        self.timeout_s = start.collective_timeout_s or DEFAULT_COLLECTIVE_TIMEOUT_S
        bundle = {"CPU": start.cpus, **({"GPU": float(start.gpus)} if start.gpus else {})}
        self.group = placement_group(
            [bundle] * self.size,
            strategy="STRICT_PACK",
            bundle_label_selector=[{NODE_ID_LABEL_KEY: start.node_id}] * self.size,
        )
        self.actors = [
            RankActor.options(  # type: ignore[attr-defined]
                num_gpus=start.gpus,
                num_cpus=start.cpus,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=rank),
            ).remote(rank, self.size, start.cores, start.gpu_model, executor, limits, compile_cache)
            for rank in range(self.size)
        ]
        self.ranks_ready: dict[int, dict[str, Any]] = {}
        self.joined: set[int] = set()
        self.payload: dict[str, Any] | None = None  # the experiment running, as sent
        self.started_at = 0.0
        self.outcomes: dict[int, dict[str, Any]] = {}
        self.failed_at: float | None = None  # when the first failing outcome of the experiment came

    def begin(self) -> list[Call]:
        """The calls that form the gang: every rank's ``ready``, rank 0's address."""
        calls: list[Call] = [(actor.ready.remote(), "ready", rank) for rank, actor in enumerate(self.actors)]
        return [*calls, (self.actors[0].address.remote(), "address", 0)]

    def submit(self, payload: dict[str, Any], now: float) -> list[Call]:
        """Send one experiment to every rank."""
        self.payload, self.started_at, self.outcomes, self.failed_at = payload, now, {}, None
        return [(actor.run.remote(payload), "run", rank) for rank, actor in enumerate(self.actors)]

    def answer(self, method: str, rank: int, value: Any, now: float) -> tuple[list[Call], Ready | Finished | None]:
        """What a rank answered: the calls it leads to, and the gang's event once it has one."""
        if method == "address":
            host, port = value
            joins = [(a.join.remote(host, int(port), self.timeout_s), "join", r) for r, a in enumerate(self.actors)]
            return joins, None
        if method in ("ready", "join"):
            if method == "ready":
                self.ranks_ready[rank] = value
            else:
                self.joined.add(rank)
            return [], self._formed()
        self.outcomes[rank] = value
        if len(self.outcomes) == self.size:
            return [], self.finish(now)
        if value.get("error") is not None and self.failed_at is None:
            self.failed_at = now
        return [], None

    def _formed(self) -> Ready | None:
        if len(self.ranks_ready) < self.size or len(self.joined) < self.size:
            return None
        first = self.ranks_ready[0]
        gpu_ids = [g for rank in range(self.size) for g in self.ranks_ready[rank]["gpu_ids"]]
        return Ready(self.worker_id, first["hostname"], first["pid"], gpu_ids)

    def grace_deadline(self) -> float | None:
        """When the ranks still silent after one rank's failure stop being waited for."""
        return None if self.failed_at is None else self.failed_at + FAILURE_GRACE_S

    def silent(self) -> list[int]:
        """The ranks that have not answered the running experiment."""
        if self.payload is None:
            return []
        return [rank for rank in range(self.size) if rank not in self.outcomes]

    def finish(self, now: float) -> Finished:
        """The experiment's one result from the ranks' outcomes (a silent rank's says so), and whether
        the gang must be retired after it."""
        assert self.payload is not None
        silent = self.silent()
        answered = list(self.outcomes.values())
        own = any(o.get("error") is not None and not o.get("peer_failure", False) for o in answered)
        outcomes = [self.outcomes.get(rank) or self._silent_outcome(rank, own) for rank in range(self.size)]
        exp = Experiment.model_validate(self.payload)
        try:
            result = self.combine(exp, outcomes, self.started_at, now).model_dump(mode="json")
        except Exception as e:  # a bug in combining: the experiment's result says so; the gang stays sound
            error = ErrorInfo(type="CombineError", message=f"combining the ranks' outcomes raised {error_line(e)}")
            failed = failed_result(exp, "runtime_error", error, started_at=self.started_at, finished_at=now)
            result = failed.model_dump(mode="json")
        self.payload = None
        return Finished(self.worker_id, result, retire=self._retire_reason(outcomes, silent))

    @staticmethod
    def _silent_outcome(rank: int, other_failed_on_its_own: bool) -> dict[str, Any]:
        """The outcome of a rank that had not answered ``FAILURE_GRACE_S`` after another rank's failure, its
        process group no longer usable. Where a rank that answered failed on its own, the silent one is
        most likely waiting for it in a collective (a peer's failure); where every rank that answered
        blames a peer, the silent one is the likely culprit (it hung)."""
        message = f"no outcome within {FAILURE_GRACE_S:g} s of another rank's failure"
        error = {"type": NO_ANSWER, "message": message}
        return {
            "rank": rank,
            "status": "timeout",
            "error": error,
            "peer_failure": other_failed_on_its_own,
            "group_ok": False,
        }

    @staticmethod
    def _retire_reason(outcomes: list[dict[str, Any]], silent: list[int]) -> str | None:
        """Why the gang must go after this experiment: a rank did not answer, or its process group broke
        (``group_ok`` false; an outcome that does not say is taken as broken when it failed), or a rank asks
        (``RETIRE``: it ran ``max_experiments``, its memory grew, its reset raised)."""
        broken = [o.get("rank") for o in outcomes if o.get("rank") not in silent and not _group_ok(o)]
        if broken or silent:
            parts = [f"rank {', '.join(map(str, broken))}'s process group broke"] if broken else []
            parts += [f"rank {', '.join(map(str, silent))} did not answer"] if silent else []
            return f"{'; '.join(parts)}: the gang is rebuilt"
        asked = [f"rank {o.get('rank')}: {o[RETIRE]}" for o in outcomes if o.get(RETIRE)]
        return "; ".join(asked) if asked else None

    def kill(self) -> None:
        """Kill every rank and give the placement group back."""
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        remove_placement_group(self.group)


def _group_ok(outcome: dict[str, Any]) -> bool:
    """Whether a rank's process group is still usable after its outcome (``group_ok``; where the outcome does
    not say, as long as it did not fail)."""
    return bool(outcome.get("group_ok", outcome.get("error") is None))
