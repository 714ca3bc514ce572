"""Request features for the learned predictors (GoodServe §3.2: TF-IDF of the prompt text).

Feature vector = scikit-learn TF-IDF of the prompt (word 1- and 2-grams seen in >= 2 training
prompts, sublinear tf, l2-normalised) ++ standardised log(1 + input tokens) ++ one-hot task label
(tasks of the training set; an unseen task is all zeros). The two extra features are ours: they
let a call without prompt text (empty text gives an all-zero TF-IDF part) still be told apart by
length and task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

from envs.common.predictors.base import prompt_of, task_of

_TFIDF_PARAMS: dict[str, Any] = {"ngram_range": (1, 2), "min_df": 2, "sublinear_tf": True}


class Featurizer:
    """Fitted feature map from calls to dense float32 vectors.

    :param vectorizer: a fitted :class:`TfidfVectorizer`.
    :param tasks: task labels in one-hot order.
    :param log_input_mean: mean of log(1 + input tokens) over the training calls.
    :param log_input_std: its standard deviation.
    """

    def __init__(
        self,
        vectorizer: TfidfVectorizer,
        tasks: Sequence[str],
        log_input_mean: float,
        log_input_std: float,
    ):
        self.vectorizer = vectorizer
        self.tasks = tuple(tasks)
        self._task_index = {t: i for i, t in enumerate(self.tasks)}
        self.log_input_mean = float(log_input_mean)
        self.log_input_std = float(log_input_std)
        self._analyze = vectorizer.build_analyzer()
        self._vocabulary: dict[str, int] = dict(vectorizer.vocabulary_)
        self._idf = np.asarray(vectorizer.idf_, dtype=np.float64)
        self._text_dim = len(self._vocabulary)

    @classmethod
    def fit(cls, calls: Sequence[Any]) -> Featurizer:
        """Fit TF-IDF vocabulary and idf, the task list and the input scaling on ``calls``."""
        vec = TfidfVectorizer(dtype=np.float32, **_TFIDF_PARAMS)
        vec.fit([prompt_of(c) for c in calls])
        logs = np.log1p([c.input_tokens for c in calls])
        tasks = sorted({task_of(c) for c in calls})
        return cls(vec, tasks, float(logs.mean()), float(logs.std()) or 1.0)

    @property
    def dim(self) -> int:
        return len(self.vectorizer.vocabulary_) + 1 + len(self.tasks)

    def transform(self, calls: Sequence[Any]) -> np.ndarray:
        """(n, dim) float32 features of ``calls``.

        The TF-IDF part is computed row by row with the fitted vectorizer's own analyzer,
        vocabulary and idf, in the same arithmetic as scikit-learn's
        ``TfidfVectorizer.transform`` (float32 counts, ``log(tf) + 1``, times the float64 idf
        rounded to float32, divided by the row's l2 norm summed in float64 in column order), so
        the result is bit-identical to it (``tests/envs/test_predictors.py``) without its per-call
        validation overhead (~1 ms per call, on the router's per-arrival path).
        """
        out = np.zeros((len(calls), self.dim), dtype=np.float32)
        base = self._text_dim
        for i, c in enumerate(calls):
            self._tfidf_row(prompt_of(c), out[i])
            out[i, base] = (np.log1p(c.input_tokens) - self.log_input_mean) / self.log_input_std
            j = self._task_index.get(task_of(c))
            if j is not None:
                out[i, base + 1 + j] = 1.0
        return out

    def _tfidf_row(self, text: str, row: np.ndarray) -> None:
        """Write the l2-normalised sublinear TF-IDF of ``text`` into ``row[:vocabulary size]``."""
        vocabulary = self._vocabulary
        counts: dict[int, int] = {}
        for term in self._analyze(text):
            j = vocabulary.get(term)
            if j is not None:
                counts[j] = counts.get(j, 0) + 1
        if not counts:
            return
        cols = np.fromiter(sorted(counts), dtype=np.int64, count=len(counts))
        v = np.fromiter((counts[j] for j in cols.tolist()), dtype=np.float32, count=len(cols))
        np.log(v, out=v)
        v += 1.0
        v *= self._idf[cols]  # computed in float64, stored as float32 (sklearn's in-place op)
        # sklearn's inplace_csr_row_normalize_l2: float32 squares accumulated in a double, in
        # column order; cumsum keeps that order (np.sum would sum pairwise).
        sq = (v * v).astype(np.float64)
        norm = float(np.sqrt(np.cumsum(sq)[-1]))
        if norm == 0.0:
            return
        row[cols] = v.astype(np.float64) / norm  # double division, as sklearn's C loop

    def to_state(self) -> dict[str, Any]:
        """JSON-able state (vocabulary, idf, tasks, scaling) for the disk cache."""
        return {
            "vocabulary": {k: int(v) for k, v in self.vectorizer.vocabulary_.items()},
            "idf": [float(x) for x in self.vectorizer.idf_],
            "tasks": list(self.tasks),
            "log_input_mean": self.log_input_mean,
            "log_input_std": self.log_input_std,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Featurizer:
        """Rebuild a fitted featurizer from :meth:`to_state` without refitting."""
        vec = TfidfVectorizer(dtype=np.float32, vocabulary=state["vocabulary"], **_TFIDF_PARAMS)
        vec.idf_ = np.asarray(state["idf"], dtype=np.float64)
        vec.vocabulary_ = dict(state["vocabulary"])
        return cls(vec, state["tasks"], state["log_input_mean"], state["log_input_std"])
