"""dcaudit.worker: a worker that fails, is missing or answers the wrong number of rows gives None (the
caller then does the work); one that works answers in item order."""

from __future__ import annotations

import os

import pytest

from dcaudit.worker import ScriptWorker


def test_a_missing_module_gives_none() -> None:
    assert ScriptWorker("dcaudit.no_such_module", ["a"]).results() is None


def test_an_answer_of_the_wrong_length_gives_none() -> None:
    pytest.importorskip("rdkit")
    worker = ScriptWorker("dcaudit.features.molecules", ["CCO", "CC"])
    worker.n = 3  # as if three items had been handed over
    assert worker.results() is None


def test_results_come_back_in_item_order() -> None:
    pytest.importorskip("rdkit")
    rows = ScriptWorker("dcaudit.features.molecules", ["CC", None, "CCO"]).results()
    assert rows is not None and [r[0] for r in rows] == ["CC", None, "CCO"]


def test_a_worker_never_asked_is_stopped_and_its_files_removed() -> None:
    pytest.importorskip("rdkit")
    worker = ScriptWorker("dcaudit.features.molecules", ["CCO"] * 50)
    directory, child = worker._dir, worker._child
    assert directory is not None and child is not None
    del worker
    assert child.poll() is not None
    assert not os.path.exists(directory)


def test_no_temp_directory_means_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    def full(**kwargs: object) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    assert ScriptWorker("dcaudit.features.molecules", ["CCO"]).results() is None
