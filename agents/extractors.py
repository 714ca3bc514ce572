"""Features extractors for servegym's padded-set observations (SB3 ``BaseFeaturesExtractor``).

Three extractors:

* :class:`PDClusterScorer` produces **one score per action** (slot k, prefill p, decode d) with
  shared weights, plus a pooled feature vector for the critic. The policy
  :class:`agents.policies.ActionScoresPolicy` uses the scores as logits directly. Slots are
  unordered, so the slot encoder is permutation-equivariant (Deep Sets: each slot sees itself
  and a masked mean/max pool of all valid slots), and so is the per-action scorer; the same
  holds for instances within a pool. The projected ratio R(c, p, d) enters every action's score
  both through a small shared MLP and linearly, so HexAgent's rule (the slot with the largest
  best-case ratio, then its argmin pair, HexAgent §5.3 Algorithm 1) is a linear function of the
  inputs and easy to imitate.
* :class:`RoutingScorer` does the same for ``servegym/Routing-v0``: one score per instance from
  a shared MLP over [instance features ‖ request features], with pooled cluster context
  (permutation-equivariant, any number of instances M), plus a linear path over the features
  GoodServe's rule reads (estimate / SLO, meets-deadline, capability), so "the instance with the
  smallest estimate among those that meet the deadline" is a linear function of the inputs.
* :class:`SetPoolingExtractor` is the generic fallback for any ``Dict`` of padded sets: a shared
  row encoder per set, masked mean + max pooling, concatenated into a flat vector for SB3's
  ordinary MLP head. A new env works with it without new code.
"""

from __future__ import annotations

from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn


def masked_pool(x: th.Tensor, valid: th.Tensor) -> th.Tensor:
    """Mean and max over the set axis of ``x`` counting only valid rows.

    :param x: (B, N, H) row embeddings.
    :param valid: (B, N) 1.0 for real rows, 0.0 for padding.
    :return: (B, 2H): masked mean, then masked max (0 where a set has no valid row).
    """
    w = valid.unsqueeze(-1)
    count = w.sum(dim=1).clamp(min=1.0)
    mean = (x * w).sum(dim=1) / count
    neg = th.finfo(x.dtype).min
    mx = th.where(w > 0, x, th.full_like(x, neg)).max(dim=1).values
    mx = th.where(valid.sum(dim=1, keepdim=True) > 0, mx, th.zeros_like(mx))
    return th.cat([mean, mx], dim=-1)


def _full_pool(x: th.Tensor) -> th.Tensor:
    """:func:`masked_pool` of a set whose rows are all valid: (B, N, H) -> (B, 2H)."""
    return th.cat([x.sum(dim=1) / x.shape[1], x.max(dim=1).values], dim=-1)


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out), nn.ReLU())


def mlp_tail(mlp: nn.Sequential, x: th.Tensor) -> th.Tensor:
    """``mlp[1:](x)`` of an :func:`_mlp` (ReLU, Linear, ReLU) as the same three functional
    calls: slicing an ``nn.Sequential`` builds a new module on every call (~20 µs, more than
    the three operations on a small batch)."""
    last: nn.Linear = mlp[2]  # type: ignore[assignment]
    return th.relu(nn.functional.linear(th.relu(x), last.weight, last.bias))


def _mlp_rows_shared(mlp: nn.Sequential, rows: th.Tensor, shared: th.Tensor) -> th.Tensor:
    """``mlp(cat([rows, shared broadcast over the rows], -1))`` without building the concatenation.

    The first layer is linear, so W·[x ‖ c] + b = W_x·x + (W_c·c + b): the shared part is
    computed once per batch element instead of once per row.

    :param mlp: an :func:`_mlp` whose input is ``rows``' features followed by ``shared``'s.
    :param rows: (B, N, F_rows).
    :param shared: (B, F_shared), the same for every row of a batch element.
    :return: (B, N, n_out).
    """
    first: nn.Linear = mlp[0]  # type: ignore[assignment]
    n = rows.shape[-1]
    x = nn.functional.linear(rows, first.weight[:, :n])
    x = x + nn.functional.linear(shared, first.weight[:, n:], first.bias).unsqueeze(1)
    return mlp_tail(mlp, x)


