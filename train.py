"""Train a scheduling policy on a servegym env: behaviour cloning from an expert, then RL.

    python train.py --env pd-cluster                       # sensible defaults, ~10 min on 2 cores
    python train.py --env pd-cluster --cluster hetero-1 --model llama3.1-70b --workload mixed \\
        --algo maskable-ppo --bc-expert hexagent --timesteps 200000 --n-envs 2 --seed 0 \\
        --out runs/hexbc --wandb offline
    python train.py --env routing --slo-scale 1.5 --out runs/goodserve-bc   # clone GoodServe

Every env family trains the same way. Its defaults (cluster, model, workload, episode length),
its expert (the default ``--bc-expert``), its baselines and its headline metrics with their
direction come from ``evaluate.ENVS`` and ``agents.TRAIN_ENVS``; ``--help`` lists them.

Reads top to bottom (CleanRL style):

1. options (:class:`TrainConfig`; ``--config FILE`` (JSON/YAML) sets defaults, flags override);
2. reference numbers: the expert and the baselines on the held-out evaluation seeds;
3. behaviour cloning from ``--bc-expert`` (expert-labelled states, optional DAgger rounds);
4. RL fine-tuning with SB3 on ``--n-envs`` vectorised envs, periodic evaluation on validation
   seeds (``agents.validation_seeds``: the best checkpoint is chosen there, never on the held-out
   seeds), checkpoints;
5. the final comparison through ``evaluate.py``'s own code on the same seeds.

Writes ``<out>/config.json``, ``model.zip`` (final), ``bc_model.zip`` (after BC),
``best_model.zip`` (best evaluation by the env's selection metric: lowest Req99 on PDCluster,
highest goodput on Routing; a row of the final table when it is not the final model),
``checkpoints/``, ``eval.json`` (references,
BC-only, evaluation history, final table, timing), ``eval_history.json`` (the evaluations during
RL so far, rewritten after each), ``progress.txt`` (SB3's update log; not with ``--quiet``),
``table.txt``, attainment plots, and the W&B run under ``<out>/wandb/`` (offline by default;
``wandb sync`` uploads it). A run that fails before its first model is saved leaves nothing
behind.

Reproducibility: the same config and seed on the same machine give the same curve: every
random source is seeded (SB3 ``seed``, BC shuffling, training-workload seeds), and torch runs
with ``--torch-threads`` threads (default 1). Float reductions depend on the thread count, so a
different ``--torch-threads`` (or another CPU / torch build) may change the curve slightly.
Subprocess envs are deterministic per seed and do not share state.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import re
import shutil
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

# --------------------------------------------------------------------------------------------
# Options, declared once.
# --------------------------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """Everything a training run depends on. Env options left None take the env family's
    training default (``agents.TRAIN_ENVS``), else its evaluation default (``evaluate.ENVS``),
    else the env's own keyword default; :func:`resolve` fills them in before the run starts, so
    ``config.json`` records every value.

    :param env: env family, a key of ``agents.TRAIN_ENVS``.
    :param cluster: cluster preset or YAML path.
    :param model: LLM name.
    :param workload: workload generator.
    :param count: workflows / requests per episode (training and evaluation).
    :param load_scale: arrival-rate multiplier.
    :param estimate_error: PDCluster: error on scheduler-visible estimates.
    :param slots: PDCluster: K, calls re-planned per invocation.
    :param slo_scale: Routing: SLO = scale × run-alone latency.
    :param slo_basis: Routing: ``request`` or ``task`` (see ``envs.routing``).
    :param instances: Routing: grow the cluster to this many instances.
    :param output_predictor: output-length predictor (``envs.predictors``).
    :param predictor_error: Routing: error e of ``oracle-error``.
    :param engine: Routing: serving-engine preset (``vllm``, ``sglang``, ``trtllm``).
    :param prefill_mode: Routing: override the engine's scheduling.
    :param token_budget: Routing: override the engine's tokens per iteration.
    :param check_interval: Routing: decode iterations between migration checks.
    :param migration: Routing: ``token`` or ``kv``.
    :param gpus: Allocation: GPUs of the pool.
    :param workflow_rate: Allocation: workflows/s (a rate trace's base rate).
    :param rate_trace: Allocation: rate shape of the autoscaling variant (``traces.rates``).
    :param rate_window: Allocation: ``train``/``heldout`` window of the rate trace.
    :param periods: Allocation: periods per episode.
    :param period_seconds: Allocation: seconds per period.
    :param warmup_seconds: Allocation: arrivals before this are left out of the metrics.
    :param units_per_gpu: Allocation: GPU-fraction units per GPU.
    :param apl_info: Allocation: add the APL's predictions to the metrics.
    :param reward: env reward name (``envs.rewards``).
    :param algo: RL algorithm (``agents.ALGOS``); ``maskable-ppo`` samples only legal actions,
        ``ppo`` learns them (illegal ones are penalised).
    :param bc_expert: policy to behaviour-clone before RL (unset: the env family's expert;
        ``none``: RL from scratch).
    :param reference: the policy the table's gain lines are computed against and the learning
        curves show (unset: the env family's expert).
    :param bc_episodes: expert episodes collected for BC.
    :param bc_epochs: BC passes over the data.
    :param bc_batch_size: BC minibatch size.
    :param bc_lr: BC learning rate.
    :param dagger_rounds: DAgger rounds after BC (0 = plain BC).
    :param dagger_episodes: episodes per DAgger round.
    :param dagger_beta: probability the expert acts in a DAgger episode step.
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
        constant-rate period) instead of ``agents.TRAIN_ENVS``' shorter training defaults.
    :param quiet: no progress bars.
    """

    env: str = "pd-cluster"
    cluster: str | None = None
    model: str | None = None
    workload: str | None = None
    count: int | None = None
    load_scale: float | None = None
    estimate_error: float | None = None
    slots: int | None = None
    slo_scale: float | None = None
    slo_basis: str | None = None
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
    dagger_rounds: int = 0
    dagger_episodes: int = 4
    dagger_beta: float = 0.5
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

#: TrainConfig fields that configure the env (``envs.CLI_ENVS`` option names).
ENV_OPTIONS = (
    "cluster", "model", "workload", "count", "load_scale", "estimate_error", "slots", "slo_scale",
    "slo_basis", "instances", "output_predictor", "predictor_error", "engine", "prefill_mode",
    "token_budget",
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
            f"--config {path!r}: expected a mapping of option -> value, got {_short(data)}"
        )
    data = {k.replace("-", "_"): v for k, v in data.items()}
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise TrainError(f"--config {path!r}: unknown option(s) {unknown}; known: {sorted(known)}")
    return {name: _config_value(path, name, value) for name, value in data.items()}


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _config_value(path: str, name: str, value: Any) -> Any:
    """A ``--config`` value checked against option ``name``'s type (YAML and JSON give typed
    values; a string where a number is expected is parsed as the flag would parse it).

    :raises TrainError: naming the file and option, with the value and the expected type.
    """
    import evaluate

    where = f"--config {path!r}: option {name!r}"
    default = getattr(TrainConfig(), name)
    parse = _option_type(name)
    if value is None and default is None:
        return None
    if name == "baselines":
        if isinstance(value, str):
            return parse(value)
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise TrainError(f"{where}: expected a list of policy names, got {_short(value)}")
    if name == "randomize":
        if isinstance(value, str):
            value = json.loads(value)
        if isinstance(value, dict):
            return value
        raise TrainError(f"{where}: expected a mapping of option -> draw, got {_short(value)}")
    if name == "hyperparams":
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return value
        raise TrainError(
            f"{where}: expected a mapping of algorithm keyword -> value, got {_short(value)}"
        )
    if isinstance(default, bool) or parse is evaluate.parse_bool:
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
    raise TrainError(f"{where}: expected {expected}, got {_short(value)}")


def option_docs() -> dict[str, str]:
    """Each :class:`TrainConfig` field's ``:param:`` text from its docstring: the one place the
    options are documented, shown by ``--help``."""
    doc = inspect.getdoc(TrainConfig) or ""
    entries = re.findall(r"^:param (\w+): (.*?)(?=^:param |\Z)", doc, re.S | re.M)
    docs = {name: " ".join(text.replace("``", "").split()) for name, text in entries}
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


def _option_type(name: str) -> Callable[[str], Any]:
    """How the command line parses option ``name`` (env options: as in ``evaluate.py``)."""
    import evaluate

    special: dict[str, Callable[[str], Any]] = {
        "hyperparams": json.loads,
        "randomize": json.loads,
        "baselines": lambda s: tuple(filter(None, s.split(","))),
        "workload": str,
        "reward": str,
        "bc_expert": str,
        "reference": str,
    }
    if name in special:
        return special[name]
    if name in evaluate.ENV_FIELD_META:
        return evaluate.ENV_FIELD_META[name]["type"]
    default = getattr(TrainConfig(), name)
    return type(default) if default is not None else int


def describe_train_envs() -> str:
    """``--help`` epilog: each trainable env family's defaults, expert, baselines, metrics."""
    import evaluate
    from agents import TRAIN_ENVS

    lines = ["trainable env families (unset options take these defaults):"]
    for name, spec in TRAIN_ENVS.items():
        entry = evaluate.env_entry(name)
        defaults = {**evaluate.env_defaults(name), **resolve(TrainConfig(env=name)).__dict__}
        opts = [
            f"--{o.replace('_', '-')} {evaluate._fmt_value(defaults.get(o))}"
            for o in ENV_OPTIONS
            if o in spec.options
        ]
        head = ", ".join(f"{m.key} ({m.better} is better)" for m in entry.headline)
        lines += [
            f"  {name} ({spec.gym_id}; extractor {spec.extractor.__name__})",
            f"    options: {'  '.join(opts)}",
            f"    --bc-expert {entry.reference}; --baselines "
            f"{','.join((*entry.baselines, *entry.own_references))}",
            textwrap.fill(
                f"every policy: {', '.join(evaluate.heuristic_names('', name))}",
                width=100,
                initial_indent="    ",
                subsequent_indent="      ",
                break_on_hyphens=False,
            ),
            f"    metrics: {head}; best checkpoint by {entry.select}",
        ]
    return "\n".join(lines)


