"""The contributor guides, played by a test: docs/adding-a-scheduler.md and docs/adding-hardware.md
on a copy of the repository. Every file the guides show is written (or appended) where they say,
and every ``python`` command of their bash blocks runs as written in the copy's root, so a guide
that drifts from the code fails here. Only the calibration check needs data from outside the
repository; it is skipped, with the reason, when that folder is absent (CI has it)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_first_scheduler import code_blocks, commands  # the one reader of doc commands

ROOT = Path(__file__).resolve().parents[2]
SCHEDULER_GUIDE = ROOT / "docs" / "adding-a-scheduler.md"
HARDWARE_GUIDE = ROOT / "docs" / "adding-hardware.md"
#: Left out of the copy: environments, outputs and caches, none of which the guides use.
NOT_COPIED = (
    ".venv", ".git", "results", "runs", "wandb", ".notes", "__pycache__", "*.egg-info",
    ".pytest_cache", ".ruff_cache", ".hypothesis", "*.png",
)  # fmt: skip


def copy_repo(dst: Path) -> Path:
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(*NOT_COPIED))
    return dst


def apply_files(text: str, repo: Path) -> list[str]:
    """Write each block headed ``# PATH`` to ``repo/PATH`` and append each block headed
    ``# append to PATH`` to it; the relative paths, in order."""
    done = []
    for lang in ("python", "yaml"):
        for block in code_blocks(text, lang):
            first, _, body = block.partition("\n")
            match = re.fullmatch(r"# (append to )?(\S+\.(?:py|yaml))", first.strip())
            if not match:
                continue
            path = repo / match.group(2)
            if match.group(1):
                assert path.is_file(), f"the guide appends to {match.group(2)}, which is missing"
                path.write_text(path.read_text().rstrip("\n") + "\n\n\n" + body)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(block)
            done.append(match.group(2))
    return done


