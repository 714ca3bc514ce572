"""The history of tool latencies a simulation holds (``Simulation.tool_history``): what H_w(t)
charges a revealed tool node before it returns (HexAgent §5.1's online horizon), learnt from the
tools that returned earlier in the run.
"""

from __future__ import annotations

from traces.schema import ToolNode


class ToolHistory:
    """Measured tool latencies, per tool name and over all tools.

    :param mode: the simulation's ``tool_estimate``: ``history`` (the mean measured latency of
        the finished tools of the node's name, else of all finished tools, else 0 s) or
        ``oracle`` (the node's true latency, which a scheduler cannot know before it returns).
    """

    mode: str
    #: Per tool name, and over all tools: [summed seconds, count] of the finished ones.
    _by_name: dict[str | None, list[float]]
    _all: list[float]

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._by_name = {}
        self._all = [0.0, 0]

    def estimate(self, node: ToolNode) -> float:
        """Seconds a scheduler expects revealed tool ``node`` to take before it returns."""
        if self.mode == "oracle":
            return node.latency
        total, count = self._by_name.get(node.name) or self._all
        return total / count if count else 0.0

    def record(self, node: ToolNode) -> None:
        """Tool ``node`` returned: its latency is now measured."""
        seen = self._by_name.setdefault(node.name, [0.0, 0])
        seen[0] += node.latency
        seen[1] += 1
        self._all[0] += node.latency
        self._all[1] += 1
