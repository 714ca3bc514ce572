"""One training run, top to bottom (CleanRL style): reference numbers, behaviour cloning (+
DAgger) from the expert, RL fine-tuning with periodic validation and checkpoints, and the final
comparison on the held-out seeds.
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envs.registry import EnvFamily, Metric, family
from evaluation.config import unique
from training.checks import (
    RandomLegalPolicy,
    baselines_of,
    chance_accuracy,
    clone_warnings,
    rollout_size,
    schedule_warnings,
)
from training.compare import (
    eval_config,
    evaluate_model,
    latest_checkpoint,
    learned_rows,
    mean_metrics,
)
from training.config import TrainConfig


def warn(report: dict[str, Any], message: str) -> None:
    """Print ``message`` to stderr as a warning and record it in ``report["warnings"]``
    (``eval.json``)."""
    print(f"train.py: warning: {message}", file=sys.stderr)
    report.setdefault("warnings", []).append(message)


def abandon(out: Path, created: bool) -> None:
    """After a failed run: finish the W&B run and remove ``out`` if this call created it and
    no model was saved in it yet."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish(exit_code=1)
    saved = any((out / name).exists() for name in ("bc_model.zip", "model.zip", "checkpoints"))
    if created and out.is_dir() and not saved:
        shutil.rmtree(out, ignore_errors=True)
        print(f"train.py: removed the unfinished run directory {out}", file=sys.stderr)


@dataclass
class _Run:
    """What every stage of a run reads: the options, where it writes, the env it trains on,
    the W&B run and the report being filled (``eval.json``)."""

    cfg: TrainConfig
    out: Path
    spec: Any  # agents.TrainEnvSpec
    entry: EnvFamily
    kwargs: dict[str, Any]
    run: Any  # the W&B run (agents.wandb_utils.init_run)
    report: dict[str, Any]
    reference: str
    val_seeds: tuple[int, ...] = ()
    ref_lines: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def metrics(self) -> tuple[Metric, ...]:
        return self.entry.headline

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(m.key for m in self.entry.headline)


def train(cfg: TrainConfig, argv: Sequence[str]) -> int:
    """The run itself, on a checked and resolved ``cfg`` (see ``train.main``): 1. the env,
    2. reference numbers, 3. behaviour cloning (+ DAgger), 4. RL, 5. the final comparison."""
    import torch
    from stable_baselines3.common.utils import set_random_seed

    from agents import algo_spec, env_kwargs, eval_seeds, make_env, train_env_spec
    from agents.wandb_utils import init_run, where

    start = time.perf_counter()
    torch.set_num_threads(cfg.torch_threads)
    set_random_seed(cfg.seed)
    spec = train_env_spec(cfg.env)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python train.py " + " ".join(argv)
    (out / "config.json").write_text(json.dumps({**asdict(cfg), "command": command}, indent=1))
    entry = family(cfg.env)
    kwargs = env_kwargs(spec, asdict(cfg))
    if not algo_spec(cfg.algo).masked:
        kwargs["invalid_action"] = "penalize"
    seeds = eval_seeds(cfg.eval_episodes)
    run = init_run(
        cfg.wandb,
        out,
        {**asdict(cfg), "command": command},
        name=out.name,
        project=cfg.wandb_project,
    )
    report: dict[str, Any] = {"config": asdict(cfg), "eval_seeds": list(seeds), "command": command}
    report["wandb"] = where(run)
    print(f"      {report['wandb']}")
    for message in schedule_warnings(cfg.timesteps, cfg.eval_every, rollout_size(cfg)):
        warn(report, message)
    # the MDP trained and evaluated, by its name and keyword arguments: gym.make(id, **kwargs)
    report["env"] = {"id": spec.gym_id, "kwargs": dict(kwargs)}
    print(f"      env: gym.make({spec.gym_id!r}, **{kwargs!r})")
    r = _Run(cfg, out, spec, entry, kwargs, run, report, cfg.reference or entry.reference)

    baselines = baselines_of(cfg)
    ref_rows = _reference_numbers(r, baselines, seeds)
    eval_env = make_env(spec, kwargs)
    model, vec_env, ckpt = _build_model(r)
    if cfg.bc_expert != "none" and ckpt is None and cfg.bc_episodes > 0:
        _behaviour_cloning(r, model, eval_env)
    evaluator, remaining = _reinforce(r, model, vec_env, eval_env, ckpt)
    model.save(out / "model.zip")
    vec_env.close()
    eval_env.close()
    learned = _final_comparison(r, ref_rows, baselines, seeds, evaluator, remaining, start)
    _print_summary(r, learned)
    return 0