def parse_args(argv: list[str]) -> TrainConfig:
    """Command line -> :class:`TrainConfig` with every per-env default filled in (:func:`resolve`).
    Precedence: flags > ``--config`` file > the env family's defaults > the dataclass's."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    base = TrainConfig()
    if known.config:
        base = TrainConfig(**{**asdict(base), **load_config_file(known.config)})

    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=describe_train_envs(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", help="JSON/YAML file of options (flags override it)")
    docs = option_docs()
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(base, f.name)
        values = allowed_values(f.name)
        help_text = docs[f.name] + (f" One of: {values}." if values else "")
        if isinstance(default, bool):
            p.add_argument(flag, action="store_true", default=default, help=help_text)
            continue
        if f.name == "ray":  # --ray alone: on this machine
            p.add_argument(flag, nargs="?", const="local", metavar="ADDRESS", help=help_text)
            continue
        shown = UNSET_SHOWN.get(f.name, "the env's") if default is None else evaluate_fmt(default)
        p.add_argument(
            flag,
            dest=f.name,
            type=_option_type(f.name),
            default=default,
            help=f"{help_text} (default: {shown})",
        )
    args = p.parse_args(argv)
    from envs import env_short_name

    try:
        args.env = env_short_name(args.env)  # a gym id (servegym/Routing-v0) or a short name
    except ValueError:
        pass  # check_config names the trainable envs
    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig)})
    check_config(cfg)
    return resolve(cfg)


def resolve(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with unset env options and ``bc_expert`` filled in: training defaults
    (``agents.TRAIN_ENVS``), then the env family's (``evaluate.ENVS``: cluster, model, expert),
    then the env's own keyword defaults. Options the env does not take stay None."""
    import evaluate
    from agents import train_env_spec

    spec = train_env_spec(cfg.env)
    entry = evaluate.env_entry(cfg.env)
    family = {"cluster": entry.cluster, "model": entry.model, "workload": entry.workloads[0]}
    training = {} if cfg.family_defaults else spec.defaults
    defaults = {**evaluate.env_defaults(cfg.env), **family, **training}
    filled = {
        name: defaults.get(name)
        for name in ENV_OPTIONS
        if name in spec.options and getattr(cfg, name) is None
    }
    if cfg.bc_expert is None:
        filled["bc_expert"] = entry.reference
    if cfg.reference is None:
        filled["reference"] = entry.reference
    return replace(cfg, **filled)