class PDClusterEncoding(NamedTuple):
    """:meth:`PDClusterScorer.encode` of a batch of B observations (K slots, P × D pairs).

    :param ratio: (B, K, P, D) the observation's clipped log1p(R).
    :param legal: (B, K, P, D) legal pairs (r > 0).
    :param best: (B, K) best_k, log1p of the slot's best legal ratio.
    :param hs: (B, K, hidden) W_s s_k + b.
    :param hp: (B, P, hidden) W_p e_p.
    :param hd: (B, D, hidden) W_d e_d.
    :param slot_logit: (B, K) slot(k) of the score.
    :param value: (B, value_dim) the critic features.
    """

    ratio: th.Tensor
    legal: th.Tensor
    best: th.Tensor
    hs: th.Tensor
    hp: th.Tensor
    hd: th.Tensor
    slot_logit: th.Tensor
    value: th.Tensor


class PDClusterScorer(BaseFeaturesExtractor):
    """Per-action scores for ``servegym/PDCluster-v0`` plus pooled critic features.

    Output = ``[scores (K·P·D), value features (value_dim)]`` in the env's flat action order
    ``a = k·P·D + p·D + d``. :attr:`action_scores_dim` tells the policy where to split.

    Score (logit) of action (k, p, d) = slot score + log-probability of the pair given the slot::

        h           = relu(W_s s_k + W_p e_p + W_d e_d + u·r_kpd + v·g_kpd + b)   (hidden units)
        pair(k,p,d) = w·h + a·r_kpd + c·g_kpd
        slot(k)     = w'·s_k + lin(slot features of k, best_k)
        score       = slot(k) + log_softmax over legal (p, d) of pair(k, ·, ·)

    so the policy factorises exactly into "which call" × "which pair for it" (HexAgent's two
    decisions), and a slot's probability does not depend on how many pairs it may use. Legal
    pairs are read off the observation (r > 0 exactly where legal); the policy's mask still
    applies on top.

    with s_k the slot embedding (own features + pooled slot context + stage), e_p / e_d the
    instance embeddings (own features + pooled pool context), r_kpd = ``ratio[k, p, d]`` and
    g_kpd = r_kpd − best_k the gap to the slot's best legal ratio (``slots[:, 11]``).

    :param observation_space: the env's ``Dict`` space (keys ``slots``, ``instances``,
        ``ratio``, ``stage``).
    :param hidden: embedding and per-action hidden width.
    :param ratio_scale: multiplies r, g and best_k where they enter the scores. Telling two
        placements apart takes logit gaps of a few units from ratio gaps of ~0.01–0.1, i.e.
        weights of ~50; Adam moves a weight by about the learning rate per step, so unscaled
        inputs would need tens of thousands of steps to get there.
    :param sparse: compute the per-action hidden layer h only for slots with at least one legal
        pair, gathered into a (N, P, D, hidden) tensor and scattered back. A slot without a legal
        pair has pair(k, ·, ·) = 0 after the masked log-softmax whatever h is, so the result is
        the dense one (up to float rounding) at a fraction of the cost: a PDCluster observation
        has ~3 such slots of K = 256 (``benchmarks.train_speed``). False computes h for every
        (k, p, d), the original dense form, kept for comparison. Parameters are the same either
        way, so checkpoints load into both.
    """

    def __init__(
        self,
        observation_space: gym.spaces.Dict,
        hidden: int = 32,
        ratio_scale: float = 100.0,
        sparse: bool = True,
    ):
        keys = {"slots", "instances", "ratio", "stage"}
        if not isinstance(observation_space, gym.spaces.Dict) or set(observation_space) != keys:
            raise ValueError(
                f"PDClusterScorer needs a Dict observation with keys {sorted(keys)}, got "
                f"{observation_space}"
            )
        k, p, d = observation_space["ratio"].shape
        n_slot = observation_space["slots"].shape[1]
        n_inst = observation_space["instances"].shape[1]
        n_stage = observation_space["stage"].shape[0]
        if observation_space["instances"].shape[0] != p + d:
            raise ValueError(
                f"instances has {observation_space['instances'].shape[0]} rows, expected P + D = "
                f"{p + d} from ratio shape {(k, p, d)}"
            )
        value_dim = 4 * hidden + 2 * hidden + n_stage
        super().__init__(observation_space, features_dim=k * p * d + value_dim)
        self.K, self.P, self.D = k, p, d
        self.ratio_scale = float(ratio_scale)
        self.sparse = bool(sparse)
        self.action_scores_dim = k * p * d
        self.value_dim = value_dim
        h = hidden
        self.slot_in = _mlp(n_slot + n_stage, h, h)
        self.slot_ctx = _mlp(3 * h, h, h)
        self.inst_in = _mlp(n_inst, h, h)
        self.inst_ctx = _mlp(3 * h, h, h)
        self.to_hidden_slot = nn.Linear(h, h)
        self.to_hidden_p = nn.Linear(h, h, bias=False)
        self.to_hidden_d = nn.Linear(h, h, bias=False)
        self.to_hidden_r = nn.Linear(2, h, bias=False)
        self.score_out = nn.Linear(h, 1)
        # Start from the linear skip terms alone: random MLP scores would swamp the ratio signal.
        nn.init.zeros_(self.score_out.weight)
        nn.init.zeros_(self.score_out.bias)
        self.score_linear = nn.Linear(2, 1, bias=False)
        self.slot_linear = nn.Linear(n_slot + 1, 1)
        nn.init.zeros_(self.slot_linear.weight)
        self.slot_out = nn.Linear(h, 1)
        nn.init.zeros_(self.slot_out.weight)

    def forward(self, observations: dict[str, th.Tensor]) -> th.Tensor:
        enc = self.encode(observations)
        ratio = enc.ratio
        b = ratio.shape[0]
        if self.sparse:
            bi, ki = enc.legal.flatten(2).any(dim=-1).nonzero(as_tuple=True)
            pair = ratio.new_zeros(ratio.shape).index_put(
                (bi, ki), self.pair_log_probs(enc, bi, ki)
            )
        else:
            pair = self._pair_log_probs(
                ratio, enc.best, enc.legal, enc.hs, enc.hp[:, None], enc.hd[:, None]
            )
        score = enc.slot_logit[:, :, None, None] + pair
        return th.cat([score.reshape(b, -1), enc.value], dim=-1)

    def encode(self, observations: dict[str, th.Tensor]) -> PDClusterEncoding:
        """Everything of :meth:`forward` but the per-action pair scores: the slot logits, the
        critic features and what :meth:`pair_log_probs` needs for any (batch, slot) rows."""
        slots, inst = observations["slots"], observations["instances"]
        ratio, stage = observations["ratio"], observations["stage"]
        b = slots.shape[0]
        valid = slots[..., 0]
        if self.sparse:
            s = _mlp_rows_shared(self.slot_in, slots, stage)
            s = _mlp_rows_shared(self.slot_ctx, s, masked_pool(s, valid))
        else:
            stage_k = stage.unsqueeze(1).expand(b, self.K, stage.shape[-1])
            s = self.slot_in(th.cat([slots, stage_k], dim=-1))
            s_pool = masked_pool(s, valid).unsqueeze(1).expand(b, self.K, -1)
            s = self.slot_ctx(th.cat([s, s_pool], dim=-1))

        e_p, e_d, pool_p, pool_d = self.encode_instances(inst)
        best = slots[..., 11] * 5.0  # log1p(min legal R), see the env docstring
        # Legal entries are exactly those with r > 0 (the env writes log1p(R) > 0 there, 0
        # elsewhere).
        legal = ratio > 0
        hs = self.to_hidden_slot(s)
        hp, hd = self.to_hidden_p(e_p), self.to_hidden_d(e_d)
        slot_skip = th.cat([slots, best.unsqueeze(-1) * self.ratio_scale], dim=-1)
        slot_logit = self.slot_out(s).squeeze(-1) + self.slot_linear(slot_skip).squeeze(-1)
        value = th.cat([masked_pool(s, valid), pool_p, stage], dim=-1)
        value = th.cat([value, pool_d], dim=-1)
        return PDClusterEncoding(ratio, legal, best, hs, hp, hd, slot_logit, value)

    def encode_instances(
        self, inst: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """Prefill and decode instance embeddings e_p (B, P, hidden), e_d (B, D, hidden) and
        their pools (B, 2·hidden) each, from the ``instances`` observation (B, P + D, F)."""
        b = inst.shape[0]
        e = self.inst_in(inst)
        pre, dec = e[:, : self.P], e[:, self.P :]
        if self.sparse:
            # Every instance row is real: a plain mean/max pool is masked_pool with all-ones
            # masks, in 4 tensor ops instead of ~15 (batch-of-1 inference is op-bound).
            e_p = _mlp_rows_shared(self.inst_ctx, pre, _full_pool(pre))
            e_d = _mlp_rows_shared(self.inst_ctx, dec, _full_pool(dec))
            return e_p, e_d, _full_pool(e_p), _full_pool(e_d)
        ones_p, ones_d = inst.new_ones(b, self.P), inst.new_ones(b, self.D)
        pre_pool = masked_pool(pre, ones_p).unsqueeze(1).expand(b, self.P, -1)
        dec_pool = masked_pool(dec, ones_d).unsqueeze(1).expand(b, self.D, -1)
        e_p = self.inst_ctx(th.cat([pre, pre_pool], dim=-1))
        e_d = self.inst_ctx(th.cat([dec, dec_pool], dim=-1))
        return e_p, e_d, masked_pool(e_p, ones_p), masked_pool(e_d, ones_d)

    def pair_log_probs(self, enc: PDClusterEncoding, bi: th.Tensor, ki: th.Tensor) -> th.Tensor:
        """(N, P, D) log-probabilities of the pairs of slot ``ki[n]`` of batch element
        ``bi[n]`` (log_softmax over its legal pairs, 0 at illegal ones): the per-action hidden
        layer only for those N slots."""
        return self._pair_log_probs(
            enc.ratio[bi, ki],
            enc.best[bi, ki],
            enc.legal[bi, ki],
            enc.hs[bi, ki],
            enc.hp[bi],
            enc.hd[bi],
        )

    def _pair_log_probs(
        self,
        ratio: th.Tensor,
        best: th.Tensor,
        legal: th.Tensor,
        hs: th.Tensor,
        hp: th.Tensor,
        hd: th.Tensor,
    ) -> th.Tensor:
        """log_softmax over the legal (p, d) of pair(k, p, d), 0 at illegal pairs.

        Leading dimensions ``...`` broadcast: (N,) for the gathered slots of the sparse path,
        (B, K) for the dense one (with ``hp``, ``hd`` of shape (B, 1, ·, hidden)).

        :param ratio: (..., P, D) r of each slot's pairs.
        :param best: (...) best_k.
        :param legal: (..., P, D) legal pairs.
        :param hs: (..., hidden) W_s s_k + b.
        :param hp: (..., P, hidden) W_p e_p of the slot's observation.
        :param hd: (..., D, hidden) W_d e_d of the slot's observation.
        :return: (..., P, D).
        """
        rg = th.stack([ratio, ratio - best[..., None, None]], dim=-1)  # (..., P, D, 2)
        hid = (
            hs[..., None, None, :]
            + hp[..., :, None, :]
            + hd[..., None, :, :]
            + self.to_hidden_r(rg)
        )
        pair = self.score_out(th.relu(hid)).squeeze(-1) + self.score_linear(
            rg * self.ratio_scale
        ).squeeze(-1)
        pair = pair.masked_fill(~legal, -1e8)
        pair = th.log_softmax(pair.flatten(-2), dim=-1).reshape_as(ratio)
        return th.where(legal, pair, th.zeros_like(pair))


class RoutingScorer(BaseFeaturesExtractor):
    """Per-instance scores for ``servegym/Routing-v0`` plus pooled critic features.

    Output = ``[scores (M), value features (value_dim)]``; score g is the logit of routing (or
    migrating) the request to instance g, in the env's action order. :attr:`action_scores_dim`
    tells :class:`agents.policies.ActionScoresPolicy` where to split. With x_g the instance's
    features and q the request's (the :class:`envs.routing.env.RoutingEnv` docstring)::

        e_g      = mlp([x_g ‖ q])                        (shared over instances)
        c_g      = mlp([e_g ‖ mean_g' e_g' ‖ max_g' e_g'])  (cluster context)
        score_g  = w·c_g + a·(key_scale · x_g[key]) + b·x_g

    Every term is the same function of each instance's own row and of permutation-invariant
    pools, so permuting the instances permutes the scores. The key features are estimate / SLO
    (9), meets deadline (10) and log capability (0): a large weight on "meets" and a negative one
    on the estimate give argmin estimate among the deadline-meeting instances, a positive one on
    capability gives GoodServe's just-enough choice (the slowest instance that still meets it).
    ``w`` and ``b`` start at zero, so an untrained policy scores by the (randomly initialised)
    key path alone: the MLP cannot swamp the key signal before training.

    :param observation_space: the env's ``Dict`` space (keys ``request`` (R,), ``instances``
        (M, F)).
    :param hidden: embedding width.
    :param key_features: instance feature indices of the linear key path.
    :param key_scale: multiplies the key features (logit gaps of a few units from feature gaps of
        ~0.1 need weights of ~10–50; Adam moves a weight by about the learning rate per step).
    """

    def __init__(
        self,
        observation_space: gym.spaces.Dict,
        hidden: int = 32,
        key_features: tuple[int, ...] = (9, 10, 0),
        key_scale: float = 10.0,
    ):
        keys = {"request", "instances"}
        if not isinstance(observation_space, gym.spaces.Dict) or set(observation_space) != keys:
            raise ValueError(
                f"RoutingScorer needs a Dict observation with keys {sorted(keys)}, got "
                f"{observation_space}"
            )
        m, n_inst = observation_space["instances"].shape
        (n_req,) = observation_space["request"].shape
        if any(not 0 <= k < n_inst for k in key_features):
            raise ValueError(f"key_features {key_features} outside the {n_inst} instance features")
        value_dim = 2 * hidden + n_req
        super().__init__(observation_space, features_dim=m + value_dim)
        self.M = m
        self.action_scores_dim = m
        self.value_dim = value_dim
        self.key_features = list(key_features)
        self.key_scale = float(key_scale)
        h = hidden
        self.inst_in = _mlp(n_inst + n_req, h, h)
        self.inst_ctx = _mlp(3 * h, h, h)
        self.score_out = nn.Linear(h, 1)
        nn.init.zeros_(self.score_out.weight)
        nn.init.zeros_(self.score_out.bias)
        self.key_linear = nn.Linear(len(key_features), 1, bias=False)
        self.inst_linear = nn.Linear(n_inst, 1, bias=False)
        nn.init.zeros_(self.inst_linear.weight)

    def forward(self, observations: dict[str, th.Tensor]) -> th.Tensor:
        inst, req = observations["instances"], observations["request"]
        b, m, _ = inst.shape
        ones = inst.new_ones(b, m)
        e = self.inst_in(th.cat([inst, req.unsqueeze(1).expand(b, m, req.shape[-1])], dim=-1))
        pool = masked_pool(e, ones)
        c = self.inst_ctx(th.cat([e, pool.unsqueeze(1).expand(b, m, -1)], dim=-1))
        score = (
            self.score_out(c).squeeze(-1)
            + self.key_linear(inst[..., self.key_features] * self.key_scale).squeeze(-1)
            + self.inst_linear(inst).squeeze(-1)
        )
        return th.cat([score, masked_pool(c, ones), req], dim=-1)


class SetPoolingExtractor(BaseFeaturesExtractor):
    """Generic extractor for a ``Dict`` of padded sets and flat vectors.

    Every 2-D ``Box`` (N, F) is a set: a shared MLP embeds each row, then a masked mean + max
    pool (in a set named in ``valid_columns``, rows whose flag column is 0 are padding; other
    sets count every row) makes it permutation-invariant. Every other ``Box`` is flattened. The
    results are concatenated.

    :param observation_space: a ``Dict`` of ``Box`` spaces.
    :param hidden: row embedding width.
    :param valid_columns: set key -> feature index of its validity flag (e.g. ``{"slots": 0}``).
    """

    def __init__(
        self,
        observation_space: gym.spaces.Dict,
        hidden: int = 64,
        valid_columns: dict[str, int] | None = None,
    ):
        if not isinstance(observation_space, gym.spaces.Dict):
            raise ValueError(
                f"SetPoolingExtractor needs a Dict observation, got {observation_space}"
            )
        sets, flats, dim = [], [], 0
        for key, space in observation_space.items():
            if not isinstance(space, gym.spaces.Box):
                raise ValueError(f"observation {key!r} is {space}; only Box entries are supported")
            if len(space.shape) == 2:
                sets.append(key)
                dim += 2 * hidden
            else:
                flats.append(key)
                dim += int(np.prod(space.shape))
        super().__init__(observation_space, features_dim=dim)
        self.sets, self.flats = sets, flats
        self.valid_columns = dict(valid_columns or {})
        unknown = set(self.valid_columns) - set(sets)
        if unknown:
            raise ValueError(f"valid_columns names {sorted(unknown)}, which are not sets: {sets}")
        self.encoders = nn.ModuleDict(
            {k: _mlp(observation_space[k].shape[1], hidden, hidden) for k in sets}
        )

    def forward(self, observations: dict[str, th.Tensor]) -> th.Tensor:
        parts = []
        for key in self.sets:
            x = observations[key]
            if key in self.valid_columns:
                valid = (x[..., self.valid_columns[key]] > 0).to(x.dtype)
            else:
                valid = x.new_ones(x.shape[:2])
            parts.append(masked_pool(self.encoders[key](x), valid))
        for key in self.flats:
            parts.append(observations[key].reshape(observations[key].shape[0], -1))
        return th.cat(parts, dim=-1)


class PDClusterTwoStepScorer(PDClusterScorer):
    """:class:`PDClusterScorer` for ``servegym/PDCluster-v1``'s two-step action space.

    Output = ``[scores (n), value features]`` with n = max(K + 1, P·D) = the env's
    ``Discrete(n)``. At a slot step (``step`` = (1, 0)) score k < K is ``slot(k)`` and score K
    (keep) a linear function of the value features; at a pair step (``step`` = (0, 1)) score
    ``p·D + d`` is ``pair(k*, p, d)``'s log-probability for the selected slot k* (``selected``),
    with r read from ``pair`` and best_k from ``slots[:, 11]``. Both are the parent's functions
    with the parent's parameters, so the flat policy's factorisation "which call" × "which pair
    for it" becomes the two steps; a flat-space checkpoint's extractor weights load into it
    (``keep_out`` is new). Scores past a step's own width are 0 and masked by the env.

    :param observation_space: the two-step ``Dict`` space (keys ``slots``, ``instances``,
        ``stage``, ``step``, ``selected``, ``pair``).
    :param hidden: as in :class:`PDClusterScorer`.
    :param ratio_scale: as in :class:`PDClusterScorer`.
    """

    def __init__(
        self, observation_space: gym.spaces.Dict, hidden: int = 32, ratio_scale: float = 100.0
    ):
        keys = {"slots", "instances", "stage", "step", "selected", "pair"}
        if not isinstance(observation_space, gym.spaces.Dict) or set(observation_space) != keys:
            raise ValueError(
                f"PDClusterTwoStepScorer needs a Dict observation with keys {sorted(keys)}, got "
                f"{observation_space}"
            )
        k = observation_space["selected"].shape[0]
        p, d = observation_space["pair"].shape
        flat = gym.spaces.Dict(
            {
                "slots": observation_space["slots"],
                "instances": observation_space["instances"],
                "stage": observation_space["stage"],
                "ratio": gym.spaces.Box(0.0, 5.0, (k, p, d), np.float32),
            }
        )
        super().__init__(flat, hidden=hidden, ratio_scale=ratio_scale, sparse=True)
        n_step = observation_space["step"].shape[0]
        self.n_actions = max(k + 1, p * d)
        self.action_scores_dim = self.n_actions
        self.value_dim = self.value_dim + n_step
        self._features_dim = self.n_actions + self.value_dim
        self._observation_space = observation_space
        self.keep_out = nn.Linear(self.value_dim, 1)
        nn.init.zeros_(self.keep_out.weight)
        nn.init.zeros_(self.keep_out.bias)

    def forward(self, observations: dict[str, th.Tensor]) -> th.Tensor:
        slots, inst = observations["slots"], observations["instances"]
        stage, step = observations["stage"], observations["step"]
        b, n = slots.shape[0], self.n_actions
        valid = slots[..., 0]
        s = _mlp_rows_shared(self.slot_in, slots, stage)
        s = _mlp_rows_shared(self.slot_ctx, s, masked_pool(s, valid))
        e_p, e_d, pool_p, pool_d = self.encode_instances(inst)
        best = slots[..., 11] * 5.0
        slot_skip = th.cat([slots, best.unsqueeze(-1) * self.ratio_scale], dim=-1)
        slot_logit = self.slot_out(s).squeeze(-1) + self.slot_linear(slot_skip).squeeze(-1)
        value = th.cat([masked_pool(s, valid), pool_p, stage, pool_d, step], dim=-1)
        slot_scores = th.cat([slot_logit, self.keep_out(value)], dim=-1)
        slot_scores = nn.functional.pad(slot_scores, (0, n - slot_scores.shape[1]))
        bi = th.arange(b, device=slots.device)
        sel = observations["selected"].argmax(dim=-1)
        ratio = observations["pair"]
        pair = self._pair_log_probs(
            ratio,
            best[bi, sel],
            ratio > 0,
            self.to_hidden_slot(s[bi, sel]),
            self.to_hidden_p(e_p),
            self.to_hidden_d(e_d),
        ).reshape(b, -1)
        pair_scores = nn.functional.pad(pair, (0, n - pair.shape[1]))
        scores = th.where(step[:, 1:2] > 0.5, pair_scores, slot_scores)
        return th.cat([scores, value], dim=-1)
