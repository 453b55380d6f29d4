"""cluster.yaml is a valid Ray autoscaler config (checked offline against Ray's schema)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_cluster_yaml_passes_rays_schema():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = prepare_config(yaml.safe_load((ROOT / "cluster.yaml").read_text()))
    validate_config(config)
    gpu_types = {name: t for name, t in config["available_node_types"].items() if t["resources"].get("GPU")}
    assert gpu_types, "a benchmark cluster needs GPU nodes"
    for t in gpu_types.values():  # reports group by the model each GPU node advertises
        assert any(k.startswith("accelerator_type:") for k in t["resources"])