def _reference_numbers(r: _Run, baselines: tuple[str, ...], seeds: Sequence[int]) -> list[dict]:
    """2. The expert and the baselines on the held-out seeds (their rows), and the learning
    curves' reference lines on the validation seeds (``r.ref_lines``)."""
    import evaluation
    from agents import validation_seeds

    cfg, metrics, reference = r.cfg, r.metrics, r.reference
    print(f"[1/4] reference: {reference} and {', '.join(baselines)} on seeds {list(seeds)}")
    ref_rows = evaluation.evaluate(eval_config(cfg, (*baselines, reference)))
    references = {p: mean_metrics(ref_rows, p, metrics) for p in (*baselines, reference)}
    assert cfg.workload is not None, "train() takes a resolved config (training.resolve)"
    best = evaluation.best_baseline(ref_rows, cfg.workload, reference)
    r.report["references"] = references
    r.report["best_baseline"] = best
    for name, vals in references.items():
        print(f"      {name:>16}: " + "  ".join(f"{k} {v:.3f}" for k, v in vals.items()))
        for k, v in vals.items():
            r.run.summary[f"reference/{name}/{k}"] = v
    # Reference lines for the learning curves: the expert and the best baseline on the
    # validation seeds, the same seeds the model is evaluated on during training.
    r.val_seeds = validation_seeds(cfg.val_episodes or cfg.eval_episodes)
    r.report["validation_seeds"] = list(r.val_seeds)
    val_policies = (reference,) if best is None else (reference, best)
    val_rows = evaluation.evaluate(eval_config(cfg, val_policies, r.val_seeds))
    r.ref_lines = {reference: mean_metrics(val_rows, reference, metrics)}
    if best is not None:
        r.ref_lines["best_baseline"] = mean_metrics(val_rows, best, metrics)
    r.report["validation_references"] = r.ref_lines
    return ref_rows


def _build_model(r: _Run) -> tuple[Any, Any, Path | None]:
    """The training envs and the model: resumed from the latest checkpoint (or the BC model)
    with ``--resume``, else new; ``(model, vec_env, checkpoint or None)``."""
    from agents import build_model, load_model, make_vec_env
    from agents.callbacks import TimedVecEnv

    cfg, out = r.cfg, r.out
    vec = "ray" if cfg.ray is not None else cfg.vec
    vec_env = TimedVecEnv(
        make_vec_env(
            cfg.env,
            r.kwargs,
            cfg.n_envs,
            cfg.seed,
            vec,
            ray_address=cfg.ray,
            randomize=cfg.randomize or None,
        )  # fmt: skip
    )
    ckpt = latest_checkpoint(out) if cfg.resume else None
    hp = {**cfg.hyperparams}
    if cfg.resume and ckpt is None and (out / "bc_model.zip").exists():
        ckpt = out / "bc_model.zip"
    if ckpt is not None:
        print(f"      resuming from {ckpt}")
        model = load_model(str(ckpt))
        model.set_env(vec_env)
    else:
        model = build_model(
            cfg.algo,
            vec_env,
            r.spec,
            seed=cfg.seed,
            hyperparams=hp,
            # SB3's stock extractor (PDCluster-v1) has no width
            extractor_kwargs=(
                {"hidden": cfg.hidden} if "hidden" in r.spec.extractor_kwargs else None
            ),
        )
    return model, vec_env, ckpt