def check_config(cfg: TrainConfig) -> None:
    """Reject bad options before any work starts.

    :raises TrainError: naming the option and the expected values.
    """
    from agents import ALGOS, TRAIN_ENVS
    from agents.wandb_utils import MODES

    if cfg.env not in TRAIN_ENVS:
        from envs.base import did_you_mean

        raise TrainError(
            f"--env {cfg.env!r} is not trainable{did_you_mean(cfg.env, TRAIN_ENVS)}; known: "
            f"{sorted(TRAIN_ENVS)}"
        )
    spec = TRAIN_ENVS[cfg.env]
    for name in ENV_OPTIONS:
        if name not in spec.options and getattr(cfg, name) is not None:
            raise TrainError(
                f"env {cfg.env!r} does not take --{name.replace('_', '-')} (got "
                f"{getattr(cfg, name)!r}); its options: "
                f"{', '.join('--' + o.replace('_', '-') for o in ENV_OPTIONS if o in spec.options)}"
            )
    if cfg.algo not in ALGOS:
        raise TrainError(f"--algo {cfg.algo!r} unknown; known: {sorted(ALGOS)}")
    if cfg.vec not in VECS:
        raise TrainError(f"--vec must be one of {', '.join(VECS)}, got {cfg.vec!r}")
    if cfg.ray is not None and cfg.vec != "subproc":
        raise TrainError(f"--ray and --vec {cfg.vec} both say where the envs run; give one")
    if cfg.wandb not in MODES:
        raise TrainError(f"--wandb must be one of {MODES}, got {cfg.wandb!r}")
    for name in (
        "n_envs", "eval_episodes", "eval_every", "ckpt_every", "bc_batch_size", "torch_threads",
    ):  # fmt: skip
        if getattr(cfg, name) < 1:
            raise TrainError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    for name in ("bc_lr", "hidden"):
        if not getattr(cfg, name) > 0:
            raise TrainError(f"--{name.replace('_', '-')} must be > 0, got {getattr(cfg, name)}")
    if not 0.0 <= cfg.dagger_beta <= 1.0:
        raise TrainError(f"--dagger-beta must be in [0, 1], got {cfg.dagger_beta}")
    for name in ("timesteps", "bc_episodes", "bc_epochs", "dagger_rounds"):
        if getattr(cfg, name) < 0:
            raise TrainError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(cfg, name)}")
    if cfg.val_episodes is not None and cfg.val_episodes < 1:
        raise TrainError(f"--val-episodes must be >= 1, got {cfg.val_episodes}")
    if cfg.count is not None and cfg.count < 1:
        raise TrainError(f"--count must be >= 1, got {cfg.count}")
    if cfg.randomize:
        from agents import train_env_spec
        from agents.randomize import check_randomization

        try:
            check_randomization(cfg.randomize, train_env_spec(cfg.env).options)
        except ValueError as exc:
            raise TrainError(f"--{exc}") from exc
    if not isinstance(cfg.hyperparams, dict):
        raise TrainError(
            f"--hyperparams must be a JSON object of algorithm keyword -> value, got "
            f"{_short(cfg.hyperparams)}"
        )
    import evaluate

    known = evaluate.heuristic_names("", cfg.env)
    dupes = sorted({b for b in cfg.baselines if cfg.baselines.count(b) > 1})
    if dupes:
        raise TrainError(f"--baselines lists {', '.join(dupes)} more than once")
    for option, spec in policy_options(cfg):
        prefix, sep, _ = spec.partition(":")
        if sep and prefix not in evaluate.POLICY_LOADERS:
            raise TrainError(
                f"{option} {spec!r}: unknown policy prefix {prefix!r}; known: "
                f"{', '.join(p + ':' for p in sorted(evaluate.POLICY_LOADERS))}"
            )
        if not sep and spec not in known:
            raise TrainError(
                f"{option} {spec!r}: unknown policy for env {cfg.env!r}; known: "
                f"{', '.join(known)}, or py:MODULE:FACTORY / py:FILE.py:FACTORY for your own"
            )


