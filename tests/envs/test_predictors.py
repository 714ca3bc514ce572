"""Specifications of the output-length predictors (``envs.common.predictors``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from envs.common.predictors import PREDICTORS, make_predictor
from envs.common.predictors.cache import clear_memory, config_key
from envs.common.predictors.data import Probe, _Node, goodserve_requests, probes

# Small training runs keep the file fast; the default configuration is measured by the report.
SMALL = {"train_count": 1200, "steps": 150, "hidden": 16}
TINY = {"train_count": 600, "steps": 60, "hidden": 8}
NON_ORACLE = [n for n in PREDICTORS if not n.startswith("oracle")]


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SERVEGYM_CACHE", str(tmp_path_factory.getbasetemp() / "predictors"))


@pytest.fixture(scope="module")
def test_calls() -> list[Probe]:
    return probes(goodserve_requests("test", 1000))


def probe(task: str, out: int, inp: int = 1000, prompt: str | None = None, uid: int = 0) -> Probe:
    return Probe(uid, _Node(task, prompt), inp, out)


@dataclass
class SealedCall:
    """A call whose true output length must not be read (it is unfinished)."""

    uid: int
    node: _Node
    input_tokens: int
    generated: int = 0

    @property
    def output_tokens(self) -> int:
        raise AssertionError("predictor read the truth of an unfinished call")


def test_registry_has_the_paper_predictors():
    assert {"oracle", "oracle-error", "task-mean", "history", "mlp", "moe"} <= set(PREDICTORS)


def test_unknown_predictor_name_lists_known_names():
    with pytest.raises(ValueError, match="unknown output predictor 'nope'.*moe"):
        make_predictor("nope")


def test_oracle_predicts_the_truth_and_its_residual():
    p = make_predictor("oracle")
    c = probe("sql", 40)
    c.generated = 15
    assert p.predict(c) == 40 and p.remaining(c) == 25


def test_oracle_error_is_deterministic_per_seed_and_within_band():
    calls = [probe("code", 1000, uid=i) for i in range(200)]
    a = [make_predictor("oracle-error", error=0.3, seed=7).predict(c) for c in calls[:1]]
    p1, p2 = (make_predictor("oracle-error", error=0.3, seed=7) for _ in range(2))
    x1 = np.array([p1.predict(c) for c in calls])
    x2 = np.array([p2.predict(c) for c in calls])
    assert (x1 == x2).all() and x1[0] == a[0]
    assert (x1 >= 700).all() and (x1 <= 1300).all() and len(set(x1)) > 50
    assert (x1 == np.array([p1.predict(c) for c in calls])).all()  # drawn once per call
    x3 = np.array([make_predictor("oracle-error", error=0.3, seed=8).predict(c) for c in calls])
    assert (x1 != x3).any()


def test_oracle_error_rejects_error_outside_unit_interval():
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        make_predictor("oracle-error", error=1.5)


def test_task_mean_matches_hand_computed_sequence_with_prior_before_observation():
    p = make_predictor("task-mean")
    got = []
    for task, out in [("sql", 10), ("sql", 21), ("code", 1000), ("sql", 30)]:
        got.append(p.predict(probe(task, out)))
        p.observe(probe(task, out))
    assert got == [256, 10, 256, round(31 / 2)]
    assert p.predict(probe("sql", 0)) == round(61 / 3)
    p.reset()
    assert p.predict(probe("sql", 0)) == 256


def test_history_uses_only_observed_calls_of_the_task():
    p = make_predictor("history", window=3)
    assert p.predict(probe("sql", 5)) == 256
    for out in (10, 20, 30, 1000):
        p.observe(probe("sql", out))
    assert p.predict(probe("sql", 0)) == 30  # median of the last 3: 20, 30, 1000
    assert p.predict(probe("code", 0)) == 30  # no code history: all-task window
    p.observe(probe("code", 500))
    assert p.predict(probe("code", 0)) == 500
    c = probe("sql", 0)
    c.generated = 25
    assert p.remaining(c) == round((30 + 1000) / 2 - 25)  # E[L - g | L > g] over the window


@pytest.mark.parametrize("name", NON_ORACLE)
def test_non_oracle_predictors_never_read_the_truth_of_unfinished_calls(name):
    p = make_predictor(name, **(SMALL if name in ("mlp", "moe", "moe-residual") else {}))
    for i, out in enumerate((12, 3000, 400)):
        p.observe(probe(("sql", "code", "swe")[i], out))
    for task, prompt in [("sql", "Write a simple lookup SQL query."), ("swe", None), ("x", "")]:
        c = SealedCall(1, _Node(task, prompt), 2000, generated=5)
        assert p.predict(c) >= 0
        assert p.remaining(c) >= 1
        assert len(p.predict_many([c, c])) == 2


@pytest.mark.parametrize("name", list(PREDICTORS))
def test_remaining_is_at_least_one_and_predicted_finish_never_moves_earlier(name, test_calls):
    """remaining(g) >= 1 while unfinished; the oracles' remaining never increases in g; the
    estimators' predicted finish g + remaining(g) never decreases in g.

    remaining itself need not decrease for learned / history predictors: their mean residual
    life E[L − g | L > g] grows with g on heavy-tailed outputs (and oracle-error's predicted
    finish moves earlier as an over-estimate's error shrinks with what is left). ``moe``
    re-predicts with a fresh network estimate at every g (GoodServe §3.4), so only its
    remaining >= 1 is required; ``moe-residual`` keeps the residual-life guarantee."""
    p = make_predictor(name, error=0.2, **(SMALL if name in ("mlp", "moe", "moe-residual") else {}))
    for c in test_calls[:50]:
        p.observe(c)
    for c in test_calls[100:130]:
        c = Probe(c.uid, c.node, c.input_tokens, c.output_tokens)
        left, finish = [], []
        for g in range(0, max(1, c.output_tokens), max(1, c.output_tokens // 37)):
            c.generated = g
            left.append(p.remaining(c))
            finish.append(g + left[-1])
        assert min(left) >= 1
        if name.startswith("oracle"):
            assert all(b <= a for a, b in zip(left, left[1:], strict=False))
        elif name != "moe":
            assert all(b >= a for a, b in zip(finish, finish[1:], strict=False))


def test_moe_training_is_reproducible_from_its_seed(test_calls):
    a = make_predictor("moe", use_cache=False, **TINY).predict_many(test_calls)
    b = make_predictor("moe", use_cache=False, **TINY).predict_many(test_calls)
    c = make_predictor("moe", use_cache=False, seed=1, **TINY).predict_many(test_calls)
    assert (a == b).all()
    assert (a != c).any()


def test_training_leaves_the_global_torch_rng_untouched():
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    make_predictor("mlp", use_cache=False, **TINY)
    assert torch.equal(torch.rand(3), expected)


def test_disk_cache_reloads_identical_predictions_and_retrains_a_corrupt_file(
    test_calls, tmp_path, monkeypatch
):
    monkeypatch.setenv("SERVEGYM_CACHE", str(tmp_path))
    clear_memory()
    first = make_predictor("mlp", **TINY).predict_many(test_calls)
    files = list(tmp_path.glob("mlp-*.npz"))
    assert len(files) == 1
    clear_memory()
    assert (make_predictor("mlp", **TINY).predict_many(test_calls) == first).all()
    files[0].write_bytes(b"not an npz")
    clear_memory()
    assert (make_predictor("mlp", **TINY).predict_many(test_calls) == first).all()
    clear_memory()


def test_cache_key_depends_on_the_configuration():
    assert config_key("moe", {"seed": 0}) != config_key("moe", {"seed": 1})
    assert config_key("moe", {"seed": 0}) == config_key("moe", {"seed": 0})


def test_learned_predictor_handles_calls_without_prompt_text():
    p = make_predictor("moe", **SMALL)
    short = p.predict(probe("sql", 0, inp=500, prompt=None))
    long = p.predict(probe("code", 0, inp=500, prompt=""))
    assert 0 <= short < long


def test_moe_beats_the_task_mean_predictor_on_the_test_split(test_calls):
    """The synthetic prompt text carries signal about the output length (GoodServe Fig. 8)."""
    truth = np.array([c.output_tokens for c in test_calls])
    moe = make_predictor("moe", **SMALL).predict_many(test_calls)
    tm = make_predictor("task-mean")
    online = []
    for c in test_calls:
        online.append(tm.predict(c))
        tm.observe(c)
    assert np.abs(moe - truth).mean() < 0.75 * np.abs(np.array(online) - truth).mean()
    assert np.abs(moe - truth).mean() < np.abs(256 - truth).mean()


def test_featurizer_tfidf_is_bit_identical_to_sklearns_transform(test_calls):
    """The per-call TF-IDF path (no sklearn validation) computes exactly sklearn's values."""
    from envs.common.predictors.base import prompt_of

    f = make_predictor("moe", **SMALL).featurizer
    vocab = sorted(f.vectorizer.vocabulary_)
    extra = [
        probe("sql", 0, prompt=None),  # no text: all-zero TF-IDF part
        probe("sql", 0, prompt="zzqx unseenword qqq"),  # only out-of-vocabulary terms
        probe("code", 0, prompt=" ".join([vocab[0]] * 7 + vocab[1:40:3])),  # repeated terms
        probe("chat", 0, prompt=vocab[5].upper() + ", " + vocab[9] + "!"),
    ]
    calls = list(test_calls) + extra
    ours = f.transform(calls)
    ref = f.vectorizer.transform([prompt_of(c) for c in calls]).toarray()
    text = ours[:, : ref.shape[1]]
    assert text.dtype == ref.dtype == np.float32
    assert np.array_equal(text, ref)
    assert np.count_nonzero(text[-2]) > 0 and not text[-4].any() and not text[-3].any()
    # one call at a time gives the same rows as the batch
    assert np.array_equal(f.transform(calls[:1])[0], ours[0])


def test_moe_batched_reprediction_equals_the_one_call_formula(test_calls):
    """remaining_many (one risk check's calls in one pass) = the §3.4 re-prediction of each call
    alone, MoE(features ++ standardised log(1 + g)) -> expm1, rounded, >= 1."""
    p = make_predictor("moe", **SMALL)
    rng = np.random.default_rng(0)
    calls = []
    for c in test_calls[:300]:
        g = int(rng.integers(1, 2 * c.output_tokens + 2)) if rng.random() < 0.8 else 0
        calls.append(Probe(c.uid, c.node, c.input_tokens, c.output_tokens, generated=g))
    got = p.remaining_many(calls)
    g_mean, g_std = p._g
    log_mean, log_std = p._re_log
    for c, left in zip(calls, got.tolist(), strict=True):
        if c.generated == 0:
            want = max(1, p.predict(c))
        else:
            gx = (np.log1p(c.generated) - g_mean) / g_std
            x = np.concatenate([p.featurizer.transform([c])[0], np.float32([gx])])[None, :]
            z = float(p.renet(x)[0]) * log_std + log_mean
            want = max(1, int(round(np.expm1(z))))
        assert left == want == p.remaining(c), (c, left, want)
    # the base default (one call at a time, in order) for a predictor without a batched net
    tm = make_predictor("task-mean")
    assert tm.remaining_many(calls).tolist() == [tm.remaining(c) for c in calls]


@pytest.mark.parametrize("name", ["moe", "mlp"])
def test_memoised_one_call_prediction_equals_the_batched_one(name, test_calls):
    """predict (memoised features, one row through the net) = predict_many over the batch."""
    p = make_predictor(name, **SMALL)
    calls = list(test_calls[:400])
    batch = p.predict_many(calls).tolist()
    assert [p.predict(c) for c in calls] == batch
    assert [p.predict(c) for c in calls] == batch  # again, from the memo
    assert bool(p._features) == (name == "moe")  # only the MoE keeps features for re-prediction
