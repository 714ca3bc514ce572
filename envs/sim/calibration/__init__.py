"""The pieces of the latency model's calibration (``python -m envs.sim.calibrate``, whose module
docstring states the whole fit procedure): :mod:`~envs.sim.calibration.data` (where the measured
data lives, shared helpers), :mod:`~envs.sim.calibration.kernels` (GEMM, elementwise, attention
and all-reduce fits), :mod:`~envs.sim.calibration.e2e` (end-to-end runs, the framework overhead
and the held-out check) and :mod:`~envs.sim.calibration.prefill` (the whole-prefill check).
"""