def _behaviour_cloning(r: _Run, model: Any, eval_env: Any) -> None:
    """3. Behaviour cloning (+ DAgger rounds) of ``model``'s policy from ``--bc-expert``; saves
    ``bc_model.zip`` and reports the clone against its teacher on the validation seeds."""
    import evaluation
    from agents import bc_train, collect, make_env
    from agents.envs import EVAL_SEED_BASE
    from envs.sim.core.progress import progress

    cfg, run, metrics = r.cfg, r.run, r.metrics
    teacher_name = cfg.bc_expert
    assert teacher_name is not None, "train() takes a resolved config (training.resolve)"
    print(f"[2/4] behaviour cloning from {cfg.bc_expert}: {cfg.bc_episodes} episodes")
    if not cfg.quiet:
        print(
            "      (CE: cross-entropy of the expert's actions under the clone; value MSE: "
            "squared error of the critic, fitted alongside to the expert's discounted "
            "returns so that RL starts with a trained critic; acc: share of the expert's "
            "actions the clone ranks first)"
        )

    def labelled(kwargs: dict[str, Any]) -> tuple[Any, Any]:
        """A (randomised) env that shows its decision context, and the teacher's factory on it."""
        env = make_env(r.spec, kwargs, randomize=cfg.randomize or None, randomize_seed=cfg.seed)
        return env, functools.partial(evaluation.resolve_policy, teacher_name, env, cfg.env)

    bc_env, expert = labelled(r.kwargs)
    seed_rng = np.random.default_rng(cfg.seed + 12345)
    train_seeds = [int(s) for s in seed_rng.integers(0, EVAL_SEED_BASE, cfg.bc_episodes)]
    gamma = float(getattr(model, "gamma", 0.99))
    t0 = time.perf_counter()
    with progress(desc="collect", unit="step", disable=cfg.quiet, file=sys.stderr) as bar:
        demos = collect(bc_env, expert, train_seeds, gamma, progress=bar.update)
    collect_s = time.perf_counter() - t0
    epoch_offset = 0

    def log_epoch(rec: Any) -> None:
        run.log(
            {
                "bc/epoch": epoch_offset + rec.epoch,
                "bc/loss": rec.loss,
                "bc/policy_loss": rec.policy_loss,
                "bc/value_loss": rec.value_loss,
                "bc/accuracy": rec.accuracy,
                "bc/samples": len(demos),
            }
        )
        if not cfg.quiet:
            print(
                f"      epoch {epoch_offset + rec.epoch:3d}  loss {rec.loss:.4f}  "
                f"CE {rec.policy_loss:.4f}  value MSE {rec.value_loss:.4f}  "
                f"acc {rec.accuracy:.3f}"
            )

    def clone(demos: Any, seed: int) -> list[dict[str, Any]]:
        """One behaviour-cloning pass of ``cfg``'s epochs over ``demos``; its epoch records."""
        return [
            asdict(rec)
            for rec in bc_train(
                model.policy,
                demos,
                cfg.bc_epochs,
                cfg.bc_batch_size,
                cfg.bc_lr,
                seed=seed,
                vf_coef=cfg.bc_vf_coef,
                on_epoch=log_epoch,
            )
        ]

    t0 = time.perf_counter()
    history = clone(demos, cfg.seed)
    dagger_rng = np.random.default_rng(cfg.seed + 777)
    dagger_env, dagger_expert = bc_env, expert
    if cfg.dagger_rounds and cfg.dagger_count is not None and cfg.dagger_count != cfg.count:
        from agents import env_kwargs

        # the training envs' every keyword, with the count of the DAgger episodes
        resized = env_kwargs(r.spec, {"count": cfg.dagger_count})
        dagger_env, dagger_expert = labelled({**r.kwargs, **resized})
    for rnd in range(cfg.dagger_rounds):
        epoch_offset += cfg.bc_epochs
        rseeds = [int(s) for s in seed_rng.integers(0, EVAL_SEED_BASE, cfg.dagger_episodes)]
        size = "" if dagger_env is bc_env else f" of {cfg.dagger_count}"
        kept = "" if cfg.dagger_keep == 1.0 else f", {cfg.dagger_keep:g} of the states kept"
        print(
            f"      DAgger round {rnd + 1}: {cfg.dagger_episodes} episodes{size}, "
            f"beta {cfg.dagger_beta}{kept}"
        )
        with progress(desc="DAgger", unit="step", disable=cfg.quiet, file=sys.stderr) as bar:
            demos = demos + collect(
                dagger_env,
                dagger_expert,
                rseeds,
                gamma,
                learner=model.policy,
                beta=cfg.dagger_beta,
                rng=dagger_rng,
                progress=bar.update,
                keep=cfg.dagger_keep,
            )
        history += clone(demos, cfg.seed + rnd + 1)
    bc_s = time.perf_counter() - t0
    model.save(r.out / "bc_model.zip")
    bc_metrics = evaluate_model(model, eval_env, r.val_seeds, metrics)
    if cfg.bc_expert in r.ref_lines:
        teacher = r.ref_lines[cfg.bc_expert]
    else:
        teacher_rows = evaluation.evaluate(eval_config(cfg, (teacher_name,), r.val_seeds))
        teacher = mean_metrics(teacher_rows, teacher_name, metrics)
    random_rows = [
        {"policy": "random-legal", **evaluation.run_episode(eval_env, RandomLegalPolicy(s), s)}
        for s in r.val_seeds
    ]
    random = mean_metrics(random_rows, "random-legal", metrics)
    chance = chance_accuracy(demos.masks)
    select = r.entry.select_metric
    accuracy = history[-1]["accuracy"] if history else float("nan")
    for message in clone_warnings(
        accuracy, chance, bc_metrics[select.key], random[select.key], select
    ):
        warn(r.report, message)
    for label, vals in (
        ("BC clone", bc_metrics),
        (f"teacher {cfg.bc_expert}", teacher),
        ("random legal policy", random),
    ):
        print(
            f"      {label + ' (validation seeds)':>36}: "
            + "  ".join(f"{k} {v:.3f}" for k, v in vals.items())
        )
    r.report["bc"] = {
        "samples": len(demos),
        "train_seeds": train_seeds,
        "collect_seconds": collect_s,
        "train_seconds": bc_s,
        "history": history,
        "eval": bc_metrics,
        "teacher_eval": teacher,
        "random_eval": random,
        "chance_accuracy": chance,
        "expert_episodes": demos.episodes[: cfg.bc_episodes],
        "dagger_episodes": demos.episodes[cfg.bc_episodes :],
    }
    for k, v in bc_metrics.items():
        run.summary[f"bc/eval_{k}"] = v
    bc_env.close()
    if dagger_env is not bc_env:
        dagger_env.close()


