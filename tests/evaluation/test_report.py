"""The report (``python -m evaluation.report``): stages, the resumable cache, the fragments."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from evaluation.report import __main__ as cli
from evaluation.report import runner
from evaluation.report.stage import CommandOutput, Stage, stage
from evaluation.report.stages import all_stages

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git repository with one code file, standing in for the project root."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "code.py").write_text("X = 1\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# Page\n")
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"],
        cwd=tmp_path,
        check=True,
    )
    monkeypatch.setattr(runner, "ROOT", tmp_path)
    return tmp_path


def _counting_stage(name: str = "demo") -> Stage:
    # Each run appends a line to {out}/runs.txt, so the test can count executions.
    code = (
        "import sys, pathlib; p = pathlib.Path(sys.argv[1]) / 'runs.txt';"
        "p.write_text(p.read_text() + 'x' if p.exists() else 'x');"
        "print('policy  metric'); print('a       1.00'); print('wrote somewhere')"
    )
    return stage(name, "A demo table", "page.md", 0.1, ["-c", code, "{out}"])


def test_stage_validates_its_fields():
    with pytest.raises(ValueError, match="lower-case"):
        stage("Bad Name", "t", "p.md", 1, "evaluate.py")
    with pytest.raises(ValueError, match="no commands"):
        Stage("ok", "t", (), 1, "p.md")
    with pytest.raises(ValueError, match="minutes"):
        stage("ok", "t", "p.md", 0, "evaluate.py")


def test_table_text_drops_run_to_run_noise():
    out = CommandOutput(("x",), "\nrow 1\nwrote results/a.json\n13 runs in 12 s wall\n\n")
    assert out.table_text() == "row 1"
    assert out.command == "python x"


def test_a_stage_runs_once_then_comes_from_the_cache(repo):
    s = _counting_stage()
    commit = runner.commit_label()
    first = runner.run_stage(s, commit)
    assert first.ok and first.cached == 0
    second = runner.run_stage(s, commit)
    assert second.ok and second.cached == 1
    assert (repo / "results/report/demo/runs.txt").read_text() == "x"
    forced = runner.run_stage(s, commit, force=True)
    assert forced.cached == 0
    assert (repo / "results/report/demo/runs.txt").read_text() == "xx"


def test_a_code_change_invalidates_the_cache_and_a_docs_change_does_not(repo):
    fp = runner.code_fingerprint()
    (repo / "docs" / "page.md").write_text("# Page, edited\n")
    assert runner.code_fingerprint() == fp
    assert runner.commit_label().endswith("+uncommitted") is False
    (repo / "envs" / "code.py").write_text("X = 2\n")
    assert runner.code_fingerprint() != fp
    assert runner.commit_label().endswith("+uncommitted")


def test_the_fragment_names_commit_command_and_fingerprint(repo):
    s = _counting_stage()
    commit = runner.commit_label()
    assert runner.run_stage(s, commit).ok
    text = (repo / "results/tables/demo.md").read_text()
    fp = runner.code_fingerprint(s.code_paths())
    assert runner.fragment_fingerprint(repo / "results/tables/demo.md") == fp
    assert f"commit `{commit}`" in text
    assert "python -c " in text and "--stages demo" in text
    table = text.split("```text\n", 1)[1]
    assert "a       1.00" in table and "wrote somewhere" not in table


def test_a_failing_command_is_reported_with_its_stderr(repo):
    s = stage("broken", "t", "page.md", 0.1, ["-c", "import sys; sys.exit('no trace file')"])
    res = runner.run_stage(s, runner.commit_label())
    assert not res.ok and "no trace file" in res.error
    assert not (repo / "results/tables/broken.md").exists()


def test_check_lists_stale_and_missing_fragments(repo, monkeypatch, capsys):
    s = _counting_stage()
    monkeypatch.setattr(cli, "all_stages", lambda: [s])
    assert cli.main(["--check"]) == 1
    assert "demo: missing" in capsys.readouterr().out
    assert cli.main(["--stages", "demo"]) == 0
    assert cli.main(["--check"]) == 0
    (repo / "envs" / "code.py").write_text("X = 3\n")
    assert cli.main(["--check"]) == 1
    assert "measured under code" in capsys.readouterr().out


def test_unknown_stage_names_are_rejected(monkeypatch):
    monkeypatch.setattr(cli, "all_stages", lambda: [_counting_stage()])
    with pytest.raises(SystemExit, match="unknown stage"):
        cli.main(["--stages", "demo,nope"])


def test_every_stage_feeds_a_page_that_includes_its_fragment():
    stages = all_stages()
    assert stages
    for s in stages:
        page = DOCS / s.page
        assert page.exists(), f"stage {s.name}: no page docs/{s.page}"
        include = f'--8<-- "results/tables/{s.name}.md"'
        assert include in page.read_text(), f"docs/{s.page} does not include {include}"


def test_every_committed_fragment_has_a_stage_and_names_its_commit():
    tables = DOCS.parent / "results" / "tables"
    names = {s.name for s in all_stages()}
    for path in sorted(tables.glob("*.md")):
        assert path.stem in names, f"{path} has no stage"
        assert runner.fragment_fingerprint(path), f"{path} has no generated header"
        assert re.search(r"Measured at commit `[0-9a-f]{7}`", path.read_text()), path


def test_learning_code_invalidates_only_the_stages_that_run_it(repo):
    (repo / "agents").mkdir()
    (repo / "agents" / "algo.py").write_text("LR = 1\n")
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    plain = stage("a", "t", "p.md", 1, "evaluate.py --env routing-v1").code_paths()
    learning = stage("b", "t", "p.md", 1, "train.py --env routing-v1").code_paths()
    heuristic, learned = runner.code_fingerprint(plain), runner.code_fingerprint(learning)
    (repo / "agents" / "algo.py").write_text("LR = 2\n")
    assert runner.code_fingerprint(plain) == heuristic
    assert runner.code_fingerprint(learning) != learned


def test_benchmark_and_example_code_count_only_for_the_stages_that_run_them():
    plain = stage("a", "t", "p.md", 1, "evaluate.py").code_paths()
    bench = stage("b", "t", "p.md", 1, "-m benchmarks.sim_speed").code_paths()
    example = stage("c", "t", "p.md", 1, "examples/plot_pd_load.py").code_paths()
    assert "benchmarks" not in plain and "examples" not in plain and "envs" in plain
    assert "benchmarks/sim_speed.py" in bench and "examples/plot_pd_load.py" in example
    assert "benchmarks/env_speed.py" not in bench
    vidur = stage("v", "t", "p.md", 1, "-m benchmarks.peer_vidur").code_paths()
    assert "benchmarks/vidur_driver.py" in vidur


def test_a_stage_uses_learning_when_it_trains_or_loads_a_checkpoint():
    assert not stage("a", "t", "p.md", 1, "evaluate.py --env routing-v1").uses_learning()
    assert stage("b", "t", "p.md", 1, "evaluate.py --policies ckpt:checkpoints/x").uses_learning()
    assert stage("c", "t", "p.md", 1, "train.py --env routing-v1").uses_learning()
    assert stage("d", "t", "p.md", 1, "-m benchmarks.train_speed").uses_learning()
    assert stage("e", "t", "p.md", 1, "evaluate.py", learned=True).uses_learning()


def test_another_familys_env_package_does_not_invalidate_a_stage(repo):
    for fam in ("routing", "pd_cluster"):
        (repo / "envs" / fam).mkdir()
        (repo / "envs" / fam / "env.py").write_text("A = 1\n")
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    pd = stage("a", "t", "p.md", 1, "evaluate.py --env pd-cluster-v1")
    routing = stage("b", "t", "p.md", 1, "evaluate.py --env routing-v1 --seeds 0")
    assert pd.families() == {"pd_cluster"} and routing.families() == {"routing"}
    assert stage("c", "t", "p.md", 1, "evaluate.py --seeds 0").families() == {"pd_cluster"}
    assert stage("d", "t", "p.md", 1, "-m benchmarks.sim_speed").families() is None
    before_pd, before_routing = (runner.code_fingerprint(s.code_paths()) for s in (pd, routing))
    (repo / "envs" / "routing" / "env.py").write_text("A = 2\n")
    assert runner.code_fingerprint(pd.code_paths()) == before_pd
    assert runner.code_fingerprint(routing.code_paths()) != before_routing


def test_a_re_measurement_clears_what_its_command_writes_with_out(repo):
    # A command that refuses an --out that exists, as train.py does.
    code = (
        "import sys, pathlib; p = pathlib.Path(sys.argv[2]);"
        "sys.exit(f'{p} already holds a run') if p.exists() else p.mkdir();"
        "print('policy  metric'); print('a       1.00')"
    )
    s = stage("demo", "A demo table", "page.md", 0.1, ["-c", code, "--out", "{out}/run"])
    commit = runner.commit_label()
    assert runner.run_stage(s, commit).ok
    again = runner.run_stage(s, commit, force=True)
    assert again.ok and again.cached == 0, again.error
    outside = repo / "elsewhere"
    outside.mkdir()
    runner._clear_outputs(("x.py", "--out", "elsewhere"), repo / "results/report/demo")
    assert outside.exists()  # only paths inside the stage's cache directory are cleared


def test_a_stage_tracks_the_checkpoints_it_loads_but_not_their_readmes(repo):
    s = stage("demo", "t", "page.md", 1, "evaluate.py --policies a,ckpt:checkpoints/demo")
    assert s.uses_learning() and s.checkpoints() == ["checkpoints/demo"]
    paths = s.code_paths()
    (repo / "checkpoints" / "demo").mkdir(parents=True)
    (repo / "checkpoints" / "demo" / "README.md").write_text("# Demo\n")
    (repo / "checkpoints" / "demo" / "model.zip").write_bytes(b"1")
    subprocess.run(["git", "add", "checkpoints"], cwd=repo, check=True)
    fp = runner.code_fingerprint(paths)
    (repo / "checkpoints" / "demo" / "README.md").write_text("# Demo, described better\n")
    assert runner.code_fingerprint(paths) == fp
    (repo / "checkpoints" / "demo" / "model.zip").write_bytes(b"2")
    assert runner.code_fingerprint(paths) != fp
