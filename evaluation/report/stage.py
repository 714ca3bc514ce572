"""What one stage of ``python -m evaluation.report`` is: the commands that measure a table or a
figure, and how their output becomes the Markdown fragment the documentation includes.

A stage's commands run from the repository root as ``python ARGV...`` (the interpreter running
the report). ``{out}`` in an argument is replaced by the stage's own cache folder
(``results/report/<name>/``), so an ``evaluate.py --out {out}/paper`` run keeps its
``results.json`` and plots there for :attr:`Stage.render` and :attr:`Stage.figures`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Lines of a command's output that are not part of a table: where files went and the wall time
# (they differ run to run and would churn the committed fragment).
_NOISE = re.compile(r"^(wrote |\d+ runs? in .* wall$|\[.*\] \d+/\d+|.*\d+it/s\]?$)")


# Code every stage depends on (evaluation/report itself only renders: it is not a cause).
CORE_PATHS = (
    "envs",
    "heuristics",
    "evaluation",
    "traces",
    "evaluate.py",
    "pyproject.toml",
    "setup.py",
    "_servegym_register.py",
)
# CLI family name -> its package under envs/ and heuristics/.
_FAMILY_PACKAGES = {"pd-cluster": "pd_cluster", "routing": "routing", "allocation": "allocation"}
# Benchmarks that time the learner (they import agents/).
_LEARNER_MODULES = frozenset(
    {"benchmarks.train_speed", "benchmarks.rollout_scale", "benchmarks.eval_scale"}
)


_BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def benchmark_files(args: Sequence[str]) -> list[str]:
    """The ``benchmarks/`` files the arguments run (``-m benchmarks.X``), each with the package
    ``__init__`` and the sibling modules its source names (``peer_vidur`` runs
    ``vidur_driver.py``); benchmarks import no other sibling."""
    run = [a.split(".", 1)[1] for a in args if re.fullmatch(r"benchmarks\.\w+", a)]
    if not run:
        return []
    stems = {p.stem for p in _BENCHMARKS.glob("*.py")}
    found = {"__init__"}
    for name in run:
        found.add(name)
        path = _BENCHMARKS / f"{name}.py"
        text = path.read_text() if path.exists() else ""
        found |= {s for s in stems if re.search(rf"\b{s}\b", text)}
    return [f"benchmarks/{s}.py" for s in sorted(found)]


@dataclass(frozen=True)
class CommandOutput:
    """One finished command of a stage.

    :param argv: the arguments after ``python``, placeholders filled.
    :param stdout: what it printed on standard output.
    """

    argv: tuple[str, ...]
    stdout: str

    @property
    def command(self) -> str:
        """The command as a reader types it (``python evaluate.py ...``)."""
        return "python " + shlex.join(self.argv)

    def table_text(self) -> str:
        """``stdout`` without the lines that change from run to run (files written, timings)."""
        lines = [ln.rstrip() for ln in self.stdout.splitlines() if not _NOISE.match(ln.strip())]
        while lines and not lines[-1]:
            lines.pop()
        while lines and not lines[0]:
            lines.pop(0)
        return "\n".join(lines)


@dataclass(frozen=True)
class StageRun:
    """What :attr:`Stage.render` gets: the stage's cache folder and its commands' outputs."""

    out: Path
    outputs: tuple[CommandOutput, ...]


def text_block(text: str) -> str:
    """``text`` as a fenced Markdown block (tables printed by the CLIs keep their alignment)."""
    return f"```text\n{text}\n```"


def default_render(run: StageRun) -> str:
    """Each command's table (its standard output without run-to-run noise) as a text block."""
    return "\n\n".join(text_block(o.table_text()) for o in run.outputs if o.table_text())


