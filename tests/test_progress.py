"""Re-reading data on resume reports progress: log lines when not interactive, a tqdm bar on a terminal."""

from __future__ import annotations

import logging

import pytest

import resumable_iterable as ri
from resumable_iterable import progress

N, CUT = 600, 250


def gen(n):
    for i in range(n[0]):
        yield {"i": i}


def build():
    return ri.IterableDataset.from_generator(gen, gen_kwargs={"n": [N]})


def resume_after(k):
    ds = build()
    it = iter(ds)
    for _ in range(k):
        next(it)
    state = ds.state_dict()
    resumed = build()
    resumed.load_state_dict(state)
    return [ex["i"] for ex in resumed]


@pytest.fixture
def small_threshold(monkeypatch):
    monkeypatch.setattr(progress, "THRESHOLD", 100)


def test_log_lines_when_not_interactive(small_threshold, monkeypatch, caplog, capsys):
    monkeypatch.setattr(progress, "_interactive", lambda: False)
    with caplog.at_level(logging.INFO, logger="resumable_iterable"):
        assert resume_after(CUT) == list(range(CUT, N))
    lines = [r.getMessage() for r in caplog.records if r.name == "resumable_iterable"]
    assert lines[0] == f"re-reading generator shard 0: {CUT} examples to re-read"
    assert lines[1].startswith(f"re-reading generator shard 0: {CUT} examples re-read in ")
    assert "re-reading" not in capsys.readouterr().err  # no bar


def test_tqdm_bar_when_interactive(small_threshold, monkeypatch, caplog, capsys):
    import tqdm.std

    bars = []
    original_init = tqdm.std.tqdm.__init__

    def recording_init(self, *a, **k):
        bars.append(self)
        original_init(self, *a, **k)

    monkeypatch.setattr(tqdm.std.tqdm, "__init__", recording_init)
    monkeypatch.setattr(progress, "_interactive", lambda: True)
    with caplog.at_level(logging.INFO, logger="resumable_iterable"):
        assert resume_after(CUT) == list(range(CUT, N))
    assert len(bars) == 1 and bars[0].total == CUT and bars[0].n == CUT
    assert bars[0].desc.startswith("re-reading generator shard 0")
    assert "re-reading generator shard 0" in capsys.readouterr().err  # drawn on stderr
    assert not [r for r in caplog.records if r.name == "resumable_iterable"]


def test_short_work_is_silent(small_threshold, monkeypatch, caplog, capsys):
    monkeypatch.setattr(progress, "_interactive", lambda: True)
    with caplog.at_level(logging.INFO, logger="resumable_iterable"):
        assert resume_after(50) == list(range(50, N))
    assert not caplog.records and capsys.readouterr().err == ""


def test_progress_context_counts_updates(small_threshold, monkeypatch, caplog):
    monkeypatch.setattr(progress, "_interactive", lambda: False)
    with caplog.at_level(logging.INFO, logger="resumable_iterable"):
        with progress.progress(300, "replaying") as bar:
            for _ in range(3):
                bar.update(100)
    assert [r.getMessage().split(" in ")[0] for r in caplog.records] == [
        "replaying: 300 examples to re-read", "replaying: 300 examples re-read"]


def test_interactive_detection_follows_stderr(monkeypatch):
    class Tty:
        def isatty(self):
            return True

    class Closed:
        def isatty(self):
            raise ValueError("I/O operation on closed file")

    monkeypatch.setattr("sys.stderr", Tty())
    assert progress._interactive() is True
    monkeypatch.setattr("sys.stderr", Closed())
    assert progress._interactive() is False
