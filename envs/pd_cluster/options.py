"""The options of :class:`envs.pd_cluster.env.PDClusterEnv` (``servegym/PDCluster-v0``): one
field per constructor argument, its meaning and its check (:class:`PDClusterOptions`), and
``reset``'s per-episode ``options``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.common.options import (
    EnvOptions,
    check_bool,
    check_choice,
    check_number,
    check_predictor,
    check_str,
    check_trace,
    check_workload,
)
from envs.pd_cluster.actions import check_action_space
from envs.pd_cluster.workloads import PAPER_WORKLOADS
from envs.sim import ClusterSpec
from envs.sim.core.simulation import TOOL_ESTIMATES

#: The workflow generators PDCluster-v0 serves: HexAgent §7.1's and prompt-reusing agent chains.
WORKLOADS = (*PAPER_WORKLOADS, "agent_chain")


def episode_observations(
    options: dict[str, Any] | None, default: bool, known: tuple[str, ...]
) -> bool:
    """Whether an episode builds observations: ``options["observations"]`` if given, else the
    constructor's ``default``.

    :param options: ``reset``'s ``options`` (None or {}: the defaults).
    :param known: the option keys the env takes; any other key is an error.
    :raises ValueError: an unknown key, or ``observations`` not a bool.
    """
    if not options:
        return default
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"unknown reset option(s) {unknown}; PDCluster-v0 takes {list(known)}")
    value = options.get("observations", default)
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"reset option observations must be True or False, got {value!r}")
    return bool(value)


def prefix_cache_blocks(prefix_cache: Any) -> int | str:
    """The simulation's ``prefix_cache_blocks`` for :class:`PDClusterEnv`'s ``prefix_cache``:
    False -> 0 (off), True or ``"kv"`` -> ``"kv"``, an integer >= 0 -> that many blocks."""
    if prefix_cache is True or prefix_cache == "kv":
        return "kv"
    if prefix_cache is False or prefix_cache is None:
        return 0
    if isinstance(prefix_cache, (int, np.integer)) and prefix_cache >= 0:
        return int(prefix_cache)
    raise ValueError(
        f"prefix_cache must be False, True, 'kv' or a number of blocks >= 0, got {prefix_cache!r}"
    )


def check_planning_delay(delay: Any, scale: Any) -> tuple[float | str | None, float]:
    """Validated ``(planning_delay, planning_delay_scale)`` of :class:`PDClusterEnv`; a delay
    of 0 is None (the blocking default)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"planning_delay_scale must be a number > 0, got {scale!r}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"planning_delay_scale must be a finite number > 0, got {scale!r}")
    if delay is None or isinstance(delay, str):
        if delay not in (None, "measured"):
            raise ValueError(
                f"planning_delay must be None, a number of seconds >= 0 or 'measured', got "
                f"{delay!r}"
            )
    elif isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise ValueError(
            f"planning_delay must be None, a number of seconds >= 0 or 'measured', got {delay!r}"
        )
    elif not (math.isfinite(delay) and delay >= 0):
        raise ValueError(f"planning_delay must be a finite number of seconds >= 0, got {delay!r}")
    else:
        delay = float(delay) if delay > 0 else None
    if scale != 1.0 and delay != "measured":
        raise ValueError(
            f"planning_delay_scale={scale!r} scales measured planning time; it needs "
            f"planning_delay='measured' (got planning_delay={delay!r})"
        )
    return delay, float(scale)