@dataclass(frozen=True)
class Stage:
    """One table (or figure) of the documentation and the commands that measure it.

    :param name: unique, lower-case words joined by ``-``; the fragment is
        ``results/tables/<name>.md``, included in a page with
        ``--8<-- "results/tables/<name>.md"``.
    :param title: one line saying what is measured (the fragment's heading line).
    :param commands: each an argument list after ``python`` (``{out}`` = the stage's cache folder).
    :param minutes: expected wall time on one free core, for the progress estimate.
    :param render: the fragment's body from the finished run (default: each command's table).
    :param figures: ``(produced, committed)`` path pairs: ``produced`` relative to the cache folder,
        ``committed`` relative to the repository root; copied after the commands finish.
    :param page: the documentation page that includes the fragment (relative to ``docs/``).
    :param learned: whether a command runs learning code (training, checkpoints, the learner
        benchmarks); ``None`` decides from the commands (:meth:`uses_learning`). The cache of a
        stage follows only the code that can change it (:meth:`code_paths`): ``evaluate.py``
        imports the learning code only for ``ckpt:`` policies, W&B and Ray.
    """

    name: str
    title: str
    commands: tuple[tuple[str, ...], ...]
    minutes: float
    page: str
    render: Callable[[StageRun], str] = default_render
    figures: tuple[tuple[str, str], ...] = field(default=())
    learned: bool | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", self.name):
            raise ValueError(f"stage name {self.name!r}: use lower-case words joined by '-'")
        if not self.commands:
            raise ValueError(f"stage {self.name!r} has no commands")
        for argv in self.commands:
            if not argv or not all(isinstance(a, str) for a in argv):
                raise ValueError(f"stage {self.name!r}: a command must be a non-empty list of str")
        if self.minutes <= 0:
            raise ValueError(f"stage {self.name!r}: minutes must be > 0, got {self.minutes}")

    def uses_learning(self) -> bool:
        """``learned`` if set, else whether a command trains, loads a checkpoint, runs an example
        script or a learner benchmark, or sends results to W&B or Ray."""
        if self.learned is not None:
            return self.learned
        return bool(self.checkpoints()) or any(
            a == "train.py"
            or a.startswith(("examples/", "--wandb", "--ray"))
            or a in _LEARNER_MODULES
            for argv in self.commands
            for a in argv
        )

    def checkpoints(self) -> list[str]:
        """The checkpoint directories the commands load (``ckpt:DIR``, alone or in a
        comma-separated policy list)."""
        return list(
            dict.fromkeys(
                item.removeprefix("ckpt:")
                for argv in self.commands
                for a in argv
                for item in a.split(",")
                if item.startswith("ckpt:")
            )
        )

    def families(self) -> set[str] | None:
        """The env packages (``pd_cluster``, ``routing``, ``allocation``) this stage's commands
        run, or None when a command may run any (one that is not ``evaluate.py`` or
        ``train.py``, or names no ``--env``: benchmarks and examples pick their own envs).
        ``evaluate.py`` without ``--env`` runs the default family (PDCluster)."""
        found: set[str] = set()
        for argv in self.commands:
            if not argv or argv[0] not in ("evaluate.py", "train.py"):
                return None
            if "--leaderboard" in argv:
                continue
            env = next(
                (argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--env"),
                next((a.split("=", 1)[1] for a in argv if a.startswith("--env=")), None),
            )
            if env is None and argv[0] == "train.py":
                return None
            key = re.sub(r"-v\d+$", "", env or "pd-cluster")
            if key not in _FAMILY_PACKAGES:
                return None
            found.add(_FAMILY_PACKAGES[key])
        return found

    def code_paths(self) -> tuple[str, ...]:
        """The tracked paths whose content can change this stage's numbers (git pathspecs): the
        simulator, the policies, the evaluation code and traces always, without the other
        families' env and heuristics packages when :meth:`families` knows them; the benchmark
        modules a command runs (:func:`benchmark_files`); the files under ``examples/`` a command
        names; the learning code when :meth:`uses_learning`, with the checkpoints it loads."""
        args = [a for argv in self.commands for a in argv]
        families = self.families()
        if families is None:
            paths = list(CORE_PATHS)
        else:  # another family's env and heuristics packages cannot move this stage's numbers
            others = [f for f in _FAMILY_PACKAGES.values() if f not in families]
            paths = [
                *CORE_PATHS,
                *(f":!{top}/{f}" for f in others for top in ("envs", "heuristics")),
            ]
        if "--leaderboard" not in args:  # the leaderboard's formatting runs only in that mode
            paths.append(":!evaluation/leaderboard.py")
        paths += benchmark_files(args)
        paths += [a for a in args if a.startswith("examples/")]  # the scripts and configs run
        if self.uses_learning():
            paths += ["agents", "training", "train.py"]
            # a checkpoint's model and config.json are what runs; its README describes it
            paths += [*self.checkpoints(), ":!checkpoints/*.md"]
        return tuple(dict.fromkeys(paths))

    def argv(self, out: Path) -> list[tuple[str, ...]]:
        """The commands with ``{out}`` replaced by ``out``."""
        return [tuple(a.replace("{out}", str(out)) for a in argv) for argv in self.commands]


def stage(
    name: str,
    title: str,
    page: str,
    minutes: float,
    *commands: str | Sequence[str],
    render: Callable[[StageRun], str] = default_render,
    figures: Sequence[tuple[str, str]] = (),
    learned: bool | None = None,
) -> Stage:
    """A :class:`Stage` from commands written as shell strings (``"evaluate.py --env routing-v1"``)
    or argument lists."""
    argvs = tuple(tuple(shlex.split(c)) if isinstance(c, str) else tuple(c) for c in commands)
    return Stage(name, title, argvs, minutes, page, render, tuple(figures), learned)