def run(command: str, cwd: Path, **env: str) -> str:
    """``command`` run in ``cwd`` with this interpreter as its ``python``."""
    argv = shlex.split(command)
    assert argv[0] == "python", command
    environ = {**os.environ, "WANDB_MODE": "disabled", "PYTHONHASHSEED": "0", **env}
    proc = subprocess.run(
        [sys.executable, *argv[1:]], cwd=cwd, env=environ, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, f"{command}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_scheduler_guide_registers_tests_evaluates_and_trains_its_policies(tmp_path: Path) -> None:
    text = SCHEDULER_GUIDE.read_text()
    repo = copy_repo(tmp_path / "repo")
    written = apply_files(text, repo)
    assert written == [
        "heuristics/pd_cluster/sjf.py",
        "heuristics/routing/routers.py",
        "heuristics/allocation/baselines.py",
        "tests/heuristics/test_sjf.py",
    ]
    # The guide's import list is the package's, plus the new module.
    listing_head = "from heuristics.pd_cluster import ("
    [imports] = [b for b in code_blocks(text, "python") if b.startswith(listing_head)]
    init = repo / "heuristics" / "pd_cluster" / "__init__.py"
    listing = r"^from heuristics\.pd_cluster import \([^\n]*\n.*?^\)\n"
    current = re.search(listing, init.read_text(), re.S | re.M)
    assert current is not None
    listed = set(re.findall(r"^    (\w+),$", imports, re.M))
    assert listed - {"sjf"} == set(re.findall(r"^    (\w+),$", current.group(0), re.M)), (
        "docs/adding-a-scheduler.md: update its copy of heuristics/pd_cluster/__init__.py's "
        "import list"
    )
    init.write_text(init.read_text().replace(current.group(0), imports))

    cmds = commands(text)
    assert [c.split()[1] for c in cmds] == [
        "-m", "evaluate.py", "evaluate.py", "evaluate.py", "train.py",
    ]  # fmt: skip
    tests = run(cmds[0], repo)
    # the rule's own test and the generic checks of tests/heuristics/test_heuristics.py on
    # per-call-sjf
    assert int(re.search(r"(\d+) passed", tests).group(1)) >= 3, tests  # type: ignore[union-attr]
    new_policies = ("per-call-sjf", "most-free-kv", "one-gpu-each")
    for command, policy in zip(cmds[1:4], new_policies, strict=True):
        out = run(command, repo)
        assert re.search(rf"^{re.escape(policy)}\s+\d", out, re.M), out
        regen = next(line for line in out.splitlines() if line.startswith("regenerate: "))
        assert policy in regen
    trained = run(cmds[4], repo)
    assert (repo / "runs/sjf/model.zip").is_file() and (repo / "runs/sjf/bc_model.zip").is_file()
    assert "per-call-sjf" in trained, trained
    # Outside a git checkout the provenance says so instead of failing.
    sidecars = list((repo / "results").glob("*/run.json"))
    assert sidecars and all(json.loads(p.read_text())["commit"] == "unknown" for p in sidecars)


@pytest.fixture(scope="module")
def hardware_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = copy_repo(tmp_path_factory.mktemp("hardware") / "repo")
    written = apply_files(HARDWARE_GUIDE.read_text(), repo)
    assert written == ["envs/configs/gpus.yaml", "envs/configs/models.yaml", "my-cluster.yaml"]
    return repo


def _latency_data() -> Path | None:
    from envs.sim.calibration.calibrate import find_data_dir

    data = find_data_dir()
    return data if (data / "SOURCES.md").is_file() else None


@pytest.mark.slow
def test_hardware_guide_adds_a_gpu_a_model_and_a_cluster_the_simulator_runs(
    hardware_repo: Path,
) -> None:
    cmds = [
        c for c in commands(HARDWARE_GUIDE.read_text()) if "envs.sim.calibration.calibrate" not in c
    ]
    assert [c.split()[1:3] for c in cmds] == [
        ["-m", "envs.sim.core.run"], ["evaluate.py", "--cluster"], ["-m", "envs.sim.latency.model"],
        ["-m", "envs.sim.calibration.benchmark_client"],
    ]  # fmt: skip
    sim = run(cmds[0], hardware_repo)
    assert "req99" in sim.lower(), sim
    table = run(cmds[1], hardware_repo)
    assert "my-cluster" in table and "qwen2.5-7b" in table
    assert re.search(r"^hexagent\s+\d", table, re.M), table
    latency = run(cmds[2], hardware_repo)
    assert "h100-pcie" in latency and "qwen2.5-7b" in latency, latency
    serving = run(cmds[3], hardware_repo)
    assert "ttft" in serving.lower(), serving
    # The packaged catalog of the real repository is untouched.
    assert "h100-pcie" not in (ROOT / "envs/configs/gpus.yaml").read_text()


def test_hardware_guide_calibration_check_runs_when_the_measurements_are_present(
    hardware_repo: Path,
) -> None:
    [cmd] = [
        c for c in commands(HARDWARE_GUIDE.read_text()) if "envs.sim.calibration.calibrate" in c
    ]
    data = _latency_data()
    if data is None:
        pytest.skip(
            "measured-latency data not found (set SERVEGYM_LATENCY_DATA to the folder with "
            "SOURCES.md; CI sets it): the guide's "
            "`python -m envs.sim.calibration.calibrate --summary` is not run"
        )
    out = run(cmd, hardware_repo, SERVEGYM_LATENCY_DATA=str(data))
    assert "held-out e2e" in out, out


def test_calibration_check_without_the_data_says_where_it_looked(hardware_repo: Path) -> None:
    """What the hardware guide promises when the measurements are absent: one line, exit 2."""
    proc = subprocess.run(
        [sys.executable, "-m", "envs.sim.calibration.calibrate", "--summary"], cwd=hardware_repo,
        env={**os.environ, "SERVEGYM_LATENCY_DATA": str(hardware_repo / "no-such-folder")},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "measured-latency folder not found" in proc.stderr
    assert "SERVEGYM_LATENCY_DATA" in proc.stderr and "Traceback" not in proc.stderr
