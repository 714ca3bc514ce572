"""The checks of the closed-loop benchmark client's options
(:func:`envs.sim.calibration.benchmark_client.closed_loop`): each bad one raises a
:class:`ServingConfigError` naming it and its value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: How the clients' first requests are spread (``closed_loop(stagger=...)``).
STAGGERS = ("none", "even", "random")
#: How a whole-prompt engine's token budget is sized (``closed_loop(budget_sizing=...)``).
BUDGET_SIZINGS = ("benchmark", "engine-default")


class ServingConfigError(ValueError):
    """A deployment the simulator cannot represent (the message names the culprit)."""


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int if it is an integer >= 1, else a :class:`ServingConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ServingConfigError(f"{name}={value!r}; expected an integer >= 1")
    return int(value)


def check_client(
    start_spread_s: float,
    stagger: str,
    budget_sizing: str,
    dataset_entries: int | None,
    prefix_caching: bool | None,
    warmup_requests: int,
    requests_per_client: int,
) -> int | None:
    """Check the client options of :func:`~envs.sim.calibration.benchmark_client.closed_loop`
    (see its :param list); return ``dataset_entries`` as an int (or None)."""
    if not (isinstance(start_spread_s, int | float) and start_spread_s >= 0):
        raise ServingConfigError(f"start_spread_s={start_spread_s!r}; expected seconds >= 0")
    if stagger not in STAGGERS:
        raise ServingConfigError(f"stagger={stagger!r}; expected one of {STAGGERS}")
    if budget_sizing not in BUDGET_SIZINGS:
        raise ServingConfigError(
            f"budget_sizing={budget_sizing!r}; expected one of {BUDGET_SIZINGS}"
        )
    if dataset_entries is not None:
        dataset_entries = positive_int("dataset_entries", dataset_entries)
    if prefix_caching is not None and not isinstance(prefix_caching, bool):
        raise ServingConfigError(f"prefix_caching={prefix_caching!r}; expected True, False or None")
    if (
        isinstance(warmup_requests, bool)
        or not isinstance(warmup_requests, int | np.integer)
        or not 0 <= warmup_requests < requests_per_client
    ):
        raise ServingConfigError(
            f"warmup_requests={warmup_requests!r}; expected an integer in "
            f"[0, requests_per_client={requests_per_client})"
        )
    return dataset_entries
