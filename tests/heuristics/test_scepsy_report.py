"""heuristics.allocation.scepsy.report: peak sustainable throughput, ratios and APL errors from
result rows."""

from __future__ import annotations

import json

from heuristics.allocation.scepsy import report


def row(policy, rate, thr, lat, ok, apl=None, sweep=True, seed=0, good=None):
    return {
        "env": "allocation",
        "workload": "beam_search",
        "gpus": 4,
        "policy": policy,
        "seed": seed,
        "workflow_rate": None,
        "sweep": {"option": "workflow_rate", "value": rate} if sweep else None,
        "metrics": {
            "throughput": thr,
            "goodput": thr if good is None else good,
            "latency_mean": lat,
            "sustainable": float(ok),
            "offered_rate": rate,
            "apl_latency": apl,
        },
    }


ROWS = [
    row("scepsy", 1.0, 0.98, 10.0, True, apl=11.0),
    row("scepsy", 2.0, 1.95, 12.0, True, apl=9.0),
    row("scepsy", 3.0, 2.40, 60.0, False),
    row("k8s-hpa", 1.0, 0.97, 20.0, True),
    row("k8s-hpa", 2.0, 1.50, 80.0, False),
    row("k8s-hpa", 3.0, 1.60, 90.0, False),
]


def test_peak_sustainable_is_the_largest_rate_sustained_and_peak_the_curve_end():
    pts = report.points(ROWS)[("beam_search", 4)]
    assert report.sustainable_rate(pts["scepsy"]) == 2.0
    assert report.peak(pts["scepsy"]) == 2.40  # unsustainable points still end the curve
    assert report.sustainable_rate(pts["k8s-hpa"]) == 1.0
    text = report.peak_table(ROWS)
    assert "scepsy peak sustainable: vs k8s-hpa 2.00x" in text
    assert "scepsy peak achieved: vs k8s-hpa 1.50x" in text  # 2.40 / 1.60
    assert "k8s-hpa                    2.00x - 2.00x over 1 rates" in text
    md = report.peak_table(ROWS, markdown=True)
    assert "| beam_search, 4 | 2 / 2.40 / 2.40 | 1 / 1.60 / 1.60 (2.00x / 1.50x / 1.50x) |" in md


def test_peak_goodput_does_not_count_a_sustained_backlog_and_averages_seeds():
    import pytest

    # k8s-hpa "sustains" rate 2 (all finish, throughput >= 90 %) at 8x its unloaded latency:
    # no workflow meets its SLO there, so its peak goodput is the rate-1 point.
    rows = [
        row("scepsy", 1.0, 0.98, 10.0, True, good=0.97),
        row("scepsy", 2.0, 1.95, 12.0, True, good=1.80),
        row("scepsy", 2.0, 1.90, 14.0, True, good=1.60, seed=1),
        row("k8s-hpa", 1.0, 0.97, 20.0, True, good=0.90),
        row("k8s-hpa", 2.0, 1.96, 160.0, True, good=0.02),
    ]
    good = report.peak_goodputs(rows)[("beam_search", 4)]
    assert good == pytest.approx({"scepsy": 1.70, "k8s-hpa": 0.90})
    text = report.peak_table(rows)
    assert "scepsy peak sustainable: vs k8s-hpa 1.00x" in text
    assert "scepsy peak goodput: vs k8s-hpa 1.89x" in text  # 1.70 / 0.90
    assert "(1.00x / 0.98x / 1.89x)" in report.peak_table(rows, markdown=True)


def test_seeds_average_and_one_unsustainable_seed_makes_the_point_unsustainable():
    rows = [row("scepsy", 1.0, 1.0, 10.0, True), row("scepsy", 1.0, 0.8, 14.0, False, seed=1)]
    [(rate, thr, lat, ok)] = report.points(rows)[("beam_search", 4)]["scepsy"]
    assert (rate, thr, lat, ok) == (1.0, 0.9, 12.0, False)


def test_apl_errors_and_rates_at_fractions_of_the_peak(tmp_path):
    assert report.apl_rates(ROWS, [0.2, 0.5]) == {("beam_search", 4): [0.4, 1.0]}
    text = report.apl_table(ROWS, "scepsy")
    assert "median error beam_search, 4 GPUs, scepsy: 17.5% over 2 runs" in text  # 10 %, 25 %
    # rows without a sweep or a workflow rate fall back to the offered rate, and main runs
    path = tmp_path / "results.json"
    path.write_text(json.dumps([row("scepsy", 4.0, 3.9, 5.0, True, apl=5.0, sweep=False)]))
    assert report.main([str(path), "--apl-rates", "0.5", "--plot", str(tmp_path / "f.png")]) == 0
    assert (tmp_path / "f.png").is_file()


def test_the_same_run_in_two_files_is_an_error_unless_one_is_dropped(tmp_path):
    import pytest

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(ROWS))
    b.write_text(json.dumps([row("k8s-hpa", 1.0, 0.99, 15.0, True)]))
    with pytest.raises(SystemExit, match="both hold the run"):
        report.load_rows([a, b])
    rows = report.load_rows([a, b], drop=[f"k8s-hpa@{a}"])
    assert [r["metrics"]["throughput"] for r in rows if r["policy"] == "k8s-hpa"] == [0.99]
    assert not any(r["policy"] == "k8s-hpa" for r in report.load_rows([a, b], drop=["k8s-hpa"]))


def test_a_missing_results_file_is_named(tmp_path):
    import pytest

    there = tmp_path / "a.json"
    there.write_text(json.dumps(ROWS))
    with pytest.raises(SystemExit, match=r"no such results file: .*gone\.json"):
        report.load_rows([there, tmp_path / "gone.json"])


def test_plot_gives_a_policy_the_same_colour_in_every_panel(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    # The 8-GPU panel lacks k8s-hpa: with per-panel colour cycling, scepsy would change colour.
    rows = ROWS + [{**row("scepsy", 1.0, 0.9, 9.0, True), "gpus": 8}]
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    report.plot(rows, tmp_path / "grid.png")
    colours = {
        (ax.get_title(), line.get_label()): line.get_color()
        for ax in figures[0].axes
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }
    assert colours[("beam_search, 4 GPUs", "scepsy")] == colours[("beam_search, 8 GPUs", "scepsy")]
    assert colours[("beam_search, 4 GPUs", "k8s-hpa")] != colours[("beam_search, 4 GPUs", "scepsy")]


def test_apl_throughput_error_counts_only_runs_offered_more_than_the_prediction():
    over = row("scepsy", 3.0, 1.6, 60.0, False)
    over["metrics"]["apl_throughput"] = 2.0  # offered 3 > T_w 2: measures capacity
    under = row("scepsy", 1.0, 0.98, 10.0, True, apl=11.0)
    under["metrics"]["apl_throughput"] = 2.0  # offered 1 < T_w: says nothing about capacity
    text = report.apl_table([over, under], "scepsy")
    assert "median throughput error beam_search: 25.0% over 1 runs" in text
    assert "achieved   1.600/s" in text and "achieved   0.980/s" not in text