def policy_options(cfg: TrainConfig) -> list[tuple[str, str]]:
    """(option, policy spec) of every policy the run uses besides the one it trains."""
    expert = [] if cfg.bc_expert in (None, "none") else [("--bc-expert", cfg.bc_expert)]
    return [*expert, *(("--baselines", b) for b in cfg.baselines)]


def check_run(cfg: TrainConfig) -> None:
    """What :func:`check_config` cannot see without building things, checked before anything
    is written: the env builds and resets with the run's options, every policy the run uses
    (expert, baselines) loads on it — a ``py:`` file that does not import, a ``ckpt:`` for
    another env — and ``--hyperparams`` names only arguments the algorithm takes.

    :raises TrainError: naming the option.
    """
    import evaluate
    from agents import algo_spec, env_kwargs, make_env, train_env_spec

    algo_class = algo_spec(cfg.algo).load_class()
    takes = set(inspect.signature(algo_class.__init__).parameters) - {"self", "policy", "env"}
    unknown = sorted(set(cfg.hyperparams) - takes)
    if unknown:
        raise TrainError(
            f"--hyperparams: {algo_class.__name__} takes no {', '.join(map(repr, unknown))}; "
            f"it takes: {', '.join(sorted(takes))}"
        )
    spec = train_env_spec(cfg.env)
    try:
        env = make_env(spec, env_kwargs(spec, asdict(cfg)))
        env.reset(seed=cfg.seed)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise TrainError(f"cannot build env {cfg.env!r} with these options: {exc}") from exc
    try:
        for option, policy in policy_options(cfg):
            try:
                evaluate.resolve_policy(policy, env, cfg.env)
            except evaluate.EvaluationError as exc:
                raise TrainError(f"{option}: {exc}") from exc
    finally:
        env.close()


def baselines_of(cfg: TrainConfig) -> tuple[str, ...]:
    """The policies the run is compared against besides the expert: ``--baselines`` (default:
    the env family's paper baselines and own references), and ``--bc-expert`` when it is
    another policy (your own ``py:`` scheduler). The expert is always evaluated, so naming it in
    ``--baselines`` adds nothing (said so on stdout)."""
    import evaluate

    entry = evaluate.env_entry(cfg.env)
    reference = cfg.reference or entry.reference
    chosen = cfg.baselines or (*entry.baselines, *entry.own_references)
    if reference in chosen:
        role = "expert" if reference == entry.reference else "reference"
        print(f"      --baselines: {reference} is the {role}, always evaluated once")
    chosen = tuple(b for b in chosen if b != reference)
    if reference != entry.reference and entry.reference not in chosen:
        chosen += (entry.reference,)  # the env's expert stays in the table
    if cfg.bc_expert not in (None, "none", reference, *chosen):
        chosen += (cfg.bc_expert,)  # the policy being cloned belongs in the table
    return chosen


