"""The roofline latency model (:class:`~envs.sim.latency.model.LatencyModel`): per-iteration
prefill and decode costs (:mod:`~envs.sim.latency.iteration`) and the calibrated efficiencies
and overheads read from ``envs/configs/latency_calibration*.yaml``
(:mod:`~envs.sim.latency.efficiency`). The fits that write those files live in
:mod:`envs.sim.calibration`, which the runtime never imports.
"""
