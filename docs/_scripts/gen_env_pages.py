"""Write one documentation page per registered servegym environment, from its class docstring.

As Gymnasium's ``docs/_scripts/gen_mds.py`` reads ``env.unwrapped.__doc__``, this reads the
docstring of each ``servegym/*`` id's entry-point class (the docstring is the spec: Description,
Action Space, Observation Space, Rewards, Starting State, Episode End, Arguments, Vectorized use,
Version History, References) and writes ``docs/envs/<name>-v<N>.md``. The Arguments section's
``:param`` list is replaced by a table of the constructor's options (name, type, default,
meaning). ``mkdocs build`` runs it through ``docs/_scripts/hooks.py``; by hand:
``python docs/_scripts/gen_env_pages.py``.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV_DIR = ROOT / "docs" / "envs"
NAMESPACE = "servegym/"

#: The sections every env class docstring has, in this order.
SECTIONS = (
    "Description",
    "Action Space",
    "Observation Space",
    "Rewards",
    "Starting State",
    "Episode End",
    "Arguments",
    "Vectorized use",
    "Version History",
    "References",
)
#: The line of the Arguments section that marks where the generated table goes.
ARGUMENTS_MARK = "<!-- arguments-table:"


def servegym_ids() -> list[str]:
    """The registered ``servegym/*`` ids (importing :mod:`envs` registers them), in the order
    of the env families (:data:`envs.CLI_ENVS`: PDCluster, Routing, Allocation), then by version.
    """
    import gymnasium as gym

    import envs

    families = [gym_id.rsplit("-v", 1)[0] for gym_id, _ in envs.CLI_ENVS.values()]

    def order(env_id: str) -> tuple[int, str, int]:
        name, _, version = env_id.rpartition("-v")
        rank = families.index(name) if name in families else len(families)
        return rank, name, int(version) if version.isdigit() else 0

    return sorted((i for i in gym.registry if i.startswith(NAMESPACE)), key=order)


def env_class(env_id: str) -> type:
    """The class behind a registered id (its ``entry_point``, ``module:Class``)."""
    import gymnasium as gym

    entry = gym.spec(env_id).entry_point
    if not isinstance(entry, str):
        return entry  # type: ignore[return-value]
    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)


def page_name(env_id: str) -> str:
    """``servegym/PDCluster-v0`` -> ``pd-cluster-v0``."""
    name = env_id.removeprefix(NAMESPACE)
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name).lower()


def split_sections(doc: str) -> tuple[str, dict[str, str]]:
    """A docstring's summary line and its ``## Section`` bodies, by title."""
    summary, _, rest = inspect.cleandoc(doc).partition("\n")
    sections: dict[str, str] = {}
    title = None
    for line in rest.splitlines():
        heading = re.match(r"^## (.+)$", line)
        if heading:
            title = heading.group(1).strip()
            sections[title] = ""
        elif title is not None:
            sections[title] += line + "\n"
    return summary.strip(), {k: v.strip() for k, v in sections.items()}


def missing_sections(cls: type) -> list[str]:
    """The :data:`SECTIONS` a class docstring lacks or has out of order (empty: all there)."""
    _, sections = split_sections(cls.__doc__ or "")
    present = [s for s in sections if s in SECTIONS]
    missing = [s for s in SECTIONS if s not in sections]
    if not missing and present != list(SECTIONS):
        return [f"out of order: {present}"]
    return missing


def param_docs(text: str) -> dict[str, str]:
    """``:param name: text`` entries (continuation lines joined) of a docstring section."""
    params: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        match = re.match(r"^:param (\w+):\s*(.*)$", line.strip())
        if match:
            name = match.group(1)
            params[name] = match.group(2)
        elif name is not None and line.strip():
            params[name] += " " + line.strip()
    return params


def constructor_options(cls: type) -> list[inspect.Parameter]:
    """The keyword options of the class's constructor, in signature order."""
    return [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]


def _type_name(param: inspect.Parameter) -> str:
    annotation = param.annotation
    if annotation is inspect.Parameter.empty:
        return ""
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def arguments_table(cls: type, params: dict[str, str]) -> str:
    """The Markdown table of the constructor's options: name, type, default, meaning.

    The options dataclass of an env, where there is one (``envs.common.options``), is the one
    place options are defined; without it the constructor's signature and ``:param`` lines are.
    """
    try:
        from envs.common.options import arguments_table as options_table  # type: ignore
    except ImportError:
        options_table = None
    if options_table is not None:
        return options_table(cls.OPTIONS)
    rows = ["| name | type | default | meaning |", "|---|---|---|---|"]
    for param in constructor_options(cls):
        default = "" if param.default is inspect.Parameter.empty else repr(param.default)
        meaning = rst_to_markdown(params.get(param.name, ""))
        rows.append(
            f"| `{param.name}` | {_cell(_type_name(param))} | `{_cell(default)}` | "
            f"{_cell(meaning)} |"
        )
    return "\n".join(rows)


def rst_to_markdown(text: str) -> str:
    """Docstring markup to Markdown: ````x```` and ``:class:`x``` become code spans."""
    text = re.sub(r":(?:class|meth|func|mod|data|attr):`~?([^`]+)`", r"`\1`", text)
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def env_page(env_id: str) -> str:
    """The Markdown page of one registered id."""
    import gymnasium as gym

    cls = env_class(env_id)
    missing = missing_sections(cls)
    if missing:
        raise ValueError(f"{cls.__qualname__} docstring ({env_id}): missing sections {missing}")
    summary, sections = split_sections(cls.__doc__ or "")
    spec = gym.spec(env_id)
    env = gym.make(env_id)
    try:
        action_space, observation_space = env.action_space, env.observation_space
    finally:
        env.close()
    registered = ", ".join(f"`{k}={v!r}`" for k, v in sorted(spec.kwargs.items())) or "none"
    lines = [
        f"# {env_id.removeprefix(NAMESPACE)}",
        "",
        rst_to_markdown(summary),
        "",
        f'| Make | `gymnasium.make("{env_id}")` |',
        "|---|---|",
        f"| Class | `{cls.__module__}.{cls.__qualname__}` |",
        f"| Action space (defaults) | `{action_space}` |",
        "| Observation space (defaults) | "
        + ", ".join(f"`{k}`: {tuple(s.shape)}" for k, s in observation_space.spaces.items())
        + " |",
        f"| Registered keyword arguments | {registered} |",
        "",
    ]
    for title in SECTIONS:
        body = sections[title]
        if title == "Arguments" and ARGUMENTS_MARK in body:
            before, mark, after = body.partition(ARGUMENTS_MARK)
            params = param_docs(after if mark else body)
            body = (before.strip() + "\n\n" if before.strip() else "") + arguments_table(
                cls, params
            )
        lines += [f"## {title}", "", rst_to_markdown(body), ""]
    return "\n".join(lines).rstrip() + "\n"


def write_pages(out_dir: Path = ENV_DIR) -> list[tuple[str, str]]:
    """Write every id's page; returns ``(id, path relative to docs/)`` pairs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for env_id in servegym_ids():
        path = out_dir / f"{page_name(env_id)}.md"
        text = env_page(env_id)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append((env_id, f"envs/{path.name}"))
    return written


def main(argv: list[str] | None = None) -> int:
    for env_id, path in write_pages():
        print(f"{env_id} -> docs/{path}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
