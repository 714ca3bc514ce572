"""One options dataclass per env: the single place where each constructor argument is declared,
documented and checked.

An env's options are a dataclass (``RoutingOptions``, ...) deriving from :class:`EnvOptions`,
with a docstring under every field (CleanRL's ``Args`` style)::

    slo_scale: float = 2.0
    \"\"\"SLO = scale × run-alone latency on ``slo_reference_gpu`` (GoodServe §4).\"\"\"

``__post_init__`` checks every value and names the option, the value and what is allowed, so a
bad option fails when the env is built, not at ``reset``. From the dataclass this module
generates the rest:

* the env constructor's keywords (:func:`takes_options`: ``Env(options=...)`` or
  ``Env(slo_scale=3.0)``, and ``inspect.signature(Env)`` lists the fields);
* the env class docstring's **Arguments** table (:func:`arguments_table`, Markdown: name, type,
  default, meaning), which the documentation generator reads;
* the help of the command-line options (:func:`option_docs`, read by :mod:`evaluation` and
  :mod:`training`).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import numbers
import os
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from envs.common.base import INVALID_ACTIONS, did_you_mean

#: Render modes every servegym env supports (``ServegymEnv.metadata``).
RENDER_MODES = ("ansi", "rgb_array")

Opts = TypeVar("Opts", bound="EnvOptions")
E = TypeVar("E", bound=type)


def _field_docstrings(cls: type) -> dict[str, str]:
    """The attribute docstrings (a string literal right below a field) of ``cls`` itself."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (an interactive class): no docs
        return {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    docs: dict[str, str] = {}
    for node, after in zip(body.body, body.body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


#: option_docs's results by options class (the docstrings are parsed from source once).
_DOCS: dict[type, dict[str, str]] = {}


def option_docs(cls: type[EnvOptions]) -> dict[str, str]:
    """Each field of the options dataclass ``cls`` -> its docstring (inherited fields too).

    :raises TypeError: if a field has no docstring (every option must say what it means).
    """
    if cls not in _DOCS:
        _DOCS[cls] = _collect_docs(cls)
    return dict(_DOCS[cls])


def _collect_docs(cls: type[EnvOptions]) -> dict[str, str]:
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_field_docstrings(klass))
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in docs]
    if missing:
        raise TypeError(f"{cls.__name__}: options without a docstring: {missing}")
    return {f.name: docs[f.name] for f in dataclasses.fields(cls)}


def option_fields(cls: type[EnvOptions]) -> list[dataclasses.Field[Any]]:
    """The fields of ``cls`` in reading order: its own first, then those every env shares."""
    shared = {f.name for f in dataclasses.fields(EnvOptions)}
    every = dataclasses.fields(cls)
    return [f for f in every if f.name not in shared] + [f for f in every if f.name in shared]


