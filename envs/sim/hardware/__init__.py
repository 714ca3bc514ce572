"""What the simulator runs on: the GPU and model catalog read from ``envs/configs/``
(:mod:`~envs.sim.hardware.catalog`) and cluster specifications, presets and topologies
(:mod:`~envs.sim.hardware.cluster`).
"""
