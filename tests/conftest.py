"""Hypothesis profiles for the whole suite.

``default`` (loaded here, what ``make test`` runs): hypothesis' usual 100 examples for tests that
do not set their own, no deadline (the suite shares small CI machines; a wall-clock deadline makes
simulator tests flaky without finding bugs), and **derandomized**: every run tries the same
examples, so a red CI build is red again on re-run and a green one stays green until the code
changes. The example database is off for the same reason: a failure found on one machine must
not change what another machine runs. Fresh examples are the job of the ``long`` profile.

``long`` (``pytest --hypothesis-profile=long``): 500 examples for tests that do not set their own,
random (not derandomized) with the local example database, so repeated runs keep exploring and
replay what failed last time. ``tests/test_invariants.py`` scales its per-test budgets by the
loaded profile's ``max_examples`` (5x under ``long``).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    max_examples=500,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("default")
