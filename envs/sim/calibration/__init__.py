"""Offline fitting tools, never imported by the runtime (``tests/test_layout.py`` checks it).

- ``python -m envs.sim.calibration.calibrate`` fits the latency model's constants
  (:mod:`~envs.sim.calibration.calibrate`, whose docstring states the whole procedure) from
  :mod:`~envs.sim.calibration.data` (where the measured data lives, shared helpers),
  :mod:`~envs.sim.calibration.kernels` (GEMM, elementwise, attention and all-reduce fits),
  :mod:`~envs.sim.calibration.e2e` (end-to-end runs, the framework overhead and the held-out
  check), :mod:`~envs.sim.calibration.prefill` (the whole-prefill check) and the per-op variants.
- ``python -m envs.sim.calibration.calibrate_serving`` fits the serving-engine constants end to
  end with :mod:`~envs.sim.calibration.serving_fit`.
- ``python -m envs.sim.calibration.benchmark_client`` is the closed-loop benchmark client
  (:func:`~envs.sim.calibration.benchmark_client.closed_loop`) those fits and
  ``benchmarks/serving_fidelity.py`` replay measured deployments with.
"""
