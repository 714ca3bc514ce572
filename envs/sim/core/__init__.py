"""The simulation runtime: the :class:`~envs.sim.core.simulation.Simulation` and the parts it
holds (event handlers, asynchronous planning, plan validation, the estimates schedulers may read,
migration), the scheduler protocol (:mod:`~envs.sim.core.protocol`) and the default schedulers,
the runtime workflow state (:mod:`~envs.sim.core.workflows`), the picklable SimPy pieces
(:mod:`~envs.sim.core.simpy_parts`), call records, metrics, outcomes and timelines, and the
command that runs the simulator without RL (``python -m envs.sim.core.run``).
"""
