"""ShareGPT conversational chains (HexAgent §7.1, after Autellix / Vicuna).

Each workflow is one conversation: a chain of T turns, each turn an LLM call whose input is the
whole history so far (earlier user turns and replies) plus the new user turn, and whose output
is the reply. Call t+1 is revealed when call t finishes.

Parameters come from ``traces/stats/sharegpt.yaml`` (fitted by :func:`traces.fit.fit_sharegpt`):

Target statistics (key in ``targets`` -- what it measures -- where it comes from):

* ``mean_turns`` -- turns (LLM calls) per workflow -- turn count implied by the etalon ShareGPT
  prefill (history before the last reply), see :func:`traces.fit.fit_sharegpt`.
* ``mean_output_tokens``, ``median_output_tokens`` -- reply tokens per call -- etalon ShareGPT
  ``num_decode_tokens`` (Llama-2 tokenizer).
* ``mean_user_tokens`` -- new user tokens per turn -- chars/4 of the 1,000 ShareGPT first-turn
  prompts (``sharegpt_mlenergy``).
* ``mean_last_turn_input_tokens`` -- input of the final call -- etalon ``num_prefill_tokens``.
* ``arrival_rate_per_s`` -- workflows/s -- HexAgent §7.1 (100 workflows at 10/s, Poisson).

The last-turn input is emergent: it is the sum of sampled turn lengths, and matches the etalon
prefill mean because the turn count was inferred from it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traces.generators._common import generate_family, sample_hist, sample_tokens
from traces.schema import LLMNode, Workflow


def build_workflow(
    rng: np.random.Generator, wid: str, arrival: float, model: str, stats: dict[str, Any]
) -> Workflow:
    """One conversational chain.

    :param rng: random generator.
    :param wid: workflow id.
    :param arrival: arrival time in seconds.
    :param model: catalog model name for every call.
    :param stats: the ``sharegpt`` stats mapping.
    """
    turns = int(sample_hist(rng, stats["turns"]["histogram"], 1)[0])
    user = sample_tokens(rng, stats["user_tokens"]["quantiles"], turns)
    reply = sample_tokens(rng, stats["reply_tokens"]["quantiles"], turns)
    nodes, history = [], 0
    for t in range(turns):
        nodes.append(
            LLMNode(
                id=f"turn{t}",
                model=model,
                input_tokens=int(history + user[t]),
                output_tokens=int(reply[t]),
                parents=(f"turn{t - 1}",) if t else (),
                task="chat",
            )
        )
        history += int(user[t] + reply[t])
    return Workflow(id=wid, arrival=arrival, nodes=tuple(nodes), meta={"workload": "sharegpt"})


def generate_sharegpt(
    seed: int,
    count: int | None = None,
    *,
    rate: float | None = None,
    model: str | None = None,
    arrival_process: str = "poisson",
) -> list[Workflow]:
    """ShareGPT conversational-chain workflows.

    :param seed: RNG seed; same seed gives the same trace.
    :param count: number of workflows (default 100, HexAgent §7.1).
    :param rate: mean arrival rate in workflows/s (default 10).
    :param model: catalog model (default ``llama3.1-70b``).
    :param arrival_process: ``"poisson"`` or ``"bursty"``.
    """
    return generate_family(
        "sharegpt", "sharegpt", build_workflow, seed, count, rate, model, arrival_process
    )
