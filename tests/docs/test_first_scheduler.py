"""The newcomer's first hour, played by a test: docs/your-first-scheduler.md's scheduler file and
every ``python`` command in it, the printed "regenerate:" line, and the training page's command that
evaluates a trained checkpoint, all run as written in a fresh directory."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "your-first-scheduler.md"


def code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def commands(text: str) -> list[str]:
    """Every ``python ...`` line of the bash blocks (continuation lines joined)."""
    out = []
    for block in code_blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(("python ", ".venv/bin/python ")):
                out.append(line)
    return out


def run(command: str, cwd: Path) -> str:
    """``command`` with its interpreter replaced by this one and the script by its repo path."""
    argv = shlex.split(command)
    assert argv[0] in ("python", ".venv/bin/python") and argv[1] in ("evaluate.py", "train.py")
    argv = [sys.executable, str(ROOT / argv[1]), *argv[2:]]
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONHASHSEED": "0"}
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{command}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def row(table: str, policy: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(policy + " "))


@pytest.mark.slow
def test_doc_commands_and_the_training_page_checkpoint_command_run_as_written(
    tmp_path: Path,
) -> None:
    text = DOC.read_text()
    sources = [b for b in code_blocks(text, "python") if b.startswith("# my_scheduler.py")]
    assert len(sources) == 1, "the doc shows my_scheduler.py once"
    (tmp_path / "my_scheduler.py").write_text(sources[0])
    cmds = [c for c in commands(text) if "--env" not in c]  # the PDCluster walk-through
    assert [c.split()[1] for c in cmds] == ["evaluate.py", "train.py", "evaluate.py"]

    # 1. Compare with the expert; the regenerate line reproduces the same numbers.
    first = run(cmds[0], tmp_path)
    spec = "py:my_scheduler.py:make"
    regen = next(line for line in first.splitlines() if line.startswith("regenerate: "))
    assert f"--policies {spec},hexagent,per-call-fcfs" in regen  # verbatim
    again = run(regen.removeprefix("regenerate: "), tmp_path)
    for policy in (spec, "hexagent"):
        assert row(first, policy) == row(again, policy)
    assert "not compared against" in first and spec in first.split("not compared against")[1]

    # 2. Clone it; the cloned scheduler is in the run's table.
    trained = run(cmds[1], tmp_path)
    assert (tmp_path / "runs/first/model.zip").is_file()
    assert row(trained, spec)

    # 3. The doc's and the training page's evaluation of the checkpoint, as written.
    run(cmds[2], tmp_path)
    training = (ROOT / "docs" / "training.md").read_text()
    [training_cmd] = [c for c in commands(training) if "ckpt:runs/first/model.zip" in c]
    out = run(training_cmd.replace("[--wandb offline]", "").strip(), tmp_path)
    assert row(out, "ckpt:runs/first/model.zip")


@pytest.mark.parametrize(
    ("env", "source", "policies"),
    [
        ("routing", "my_router.py", ("goodserve", "least-request", "round-robin")),
        ("allocation", "my_planner.py", ("naive-equal", "demand-proportional")),
    ],
)
@pytest.mark.slow
def test_doc_router_and_planner_run_as_written(
    tmp_path: Path, env: str, source: str, policies: tuple[str, ...]
) -> None:
    """Sections 4 and 5: the file and its command as written; the table has a finite row for
    it beside the baselines, and its actions were legal (Router.act / PlanPolicy check them)."""
    text = DOC.read_text()
    [code] = [b for b in code_blocks(text, "python") if b.startswith(f"# {source}")]
    (tmp_path / source).write_text(code)
    [cmd] = [c for c in commands(text) if f"--env {env}" in c]
    out = run(cmd, tmp_path)
    spec = f"py:{source}:make"
    cells = row(out, spec).split()[1:]
    assert cells and all(c != "-" for c in cells)
    assert float(cells[0]) > 0  # goodput: some requests / workflows met their SLO
    for policy in policies:
        assert row(out, policy)
    check_documented_rule(env, tmp_path / source)


def check_documented_rule(env_name: str, source: Path) -> None:
    """The doc's policy does what its docstring says on a few real decisions."""
    import gymnasium as gym
    import numpy as np

    import envs  # noqa: F401
    from heuristics.plugins import make_plugin_policy

    policy = make_plugin_policy(f"{source}:make")
    policy.reset()
    if env_name == "routing":
        env = gym.make("servegym/Routing-v0", workload_count=40, decision_context=True)
        obs, info = env.reset(seed=0)
        for _ in range(30):
            ctx, action = info["decision_context"], policy.act(obs, info)
            legal = np.flatnonzero(ctx.feasible)
            if ctx.kind == "route" and ctx.meets_deadline[legal].any():
                assert ctx.meets_deadline[action]
                meeting = legal[ctx.meets_deadline[legal]]
                assert ctx.outstanding[action] == ctx.outstanding[meeting].min()
            obs, _, term, trunc, info = env.step(action)
            if term or trunc:
                break
    else:
        env = gym.make("servegym/Allocation-v0", decision_context=True)
        obs, info = env.reset(seed=0)
        ctx = info["decision_context"]
        plan = policy.plan(ctx)
        total = ctx.topology.num_gpus * ctx.units_per_gpu
        largest = plan.get(ctx.models[0])
        assert (
            largest.units
            >= min(total // 2, total - sum(ctx.min_units[m] for m in ctx.models[1:]))
            - largest.replicas
        )
        assert all(plan.get(m).units >= ctx.min_units[m] for m in ctx.models)


@pytest.mark.parametrize(
    ("source", "factory", "message"),
    [
        ("def make():\n    return object()\n", "make", "without act and reset"),
        ("def make():\n    return 1\n", "nope", "has no 'nope'; its callables: make"),
        ("def make(:\n", "make", "importing"),
        ("def make():\n    raise RuntimeError('boom')\n", "make", "factory raised RuntimeError"),
    ],
)
def test_bad_plugins_get_a_clear_error_naming_the_spec(
    tmp_path: Path, source: str, factory: str, message: str
) -> None:
    from heuristics.plugins import PluginError, make_plugin_policy

    (tmp_path / "p.py").write_text(source)
    with pytest.raises(PluginError, match=re.escape(message)) as err:
        make_plugin_policy(f"{tmp_path / 'p.py'}:{factory}")
    assert "py:" in str(err.value)


def test_module_specs_and_env_taking_factories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from heuristics.plugins import PluginError, make_plugin_policy

    (tmp_path / "mysched_mod.py").write_text(
        "class P:\n"
        "    def __init__(self, env):\n"
        "        self.env = env\n"
        "    def reset(self):\n        pass\n"
        "    def act(self, obs, info):\n        return 0\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    policy = make_plugin_policy("mysched_mod:P", env="the env")
    assert policy.env == "the env" and policy.name == "py:mysched_mod:P"
    with pytest.raises(PluginError, match="no module 'not_there'"):
        make_plugin_policy("not_there:P")
    with pytest.raises(PluginError, match="no such file"):
        make_plugin_policy("missing.py:P")
    with pytest.raises(PluginError, match="expected py:MODULE:FACTORY"):
        make_plugin_policy("justamodule")


def test_evaluate_cli_reports_a_failing_plugin_without_traceback(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(
        "class P:\n    name = 'bad'\n    def reset(self):\n        pass\n"
        "    def act(self, obs, info):\n        return info['decision_context'].nope\n"
        "def make():\n    return P()\n"
    )
    proc = subprocess.run(
        [sys.executable, str(ROOT / "evaluate.py"), "--workload", "mixed", "--count", "5",
         "--seeds", "0", "--policies", "py:bad.py:make", "--quiet"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "WANDB_MODE": "disabled"},
    )  # fmt: skip
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "py:bad.py:make" in proc.stderr and "bad.py:6 in act" in proc.stderr
