"""Loaders of the public trace formats into servegym records, and a registry by name.

Every loader reads its raw files at run time from the data directory (``data_dir`` argument,
else ``$SERVEGYM_DATA``; see :mod:`traces.data` and ``traces-raw/SOURCES.md``) and has the
signature ``(data_dir=None, *, model=<catalog model>, limit=None, **options) -> list[Record]``.
The output is sorted by arrival, arrivals start at 0 s, and model names are catalog names, so
it passes :func:`traces.validate.validate_records`.

=======================  ========  ==========================================================
name                     records   source (SOURCES.md section)
=======================  ========  ==========================================================
mooncake-conversation    Request   Mooncake Kimi chat, 1 h (§1)
mooncake-synthetic       Request   Mooncake synthetic, Poisson arrivals (§1)
azure-code               Request   Azure LLM inference 2023, code (§2)
ragpulse                 Workflow  RAGPulse RAG service, 1 week: embed/retrieve/rerank/generate
bfcl                     Workflow  BFCL v4 function-calling tasks (§7), Poisson arrivals
lats                     Workflow  LATS / ToT tree-search logs (§11), Poisson arrivals
parrot-metagpt           Workflow  Parrot MetaGPT multi-agent run, layered fan-out (§10)
=======================  ========  ==========================================================

The Mooncake tool-agent trace and the Azure conversation trace are not in the traces-raw
snapshot; :func:`~traces.loaders.mooncake.load_mooncake` (``trace="toolagent"``) and
:func:`~traces.loaders.azure.load_azure` (``trace="conversation"``) read them if downloaded.

Add a loader: write ``traces/loaders/<source>.py`` with a ``load_<source>`` function of the
signature above and register it in :data:`LOADERS`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from traces.loaders._common import FilteredRecordsWarning
from traces.loaders.azure import load_azure
from traces.loaders.bfcl import load_bfcl
from traces.loaders.lats import load_lats
from traces.loaders.mooncake import load_mooncake
from traces.loaders.parrot import load_parrot_metagpt
from traces.loaders.ragpulse import load_ragpulse
from traces.schema import Record

#: Loader name -> loader callable ``(data_dir=None, *, model=..., limit=None, **kw)``.
LOADERS: dict[str, Callable[..., list[Record]]] = {
    "mooncake-conversation": partial(load_mooncake, trace="conversation"),
    "mooncake-synthetic": partial(load_mooncake, trace="synthetic"),
    "azure-code": partial(load_azure, trace="code"),
    "ragpulse": load_ragpulse,
    "bfcl": load_bfcl,
    "lats": load_lats,
    "parrot-metagpt": load_parrot_metagpt,
}


def load(name: str, **kwargs: Any) -> list[Record]:
    """Run the loader registered as ``name``.

    :param name: a key of :data:`LOADERS`, e.g. ``"mooncake-conversation"``.
    :param kwargs: passed to the loader (``data_dir``, ``model``, ``limit``, loader options).
    :return: the loaded records, sorted by arrival.
    :raises KeyError: naming the unknown loader and listing the known names.
    """
    try:
        loader = LOADERS[name]
    except KeyError:
        raise KeyError(f"unknown trace loader {name!r}; known loaders: {sorted(LOADERS)}") from None
    return loader(**kwargs)


__all__ = ["LOADERS", "FilteredRecordsWarning", "load"]
