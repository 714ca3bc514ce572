"""What a training run depends on: :class:`TrainConfig` (every option, declared once), the
``--config`` file reader that checks each value's type, and :func:`resolve`, which fills in
the env family's training defaults (``envs.registry``).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from envs.registry import family, option_help


@dataclass
class TrainConfig:
    """Everything a training run depends on. Env options left None take the env family's
    training default, else its evaluation default (both in ``envs.registry``), else the env's
    own keyword default; :func:`resolve` fills them in before the run starts, so
    ``config.json`` records every value.

    :param env: env family, a key of ``agents.TRAIN_ENVS``.
    :param cluster, model, workload, count, ...: the env options (:data:`ENV_OPTIONS`): each
        sets the env keyword the env family's options map it to (``agents.TRAIN_ENVS``),
        documented in the env's options dataclass (``envs.<family>.options``), which
        ``--help`` quotes.
    :param algo: RL algorithm (``agents.ALGOS``); ``maskable-ppo`` samples only legal actions,
        ``ppo`` learns them (illegal ones are penalised), ``teacher-ppo`` is maskable-ppo with a
        critic warm-up and a decaying KL anchor to the behaviour clone (``agents.teacher_ppo``).
    :param bc_expert: policy to behaviour-clone before RL (unset: the env family's expert;
        ``none``: RL from scratch).
    :param reference: the policy the table's gain lines are computed against and the learning
        curves show (unset: the env family's expert).
    :param bc_episodes: expert episodes collected for BC.
    :param bc_epochs: BC passes over the data.
    :param bc_batch_size: BC minibatch size.
    :param bc_lr: BC learning rate.
    :param bc_vf_coef: BC: weight of the critic's squared error against the expert's discounted
        returns in the loss (the critic shares the features extractor with the policy).
    :param dagger_rounds: DAgger rounds after BC (0 = plain BC).
    :param dagger_episodes: episodes per DAgger round.
    :param dagger_beta: probability the expert acts in a DAgger episode step.
    :param dagger_count: workflows or requests per DAgger episode (unset: ``count``; envs that
        take ``count`` only), every other env option as in training; larger than ``count`` to
        label the states of the scale the policy is run at.
    :param dagger_keep: share of a DAgger episode's states kept (each with this probability);
        below 1 when its episodes are long.
    :param timesteps: RL env steps after BC (0 = BC only).
    :param n_envs: vectorised training envs.
    :param vec: where the training envs run: one subprocess each, or all in this process.
    :param ray: run the training envs as Ray actors instead (``agents.distributed.RayVecEnv``):
        ``local`` (``--ray`` alone: Ray on this machine's cores) or a cluster address
        (``auto``, ``ray://HOST:10001``); needs ``pip install -e '.[ray]'``.
    :param seed: master seed.
    :param eval_episodes: held-out evaluation seeds (``agents.eval_seeds``).
    :param val_episodes: validation seeds (``agents.validation_seeds``) of the evaluations during
        RL, the BC-only figure and the best-checkpoint choice; fewer than ``eval_episodes`` when an
        episode is long (unset: ``eval_episodes``).
    :param eval_every: env steps between evaluations during RL.
    :param ckpt_every: env steps between checkpoints.
    :param baselines: policies the run is compared against besides the expert, which is always
        evaluated (empty: the env family's paper baselines and our own references).
    :param hyperparams: JSON overrides of the algorithm's defaults (e.g.
        ``{"learning_rate": 3e-4}``).
    :param hidden: width of the feature extractor's layers.
    :param torch_threads: torch intra-op threads in this process (workers use 1).
    :param out: run directory.
    :param wandb: W&B mode; offline writes a local run under ``<out>/wandb`` (``wandb sync``
        uploads it).
    :param wandb_project: W&B project.
    :param resume: continue from the latest checkpoint in ``out``.
    :param randomize: domain randomisation of the training envs (BC demonstrations and RL
        rollouts; never the evaluation envs): JSON/YAML mapping option -> {uniform: [low,
        high]} or {choice: [...]}, redrawn every episode (agents.randomize).
    :param family_defaults: unset env options take the env family's evaluation defaults
        (``evaluate.py``'s: the shipped checkpoints' setting, e.g. Allocation's 4 GPUs and one
        constant-rate period) instead of the registry's shorter training defaults.
    :param quiet: no progress bars.
    """

    env: str = "pd-cluster"
    cluster: str | None = None
    model: str | None = None
    latency_calibration: str | None = None
    workload: str | None = None
    count: int | None = None
    load_scale: float | None = None
    estimate_error: float | None = None
    slots: int | None = None
    slo_scale: float | None = None
    slo_basis: str | None = None
    observation: str | None = None
    instances: int | None = None
    output_predictor: str | None = None
    predictor_error: float | None = None
    engine: str | None = None
    prefill_mode: str | None = None
    token_budget: int | None = None
    check_interval: int | None = None
    migration: str | None = None
    gpus: int | None = None
    workflow_rate: float | None = None
    rate_trace: str | None = None
    rate_window: str | None = None
    periods: int | None = None
    period_seconds: float | None = None
    warmup_seconds: float | None = None
    units_per_gpu: int | None = None
    apl_info: bool | None = None
    reward: str | None = None
    algo: str = "maskable-ppo"
    bc_expert: str | None = None
    reference: str | None = None
    bc_episodes: int = 16
    bc_epochs: int = 8
    bc_batch_size: int = 128
    bc_lr: float = 3e-3
    bc_vf_coef: float = 0.5
    dagger_rounds: int = 0
    dagger_episodes: int = 4
    dagger_beta: float = 0.5
    dagger_count: int | None = None
    dagger_keep: float = 1.0
    timesteps: int = 20_000
    n_envs: int = 2
    vec: str = "subproc"
    ray: str | None = None
    seed: int = 0
    eval_episodes: int = 3
    val_episodes: int | None = None
    eval_every: int = 10_000
    ckpt_every: int = 10_000
    baselines: tuple[str, ...] = ()
    hyperparams: dict[str, Any] = field(default_factory=dict)
    hidden: int = 32
    torch_threads: int = 1
    out: str = "runs/default"
    wandb: str = "offline"
    wandb_project: str = "servegym"
    resume: bool = False
    quiet: bool = False
    family_defaults: bool = False
    randomize: dict[str, Any] = field(default_factory=dict)


#: Where the training envs run (``agents.make_vec_env``).
VECS = ("subproc", "dummy")


#: What ``--help`` shows as the default of an option left unset, when it is not the env's.
UNSET_SHOWN = {"val_episodes": "--eval-episodes", "reference": "the env's expert"}


#: TrainConfig fields that configure the env (``envs.registry`` option names).
ENV_OPTIONS = (
    "cluster", "model", "latency_calibration", "workload", "count", "load_scale", "estimate_error",
    "slots", "slo_scale",
    "slo_basis", "observation", "instances", "output_predictor", "predictor_error", "engine",
    "prefill_mode", "token_budget",
    "check_interval", "migration", "gpus", "workflow_rate", "rate_trace", "rate_window", "periods",
    "period_seconds", "warmup_seconds", "units_per_gpu", "apl_info", "reward",
)  # fmt: skip


class TrainError(ValueError):
    """A bad option: reported without a traceback."""


def load_config_file(path: str) -> dict[str, Any]:
    """Options from a JSON or YAML file (keys are :class:`TrainConfig` fields, ``-`` or ``_``).

    Each value is checked against its option's type here, before anything runs: ``timesteps:
    lots``, ``n_envs: 2.5`` or ``timesteps: .inf`` is an error, not cast or truncated.

    :raises TrainError: for a missing or unreadable file, text that is not JSON/YAML, a file that
        is not a mapping of options, an unknown key or a value of the wrong type.
    """
    p = Path(path)
    if not p.is_file():
        raise TrainError(f"--config {path!r}: no such file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrainError(f"--config {path!r}: cannot read it as UTF-8 text: {exc}") from exc
    if p.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except (yaml.YAMLError, RecursionError) as exc:
            raise TrainError(f"--config {path!r}: not valid YAML: {exc}") from exc
    else:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise TrainError(f"--config {path!r}: not valid JSON: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise TrainError(
            f"--config {path!r}: expected a mapping of option -> value, got {short_repr(data)}"
        )
    data = {k.replace("-", "_"): v for k, v in data.items()}
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise TrainError(f"--config {path!r}: unknown option(s) {unknown}; known: {sorted(known)}")
    return {name: _config_value(path, name, value) for name, value in data.items()}


def short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _config_value(path: str, name: str, value: Any) -> Any:
    """A ``--config`` value checked against option ``name``'s type (YAML and JSON give typed
    values; a string where a number is expected is parsed as the flag would parse it).

    :raises TrainError: naming the file and option, with the value and the expected type.
    """
    where = f"--config {path!r}: option {name!r}"
    default = getattr(TrainConfig(), name)
    parse = option_type(name)
    if value is None and default is None:
        return None
    if name in ("baselines", "randomize", "hyperparams"):
        return _structured_value(where, name, value, parse)
    return _scalar_value(where, value, default, parse)


def _scalar_value(where: str, value: Any, default: Any, parse: Callable[[str], Any]) -> Any:
    """A bool, integer, number or string ``value`` of a ``--config`` option whose default is
    ``default`` and whose flag parses with ``parse``.

    :raises TrainError: naming ``where``, with the value and the expected type.
    """
    import evaluation

    if isinstance(default, bool) or parse is evaluation.parse_bool:
        if isinstance(value, bool):
            return value
        expected = "true or false"
    elif parse is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        expected = "an integer"
    elif parse is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isfinite(value):
                return float(value)
            expected = "a finite number"
        else:
            expected = "a number"
    else:
        if isinstance(value, str):
            return value
        expected = "a string"
    if isinstance(value, str) and expected != "a finite number":
        try:
            return parse(value)
        except (ValueError, argparse.ArgumentTypeError):
            pass
    raise TrainError(f"{where}: expected {expected}, got {short_repr(value)}")


def _structured_value(where: str, name: str, value: Any, parse: Callable[[str], Any]) -> Any:
    """A ``--config`` value of ``baselines`` (a list), ``randomize`` or ``hyperparams`` (a
    mapping).

    :raises TrainError: naming ``where``, with the value and the expected shape.
    """
    if name == "baselines":
        if isinstance(value, str):
            return parse(value)
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise TrainError(f"{where}: expected a list of policy names, got {short_repr(value)}")
    if name == "randomize":
        if isinstance(value, str):
            value = json.loads(value)
        if isinstance(value, dict):
            return value
        raise TrainError(f"{where}: expected a mapping of option -> draw, got {short_repr(value)}")
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return value  # hyperparams
    raise TrainError(
        f"{where}: expected a mapping of algorithm keyword -> value, got {short_repr(value)}"
    )


def option_docs() -> dict[str, str]:
    """Each :class:`TrainConfig` field's ``--help`` text: its ``:param:`` line, or for an env
    option the docstring of the env keyword it sets (:func:`envs.registry.option_help`)."""
    from agents import TRAIN_ENVS

    doc = inspect.getdoc(TrainConfig) or ""
    entries = re.findall(r"^:param (\w+): (.*?)(?=^:param |\Z)", doc, re.S | re.M)
    docs = {name: " ".join(text.replace("``", "").split()) for name, text in entries}
    takes = {name: spec.options for name, spec in TRAIN_ENVS.items()}
    docs.update({name: option_help(name, takes) for name in ENV_OPTIONS})
    missing = [f.name for f in fields(TrainConfig) if f.name not in docs]
    if missing:  # a new field without a :param: line is a bug in this file
        raise AssertionError(f"TrainConfig fields without a :param: line: {missing}")
    return docs


def allowed_values(name: str) -> str | None:
    """The values option ``name`` accepts, for ``--help`` (None: free-form)."""
    from agents import ALGOS, TRAIN_ENVS
    from agents.wandb_utils import MODES

    listed = {
        "env": ", ".join(TRAIN_ENVS),
        "algo": ", ".join(ALGOS),
        "vec": ", ".join(VECS),
        "wandb": ", ".join(MODES),
        "bc_expert": "none, a policy of the env (listed per env below), "
        "py:MODULE:FACTORY or py:FILE.py:FACTORY (your own), ckpt:PATH",
        "reference": "a policy of the env (listed per env below) or a py: spec",
        "baselines": "comma-separated policies of the env (listed per env below) or py: specs",
    }
    return listed.get(name)


def evaluate_fmt(value: Any) -> str:
    """A default as ``--help`` shows it (``0.003``, ``()``, ``{}``)."""
    return f"{value:g}" if isinstance(value, float) else repr(value)


def option_type(name: str) -> Callable[[str], Any]:
    """How the command line parses option ``name`` (env options: as in ``evaluate.py``)."""
    import evaluation

    special: dict[str, Callable[[str], Any]] = {
        "hyperparams": json.loads,
        "randomize": json.loads,
        "baselines": lambda s: tuple(filter(None, s.split(","))),
        "workload": str,
        "reward": str,
        "bc_expert": str,
        "reference": str,
        "observation": str,
    }
    if name in special:
        return special[name]
    if name in evaluation.ENV_FIELD_META:
        return evaluation.ENV_FIELD_META[name]["type"]
    default = getattr(TrainConfig(), name)
    return type(default) if default is not None else int


def resolve(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with unset env options and ``bc_expert`` filled in: the env family's training
    defaults (``envs.registry``: ``train_defaults``), then its evaluation defaults (cluster,
    model, first workload, expert), then the env's own keyword defaults. Options the env does
    not take stay None. ``env`` becomes its explicit ``-vN`` name (``routing`` ->
    ``routing-v1``), so ``config.json`` records which version trained the model."""
    import evaluation
    from agents import train_env_spec
    from envs import versioned_name

    with contextlib.suppress(ValueError):  # check_config names the trainable envs
        cfg = replace(cfg, env=versioned_name(cfg.env))

    spec = train_env_spec(cfg.env)
    entry = family(cfg.env)
    evaluated = {"cluster": entry.cluster, "model": entry.model, "workload": entry.workloads[0]}
    training = {} if cfg.family_defaults else entry.train_defaults
    defaults = {**evaluation.env_defaults(cfg.env), **evaluated, **training}
    filled: dict[str, Any] = {
        name: defaults.get(name)
        for name in ENV_OPTIONS
        if name in spec.options and getattr(cfg, name) is None
    }
    if cfg.bc_expert is None:
        filled["bc_expert"] = entry.reference
    if cfg.reference is None:
        filled["reference"] = entry.reference
    return replace(cfg, **filled)
