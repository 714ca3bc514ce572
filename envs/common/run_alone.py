"""Run-alone latency: the seconds a request takes alone on one instance, the base of the SLOs of
Routing-v0 (GoodServe §4: SLO = scale × run-alone latency on the mid-tier GPU) and Allocation-v0
(Scepsy §7.1), and of the allocation heuristics' latency targets.
"""

from __future__ import annotations

from envs.sim.latency.model import LatencyModel


class RunAloneLatency:
    """Seconds a request takes alone on one instance of ``latency``'s kind (the SLO base).

    Chunked prefill: ``ceil(L_in / budget)`` iterations over growing context; whole-prompt modes:
    one pass. The prefill emits the first token, then ``L_out − 1`` decode steps at batch 1.
    Cached by (L_in, L_out).
    """

    def __init__(self, latency: LatencyModel, prefill_mode: str, token_budget: int):
        self.latency = latency
        self.chunked = prefill_mode in ("chunked", "chunked-prefill-first")
        self.budget = token_budget
        self._cache: dict[tuple[int, int], float] = {}

    def __call__(self, input_tokens: int, output_tokens: int) -> float:
        key = (input_tokens, output_tokens)
        t = self._cache.get(key)
        if t is None:
            lat = self.latency
            if self.chunked:
                t, done = 0.0, 0
                while done < input_tokens:
                    n = min(self.budget, input_tokens - done)
                    t += lat.prefill_time(n, 1, done)
                    done += n
            else:
                t = lat.prefill_time(input_tokens)
            if output_tokens > 1:
                t += lat.decode_steps_time(1, input_tokens + 1, output_tokens - 1)
            self._cache[key] = t
        return t
