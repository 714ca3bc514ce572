"""envs.sim.core.progress: a live bar on a terminal, sparse plain lines into a log."""

from __future__ import annotations

import io

from envs.sim.core import progress as progress_mod


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_plain_newline_lines_and_no_carriage_returns(monkeypatch):
    monkeypatch.setattr(progress_mod, "LOG_INTERVAL_S", 0.0)
    log = io.StringIO()
    for _ in progress_mod.progress(range(50), file=log, desc="work"):
        pass
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines and all(line.startswith("work") for line in lines)
    assert "50/50" in lines[-1]


def test_the_default_interval_keeps_a_log_sparse():
    log = io.StringIO()
    for _ in progress_mod.progress(range(10_000), file=log, desc="work"):
        pass
    assert len(log.getvalue().splitlines()) <= 3  # the first, maybe one more, the last


def test_a_terminal_gets_the_live_bar():
    tty = TTY()
    for _ in progress_mod.progress(range(5), file=tty, desc="work", mininterval=0):
        pass
    assert "\r" in tty.getvalue()
