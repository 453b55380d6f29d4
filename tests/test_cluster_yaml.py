"""cluster.yaml runs a sweep as shipped, validates offline, and says what the README says.

Checked offline: Ray's own schema; the shape (a head that only schedules, autoscaling GPU
nodes of two models advertising ``accelerator_type``); the install (this checkout, the
README's torch pin, the ``cluster`` extra, the tested Ray); token authentication; and every
command the README's cluster section and the file's own header name: each ``ray`` and
``compilebench`` subcommand and flag exists, each file named exists, each spec validates.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import ray
import typer.main
import yaml

from orchestrator.cli import app
from orchestrator.plan.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "cluster.yaml").read_text())
README = (ROOT / "README.md").read_text()
CLUSTER_SECTION = README.split("## Running on a cluster\n", 1)[1].split("\n## ", 1)[0]


def test_cluster_yaml_passes_rays_schema():
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(yaml.safe_load((ROOT / "cluster.yaml").read_text())))


def test_a_scheduling_head_and_autoscaling_gpu_nodes_of_two_models():
    types = CONFIG["available_node_types"]
    assert types[CONFIG["head_node_type"]]["resources"] == {"CPU": 0}  # experiments never land on the head
    gpu_types = {name: t for name, t in types.items() if t["resources"].get("GPU")}
    models = set()
    for t in gpu_types.values():
        advertised = [k.removeprefix("accelerator_type:") for k in t["resources"] if k.startswith("accelerator_type:")]
        assert len(advertised) == 1  # reports and gpu_models group by the model each node advertises
        models.update(advertised)
        assert t["min_workers"] == 0 and t["max_workers"] >= 1  # started on demand, stopped when idle
    assert len(models) == len(gpu_types) >= 2
    assert sum(t["max_workers"] for t in gpu_types.values()) <= CONFIG["max_workers"]


def test_every_node_installs_this_checkout_with_the_readme_torch_pin_and_the_tested_ray():
    pin = re.search(r"pip install (torch==[\d.]+)", README)
    assert pin, "the README's install names a torch pin"
    (setup,) = CONFIG["setup_commands"]
    assert f"{pin.group(1)} " in setup and "-e '.[cluster,s3]'" in setup
    assert CONFIG["file_mounts"]["~/compilebench"] == "." and setup.startswith("cd ~/compilebench &&")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith("ray[default]") for dep in extras["cluster"])  # ray job submit needs the dashboard
    assert any(dep.startswith("s3fs") for dep in extras["s3"])  # reports written to s3://
    image = CONFIG["docker"]["image"]
    assert image.startswith(f"rayproject/ray:{ray.__version__}-py311"), (image, ray.__version__)


def test_token_authentication_stays_on_for_every_node():
    assert CONFIG["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in CONFIG[key] if "ray start" in c]
        assert starts and all("RAY_AUTH_MODE=token RAY_worker_niceness=0 ray start" in c for c in starts), key


def test_every_node_starts_its_workers_at_niceness_0_as_a_local_instance_does():
    """Ray's default (15) gives a worker about 1/30 of a core that another process wants: the timing worker."""
    from orchestrator.execution.cluster import LOCAL_SYSTEM_CONFIG

    assert LOCAL_SYSTEM_CONFIG["worker_niceness"] == 0
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in CONFIG[key] if "ray start" in c]
        assert all(f"RAY_worker_niceness={LOCAL_SYSTEM_CONFIG['worker_niceness']} " in c for c in starts), key


def commands(text: str) -> list[list[str]]:
    """Shell commands in the ```bash blocks of ``text`` (continuations joined, comments dropped)."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words and re.match(r"^[A-Z_]+=", words[0]):  # VAR=value prefixes
                words = words[1:]
            if words:
                found.append(words)
    return found


def header_commands() -> list[list[str]]:
    """The commands cluster.yaml's header comment shows, in the same form as the README's."""
    lines = [ln[4:] for ln in (ROOT / "cluster.yaml").read_text().splitlines() if ln.startswith("#   ")]
    return commands("```bash\n" + "\n".join(lines) + "\n```")


def check(words: list[str]) -> None:
    """The program, subcommand and options of ``words`` exist; files it names exist; specs validate."""
    program, args = words[0], words[1:]
    if program == "ray":
        from ray.scripts.scripts import cli

        group: Any = cli
    elif program == "compilebench":
        group = typer.main.get_command(app)
    else:
        pytest.fail(f"unexpected program in {words}")
    while hasattr(group, "commands"):  # a group: Ray's click one, or typer's (which vendors click)
        assert args and args[0] in group.commands, f"{program} has no command {args[:1]} ({words})"
        group, args = group.commands[args[0]], args[1:]
    entrypoint: list[str] = []
    if "--" in args:
        args, entrypoint = args[: args.index("--")], args[args.index("--") + 1 :]
    options = {opt for p in group.params for opt in p.opts}
    for arg in args:
        if arg.startswith("-"):
            assert arg.split("=")[0] in options, f"{group.name} has no option {arg} ({words})"
        elif arg.endswith(".yaml") and program == "ray":
            assert (ROOT / arg).exists(), arg
        elif arg.endswith(".yaml"):
            load_spec(ROOT / arg)  # the spec the README runs is valid
    if entrypoint:
        check(entrypoint)


def test_readme_cluster_section_names_commands_flags_and_files_that_exist():
    found = commands(CLUSTER_SECTION)
    programs = [" ".join(w[:3]) for w in found]
    for expected in ("ray up", "ray job submit", "ray get-auth-token", "ray down"):
        assert any(p.startswith(expected) for p in programs), expected
    submit = next(w for w in found if w[:3] == ["ray", "job", "submit"])
    assert "--working-dir" in submit and submit[submit.index("--") + 1 :][:2] == ["compilebench", "run"]
    assert submit[-2:] == ["--address", "auto"]
    assert submit[submit.index("--out") + 1].startswith("s3://")  # the report lands in the bucket: nothing to fetch
    assert not any(w[:2] == ["ray", "rsync-down"] for w in found)
    for words in found:
        check(words)


def test_cluster_yaml_header_shows_what_the_readme_does():
    shown = header_commands()
    assert shown == commands(CLUSTER_SECTION)
    for words in shown:
        check(words)
