"""Serving instances and their engines: prefill, decode and monolithic instances
(:mod:`~envs.sim.engines.instances`), prefill queues and chunking, continuous batching, the
prefix cache, GPUs shared by fractional instances and their contention, live reconfiguration,
and the serving-engine presets read from ``envs/configs/engines.yaml``
(:mod:`~envs.sim.engines.presets`).
"""
