"""The ``train.py`` command line: the argparse parser built from :class:`TrainConfig`'s fields
and docstring, and ``--help``'s per-env description.
"""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import asdict, fields

from envs.registry import family
from training.checks import check_config
from training.config import (
    ENV_OPTIONS,
    UNSET_SHOWN,
    TrainConfig,
    allowed_values,
    evaluate_fmt,
    load_config_file,
    option_docs,
    option_type,
    resolve,
)

#: What ``train.py --help`` says first (the first line of ``train.py``'s docstring).
DESCRIPTION = (
    "Train a scheduling policy on a servegym env: behaviour cloning from an expert, then RL."
)


def describe_train_envs() -> str:
    """``--help`` epilog: each trainable env family's defaults, expert, baselines, metrics."""
    import evaluation
    from agents import TRAIN_ENVS

    lines = ["trainable env families (unset options take these defaults):"]
    for name, spec in TRAIN_ENVS.items():
        entry = family(name)
        defaults = {**evaluation.env_defaults(name), **resolve(TrainConfig(env=name)).__dict__}
        opts = [
            f"--{o.replace('_', '-')} {evaluation.fmt_value(defaults.get(o))}"
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
                f"every policy: {', '.join(evaluation.heuristic_names('', name))}",
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
        description=DESCRIPTION,
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
            type=option_type(f.name),
            default=default,
            help=f"{help_text} (default: {shown})",
        )
    args = p.parse_args(argv)
    from envs import versioned_name

    try:
        # a gym id (servegym/Routing-v0) or a short name, recorded with its version
        # (``routing`` -> ``routing-v1``), so config.json says which version trained the model
        args.env = versioned_name(args.env)
    except ValueError:
        pass  # check_config names the trainable envs
    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig)})
    check_config(cfg)
    return resolve(cfg)