# --------------------------------------------------------------------------------------------
# Evaluation on held-out seeds (through evaluate.py's code, so numbers match it exactly).
# --------------------------------------------------------------------------------------------


def eval_config(
    cfg: TrainConfig, policies: tuple[str, ...], seeds: tuple[int, ...] | None = None
) -> Any:
    """The ``evaluate.EvalConfig`` for ``policies`` on this run's env, on ``seeds`` (default:
    the held-out evaluation seeds)."""
    import evaluate
    from agents import eval_seeds

    opts = {
        name: getattr(cfg, name)
        for name in evaluate.ENV_FIELDS
        if hasattr(cfg, name) and getattr(cfg, name) is not None
    }
    reference = cfg.reference if cfg.reference in policies else None
    return evaluate.EvalConfig(
        env=cfg.env,
        workloads=(cfg.workload,),
        policies=policies,
        reference=reference,
        seeds=eval_seeds(cfg.eval_episodes) if seeds is None else seeds,
        quiet=True,
        **opts,
    )


def mean_metrics(rows: list[dict[str, Any]], policy: str, metrics: Sequence[Any]) -> dict:
    """Mean over seeds of each metric (``evaluate.Metric``) of ``policy``; a run that did not
    report one counts as the worst value in the metric's direction."""
    out = {}
    for m in metrics:
        worst = math.inf if m.better == "lower" else -math.inf
        vals = [r["metrics"].get(m.key) for r in rows if r["policy"] == policy]
        out[m.key] = float(np.mean([worst if v is None else v for v in vals]))
    return out


def evaluate_model(model: Any, env: Any, seeds: tuple[int, ...], metrics: Sequence[Any]) -> dict:
    """Mean metrics of ``model`` (argmax actions) over ``seeds`` on ``env``."""
    import evaluate
    from agents import SB3Policy

    policy = SB3Policy(model, "current")
    rows = [{"policy": "current", **evaluate.run_episode(env, policy, s)} for s in seeds]
    return mean_metrics(rows, "current", metrics)


def latest_checkpoint(out: Path) -> Path | None:
    """The checkpoint with the most steps in ``out/checkpoints`` (SB3 ``*_<N>_steps.zip``)."""
    ckpts = sorted(
        (out / "checkpoints").glob("*_steps.zip"), key=lambda p: int(p.stem.split("_")[-2])
    )
    return ckpts[-1] if ckpts else None


# --------------------------------------------------------------------------------------------
# Main path
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status.

    Every option is checked (policies resolved on a built env) before anything is written to
    ``--out``; if the run then fails before its first model is saved, a run directory this call
    created is removed again, so a retry is not blocked by a half-written run.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    import evaluate

    try:
        cfg = parse_args(argv)
        check_run(cfg)
        out = Path(cfg.out)
        if (out / "config.json").exists() and not cfg.resume:
            raise TrainError(
                f"{out} already holds a run; pass --resume to continue it or choose another --out"
            )
    except (TrainError, evaluate.EvaluationError) as exc:
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 2
    created = not out.exists()
    try:
        return train(cfg, argv)
    except BaseException as exc:
        _abandon(out, created)
        if isinstance(exc, (TrainError, evaluate.EvaluationError)):
            print(f"train.py: error: {exc}", file=sys.stderr)
            return 2
        raise


