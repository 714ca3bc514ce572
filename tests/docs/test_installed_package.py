"""The installed package, as a user gets it: build the wheel, install it into a fresh virtual
environment, and from a directory outside the repository run ``servegym-evaluate --help``,
``gymnasium.make("servegym/Routing-v0")`` without importing a servegym package, and the README
quickstart as written.

Dependencies come from pip's configured sources (the local torch wheel is found as ``make
venv`` finds it: ``torch==2.13.0`` is pinned). About 1 CPU-minute of pip; minutes of wall time
on a busy machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _run(argv: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["WANDB_MODE"] = "disabled"
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout)
    assert result.returncode == 0, f"{argv}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` directory of a fresh venv with the built wheel installed."""
    tmp = tmp_path_factory.mktemp("installed")
    wheels = tmp / "wheels"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheels), str(ROOT)],
        tmp,
    )  # fmt: skip
    [wheel] = wheels.glob("servegym-*.whl")
    _run([sys.executable, "-m", "venv", str(tmp / "venv")], tmp)
    bin_dir = tmp / "venv" / "bin"
    _run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)], tmp, timeout=1800)
    return bin_dir


def test_console_script_prints_its_help(installed: Path, tmp_path: Path) -> None:
    out = _run([str(installed / "servegym-evaluate"), "--help"], tmp_path).stdout
    assert "--policies" in out and "--env" in out
    assert "--timesteps" in _run([str(installed / "servegym-train"), "--help"], tmp_path).stdout


def test_gym_make_needs_no_import(installed: Path, tmp_path: Path) -> None:
    code = (
        "import gymnasium as gym\n"
        "env = gym.make('servegym/Routing-v0')\n"
        "obs, info = env.reset(seed=0)\n"
        "print(env.spec.id, env.action_space)\n"
    )
    out = _run([str(installed / "python"), "-c", code], tmp_path).stdout
    assert out.startswith("servegym/Routing-v0 Discrete(")


def test_readme_quickstart_runs_from_the_installed_package(installed: Path, tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    code = readme.split("## Quickstart", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "quickstart.py").write_text(code)
    where = _run(
        [str(installed / "python"), "-c", "import evaluation; print(evaluation.__file__)"],
        tmp_path,
    ).stdout
    assert str(ROOT) not in where  # the installed copy, not the checkout
    out = _run([str(installed / "python"), "quickstart.py"], tmp_path).stdout
    for policy in ("MaskablePPO", "ckpt:routing", "goodserve", "least-request"):
        assert any(line.startswith(policy) for line in out.splitlines()), policy
