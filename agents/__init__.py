"""Learned policies for servegym: SB3 / sb3-contrib builders, features extractors for padded-set
observations, behaviour cloning (+ DAgger) from any expert in ``heuristics/``, W&B logging.

    from agents import TRAIN_ENVS, build_model, collect, bc_train, load_policy
    policy = load_policy("runs/NAME/model.zip")       # reset() / act(obs, info), like heuristics

``train.py`` wires these together; ``evaluate.py --policies ckpt:PATH`` uses :func:`load_policy`.
"""

from agents.algos import ALGOS, AlgoSpec, algo_spec, build_model, load_model, register_algo
from agents.bc import BCEpoch, Demonstrations, bc_accuracy, bc_train, collect
from agents.checkpoint import SB3Policy, load_policy
from agents.envs import (
    EVAL_SEED_BASE,
    TRAIN_ENVS,
    TrainEnvSpec,
    env_kwargs,
    eval_seeds,
    make_env,
    make_vec_env,
    train_env_spec,
    validation_seeds,
)
from agents.extractors import PDClusterScorer, RoutingScorer, SetPoolingExtractor
from agents.policies import ActionScoresActorCriticPolicy, ActionScoresPolicy

__all__ = [
    "ALGOS",
    "EVAL_SEED_BASE",
    "TRAIN_ENVS",
    "ActionScoresActorCriticPolicy",
    "ActionScoresPolicy",
    "AlgoSpec",
    "BCEpoch",
    "Demonstrations",
    "PDClusterScorer",
    "RoutingScorer",
    "SB3Policy",
    "SetPoolingExtractor",
    "TrainEnvSpec",
    "algo_spec",
    "bc_accuracy",
    "bc_train",
    "build_model",
    "collect",
    "env_kwargs",
    "eval_seeds",
    "validation_seeds",
    "load_model",
    "load_policy",
    "make_env",
    "make_vec_env",
    "register_algo",
    "train_env_spec",
]
