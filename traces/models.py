"""The LLM names a servegym trace may use unless told otherwise: the models of the simulator's
packaged catalog (``envs/configs/models.yaml``, :func:`envs.sim.hardware.catalog.model_names`).

They live here, below the simulator, so that validating a trace imports nothing above
``traces`` (the tower: ... -> ``envs.sim`` -> ``traces``); ``tests/traces/test_trace_schema.py``
checks that this list and the catalog agree, so adding a model to the catalog means adding its name
here. A trace for a catalog extended with your own YAML passes ``known_models`` explicitly
(``python -m traces.validate FILE --known-models a,b``).
"""

#: Model names of the packaged simulator catalog (sorted).
CATALOG_MODELS: frozenset[str] = frozenset(
    {
        "bge-reranker-base",
        "e5-base-v2",
        "llama2-70b",
        "llama2-7b",
        "llama3-70b",
        "llama3-8b",
        "llama3.1-70b",
        "llama3.1-8b",
        "llama3.1-8b-prm",
        "llama3.2-1b",
        "minimax-m2.5",
        "mistral-7b",
        "mixtral-8x7b",
        "qwen2-72b",
        "qwen2-7b",
        "qwen2.5-14b",
        "qwen3-235b-a22b",
        "qwen3-32b",
    }
)
