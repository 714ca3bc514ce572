"""Text-to-token-count estimate for sources that record text but no token counts.

BFCL and the LATS logs store prompt and completion *text* only; no tokenizer can be downloaded
here, so their loaders convert characters to tokens with one calibrated factor,
:data:`TOKENS_PER_CHAR`.

Provenance of the factor: the only raw source that holds both text and the serving tokenizer's
counts for the same calls is the Parrot MetaGPT run (``parrot_metagpt/``, SOURCES.md §10): 57
gpt-4-32k calls (tokenizer ``cl100k_base``) with their prompt text (``system`` + ``user_msg``),
completion text and ``usage``. Over all 57 prompts and 57 completions,

    sum(prompt_tokens + completion_tokens) / sum(prompt_chars + completion_chars) = 0.2291

(prompts alone 0.2297, completions alone 0.2230; per-call ratios 0.19-0.29). The text is
English mixed with Python code. :func:`calibrate_tokens_per_char` recomputes the value from the
data directory, and ``tests/traces/test_loaders.py`` checks that it still matches the constant.

Caveats: ``cl100k_base`` (100k vocabulary) is close to the Llama-3 tokenizer (128k, also
tiktoken-based) on English and code; the Llama-2 tokenizer (32k vocabulary) produces more
tokens per character, and non-English text (e.g. the Chinese BFCL ``live_*`` questions) does
too. The prompt count includes a few tokens of chat-format overhead per message, which is why
the prompt ratio is slightly higher than the completion ratio.
"""

from __future__ import annotations

import json
from pathlib import Path

#: Tokens per character of text (cl100k_base, fitted on parrot_metagpt; see the module docstring).
TOKENS_PER_CHAR = 0.229

_PARROT_FILES = ("log_3_round.jsonl", "log_new_rounds.jsonl")


def estimate_tokens_from_chars(n_chars: int, *, tokens_per_char: float = TOKENS_PER_CHAR) -> int:
    """Estimate the token count of a text of ``n_chars`` characters.

    :param n_chars: text length in characters (>= 0).
    :param tokens_per_char: conversion factor in tokens per character.
    :return: estimated tokens, rounded; at least 1 for a non-empty text, 0 for an empty one.
    """
    if n_chars < 0:
        raise ValueError(f"n_chars must be >= 0, got {n_chars}")
    if n_chars == 0:
        return 0
    return max(1, round(n_chars * tokens_per_char))


def estimate_tokens(text: str, *, tokens_per_char: float = TOKENS_PER_CHAR) -> int:
    """Estimate the token count of ``text`` from its length in characters.

    :param text: the text.
    :param tokens_per_char: conversion factor in tokens per character.
    :return: estimated tokens (see :func:`estimate_tokens_from_chars`).
    """
    return estimate_tokens_from_chars(len(text), tokens_per_char=tokens_per_char)


def calibrate_tokens_per_char(parrot_dir: Path | str) -> float:
    """Recompute the tokens-per-character factor from the Parrot MetaGPT logs.

    :param parrot_dir: the ``parrot_metagpt`` directory (SOURCES.md §10).
    :return: sum of prompt and completion tokens over sum of their characters, over all calls.
    """
    tokens = 0
    chars = 0
    for name in _PARROT_FILES:
        path = Path(parrot_dir) / name
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                entry = json.loads(line)
                queries = {
                    k[: -len("_queries")]: v for k, v in entry.items() if k.endswith("_queries")
                }
                for rnd, calls in queries.items():
                    responses = entry.get(f"{rnd}_responses")
                    if responses is None:
                        raise ValueError(f"{path}:{lineno}: {rnd}_queries has no {rnd}_responses")
                    for call, query in calls.items():
                        resp = responses[call]
                        text = resp["choices"][0]["message"]["content"]
                        chars += len(query["system"]) + len(query["user_msg"]) + len(text)
                        tokens += (
                            resp["usage"]["prompt_tokens"] + resp["usage"]["completion_tokens"]
                        )
    if chars == 0:
        raise ValueError(f"no calls found in {parrot_dir}; expected {_PARROT_FILES}")
    return tokens / chars