@dataclass(frozen=True)
class PDClusterOptions(EnvOptions):
    """Everything a :class:`~envs.pd_cluster.env.PDClusterEnv` is built from (HexAgent's setup
    by default)."""

    cluster: str | ClusterSpec = "hetero-1"
    """Preset name or YAML path (``hetero-1``, ``hetero-2``, ``homo-h200-4p4d``,
    ``homo-a100-4p4d``) or a prefill-decode ``ClusterSpec``."""

    model: str | None = None
    """``llama3.1-70b`` or ``qwen3-235b-a22b`` (HexAgent §7.1); None: ``llama3.1-70b``. With a
    ``trace``, a model given here also serves every call of the trace."""

    workload: str = "mixed"
    """Generator name (``sharegpt``, ``bfcl``, ``lats``, ``mixed``: HexAgent §7.1;
    ``agent_chain``: prompt-reusing agent chains with ``prefix_hashes``); any other
    ``traces.generators`` name works too."""

    trace: str | Sequence[Any] | None = None
    """A servegym JSONL workflow trace, or a list of records, instead of a generator
    (``workload_count`` keeps its first records, ``load_scale`` divides its arrival times)."""

    workload_count: int | None = None
    """Workflows per episode (None: the paper's, HexAgent §7.1)."""

    workload_rate: float | None = None
    """Arrival rate in workflows/s (None: the paper's)."""

    load_scale: float = 1.0
    """Multiplies the arrival rate, > 0 (1.0 = the paper's)."""

    slots: int = 256
    """K, waiting calls re-planned per invocation. 256 covers the queues of the paper presets,
    so an invocation re-plans every waiting call as HexAgent's does (§5.2); with a small K the
    calls beyond it keep stale plans and every policy degrades toward FCFS (at K=16 HexAgent no
    longer beats ATLAS on bfcl)."""

    reward: str = "slowdown"
    """``slowdown`` (−(C_w/H_w)^p / N per finished workflow), ``lateness`` or ``req99``
    (``envs.common.rewards``); ``reward_kwargs`` holds its options."""

    estimate_error: float = 0.0
    """Multiplicative error e in [0, 1) on scheduler-visible estimates (HexAgent §7.6)."""

    output_predictor: str = "oracle"
    """``oracle`` (truth × ``estimate_error``) or any name in
    ``envs.common.predictors.PREDICTORS`` (``task-mean``, ``history``, ``mlp``, ``moe``,
    ``oracle-error``). The learned ones are trained on the GoodServe request mix's synthetic
    prompts; HexAgent's workloads carry no prompt text, so they predict from length and task."""

    tool_estimate: str = "history"
    """What H_w(t) charges a revealed tool that has not returned yet: ``history`` (the mean
    measured latency of earlier finished tools of its name) or ``oracle`` (its true latency,
    unknowable before it returns)."""

    prefix_cache: bool | int | str = False
    """An LRU prefix cache on every prefill instance (SGLang's RadixAttention at block
    granularity): False (none, every prompt is computed in full), True or ``"kv"`` (as many
    512-token blocks as the instance's KV capacity holds) or a number of blocks. A hit computes
    only the uncached tokens. Needs a workload with ``prefix_hashes`` (e.g. ``agent_chain``).
    Standalone horizons H_w are simulated without it."""

    prefix_cache_visible: bool = True
    """With a ``prefix_cache``, schedulers see it: R and Δ price each prefill on p's uncached
    tokens. False: the cache still works, but the context prices every prompt in full (a
    cache-blind scheduler, for ablations)."""

    planning_delay: float | str | None = None
    """How long a plan takes to land (HexAgent §4.3 asynchronous planning, §5.2, Algorithm 1
    lines 5–7 and 23). None or 0: instantaneous, the simulator waits for every plan. A number:
    seconds of simulated time per plan; meanwhile serving goes on and new calls follow the
    fallback plan. ``"measured"``: each plan takes the wall time its invocation took, times
    ``planning_delay_scale`` (non-deterministic: for reporting a policy's cost, not for
    training or pinned comparisons)."""

    planning_delay_scale: float = 1.0
    """Multiplies the measured wall time of ``planning_delay="measured"``, > 0."""

    observations: bool = True
    """Build the observation. False: every step returns a read-only all-zero observation and
    the env skips the work only the observation needs, for policies that act on
    ``info["decision_context"]`` alone (the experts and baselines); never for a learned
    policy."""

    action_space: str = "flat"
    """``flat`` (one ``Discrete(K · P · D)`` step per pick; PDCluster-v0) or ``two-step`` (a slot
    step, with a keep action that ends the invocation, then a pair step at the prefill stage;
    PDCluster-v1). :mod:`envs.pd_cluster.actions` defines both."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.cluster, ClusterSpec):
            check_str("cluster", self.cluster)
        check_str("model", self.model, none=True)
        check_trace("trace", self.trace)
        check_workload("workload", self.workload, self.trace, WORKLOADS, "PDCluster-v0")
        check_number("workload_count", self.workload_count, 1, integer=True, none=True)
        check_number(
            "workload_rate", self.workload_rate, 0, above=True, none=True, unit="workflows/s"
        )
        check_number("load_scale", self.load_scale, 0, above=True)
        check_number("slots", self.slots, 1, integer=True)
        check_number("estimate_error", self.estimate_error, 0)
        if not self.estimate_error < 1:
            raise ValueError(f"estimate_error must be in [0, 1), got {self.estimate_error!r}")
        check_predictor("output_predictor", self.output_predictor)
        check_choice("tool_estimate", self.tool_estimate, TOOL_ESTIMATES)
        prefix_cache_blocks(self.prefix_cache)
        check_bool("prefix_cache_visible", self.prefix_cache_visible)
        check_planning_delay(self.planning_delay, self.planning_delay_scale)
        check_bool("observations", self.observations)
        check_action_space(self.action_space)