def _reinforce(
    r: _Run, model: Any, vec_env: Any, eval_env: Any, ckpt: Path | None
) -> tuple[Any, int]:
    """4. RL fine-tuning with periodic validation and checkpoints; ``(the evaluation
    callback, the env steps run)``."""
    from stable_baselines3.common.callbacks import CheckpointCallback
    from stable_baselines3.common.logger import HumanOutputFormat, Logger

    from agents.callbacks import (
        EpisodeMetricsCallback,
        PeriodicEvalCallback,
        TimingCallback,
        TqdmCallback,
        WandbWriter,
    )

    cfg, out, metrics, entry = r.cfg, r.out, r.metrics, r.entry
    writers: list[Any] = [WandbWriter(r.run)]
    if not cfg.quiet:
        writers.append(HumanOutputFormat(str(out / "progress.txt")))
    model.set_logger(Logger(folder=str(out), output_formats=writers))
    remaining = max(0, cfg.timesteps - (model.num_timesteps if ckpt is not None else 0))
    timing = TimingCallback(vec_env)
    evaluator = PeriodicEvalCallback(
        lambda m: evaluate_model(m, eval_env, r.val_seeds, metrics),
        every=cfg.eval_every,
        select=entry.select,
        better=entry.select_metric.better,
        references=r.ref_lines,
        best_path=out / "best_model.zip",
        history_path=out / "eval_history.json",
    )
    if remaining > 0:
        where = f"Ray ({cfg.ray})" if cfg.ray is not None else cfg.vec
        print(f"[3/4] {cfg.algo}: {remaining} env steps on {cfg.n_envs} {where} envs")
        callbacks = [
            TqdmCallback(remaining, disable=cfg.quiet),
            EpisodeMetricsCallback(r.keys),
            timing,
            evaluator,
            CheckpointCallback(max(1, cfg.ckpt_every // cfg.n_envs), str(out / "checkpoints")),
        ]
        model.learn(
            remaining, callback=callbacks, reset_num_timesteps=ckpt is None, progress_bar=False
        )
        t = timing.summary()
        # Interval evaluations run inside rollouts; split them out of the rollout time.
        t["eval_s"] = sum(h["eval_seconds"] for h in evaluator.history)
        in_rollout = sum(h["eval_seconds"] for h in evaluator.history if h["trigger"] == "interval")
        # A difference of separately timed spans: clamp the timer jitter that can make it < 0.
        t["inference_s"] = max(0.0, t["rollout_s"] - in_rollout - t["env_s"])
        t["train_wall_s"] = t["wall_s"] - t["eval_s"]
        t["env_share"] = t["env_s"] / t["train_wall_s"]
        t["learner_share"] = (t["inference_s"] + t["update_s"]) / t["train_wall_s"]
        t["env_steps_per_s"] = t["env_steps"] / t["train_wall_s"]
        r.report["timing"] = t
        r.report["history"] = evaluator.history
    return evaluator, remaining


def _final_comparison(
    r: _Run,
    ref_rows: list[dict],
    baselines: tuple[str, ...],
    seeds: Sequence[int],
    evaluator: Any,
    remaining: int,
    start: float,
) -> tuple[str, ...]:
    """5. The learned policies against the references on the held-out seeds, through
    ``evaluate.py`` (identical numbers to ``evaluate.py --policies``): ``table.txt``,
    ``eval.json``, W&B; the learned policies' specs."""
    import evaluation
    from agents.wandb_utils import log_comparison, log_model_artifact

    cfg, out, metrics, reference, report = r.cfg, r.out, r.metrics, r.reference, r.report
    print(f"[4/4] final comparison on held-out seeds {list(seeds)}")
    learned = learned_rows(out, evaluator.history, with_bc=remaining > 0)
    policies = (*learned,)
    rows = ref_rows + evaluation.evaluate(eval_config(cfg, policies))
    ecfg = eval_config(cfg, (*baselines, reference, *policies))
    regen = evaluation.command_for(ecfg)
    table = evaluation.format_table(rows, reference=reference, command=regen)
    pngs = evaluation.plot_attainment(rows, out, reference)
    (out / "table.txt").write_text(table + "\n")
    ran = unique(row["policy"] for row in rows)
    report["final"] = {p: mean_metrics(rows, p, metrics) for p in ran}
    report["table"] = table
    report["rows"] = [{k: v for k, v in row.items() if not isinstance(v, list)} for row in rows]
    report["wall_seconds"] = time.perf_counter() - start
    (out / "eval.json").write_text(json.dumps(evaluation.json_safe(report), indent=1))
    log_comparison(r.run, rows, table, pngs, metrics=r.keys)
    final = report["final"][learned[-1]]
    log_model_artifact(r.run, out / "model.zip", f"{out.name}-model", final)
    r.run.finish()
    print(table)
    return tuple(learned)


def _print_summary(r: _Run, learned: Sequence[str]) -> None:
    """The clone against its teacher, the RL timing and what was written."""
    cfg, out, keys, report = r.cfg, r.out, r.keys, r.report
    if "bc" in report:
        clone = report["final"].get(f"ckpt:{out / 'bc_model.zip'}", report["final"][learned[0]])
        teacher = report["final"].get(cfg.bc_expert)
        if teacher is not None:
            print(
                f"clone vs teacher {cfg.bc_expert} (held-out seeds): "
                + "  ".join(f"{k} {clone[k]:.3f} vs {teacher[k]:.3f}" for k in keys)
            )
    if "timing" in report:
        t = report["timing"]
        print(
            f"RL: {t['env_steps']} steps in {t['train_wall_s']:.0f} s without evaluation "
            f"({t['env_steps_per_s']:.0f} steps/s): env {t['env_share']:.0%}, learner "
            f"{t['learner_share']:.0%} (inference {t['inference_s']:.0f} s, updates "
            f"{t['update_s']:.0f} s); evaluation {t['eval_s']:.0f} s"
        )
    print(
        f"wrote {out}/{{model.zip, config.json, eval.json, table.txt}} in "
        f"{report['wall_seconds']:.0f} s"
    )
    print(report["wandb"])
    for message in report.get("warnings", ()):
        print(f"train.py: warning (above): {message}", file=sys.stderr)