def option_defaults(cls: type[EnvOptions]) -> dict[str, Any]:
    """Each option of ``cls`` -> its default."""
    return {f.name: f.default for f in dataclasses.fields(cls)}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def arguments_table(cls: type[EnvOptions]) -> str:
    """The Markdown **Arguments** table of the options dataclass ``cls``: one row per option
    with its name, type, default and meaning (the field's docstring)."""
    docs = option_docs(cls)
    rows = [
        "| argument | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for f in option_fields(cls):
        rows.append(
            f"| `{f.name}` | `{_cell(str(f.type))}` | `{_cell(repr(f.default))}` "
            f"| {_cell(docs[f.name])} |"
        )
    return "\n".join(rows)


#: Where an env class docstring's generated Arguments table goes (else it is appended).
ARGUMENTS_MARK = "<!-- arguments-table -->"


def takes_options(options_cls: type[EnvOptions]) -> Callable[[E], E]:
    """Class decorator of an env whose ``__init__(self, options=None, **kwargs)`` builds its
    options with :meth:`EnvOptions.build`: records ``options_cls`` as the env's ``OPTIONS``,
    puts the generated **Arguments** table where the docstring has :data:`ARGUMENTS_MARK` (else
    appends an Arguments section) and gives ``__init__``
    the signature of the options (``options=`` and one keyword per field, with its default)."""

    def decorate(env_cls: E) -> E:
        env_cls.OPTIONS = options_cls  # type: ignore[attr-defined]
        doc = inspect.cleandoc(env_cls.__doc__ or "")
        table = arguments_table(options_cls)
        if ARGUMENTS_MARK in doc:  # the docstring says where its Arguments table goes
            env_cls.__doc__ = doc.replace(ARGUMENTS_MARK, table) + "\n"
        else:
            env_cls.__doc__ = f"{doc}\n\n## Arguments\n\n{table}\n"
        params = [
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter(
                "options",
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=None,
                annotation=f"{options_cls.__name__} | None",
            ),
        ]
        params += [
            inspect.Parameter(
                f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type
            )
            for f in option_fields(options_cls)
        ]
        init = env_cls.__init__  # type: ignore[misc]
        init.__signature__ = inspect.Signature(params, return_annotation=None)
        return env_cls

    return decorate


# -- checks ------------------------------------------------------------------------------------
def is_int(value: Any) -> bool:
    """A Python or numpy integer, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """A finite real number (Python or numpy), not a bool."""
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, (bool, np.bool_))
        and math.isfinite(float(value))
    )


def check_choice(name: str, value: Any, allowed: Iterable[Any], none: bool = False) -> None:
    """:raises ValueError: unless ``value`` is one of ``allowed`` (or None with ``none``)."""
    allowed = tuple(allowed)
    if (none and value is None) or value in allowed:
        return
    shown = ", ".join(repr(a) for a in allowed) + (" or None" if none else "")
    raise ValueError(
        f"{name} must be one of {shown}, got {value!r}" + did_you_mean(str(value), allowed)
    )


def check_number(
    name: str,
    value: Any,
    low: float | None = None,
    *,
    above: bool = False,
    high: float | None = None,
    integer: bool = False,
    none: bool = False,
    unit: str = "",
) -> None:
    """:raises ValueError: unless ``value`` is a finite number (an integer with ``integer``)
    that is >= ``low`` (> with ``above``) and <= ``high``, or None with ``none``; the message
    names the option, the value and what it expects."""
    if none and value is None:
        return
    kind = "an integer" if integer else "a number"
    if unit:
        kind += f" of {unit}"
    if low is not None:
        kind += f" {'>' if above else '>='} {low:g}"
    if high is not None:
        kind += f" {'and ' if low is not None else ''}<= {high:g}"
    ok = is_int(value) if integer else is_number(value)
    if ok:
        v = float(value)
        ok = (low is None or (v > low if above else v >= low)) and (high is None or v <= high)
    if not ok:
        raise ValueError(f"{name} must be {kind}{' or None' if none else ''}, got {value!r}")


def check_bool(name: str, value: Any) -> None:
    """:raises ValueError: unless ``value`` is True or False."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def check_str(name: str, value: Any, none: bool = False) -> None:
    """:raises ValueError: unless ``value`` is a string (or None with ``none``)."""
    if not (isinstance(value, str) or (none and value is None)):
        raise ValueError(f"{name} must be a string{' or None' if none else ''}, got {value!r}")


def check_workload(
    name: str, value: Any, trace: Any, own: Iterable[str], env: str, takes_trace: bool = True
) -> None:
    """A workload generator name (:data:`traces.generators.GENERATORS`; any string when a
    ``trace`` replaces the generator).

    :param own: the generators the env is made for, named first in the error.
    :raises ValueError: naming the workload, the closest names, the env's and all generators.
    """
    if trace is not None:
        check_str(name, value)
        return
    from traces.generators import GENERATORS

    if value not in GENERATORS:
        raise ValueError(
            f"unknown {name} {value!r}{did_you_mean(str(value), GENERATORS)}; {env} is made for "
            f"{', '.join(own)}{' (or a trace=)' if takes_trace else ''}; every generator: "
            f"{', '.join(GENERATORS)}"
        )


def check_predictor(name: str, value: Any) -> None:
    """:raises ValueError: unless ``value`` names an output-length predictor
    (:data:`envs.common.predictors.PREDICTORS`)."""
    from envs.common.predictors import PREDICTORS

    if value not in PREDICTORS:
        raise ValueError(
            f"unknown {name} {value!r}{did_you_mean(str(value), PREDICTORS)}; known: "
            f"{sorted(PREDICTORS)}"
        )


def check_trace(name: str, value: Any) -> None:
    """:raises ValueError: unless ``value`` is None, a trace file path or a list of records."""
    if value is None or isinstance(value, (str, os.PathLike)):
        return
    if not isinstance(value, Sequence):
        raise ValueError(
            f"{name} must be a servegym JSONL trace path or a list of records, got {value!r}"
        )


@dataclass(frozen=True)
class EnvOptions:
    """The options every servegym env takes (its own options dataclass derives from this)."""

    reward: str = "goodput"
    """The per-step reward (:data:`envs.common.rewards.REWARDS`: ``goodput``, ``slowdown``,
    ``lateness``, ``req99``); ``reward_kwargs`` holds its options."""

    reward_kwargs: dict[str, Any] | None = None
    """Options of the reward (``slowdown``'s exponent ``p``, ``lateness``'s ``alpha``);
    None: its defaults."""

    invalid_action: str = "penalize"
    """What a masked action does: ``penalize`` (the fallback policy's action is taken instead,
    the step's reward is −``invalid_penalty`` and ``info["invalid_action"]`` is True) or
    ``raise`` (a ValueError)."""

    invalid_penalty: float = 1.0
    """The penalty (>= 0) subtracted from the reward of a step whose masked action was
    replaced (``invalid_action="penalize"``)."""

    max_steps: int | None = None
    """Truncate the episode after this many steps (None: run to completion)."""

    workload_seed: int | None = None
    """Fix the workload for every reset (None: the reset seed picks it)."""

    render_mode: str | None = None
    """``ansi`` (a text table) or ``rgb_array`` (a picture); None: no rendering."""

    decision_context: bool = True
    """Put the structured decision context the experts act on in every step's
    ``info["decision_context"]`` (the registered ids pass False: learners do not need it)."""

    latency_calibration: str | None = "roofline"
    """Per-op calibration variant of the simulated instances (one of
    :data:`envs.sim.latency.efficiency.CALIBRATION_VARIANTS`): ``roofline`` (HexAgent §4.2's
    roofline, which every ``-v0`` id's pinned results use) or ``smooth-roofline`` (the
    simulator's default, which the ``-v1`` ids use); None: the variant in force
    (``$SERVEGYM_LATENCY_CALIBRATION``, else the simulator's default)."""

    def __post_init__(self) -> None:
        from envs.common.rewards import REWARDS, make_reward

        check_str("reward", self.reward)
        if self.reward_kwargs is not None and not isinstance(self.reward_kwargs, dict):
            raise ValueError(
                f"reward_kwargs must be a dict of the reward's options or None, got "
                f"{self.reward_kwargs!r}"
            )
        if self.reward not in REWARDS:
            make_reward(self.reward, 1)  # "unknown reward ..., known: ..."
        try:
            make_reward(self.reward, 1, **(self.reward_kwargs or {}))
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"reward_kwargs {self.reward_kwargs!r} do not fit reward {self.reward!r}: {exc}"
            ) from None
        check_choice("invalid_action", self.invalid_action, INVALID_ACTIONS)
        check_number("invalid_penalty", self.invalid_penalty, 0)
        check_number("max_steps", self.max_steps, 1, integer=True, none=True)
        check_number("workload_seed", self.workload_seed, integer=True, none=True)
        check_choice("render_mode", self.render_mode, RENDER_MODES, none=True)
        check_bool("decision_context", self.decision_context)
        from envs.sim.latency.efficiency import CALIBRATION_VARIANTS

        check_choice(
            "latency_calibration", self.latency_calibration, CALIBRATION_VARIANTS, none=True
        )

    @classmethod
    def build(
        cls: type[Opts], options: Opts | None = None, kwargs: dict[str, Any] | None = None
    ) -> Opts:
        """The options of an env constructor called with ``options`` and/or keyword ``kwargs``
        (keywords override the fields of ``options``).

        :raises TypeError: for an unknown keyword (with the closest and all known options) or
            ``options`` not a ``cls``.
        """
        kwargs = dict(kwargs or {})
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise TypeError(
                f"unknown option(s) {unknown}{did_you_mean(unknown[0], names)}; "
                f"{cls.__name__} takes {', '.join(names)}"
            )
        if options is None:
            return cls(**kwargs)
        if not isinstance(options, cls):
            raise TypeError(
                f"options must be a {cls.__name__} (or pass the options as keywords), got "
                f"{type(options).__name__} {options!r}"
            )
        return dataclasses.replace(options, **kwargs) if kwargs else options
