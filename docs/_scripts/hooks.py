"""MkDocs hooks (``hooks:`` in ``mkdocs.yml``): generate the environment pages before a build.

``on_config`` writes one page per registered ``servegym/*`` id (:mod:`gen_env_pages`) and lists
them in the navigation under "Environments", so an id registered tomorrow gets its page without
an edit here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_env_pages  # noqa: E402

ENV_SECTION = "Environments"


def on_config(config: Any) -> Any:
    pages = gen_env_pages.write_pages()
    for item in config["nav"]:
        if isinstance(item, dict) and ENV_SECTION in item:
            generated = [{env_id.removeprefix("servegym/"): path} for env_id, path in pages]
            item[ENV_SECTION] = item[ENV_SECTION][:1] + generated + item[ENV_SECTION][1:]
            break
    else:
        raise ValueError(f"mkdocs.yml nav has no {ENV_SECTION!r} section for the env pages")
    return config
