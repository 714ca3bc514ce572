"""Train a scheduling policy on a servegym env: behaviour cloning from an expert, then RL.

    python train.py --env pd-cluster                       # sensible defaults, ~10 min on 2 cores
    python train.py --env pd-cluster --cluster hetero-1 --model llama3.1-70b --workload mixed \\
        --algo maskable-ppo --bc-expert hexagent --timesteps 200000 --n-envs 2 --seed 0 \\
        --out runs/hexbc --wandb offline
    python train.py --env routing --slo-scale 1.5 --out runs/goodserve-bc   # clone GoodServe

Every env family trains the same way. Its defaults (cluster, model, workload, episode length),
its expert (the default ``--bc-expert``), its baselines and its headline metrics with their
direction come from ``envs.registry``, its features extractor from ``agents.TRAIN_ENVS``;
``--help`` lists them. This file parses the options and calls the :mod:`training` package
(``config``: the options; ``checks``; ``cli``: the parser; ``run``: the run itself;
``compare``: evaluation through :mod:`evaluation`'s own code).

Reads top to bottom (CleanRL style):

1. options (:class:`TrainConfig`; ``--config FILE`` (JSON/YAML) sets defaults, flags override);
2. reference numbers: the expert and the baselines on the held-out evaluation seeds;
3. behaviour cloning from ``--bc-expert`` (expert-labelled states, optional DAgger rounds);
4. RL fine-tuning with SB3 on ``--n-envs`` vectorised envs, periodic evaluation on validation
   seeds (``agents.validation_seeds``: the best checkpoint is chosen there, never on the held-out
   seeds), checkpoints;
5. the final comparison through ``evaluate.py``'s own code (:mod:`evaluation`) on the same seeds.

Writes ``<out>/config.json``, ``model.zip`` (final), ``bc_model.zip`` (after BC),
``best_model.zip`` (best evaluation by the env's selection metric: lowest Req99 on PDCluster,
highest goodput on Routing; a row of the final table when it is not the final model),
``checkpoints/``, ``eval.json`` (references,
BC-only, evaluation history, final table, timing), ``eval_history.json`` (the evaluations during
RL so far, rewritten after each), ``progress.txt`` (SB3's update log; not with ``--quiet``),
``table.txt``, attainment plots, and the W&B run under ``<out>/wandb/`` (offline by default;
``wandb sync`` uploads it). A run that fails before its first model is saved leaves nothing
behind.

Reproducibility: the same config and seed on the same machine give the same curve: every
random source is seeded (SB3 ``seed``, BC shuffling, training-workload seeds), and torch runs
with ``--torch-threads`` threads (default 1). Float reductions depend on the thread count, so a
different ``--torch-threads`` (or another CPU / torch build) may change the curve slightly.
Subprocess envs are deterministic per seed and do not share state.
"""

from __future__ import annotations

import sys

from training.command import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
