"""What a :class:`~envs.sim.core.simulation.Simulation` checks before it starts: its options
(:func:`checked_options`) and its workload (:func:`workflow_runs`), each bad value raising an error
that names it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from envs.sim.core.protocol import KV_POLICIES, MIGRATION_MODES, PREFILL_MODES, TOOL_ESTIMATES
from envs.sim.core.workflows import WorkflowRun, WorkloadError, as_workflow
from envs.sim.engines.presets import EnginePreset, get_engine
from envs.sim.hardware.catalog import get_model
from envs.sim.hardware.cluster import ClusterSpec
from traces.schema import LLMNode, Request, Workflow

#: What a simulation keeps of a finished workflow (``Simulation(record_store=...)``).
RECORD_STORES = ("objects", "compact", "disk")


def checked_options(
    cluster: ClusterSpec,
    *,
    estimate_error: float,
    engine: str | EnginePreset | None,
    prefill_mode: str | None,
    kv_policy: str | None,
    token_budget: int | None,
    check_interval: int | None,
    migration: str,
    tool_estimate: str,
    record_store: str,
    prefix_block_tokens: int,
) -> tuple[EnginePreset | None, str, str]:
    """Check :class:`~envs.sim.core.simulation.Simulation`'s options (a bad one raises, naming it
    and its value); return the engine preset and the prefill mode and KV policy it resolves (see
    the simulation's :param list)."""
    if cluster.architecture == "pool":
        raise WorkloadError(
            f"cluster {cluster.name!r} is a GPU pool with no instances; allocate instances "
            "first (servegym/Allocation-v0 does this)"
        )
    if not 0.0 <= estimate_error < 1.0:
        raise ValueError(f"estimate_error must be in [0, 1), got {estimate_error}")
    preset = None if engine is None else get_engine(engine)
    if prefill_mode is None:
        prefill_mode = "prefill-first" if preset is None else preset.scheduling
    if kv_policy is None:
        kv_policy = "reserve" if preset is None else preset.kv_policy
    if prefill_mode not in PREFILL_MODES:
        raise ValueError(f"prefill_mode must be one of {PREFILL_MODES}, got {prefill_mode!r}")
    if kv_policy not in KV_POLICIES:
        raise ValueError(f"kv_policy must be one of {KV_POLICIES}, got {kv_policy!r}")
    if token_budget is not None and (
        isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 1
    ):
        raise ValueError(f"token_budget must be an integer >= 1 token, got {token_budget!r}")
    if check_interval is not None and (
        isinstance(check_interval, bool)
        or not isinstance(check_interval, int)
        or check_interval < 1
    ):
        raise ValueError(
            f"check_interval must be None or an integer >= 1 decode iterations, got "
            f"{check_interval!r}"
        )
    if migration not in MIGRATION_MODES:
        raise ValueError(f"migration must be one of {MIGRATION_MODES}, got {migration!r}")
    if tool_estimate not in TOOL_ESTIMATES:
        raise ValueError(f"tool_estimate must be one of {TOOL_ESTIMATES}, got {tool_estimate!r}")
    if record_store not in RECORD_STORES:
        raise ValueError(f"record_store must be one of {RECORD_STORES}, got {record_store!r}")
    if isinstance(prefix_block_tokens, bool) or not isinstance(prefix_block_tokens, int):
        raise ValueError(f"prefix_block_tokens must be an integer, got {prefix_block_tokens!r}")
    if prefix_block_tokens < 1:
        raise ValueError(f"prefix_block_tokens must be >= 1, got {prefix_block_tokens}")
    return preset, prefill_mode, kv_policy


def workflow_runs(
    workload: Sequence[Workflow | Request],
    cluster: ClusterSpec,
    served_models: set[str],
    largest_kv: dict[str, int],
) -> list[WorkflowRun]:
    """One :class:`WorkflowRun` per record of ``workload``, checked: sorted by arrival, arrivals
    finite and >= 0, every LLM node's model served, within its context window and within the KV
    of the largest instance that would decode it (``largest_kv``)."""
    context = {m: get_model(m).max_context_tokens for m in served_models}
    runs: list[WorkflowRun] = []
    last = -math.inf
    for i, rec in enumerate(workload):
        wf = as_workflow(rec)
        if not wf.arrival >= last:
            raise WorkloadError(
                f"workload not sorted by arrival: record {i} ({wf.id!r}) arrives at "
                f"{wf.arrival} s, before the previous record's {last} s"
            )
        if not math.isfinite(wf.arrival) or wf.arrival < 0:
            raise WorkloadError(f"record {i} ({wf.id!r}) has arrival {wf.arrival}; need >= 0")
        last = wf.arrival
        run = WorkflowRun(wf, i)
        for node in wf.nodes:
            if not isinstance(node, LLMNode):
                continue
            if node.model not in served_models:
                raise WorkloadError(
                    f"workflow {wf.id!r} node {node.id!r} needs model {node.model!r}, but "
                    f"cluster {cluster.name!r} serves {sorted(served_models)}"
                )
            need = node.input_tokens + node.output_tokens
            window = context[node.model]
            if need > window:  # vLLM refuses such a request (max_model_len)
                raise WorkloadError(
                    f"record {i} (workflow {wf.id!r}) node {node.id!r} is {need} tokens long "
                    f"(input_tokens {node.input_tokens} + output_tokens "
                    f"{node.output_tokens}), beyond {node.model!r}'s context window of "
                    f"{window} tokens"
                )
            if need > largest_kv[node.model]:
                raise WorkloadError(
                    f"record {i} (workflow {wf.id!r}) node {node.id!r} holds {need} KV "
                    f"tokens (input_tokens {node.input_tokens} + output_tokens "
                    f"{node.output_tokens}), more than any instance of cluster "
                    f"{cluster.name!r} serving {node.model!r} holds "
                    f"({largest_kv[node.model]} tokens)"
                )
        runs.append(run)
    return runs
