"""A factorised (slot, then pair) action head for ``servegym/PDCluster-v0``.

PDCluster's flat action is a = k·P·D + p·D + d. :class:`agents.policies.ActionScoresPolicy`
scores every one of the K·P·D actions (16,384 at K = 256 on Hetero-1) and normalises them in one
softmax. Its scores already factorise (``PDClusterScorer``: score = slot(k) + log-softmax over
the legal pairs of pair(k, ·, ·)), so the same distribution is

    π(k, p, d) = softmax over open slots of slot(k) × softmax over k's legal pairs of pair(k, p, d)

and this module computes it that way (HexAgent's two decisions, §5.3 Algorithm 1: which call,
then which pair for it): sampling draws the slot first, then the pair of that slot only;
``log_prob`` of a stored action needs the pair scores of its slot only. A forward pass
therefore never builds the K × P·D per-action hidden layer, only the slot logits and the P·D
pair scores of one slot per observation; the slot encoder itself runs on the valid slots only
(:func:`encode_valid_slots`; padding slots have no legal action).

Same parameters, same distribution: :class:`FactoredActionPolicy` reads the same
:class:`agents.extractors.PDClusterScorer`, so a checkpoint of either policy class loads into
the other, and for an action mask equal to the observation's legal pairs (the env's, r > 0
exactly where legal) the log-probabilities agree up to float rounding
(``tests/agents/test_factored_policy.py``). What differs, by design:

* **deterministic action** = the most likely slot, then its most likely pair (greedy per head),
  not the joint argmax over all K·P·D actions (which would need every slot's pair scores);
* **entropy** is not computed analytically (it would need every slot's pair scores too):
  ``evaluate_actions`` returns None and MaskablePPO uses its documented estimate −mean(log π(a))
  for the entropy loss (identical in expectation on on-policy samples; with the default
  ``ent_coef = 0`` it is only logged).

Registered as the algorithm ``maskable-ppo-factored`` (:mod:`agents.algos`); ``maskable-ppo``
keeps the flat head. Its rollout buffer (:mod:`agents.factored_buffer`) keeps, per step, the
taken slot's ``ratio`` and mask rows and which slots are open instead of the K·P·D ``ratio``
observation and mask; ``evaluate_actions`` takes either and gives the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.preprocessing import is_image_space, preprocess_obs
from torch import nn

from agents.extractors import PDClusterScorer, mlp_tail
from agents.factored_buffer import TakenSlotRows
from agents.policies import value_mlp

#: Logit of a masked slot or pair (sb3-contrib's masking constant).
MASKED_LOGIT = -1e8

#: ``slot of each batch element (B,) -> (B, P·D)`` pair log-probabilities of those slots.
PairScores = Callable[[th.Tensor], th.Tensor]


def _rows_shared(
    mlp: nn.Sequential, rows: th.Tensor, shared: th.Tensor, bi: th.Tensor
) -> th.Tensor:
    """``mlp(cat([rows, shared[bi]], -1))`` for gathered rows (N, F) of batch elements ``bi``;
    the shared part's first layer is computed once per batch element (as
    ``agents.extractors._mlp_rows_shared`` does for padded rows)."""
    first: nn.Linear = mlp[0]  # type: ignore[assignment]
    n = rows.shape[-1]
    x = nn.functional.linear(rows, first.weight[:, :n])
    x = x + nn.functional.linear(shared, first.weight[:, n:], first.bias)[bi]
    return mlp_tail(mlp, x)


def _segment_count(bi: th.Tensor, b: int, dtype: th.dtype) -> th.Tensor:
    """(b,) the number of rows of each batch element (``bi``: the element of each row)."""
    return th.zeros(b, dtype=dtype, device=bi.device).index_add_(
        0, bi, th.ones_like(bi, dtype=dtype)
    )


def _segment_pool(x: th.Tensor, bi: th.Tensor, count: th.Tensor) -> th.Tensor:
    """Mean and max of the rows ``x`` (N, H) of each batch element (``bi``), (b, 2H) for the
    ``count`` (b,) rows of each (:func:`_segment_count`); 0 for an element without rows:
    ``agents.extractors.masked_pool`` of the valid rows only."""
    b, h = count.shape[0], x.shape[1]
    mean = x.new_zeros(b, h).index_add_(0, bi, x) / count.clamp(min=1.0)[:, None]
    neg = th.finfo(x.dtype).min
    mx = x.new_full((b, h), neg).scatter_reduce(
        0, bi[:, None].expand(-1, h), x, reduce="amax", include_self=True
    )
    mx = th.where(count[:, None] > 0, mx, th.zeros_like(mx))
    return th.cat([mean, mx], dim=-1)


class SlotEncoding(NamedTuple):
    """:func:`encode_valid_slots` of a batch of B observations (K slots, N valid ones).

    :param ratio: (B, K, P, D) the observation's ``ratio`` (None when the batch carries the taken
        slots' rows only, :class:`agents.factored_buffer.TakenSlotRows`).
    :param best: (B, K) best_k, log1p of the slot's best legal ratio.
    :param hs_rows: (N + 1, hidden) W_s s_k + b of the valid slots, then a zero row.
    :param row_of: (B, K) the row of ``hs_rows`` of each slot (N, the zero row, for padding).
    :param hp: (B, P, hidden) W_p e_p.
    :param hd: (B, D, hidden) W_d e_d.
    :param slot_logit: (B, K) slot(k) of the score (:data:`MASKED_LOGIT` for padding slots).
    :param value: (B, value_dim) the critic features.
    """

    ratio: th.Tensor | None
    best: th.Tensor
    hs_rows: th.Tensor
    row_of: th.Tensor
    hp: th.Tensor
    hd: th.Tensor
    slot_logit: th.Tensor
    value: th.Tensor


def encode_valid_slots(fe: PDClusterScorer, observations: dict[str, th.Tensor]) -> SlotEncoding:
    """:meth:`PDClusterScorer.encode` computed on the valid slots only (``slots[:, 0] == 1``;
    ~4 of K = 256 in a PDCluster observation on the mixed workload): the slot MLPs, pools, slot
    logits and W_s s_k run on the gathered valid rows. Padding slots have no legal action, so
    nothing the policy uses changes (their slot logit is set to :data:`MASKED_LOGIT` and their
    W_s s_k to 0 instead of values no action can use); the rest equals ``encode`` up to float
    rounding (the pools sum in another order). W_s s_k stays in rows (``hs_rows``, indexed by
    ``row_of``) instead of a (B, K, hidden) tensor that the pair head would only gather from.
    ``observations["ratio"]`` is optional (not read here)."""
    slots, inst, stage = observations["slots"], observations["instances"], observations["stage"]
    b, k = slots.shape[:2]
    bi, ki = (slots[..., 0] > 0).nonzero(as_tuple=True)
    rows = slots[bi, ki]
    s = _rows_shared(fe.slot_in, rows, stage, bi)
    count = _segment_count(bi, b, s.dtype)
    s = _rows_shared(fe.slot_ctx, s, _segment_pool(s, bi, count), bi)
    e_p, e_d, pool_p, pool_d = fe.encode_instances(inst)
    best = slots[..., 11] * 5.0  # log1p(min legal R), see the env docstring
    skip = th.cat([rows, (best[bi, ki] * fe.ratio_scale)[:, None]], dim=-1)
    logit_rows = fe.slot_out(s).squeeze(-1) + fe.slot_linear(skip).squeeze(-1)
    slot_logit = slots.new_full((b, k), MASKED_LOGIT).index_put((bi, ki), logit_rows)
    hs_rows = fe.to_hidden_slot(s)
    n = hs_rows.shape[0]
    hs_rows = th.cat([hs_rows, hs_rows.new_zeros(1, hs_rows.shape[1])])
    row_of = th.full((b, k), n, dtype=th.long, device=slots.device).index_put(
        (bi, ki), th.arange(n, device=slots.device)
    )
    value = th.cat([_segment_pool(s, bi, count), pool_p, stage], dim=-1)
    value = th.cat([value, pool_d], dim=-1)
    hp, hd = fe.to_hidden_p(e_p), fe.to_hidden_d(e_d)
    return SlotEncoding(observations.get("ratio"), best, hs_rows, row_of, hp, hd, slot_logit, value)


def pair_log_probs(
    fe: PDClusterScorer, enc: SlotEncoding, slot: th.Tensor, ratio_rows: th.Tensor | None = None
) -> th.Tensor:
    """(B, P·D) log-probabilities of the pairs of slot ``slot[b]`` of each batch element b
    (:meth:`PDClusterScorer.pair_log_probs` with one slot per element: log_softmax over the
    legal pairs, 0 at illegal ones), from those slots' ``ratio`` rows ``ratio_rows`` (B, P, D)
    (default: read from ``enc.ratio``). One slot per element, so the instance terms W_p e_p and
    W_d e_d are used as they are, not gathered per row."""
    bi = th.arange(slot.shape[0], device=slot.device)
    r = enc.ratio[bi, slot] if ratio_rows is None else ratio_rows  # type: ignore[index]
    hs = enc.hs_rows[enc.row_of[bi, slot]]
    out = fe._pair_log_probs(r, enc.best[bi, slot], r > 0, hs, enc.hp, enc.hd)
    return out.flatten(1)


def open_slots(masks: th.Tensor) -> th.Tensor:
    """(B, K) bool: slots of ``masks`` (B, K, n_pairs) bool with a legal pair. With n_pairs a
    multiple of 8 a row is read as 8-byte words (each >= 0, as a bool byte is 0 or 1) and their
    max taken: the same result as ``masks.any(-1)``, which is ~20x slower on bools here."""
    if masks.shape[-1] % 8 == 0 and masks.is_contiguous() and masks.storage_offset() % 8 == 0:
        return masks.view(th.int64).amax(dim=-1) > 0
    return masks.any(dim=-1)


def _categorical_sample(logits: th.Tensor) -> th.Tensor:
    """One draw per row of ``th.distributions.Categorical(logits=logits).sample()`` for 2-D
    ``logits``, by the same three operations (normalise by ``logsumexp``, ``softmax``,
    ``multinomial``), so the same draws for the same RNG state
    (``tests/agents/test_factored_buffer.py`` checks it), without the distribution object's argument
    validation and shape bookkeeping (~100 µs per call, as much as the draw itself)."""
    probs = th.softmax(logits - logits.logsumexp(dim=-1, keepdim=True), dim=-1)
    return th.multinomial(probs, 1, True).reshape(-1)


class FactoredMaskableDistribution:
    """π(a) = π_slot(k) · π_pair(j | k) over flat actions a = k·n_pairs + j (module docstring).

    :param slot_logits: (B, K) unnormalised slot scores.
    :param pair_scores: the pair log-probabilities of given (batch, slot) rows.
    :param n_pairs: P·D, pairs per slot.
    """

    def __init__(self, slot_logits: th.Tensor, pair_scores: PairScores, n_pairs: int):
        self.slot_logits = slot_logits
        self.pair_scores = pair_scores
        self.n_pairs = int(n_pairs)
        self.masks: th.Tensor | None = None  # (B, K, n_pairs) bool
        self._taken_pair_mask: th.Tensor | None = None  # (B, n_pairs) bool, see apply_taken
        self.slot_log_probs = th.log_softmax(slot_logits, dim=-1)
        self._sampled: tuple[th.Tensor, th.Tensor] | None = None  # (actions, their log π)

    def apply_masking(self, masks: np.ndarray | th.Tensor | None) -> None:
        """Restrict to the legal flat actions ``masks`` ((B, K·n_pairs) or (K·n_pairs,) bool):
        a slot is open when any of its pairs is legal; a slot's pairs are renormalised over its
        legal ones.

        :raises ValueError: if the mask has the wrong size.
        """
        self._sampled = None
        self._taken_pair_mask = None
        if masks is None:
            self.masks = None
            self.slot_log_probs = th.log_softmax(self.slot_logits, dim=-1)
            return
        b, k = self.slot_logits.shape
        m = th.as_tensor(masks, dtype=th.bool, device=self.slot_logits.device)
        if m.numel() != b * k * self.n_pairs:
            raise ValueError(
                f"action mask has {m.numel()} entries, expected batch {b} x {k} slots x "
                f"{self.n_pairs} pairs = {b * k * self.n_pairs}"
            )
        self.masks = m.reshape(b, k, self.n_pairs)
        self._mask_slots(open_slots(self.masks))

    def apply_taken(self, slot_open: th.Tensor, pair_mask: th.Tensor) -> None:
        """The same restriction given only what :meth:`log_prob` of the actions taken needs
        (:class:`agents.factored_buffer.TakenSlotRows`): ``slot_open`` (B, K) bool, the slots
        with a legal pair, and ``pair_mask`` (B, n_pairs) bool, the mask row of each batch
        element's taken slot. Afterwards only :meth:`log_prob` of those actions is defined.

        :raises ValueError: if the shapes do not match the slot logits.
        """
        b, k = self.slot_logits.shape
        if tuple(slot_open.shape) != (b, k) or tuple(pair_mask.shape) != (b, self.n_pairs):
            raise ValueError(
                f"taken-slot masks of shapes {tuple(slot_open.shape)} and "
                f"{tuple(pair_mask.shape)}, expected {(b, k)} and {(b, self.n_pairs)}"
            )
        self._sampled = None
        self.masks = None
        self._taken_pair_mask = pair_mask
        self._mask_slots(slot_open)

    def _mask_slots(self, open_slot: th.Tensor) -> None:
        logits = th.where(open_slot, self.slot_logits, th.full_like(self.slot_logits, MASKED_LOGIT))
        self.slot_log_probs = th.log_softmax(logits, dim=-1)

    def _pair_log_probs(self, slot: th.Tensor) -> th.Tensor:
        """(B, n_pairs) log π_pair(· | slot[b]) for every batch element b."""
        if self.masks is not None:
            mask = self.masks[th.arange(slot.shape[0], device=slot.device), slot]
        else:
            mask = self._taken_pair_mask
        scores = self.pair_scores(slot)
        if mask is not None:
            scores = th.where(mask, scores, th.full_like(scores, MASKED_LOGIT))
        return th.log_softmax(scores, dim=-1)

    def get_actions(self, deterministic: bool = False) -> th.Tensor:
        """Flat actions: a slot (argmax or a draw), then a pair of that slot (likewise).

        :raises RuntimeError: after :meth:`apply_taken` (the other slots' masks are unknown).
        """
        if self._taken_pair_mask is not None:
            raise RuntimeError("apply_taken() keeps the taken slots' masks only: cannot act")
        if deterministic:
            slot = self.slot_log_probs.argmax(dim=-1)
        else:
            slot = _categorical_sample(self.slot_log_probs)
        pair_lp = self._pair_log_probs(slot)
        if deterministic:
            pair = pair_lp.argmax(dim=-1)
        else:
            pair = _categorical_sample(pair_lp)
        actions = slot * self.n_pairs + pair
        bi = th.arange(slot.shape[0], device=slot.device)
        self._sampled = (actions, self.slot_log_probs[bi, slot] + pair_lp[bi, pair])
        return actions

    def sample(self) -> th.Tensor:
        return self.get_actions(deterministic=False)

    def mode(self) -> th.Tensor:
        return self.get_actions(deterministic=True)

    def log_prob(self, actions: th.Tensor) -> th.Tensor:
        """(B,) log π(a) = log π_slot(k) + log π_pair(j | k)."""
        if self._sampled is not None and actions is self._sampled[0]:
            return self._sampled[1]
        actions = actions.long().reshape(-1)
        slot = th.div(actions, self.n_pairs, rounding_mode="floor")
        pair = actions - slot * self.n_pairs
        bi = th.arange(actions.shape[0], device=actions.device)
        return self.slot_log_probs[bi, slot] + self._pair_log_probs(slot)[bi, pair]

    def entropy(self) -> None:
        """None: see the module docstring (MaskablePPO then estimates it from log π(a))."""
        return None


class CriticMLP(nn.Module):
    """SB3 ``mlp_extractor`` of :class:`FactoredActionPolicy`: the critic MLP over the
    encoding's value features. The actor has no latent (its scores come from the extractor),
    so ``latent_dim_pi`` is 1 and SB3's discarded ``action_net`` stays tiny (a flat head would
    be a K·P·D × K·P·D Linear, ~1 GB at K = 256).

    :param value_dim: critic input features.
    :param vf_arch: hidden layer widths.
    :param activation_fn: activation between layers.
    """

    def __init__(self, value_dim: int, vf_arch: list[int], activation_fn: type[nn.Module]):
        super().__init__()
        self.value_net, self.latent_dim_vf = value_mlp(value_dim, vf_arch, activation_fn)
        self.latent_dim_pi = 1


class FactoredActionPolicy(MaskableActorCriticPolicy):
    """MaskablePPO policy with the factorised head (module docstring) over a
    :class:`agents.extractors.PDClusterScorer` (:func:`encode_valid_slots` and its
    ``pair_log_probs``). ``net_arch`` sets the critic MLP (a list or ``dict(vf=[...])``);
    ``ortho_init`` defaults to False, as for :class:`agents.policies.ActionScoresPolicy`.
    """

    def __init__(self, *args: Any, ortho_init: bool = False, **kwargs: Any):
        super().__init__(*args, ortho_init=ortho_init, **kwargs)

    def _build_mlp_extractor(self) -> None:
        fe = self.features_extractor
        if not isinstance(fe, PDClusterScorer):
            raise ValueError(
                f"{type(self).__name__} needs agents.extractors.PDClusterScorer as its features "
                f"extractor (servegym/PDCluster-v0), got {type(fe).__name__}"
            )
        n_actions = int(self.action_space.n)  # type: ignore[attr-defined]
        if fe.action_scores_dim != n_actions:
            raise ValueError(
                f"extractor covers {fe.action_scores_dim} actions but the env has {n_actions}"
            )
        arch = self.net_arch
        vf_arch = list(arch.get("vf", [])) if isinstance(arch, dict) else list(arch or [])
        self.mlp_extractor = CriticMLP(fe.value_dim, vf_arch, self.activation_fn)
        spaces_ = self.observation_space.spaces.values()  # type: ignore[attr-defined]
        self._float_boxes = all(
            isinstance(sp, gym.spaces.Box) and not is_image_space(sp) for sp in spaces_
        )

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        # The slot logits and pair scores come from the extractor: drop SB3's Linear head and
        # rebuild the optimizer without it.
        self.action_net = nn.Identity()
        self.optimizer = self.optimizer_class(
            self.parameters(),
            lr=lr_schedule(1),  # type: ignore[call-arg]
            **self.optimizer_kwargs,
        )

    def _encode(self, obs: Any) -> SlotEncoding:
        if self._float_boxes:  # what preprocess_obs does to non-image Box entries, in one step
            x = {key: value.float() for key, value in obs.items()}
        else:
            x = preprocess_obs(obs, self.observation_space, self.normalize_images)
        return encode_valid_slots(self.features_extractor, x)

    def _distribution(
        self, enc: SlotEncoding, ratio_rows: th.Tensor | None = None
    ) -> FactoredMaskableDistribution:
        fe = self.features_extractor

        def pair_scores(slot: th.Tensor) -> th.Tensor:
            return pair_log_probs(fe, enc, slot, ratio_rows)

        return FactoredMaskableDistribution(enc.slot_logit, pair_scores, fe.P * fe.D)

    def _value(self, enc: SlotEncoding) -> th.Tensor:
        return self.value_net(self.mlp_extractor.value_net(enc.value))

    def forward(
        self, obs: Any, deterministic: bool = False, action_masks: np.ndarray | None = None
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        enc = self._encode(obs)
        dist = self._distribution(enc)
        if action_masks is not None:
            dist.apply_masking(action_masks)
        actions = dist.get_actions(deterministic=deterministic)
        return actions, self._value(enc), dist.log_prob(actions)

    def evaluate_actions(
        self,
        obs: Any,
        actions: th.Tensor,
        action_masks: th.Tensor | TakenSlotRows | None = None,
    ) -> tuple[th.Tensor, th.Tensor, None]:
        """Values and log π(actions). ``action_masks`` is the flat mask, or the
        :class:`agents.factored_buffer.TakenSlotRows` of the actions (then ``obs`` needs no
        ``ratio``: the taken slots' rows come with them): the same numbers either way."""
        enc = self._encode(obs)
        if isinstance(action_masks, TakenSlotRows):
            dist = self._distribution(enc, action_masks.ratio)
            dist.apply_taken(action_masks.slot_open, action_masks.pair_mask)
        else:
            dist = self._distribution(enc)
            if action_masks is not None:
                dist.apply_masking(action_masks)
        return self._value(enc), dist.log_prob(actions), dist.entropy()

    def get_distribution(  # type: ignore[override]
        self, obs: Any, action_masks: np.ndarray | None = None
    ) -> FactoredMaskableDistribution:
        dist = self._distribution(self._encode(obs))
        if action_masks is not None:
            dist.apply_masking(action_masks)
        return dist

    def predict_values(self, obs: Any) -> th.Tensor:
        return self._value(self._encode(obs))