def _abandon(out: Path, created: bool) -> None:
    """After a failed run: finish the W&B run and remove ``out`` if this call created it and
    no model was saved in it yet."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish(exit_code=1)
    saved = any((out / name).exists() for name in ("bc_model.zip", "model.zip", "checkpoints"))
    if created and out.is_dir() and not saved:
        shutil.rmtree(out, ignore_errors=True)
        print(f"train.py: removed the unfinished run directory {out}", file=sys.stderr)


def train(cfg: TrainConfig, argv: Sequence[str]) -> int:  # noqa: C901  (reads top to bottom)
    """The run itself, on a checked and resolved ``cfg`` (see :func:`main`)."""
    import torch
    from stable_baselines3.common.callbacks import CheckpointCallback
    from stable_baselines3.common.utils import set_random_seed

    import evaluate
    from agents import (
        algo_spec,
        bc_train,
        build_model,
        collect,
        env_kwargs,
        eval_seeds,
        load_model,
        make_env,
        make_vec_env,
        train_env_spec,
        validation_seeds,
    )
    from agents.callbacks import (
        EpisodeMetricsCallback,
        PeriodicEvalCallback,
        TimedVecEnv,
        TimingCallback,
        TqdmCallback,
        WandbWriter,
    )
    from agents.envs import EVAL_SEED_BASE
    from agents.wandb_utils import init_run, log_comparison, log_model_artifact

    start = time.perf_counter()
    torch.set_num_threads(cfg.torch_threads)
    set_random_seed(cfg.seed)
    spec = train_env_spec(cfg.env)
    algo = algo_spec(cfg.algo)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python train.py " + " ".join(argv)
    (out / "config.json").write_text(json.dumps({**asdict(cfg), "command": command}, indent=1))
    entry = evaluate.env_entry(cfg.env)
    reference = cfg.reference or entry.reference
    baselines = baselines_of(cfg)
    metrics = entry.headline
    keys = tuple(m.key for m in metrics)
    kwargs = env_kwargs(spec, asdict(cfg))
    if not algo.masked:
        kwargs["invalid_action"] = "penalize"
    seeds = eval_seeds(cfg.eval_episodes)
    run = init_run(
        cfg.wandb,
        out,
        {**asdict(cfg), "command": command},
        name=out.name,
        project=cfg.wandb_project,
    )
    report: dict[str, Any] = {"config": asdict(cfg), "eval_seeds": list(seeds), "command": command}
    # the MDP trained and evaluated, by its name and keyword arguments: gym.make(id, **kwargs)
    report["env"] = {"id": spec.gym_id, "kwargs": dict(kwargs)}
    print(f"      env: gym.make({spec.gym_id!r}, **{kwargs!r})")

    # 2. Reference numbers: expert and baselines on the held-out seeds.
    print(f"[1/4] reference: {reference} and {', '.join(baselines)} on seeds {list(seeds)}")
    ref_rows = evaluate.evaluate(eval_config(cfg, (*baselines, reference)))
    references = {p: mean_metrics(ref_rows, p, metrics) for p in (*baselines, reference)}
    best = evaluate.best_baseline(ref_rows, cfg.workload, reference)
    report["references"] = references
    report["best_baseline"] = best
    for name, vals in references.items():
        print(f"      {name:>16}: " + "  ".join(f"{k} {v:.3f}" for k, v in vals.items()))
        for k, v in vals.items():
            run.summary[f"reference/{name}/{k}"] = v
    # Reference lines for the learning curves: the expert and the best baseline on the
    # validation seeds, the same seeds the model is evaluated on during training.
    val_seeds = validation_seeds(cfg.val_episodes or cfg.eval_episodes)
    report["validation_seeds"] = list(val_seeds)
    val_policies = (reference,) if best is None else (reference, best)
    val_rows = evaluate.evaluate(eval_config(cfg, val_policies, val_seeds))
    ref_lines = {reference: mean_metrics(val_rows, reference, metrics)}
    if best is not None:
        ref_lines["best_baseline"] = mean_metrics(val_rows, best, metrics)
    report["validation_references"] = ref_lines

    eval_env = make_env(spec, kwargs)
    vec = "ray" if cfg.ray is not None else cfg.vec
    vec_env = TimedVecEnv(
        make_vec_env(
            cfg.env, kwargs, cfg.n_envs, cfg.seed, vec, ray_address=cfg.ray,
            randomize=cfg.randomize or None,
        )  # fmt: skip
    )
    ckpt = latest_checkpoint(out) if cfg.resume else None
    hp = {**cfg.hyperparams}
    if cfg.resume and ckpt is None and (out / "bc_model.zip").exists():
        ckpt = out / "bc_model.zip"
    if ckpt is not None:
        print(f"      resuming from {ckpt}")
        model = load_model(str(ckpt))
        model.set_env(vec_env)
    else:
        model = build_model(
            cfg.algo,
            vec_env,
            spec,
            seed=cfg.seed,
            hyperparams=hp,
            extractor_kwargs={"hidden": cfg.hidden},
        )

    # 3. Behaviour cloning (+ DAgger) from the expert.
    if cfg.bc_expert != "none" and ckpt is None and cfg.bc_episodes > 0:
        from envs.sim.progress import progress

        print(f"[2/4] behaviour cloning from {cfg.bc_expert}: {cfg.bc_episodes} episodes")
        if not cfg.quiet:
            print(
                "      (CE: cross-entropy of the expert's actions under the clone; value MSE: "
                "squared error of the critic, fitted alongside to the expert's discounted "
                "returns so that RL starts with a trained critic; acc: share of the expert's "
                "actions the clone ranks first)"
            )
        bc_env = make_env(spec, kwargs, randomize=cfg.randomize or None, randomize_seed=cfg.seed)
        seed_rng = np.random.default_rng(cfg.seed + 12345)
        train_seeds = [int(s) for s in seed_rng.integers(0, EVAL_SEED_BASE, cfg.bc_episodes)]
        expert = functools.partial(evaluate.resolve_policy, cfg.bc_expert, bc_env, cfg.env)
        gamma = float(getattr(model, "gamma", 0.99))
        t0 = time.perf_counter()
        with progress(desc="collect", unit="step", disable=cfg.quiet, file=sys.stderr) as bar:
            demos = collect(bc_env, expert, train_seeds, gamma, progress=bar.update)
        collect_s = time.perf_counter() - t0
        epoch_offset = 0

        def log_epoch(rec: Any) -> None:
            run.log(
                {
                    "bc/epoch": epoch_offset + rec.epoch,
                    "bc/loss": rec.loss,
                    "bc/policy_loss": rec.policy_loss,
                    "bc/value_loss": rec.value_loss,
                    "bc/accuracy": rec.accuracy,
                    "bc/samples": len(demos),
                }
            )
            if not cfg.quiet:
                print(
                    f"      epoch {epoch_offset + rec.epoch:3d}  loss {rec.loss:.4f}  "
                    f"CE {rec.policy_loss:.4f}  value MSE {rec.value_loss:.4f}  "
                    f"acc {rec.accuracy:.3f}"
                )

        t0 = time.perf_counter()
        history = [
            asdict(r)
            for r in bc_train(
                model.policy,
                demos,
                cfg.bc_epochs,
                cfg.bc_batch_size,
                cfg.bc_lr,
                seed=cfg.seed,
                on_epoch=log_epoch,
            )
        ]
        dagger_rng = np.random.default_rng(cfg.seed + 777)
        for rnd in range(cfg.dagger_rounds):
            epoch_offset += cfg.bc_epochs
            rseeds = [int(s) for s in seed_rng.integers(0, EVAL_SEED_BASE, cfg.dagger_episodes)]
            print(
                f"      DAgger round {rnd + 1}: {cfg.dagger_episodes} episodes, "
                f"beta {cfg.dagger_beta}"
            )
            demos = demos + collect(
                bc_env,
                expert,
                rseeds,
                gamma,
                learner=model.policy,
                beta=cfg.dagger_beta,
                rng=dagger_rng,
            )
            history += [
                asdict(r)
                for r in bc_train(
                    model.policy,
                    demos,
                    cfg.bc_epochs,
                    cfg.bc_batch_size,
                    cfg.bc_lr,
                    seed=cfg.seed + rnd + 1,
                    on_epoch=log_epoch,
                )
            ]
        bc_s = time.perf_counter() - t0
        model.save(out / "bc_model.zip")
        bc_metrics = evaluate_model(model, eval_env, val_seeds, metrics)
        if cfg.bc_expert in ref_lines:
            teacher = ref_lines[cfg.bc_expert]
        else:
            teacher_rows = evaluate.evaluate(eval_config(cfg, (cfg.bc_expert,), val_seeds))
            teacher = mean_metrics(teacher_rows, cfg.bc_expert, metrics)
        for label, vals in (("BC clone", bc_metrics), (f"teacher {cfg.bc_expert}", teacher)):
            print(
                f"      {label + ' (validation seeds)':>36}: "
                + "  ".join(f"{k} {v:.3f}" for k, v in vals.items())
            )
        report["bc"] = {
            "samples": len(demos),
            "train_seeds": train_seeds,
            "collect_seconds": collect_s,
            "train_seconds": bc_s,
            "history": history,
            "eval": bc_metrics,
            "teacher_eval": teacher,
            "expert_episodes": demos.episodes[: cfg.bc_episodes],
        }
        for k, v in bc_metrics.items():
            run.summary[f"bc/eval_{k}"] = v
        bc_env.close()

    # 4. RL fine-tuning.
    from stable_baselines3.common.logger import HumanOutputFormat, Logger

    writers: list[Any] = [WandbWriter(run)]
    if not cfg.quiet:
        writers.append(HumanOutputFormat(str(out / "progress.txt")))
    model.set_logger(Logger(folder=str(out), output_formats=writers))
    remaining = max(0, cfg.timesteps - (model.num_timesteps if ckpt is not None else 0))
    timing = TimingCallback(vec_env)
    evaluator = PeriodicEvalCallback(
        lambda m: evaluate_model(m, eval_env, val_seeds, metrics),
        every=cfg.eval_every,
        select=entry.select,
        better=entry.select_metric.better,
        references=ref_lines,
        best_path=out / "best_model.zip",
        history_path=out / "eval_history.json",
    )
    if remaining > 0:
        where = f"Ray ({cfg.ray})" if cfg.ray is not None else cfg.vec
        print(f"[3/4] {cfg.algo}: {remaining} env steps on {cfg.n_envs} {where} envs")
        callbacks = [
            TqdmCallback(remaining, disable=cfg.quiet),
            EpisodeMetricsCallback(keys),
            timing,
            evaluator,
            CheckpointCallback(max(1, cfg.ckpt_every // cfg.n_envs), str(out / "checkpoints")),
        ]
        model.learn(
            remaining, callback=callbacks, reset_num_timesteps=ckpt is None, progress_bar=False
        )
        t = timing.summary()
        # Interval evaluations run inside rollouts; split them out of the rollout time.
        t["eval_s"] = sum(h["eval_seconds"] for h in evaluator.history)
        in_rollout = sum(h["eval_seconds"] for h in evaluator.history if h["trigger"] == "interval")
        # A difference of separately timed spans: clamp the timer jitter that can make it < 0.
        t["inference_s"] = max(0.0, t["rollout_s"] - in_rollout - t["env_s"])
        t["train_wall_s"] = t["wall_s"] - t["eval_s"]
        t["env_share"] = t["env_s"] / t["train_wall_s"]
        t["learner_share"] = (t["inference_s"] + t["update_s"]) / t["train_wall_s"]
        t["env_steps_per_s"] = t["env_steps"] / t["train_wall_s"]
        report["timing"] = t
        report["history"] = evaluator.history
    model.save(out / "model.zip")
    vec_env.close()
    eval_env.close()

    # 5. Final comparison, through evaluate.py (identical numbers to `evaluate.py --policies`).
    print(f"[4/4] final comparison on held-out seeds {list(seeds)}")
    learned = learned_rows(out, evaluator.history, with_bc=remaining > 0)
    policies = (*learned,)
    rows = ref_rows + evaluate.evaluate(eval_config(cfg, policies))
    ecfg = eval_config(cfg, (*baselines, reference, *policies))
    regen = evaluate.command_for(ecfg)
    table = evaluate.format_table(rows, reference=reference, command=regen)
    pngs = evaluate.plot_attainment(rows, out, reference)
    (out / "table.txt").write_text(table + "\n")
    report["final"] = {
        p: mean_metrics(rows, p, metrics) for p in _unique(r["policy"] for r in rows)
    }
    report["table"] = table
    report["rows"] = [{k: v for k, v in r.items() if not isinstance(v, list)} for r in rows]
    report["wall_seconds"] = time.perf_counter() - start
    (out / "eval.json").write_text(json.dumps(evaluate.json_safe(report), indent=1))
    log_comparison(run, rows, table, pngs, metrics=keys)
    final = report["final"][learned[-1]]
    log_model_artifact(run, out / "model.zip", f"{out.name}-model", final)
    run.finish()
    print(table)
    if "bc" in report:
        clone = report["final"].get(f"ckpt:{out / 'bc_model.zip'}", report["final"][learned[0]])
        teacher = report["final"].get(cfg.bc_expert)
        if teacher is not None:
            print(
                f"clone vs teacher {cfg.bc_expert} (held-out seeds): "
                + "  ".join(f"{k} {clone[k]:.3f} vs {teacher[k]:.3f}" for k in keys)
            )
    if "timing" in report:
        t = report["timing"]
        print(
            f"RL: {t['env_steps']} steps in {t['train_wall_s']:.0f} s without evaluation "
            f"({t['env_steps_per_s']:.0f} steps/s): env {t['env_share']:.0%}, learner "
            f"{t['learner_share']:.0%} (inference {t['inference_s']:.0f} s, updates "
            f"{t['update_s']:.0f} s); evaluation {t['eval_s']:.0f} s"
        )
    print(
        f"wrote {out}/{{model.zip, config.json, eval.json, table.txt}} in "
        f"{report['wall_seconds']:.0f} s"
    )
    return 0


def learned_rows(out: Path, history: list[dict[str, Any]], with_bc: bool) -> list[str]:
    """The checkpoints of the final table, in order: ``bc_model.zip`` (when it exists and RL
    followed), ``best_model.zip`` (when an earlier validation evaluation beat the last one, so it
    is not the final model), ``model.zip`` (always last).

    :param out: the run directory.
    :param history: the evaluations during RL (``PeriodicEvalCallback.history``).
    :param with_bc: RL ran after behaviour cloning.
    """
    rows = [f"ckpt:{out / 'model.zip'}"]
    if history and "saved_best" not in history[-1] and (out / "best_model.zip").exists():
        rows.insert(0, f"ckpt:{out / 'best_model.zip'}")
    if with_bc and (out / "bc_model.zip").exists():
        rows.insert(0, f"ckpt:{out / 'bc_model.zip'}")
    return rows


def _unique(values: Any) -> list[Any]:
    return list(dict.fromkeys(values))


if __name__ == "__main__":
    sys.exit(main())
