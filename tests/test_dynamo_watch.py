"""The recompile sentinel: reasons whatever TORCH_LOGS says, the limit from counters, every
logger setting put back; and the CUDA-graph verdict from inductor's counters and log."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo
import torch._logging._internal
from torch._dynamo.utils import counters

from tasks.dynamo_watch import CUDAGRAPH_LOGGERS, LIMIT_LOGGER, RECOMPILES_LOGGERS, DynamoWatch

ROOT = Path(__file__).resolve().parents[1]
TOUCHED = [*RECOMPILES_LOGGERS, LIMIT_LOGGER, *CUDAGRAPH_LOGGERS]


def logger_settings():
    state = torch._logging._internal.log_state
    loggers = {
        name: (logging.getLogger(name).level, logging.getLogger(name).propagate, list(logging.getLogger(name).handlers))
        for name in TOUCHED
    }
    return set(state.artifact_names), dict(state.log_qname_to_level), loggers


def recompile_three_times():
    fn = torch.compile(lambda x: x + 1, backend="eager", dynamic=False)
    for n in (2, 3, 4, 5):
        fn(torch.ones(n))


@pytest.fixture(autouse=True)
def clean_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_reasons_are_collected_and_every_setting_put_back():
    before = logger_settings()
    with DynamoWatch() as watch:
        assert torch._logging._internal.log_state.is_artifact_enabled("recompiles")
        recompile_three_times()
    assert watch.reasons[0] == "0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3"
    assert len(watch.reasons) == 3
    assert logger_settings() == before


@pytest.mark.parametrize("artifact", ["recompiles", "recompiles_verbose"])
def test_a_user_who_asked_for_recompile_logs_still_gets_them_and_keeps_their_settings(artifact):
    torch._logging.set_logs(**{artifact: True})
    try:
        seen = []
        user_handler = logging.Handler()
        user_handler.emit = lambda record: seen.append(record.getMessage())
        user_logger = logging.getLogger("torch._dynamo")  # where torch's own handler sits
        user_logger.addHandler(user_handler)
        before = logger_settings()
        with DynamoWatch() as watch:
            recompile_three_times()
        user_logger.removeHandler(user_handler)
        assert len(watch.reasons) == 3
        assert "size mismatch at index 0" in watch.reasons[0]
        assert sum("Recompiling function" in m for m in seen) == 3  # the user's logs kept flowing
        assert logger_settings() == before
    finally:
        torch._logging.set_logs()


def test_torch_logs_from_the_environment_do_not_hide_the_reasons():
    code = (
        "import json, torch\n"
        "from tasks.dynamo_watch import DynamoWatch\n"
        "from tests.test_dynamo_watch import recompile_three_times\n"
        "with DynamoWatch() as watch:\n"
        "    recompile_three_times()\n"
        "state = torch._logging._internal.log_state\n"
        "print(json.dumps({'reasons': watch.reasons, 'artifacts': sorted(state.artifact_names)}))\n"
    )
    env = {**os.environ, "TORCH_LOGS": "recompiles_verbose,graph_breaks"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(out["reasons"]) == 3 and "size mismatch" in out["reasons"][0]
    assert out["artifacts"] == ["graph_breaks", "recompiles_verbose"]  # the user's choice, untouched
    assert "Recompiling function" in proc.stderr  # and the user still sees the logs they asked for


def test_the_recompile_limit_is_found_by_counter_even_when_its_warning_is_silenced():
    dynamo_logger = logging.getLogger("torch._dynamo")
    level = dynamo_logger.level
    dynamo_logger.setLevel(logging.ERROR)  # as TORCH_LOGS="-dynamo" would: no limit warning at all
    try:
        with DynamoWatch() as watch:
            fn = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
            for n in range(1, 12):
                fn(torch.ones(n))
    finally:
        dynamo_logger.setLevel(level)
    assert watch.limit_messages == []
    assert watch.snapshot().limit_hits > watch.entered.limit_hits


def test_cudagraphs_used_when_inductor_skipped_none():
    with DynamoWatch() as watch:
        pass
    assert watch.cudagraph_verdict() == (True, [])


def test_a_cudagraph_skip_is_counted_and_its_logged_reason_kept():
    with DynamoWatch() as watch:
        counters["inductor"]["cudagraph_skips"] += 1  # what inductor's log_cudagraph_skip_and_bump_counter does
        logging.getLogger(CUDAGRAPH_LOGGERS[0]).warning("skipping cudagraphs due to mutated inputs (1 instances)")
        counters["inductor"]["cudagraph_skips"] += 1  # a CPU graph: counted, never logged
    used, reasons = watch.cudagraph_verdict()
    assert used is False
    assert reasons == [
        "skipping cudagraphs due to mutated inputs (1 instances)",
        "1 graph(s) skipped without a logged reason",
    ]


def test_skips_before_the_watch_do_not_count():
    counters["inductor"]["cudagraph_skips"] += 5
    with DynamoWatch() as watch:
        pass
    assert watch.cudagraph_verdict() == (True, [])
