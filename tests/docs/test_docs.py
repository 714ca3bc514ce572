"""The documentation: a short README, no history narration, one generated page per environment
with the sections of the env class docstring, and a site that builds with broken links failing.

History lives in CHANGELOG.md and the commit messages; README, docs, code comments and file
names say what the code does now (the design page, docs/design.md, "Layout" and STYLE).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250
#: History narration: a work item's number, a work session, measurements "not rerun".
NARRATION = re.compile(
    r"\bissue[ -]?\d+|\bsession \d|\b(?:this|that|last|one|fourth|third) session\b|\bnot rerun\b",
    re.IGNORECASE,
)


def _gen_env_pages():
    spec = importlib.util.spec_from_file_location(
        "gen_env_pages", ROOT / "docs" / "_scripts" / "gen_env_pages.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [f for f in out.stdout.splitlines() if (ROOT / f).is_file()]


def narration_hits(files: list[str], root: Path = ROOT) -> list[str]:
    """``file:line: text`` of every line matching :data:`NARRATION` in ``files`` (paths
    relative to ``root``), and every file whose name matches."""
    hits = []
    for name in files:
        if NARRATION.search(Path(name).name.replace("_", " ")):
            hits.append(f"{name}: file name")
        text = (root / name).read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if NARRATION.search(line):
                hits.append(f"{name}:{number}: {line.strip()}")
    return hits


def test_readme_is_at_most_250_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_no_history_narration_in_readme_docs_code_or_file_names() -> None:
    files = [
        f
        for f in _tracked_files()
        if not f.startswith("tests/")
        and (f == "README.md" or f.endswith((".md", ".py", ".yaml", ".yml", ".sh", ".png")))
        and f != "CHANGELOG.md"
    ]
    hits = narration_hits([f for f in files if not f.endswith(".png")])
    hits += [f"{f}: file name" for f in files if f.endswith(".png") and NARRATION.search(f)]
    assert not hits, "history narration (move it to CHANGELOG.md):\n" + "\n".join(hits)


def test_narration_check_finds_a_planted_line(tmp_path: Path) -> None:
    (tmp_path / "notes_issue29.sh").write_text("ok\nmeasured in session 4\n")
    (tmp_path / "clean.md").write_text("goodserve-sessions replays agent sessions\n")
    hits = narration_hits(["notes_issue29.sh", "clean.md"], tmp_path)
    assert hits == ["notes_issue29.sh: file name", "notes_issue29.sh:2: measured in session 4"]


def test_every_env_docstring_has_the_sections_in_order() -> None:
    gen = _gen_env_pages()
    ids = gen.servegym_ids()
    assert {"servegym/PDCluster-v0", "servegym/Routing-v0", "servegym/Allocation-v0"} <= set(ids)
    for env_id in ids:
        assert gen.missing_sections(gen.env_class(env_id)) == [], env_id


def test_each_env_page_has_the_sections_and_an_arguments_table_of_the_real_options() -> None:
    gen = _gen_env_pages()
    for env_id in gen.servegym_ids():
        cls = gen.env_class(env_id)
        page = gen.env_page(env_id)
        titles = re.findall(r"^## (.+)$", page, re.MULTILINE)
        assert titles == list(gen.SECTIONS), env_id
        arguments = page.split("## Arguments", 1)[1].split("\n## ", 1)[0]
        rows = re.findall(r"^\| `(\w+)` \| (.*?) \| `([^`]*)` \|", arguments, re.MULTILINE)
        # every keyword but ``options=`` (which takes a whole options object)
        options = [p for p in gen.constructor_options(cls) if p.name != "options"]
        assert [name for name, _, _ in rows] == [p.name for p in options], env_id
        for (name, _, default), param in zip(rows, options, strict=True):
            expected = "" if param.default is inspect.Parameter.empty else repr(param.default)
            assert default == expected.replace("|", "\\|"), (env_id, name)


def test_missing_sections_names_what_a_docstring_lacks() -> None:
    gen = _gen_env_pages()

    class Partial:
        """Summary.

        ## Description

        text

        ## Rewards

        text
        """

    missing = gen.missing_sections(Partial)
    assert "Action Space" in missing and "Description" not in missing


@pytest.mark.slow
def test_site_builds_with_strict_links(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for page in ("index.html", "envs/routing-v0/index.html", "getting-started/index.html"):
        assert (tmp_path / page).is_file(), page


def test_readme_quickstart_is_the_tested_example() -> None:
    """The README shows examples/quickstart.py verbatim (tests/evaluation/test_compare.py runs the
    file; Getting started includes it by reference)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = readme.split("## Quickstart", 1)[1]
    block = quickstart.split("```python\n", 1)[1].split("```", 1)[0]
    assert block == (ROOT / "examples" / "quickstart.py").read_text(encoding="utf-8")
