"""Spec loading: what a valid spec becomes, and one exact line for each kind of bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.plan.spec import SpecError, load_spec
from tasks.models import CompileConfig

ROOT = Path(__file__).resolve().parents[1]
COMPILE_FIELDS = ", ".join(CompileConfig.model_fields)


def error_of(write_spec, text: str, name: str = "spec.yaml") -> str:
    with pytest.raises(SpecError) as info:
        load_spec(write_spec(text, name))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_seed_example_expands_to_ten_experiments():
    spec = load_spec(ROOT / "examples" / "seed.yaml")
    assert spec.name == "seed-tutorial"
    assert [e.target for e in spec.experiments] == [
        "seed.foo",
        "seed.foo",
        "seed.outer",
        "seed.my_module",
        "seed.my_module",
        "seed.foo3",
        "seed.foo3",
        "seed.bar",
        "seed.bar",
        "seed.bar_fixed",
    ]
    assert [e.compile.cache for e in spec.experiments[:2]] == ["warm", "cold"]
    assert [e.compile.method for e in spec.experiments[3:5]] == ["torch_compile", "module_compile"]
    assert [e.compile.mode for e in spec.experiments[5:7]] == [None, "max-autotune-no-cudagraphs"]
    assert [e.compile.fullgraph for e in spec.experiments[7:10]] == [False, True, True]
    assert all(e.timing.repeats is None and e.timing.warmup is None for e in spec.experiments)  # by device


def test_json_spec_is_read_like_yaml(write_spec):
    spec = load_spec(write_spec('{"name": "j", "experiments": [{"target": "seed.foo"}]}', "s.json"))
    assert [e.target for e in spec.experiments] == ["seed.foo"]


def test_unknown_field(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: seed.foo\n    compile: {bakend: eager}\n")
    assert msg == f"spec.yaml: experiments[0].compile.bakend: unknown field (allowed: {COMPILE_FIELDS})"


def test_unknown_top_level_field(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments: [{target: seed.foo}]\nexperimnts: []\n")
    assert msg == "spec.yaml: experimnts: unknown field (allowed: name, description, defaults, experiments)"


def test_top_level_must_be_a_mapping(write_spec):
    assert error_of(write_spec, "") == "spec.yaml: a spec is a mapping with 'name' and 'experiments', got an empty file"
    assert error_of(write_spec, "- a\n") == "spec.yaml: a spec is a mapping with 'name' and 'experiments', got a list"


def test_missing_required_field(write_spec):
    assert error_of(write_spec, "experiments: [{target: seed.foo}]\n") == "spec.yaml: name: required field missing"


def test_error_outside_the_swept_field_names_the_sweep_point(write_spec):
    text = "name: x\nexperiments:\n  - target: seed.foo\n    resources: {gpus: 1}\n    sweep: {device: [cuda, cpu]}\n"
    msg = error_of(write_spec, text)
    assert msg == (
        "spec.yaml: experiments[0].resources.gpus: a 'cpu' experiment reserves no GPU (at sweep point device='cpu')"
    )


def test_wrong_type(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: seed.foo\n    timing: {repeats: many}\n")
    assert msg.startswith("spec.yaml: experiments[0].timing.repeats: input should be a valid integer")
    assert "(got 'many')" in msg


def test_wrong_type_in_defaults(write_spec):
    msg = error_of(write_spec, "name: x\ndefaults: {compile: {fullgraph: maybe}}\nexperiments:\n  - target: seed.foo\n")
    assert msg.startswith("spec.yaml: defaults.compile.fullgraph: input should be a valid boolean")


def test_unknown_backend(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: seed.foo\n    compile: {backend: turbo}\n")
    assert msg.startswith("spec.yaml: experiments[0].compile.backend: unknown backend 'turbo' (known: ")
    assert "aot_eager" in msg and "inductor" in msg


def test_unknown_mode(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: seed.foo\n    compile: {mode: fastest}\n")
    assert msg.startswith("spec.yaml: experiments[0].compile.mode: unknown mode 'fastest' (known: ")
    assert "max-autotune" in msg


def test_unknown_mode_in_a_sweep_points_at_the_sweep(write_spec):
    text = "name: x\nexperiments:\n  - target: seed.foo\n    sweep: {compile.mode: [default, fastest]}\n"
    msg = error_of(write_spec, text)
    assert msg.startswith("spec.yaml: experiments[0].sweep.compile.mode: unknown mode 'fastest'")


def test_sweep_path_that_does_not_exist(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: seed.foo\n    sweep: {compile.fulgraph: [true]}\n")
    assert msg == (
        f"spec.yaml: experiments[0].sweep.compile.fulgraph: no field 'fulgraph' (fields of compile: {COMPILE_FIELDS})"
    )


def test_empty_sweep_list(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: seed.foo\n    sweep: {compile.fullgraph: []}\n")
    assert msg == "spec.yaml: experiments[0].sweep.compile.fullgraph: empty list (a sweep needs at least one value)"


def test_malformed_yaml(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: seed.foo\n   compile: {\n")
    assert msg.startswith("spec.yaml: malformed YAML at line ")


def test_yaml_is_read_with_a_safe_loader(write_spec):
    msg = error_of(write_spec, "name: !!python/object/apply:os.system ['true']\nexperiments: []\n")
    assert msg.startswith("spec.yaml: malformed YAML at line 1")


def test_unknown_target(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: seed.fooo\n")
    assert msg.startswith("spec.yaml: experiments[0].target: unknown target 'seed.fooo' (built-in targets: ")


def test_import_path_that_does_not_resolve(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: no_such_pkg.models:make\n")
    assert msg.startswith("spec.yaml: experiments[0].target: cannot import module 'no_such_pkg.models'")


def test_import_path_with_missing_factory(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: json:no_such_factory\n")
    assert msg == (
        "spec.yaml: experiments[0].target: module 'json' has no callable 'no_such_factory' "
        "(target 'json:no_such_factory')"
    )


def test_malformed_import_path(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: 'pkg/mod:make'\n")
    assert msg.startswith("spec.yaml: experiments[0].target: value error, 'pkg/mod:make' is not an import path")


def test_unknown_param_of_a_target(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: seed.foo3\n    params: {shap: [8, 8]}\n")
    assert msg.startswith("spec.yaml: experiments[0].params: got an unexpected keyword argument 'shap'")
    assert "accepts: shape, dtype" in msg


def test_mode_and_options_together(write_spec):
    text = "name: x\nexperiments:\n  - target: seed.foo\n    compile: {mode: max-autotune, options: {debug: true}}\n"
    msg = error_of(write_spec, text)
    assert msg == (
        "spec.yaml: experiments[0].compile.options: cannot be combined with compile.mode "
        "(torch.compile takes one or the other)"
    )


def test_no_experiments(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments: []\n")
    assert msg.startswith("spec.yaml: experiments: list should have at least 1 item")


def test_duplicate_experiments(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: seed.foo\n  - target: seed.foo\n")
    assert msg.startswith("spec.yaml: experiments[1]: same experiment as experiments[0] (id ")


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match=r"cannot read spec .*nope\.yaml"):
        load_spec(tmp_path / "nope.yaml")


@pytest.mark.parametrize("command", ["validate", "run"])
def test_cli_bad_spec_is_one_line_exit_2_and_starts_nothing(write_spec, tmp_path, command):
    bad = write_spec("name: x\nexperiments:\n  - target: seed.foo\n    compile: {mode: fastest}\n")
    args = [sys.executable, "-m", "orchestrator", command, str(bad)]
    if command == "run":
        args += ["--out", str(tmp_path / "r.json")]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: spec.yaml: experiments[0].compile.mode: unknown mode 'fastest'")
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("r.*"))  # no report, no journal: nothing started


def test_cache_state_is_checked(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: seed.foo\n    compile: {cache: lukewarm}\n")
    assert msg == "spec.yaml: experiments[0].compile.cache: input should be 'cold', 'warm' or 'shared' (got 'lukewarm')"


def test_time_budgets_must_be_positive(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: seed.foo\n    timing: {repeats_ms: 0}\n")
    assert msg == "spec.yaml: experiments[0].timing.repeats_ms: input should be greater than 0 (got 0)"


def test_cold_and_warm_are_different_experiments(write_spec):
    spec = load_spec(
        write_spec("name: x\nexperiments:\n  - target: seed.foo\n    sweep: {compile.cache: [cold, warm]}\n")
    )
    cold, warm = spec.experiments
    assert cold.id != warm.id
    assert (cold.compile.label(), warm.compile.label()) == ("inductor+cold", "inductor")


# --- Bad input that used to end in a traceback: one line each. ---


def test_spec_that_is_not_utf8(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_bytes("name: caf\u00e9\n".encode("latin-1") + b"experiments: []\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == ("spec.yaml: not UTF-8 text (byte 0xe9 at line 1); a spec is a YAML or JSON text file")


@pytest.mark.parametrize("junk", [bytes(range(256)), b"\x89PNG\r\n\x1a\n\x00\x00", b"\x00\x01\x02name: x"])
def test_binary_junk_is_one_line(tmp_path, junk):
    for name in ("junk.yaml", "junk.json"):
        path = tmp_path / name
        path.write_bytes(junk)
        with pytest.raises(SpecError) as info:
            load_spec(path)
        message = str(info.value)
        assert message.startswith(f"{name}: ") and "\n" not in message


def test_duplicate_keys_in_yaml_name_the_key_and_the_lines(write_spec):
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: seed.foo\n    seed: 1\n    seed: 2\n")
    assert msg == "spec.yaml: duplicate key 'seed' at line 5 (first given at line 4)"
    msg = error_of(write_spec, "name: x\nexperiments: [{target: seed.foo}]\nname: y\n")
    assert msg == "spec.yaml: duplicate key 'name' at line 3 (first given at line 1)"


def test_yaml_merge_keys_may_still_be_overridden(write_spec):
    text = """
        name: x
        base: &base {target: seed.foo, seed: 1}
        experiments:
          - {<<: *base, seed: 2}
    """
    msg = error_of(write_spec, text)  # the merge is fine; 'base' is what is wrong
    assert msg.startswith("spec.yaml: base: unknown field")


def test_duplicate_keys_in_json(write_spec):
    msg = error_of(write_spec, '{"name": "a", "experiments": [{"target": "seed.foo"}], "name": "b"}', "s.json")
    assert msg == "s.json: duplicate key 'name' in a JSON object"


def test_a_count_and_a_budget_together(write_spec):
    text = "name: x\nexperiments:\n  - target: seed.foo\n    timing: {repeats: 10, repeats_ms: 100}\n"
    msg = error_of(write_spec, text)
    assert msg.startswith(
        "spec.yaml: experiments[0].timing.repeats_ms: value error, cannot be combined with timing.repeats"
    )
    text = "name: x\ndefaults: {timing: {warmup: 1, warmup_ms: 5}}\nexperiments:\n  - target: seed.foo\n"
    assert error_of(write_spec, text).startswith(
        "spec.yaml: defaults.timing.warmup_ms: value error, cannot be combined"
    )


def test_an_experiments_own_budget_replaces_a_count_from_defaults(write_spec):
    spec = load_spec(
        write_spec(
            """
            name: x
            defaults: {timing: {warmup: 2, repeats: 20}}
            experiments:
              - target: seed.foo
                timing: {warmup_ms: 25, repeats_ms: 200}
              - target: seed.foo3
                sweep: {timing.repeats_ms: [50]}
              - target: seed.bar
            """
        )
    )
    timings = [(t.warmup, t.repeats, t.warmup_ms, t.repeats_ms) for t in (e.timing for e in spec.experiments)]
    assert timings == [(None, None, 25, 200), (2, None, None, 50), (2, 20, None, None)]


def test_unknown_inductor_option_suggests_the_closest(write_spec):
    text = "name: x\nexperiments:\n  - target: seed.foo\n    compile: {options: {triton.cudagrphs: true}}\n"
    msg = error_of(write_spec, text)
    assert msg == (
        "spec.yaml: experiments[0].compile.options.triton.cudagrphs: unknown inductor option 'triton.cudagrphs' "
        "(did you mean 'triton.cudagraphs'?)"
    )


def test_unknown_inductor_option_in_a_sweep_points_at_the_sweep(write_spec):
    text = "name: x\nexperiments:\n  - target: seed.foo\n    sweep: {compile.options.max_autotun: [true]}\n"
    msg = error_of(write_spec, text)
    assert msg.startswith(
        "spec.yaml: experiments[0].sweep.compile.options.max_autotun: unknown inductor option 'max_autotun'"
    )


def test_nested_inductor_options_are_refused_with_the_flat_spelling(write_spec):
    text = "name: x\nexperiments:\n  - target: seed.foo\n    compile: {options: {triton: {cudagraphs: true}}}\n"
    msg = error_of(write_spec, text)
    assert msg.startswith("spec.yaml: experiments[0].compile.options.triton: unknown inductor option 'triton': ")
    assert "flat dotted names ('triton." in msg


def test_options_of_other_backends_are_not_inductors(write_spec):
    spec = load_spec(
        write_spec("name: x\nexperiments:\n  - target: seed.foo\n    compile: {backend: eager, options: {a: 1}}\n")
    )
    assert spec.experiments[0].compile.options == {"a": 1}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def make(device):\n    return (\n", "SyntaxError: '(' was never closed (broken_target.py, line 2)"),
        ("raise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
        ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
        ("import no_such_dependency_xyz\n", "No module named 'no_such_dependency_xyz'"),
    ],
)
def test_a_user_target_module_that_cannot_be_imported(write_spec, tmp_path, monkeypatch, source, expected):
    (tmp_path / "broken_target.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "broken_target", raising=False)
    msg = error_of(write_spec, "name: x\nexperiments:\n  - target: broken_target:make\n")
    assert msg == (
        "spec.yaml: experiments[0].target: cannot import module 'broken_target' of target "
        f"'broken_target:make': {expected}"
    )


def test_the_names_validated_without_torch_are_torchs_own():
    import torch._dynamo
    import torch._inductor

    from orchestrator.plan.spec import SHIPPED_BACKENDS, SHIPPED_MODES

    assert set(SHIPPED_BACKENDS) <= set(torch._dynamo.list_backends(exclude_tags=()))
    assert set(SHIPPED_MODES) <= set(torch._inductor.list_mode_options())
