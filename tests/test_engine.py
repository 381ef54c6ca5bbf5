"""The audit's DuckDB: a finished audit's database serves the next audit with the same settings, clean, and
never two audits at once (dcaudit.engine.audit_database)."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import polars as pl
import pytest

import dcaudit
from dcaudit import engine
from dcaudit.config import load_settings


def _settings(tmp_path: Path):  # noqa: ANN202 - a Settings
    return dataclasses.replace(load_settings(), home=tmp_path / "home", threads=1, memory_limit="500MB")


def _setting(con, name: str) -> object:  # noqa: ANN001 - a DuckDB connection
    return con.execute(f"SELECT current_setting('{name}')").fetchall()[0][0]


def test_a_finished_audit_database_serves_the_next_one_reset(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with engine.audit_database(settings) as con:
        con.execute("CREATE TEMP TABLE scratch AS SELECT 1 AS x")
        con.execute("SET disabled_optimizers = 'statistics_propagation'; SET perfect_ht_threshold = 20")
        con.execute("SET preserve_insertion_order = true")
        first = _setting(con, "memory_limit")
    with engine.audit_database(settings) as con:
        # the same database (its memory limit and threads as connect set them), nothing of the last audit in it
        assert _setting(con, "memory_limit") == first and _setting(con, "threads") == 1
        assert con.execute("SELECT count(*) FROM duckdb_tables()").fetchall() == [(0,)]
        assert _setting(con, "disabled_optimizers") == "" and _setting(con, "perfect_ht_threshold") == 12
        assert _setting(con, "preserve_insertion_order") is False
        held = con
    idle = [db for key, db in engine._IDLE.items() if key[2] == str(settings.temp_dir)]
    assert len(idle) == 1 and held is not idle[0]   # the cursor went; the database waits for the next audit


def test_a_database_left_with_anything_is_closed_not_handed_on(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with engine.audit_database(settings) as con:
        con.execute("CREATE TABLE kept AS SELECT 1 AS x")   # outside the temp schema: it would outlive the audit
    with engine.audit_database(settings) as con:
        assert con.execute("SELECT count(*) FROM duckdb_tables()").fetchall() == [(0,)]


def test_audits_at_the_same_time_never_share_a_database(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with engine.audit_database(settings):
        pass   # one idle database now
    both_set = threading.Barrier(2)
    seen: dict[int, object] = {}

    def audit(index: int) -> None:
        with engine.audit_database(settings) as con:
            con.execute(f"SET perfect_ht_threshold = {13 + index}")   # a database-wide setting
            both_set.wait()   # the other audit has set its own by now
            seen[index] = _setting(con, "perfect_ht_threshold")

    threads = [threading.Thread(target=audit, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {0: 13, 1: 14}   # on one shared database one audit would read the other's value
    # two databases were in use at once: one was new; one of them stays idle afterwards
    assert sum(key[2] == str(settings.temp_dir) for key in engine._IDLE) == 1


def test_results_do_not_depend_on_the_audits_before(tmp_path: Path) -> None:
    """A float audit switches statistics propagation off on its database; the integer audit after it on the
    same database gives the same result as on a fresh one (and NaN is still excluded in the float one)."""
    settings = _settings(tmp_path)
    frame = pl.DataFrame({"id": [f"c{i}" for i in range(40)], "e": [i % 3 for i in range(40)],
                          "x": [float("nan") if i == 7 else i / 10 for i in range(40)],
                          "y": [int(i % 3 == 0) for i in range(40)]})
    engine._IDLE.clear()
    fresh = dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", settings=settings).summary.to_dicts()
    floats = dcaudit.audit(frame, evidence="x", claim="y = 1", id="id", fiber_rule="quantile:4",
                           settings=settings).summary.to_dicts()
    again = dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", settings=settings).summary.to_dicts()
    assert [r["n_candidates"] for r in floats] == [39]   # the NaN row is excluded
    drop = {"run_id", "started_at", "finished_at"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in again] == [
        {k: v for k, v in r.items() if k not in drop} for r in fresh]


def test_the_shared_database_is_an_idle_audit_database(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A command's catalog build and console run on the database its audit used (one database opened, not
    two), with row order kept again; the database leaves the pool, so no later audit shares it."""
    settings = _settings(tmp_path)
    monkeypatch.setattr(engine, "_INSTANCE", None)
    monkeypatch.setattr(engine, "_IDLE", {})   # no database of an earlier test to adopt instead
    with engine.audit_database(settings) as con:
        limit = _setting(con, "memory_limit")
    key = next(k for k in engine._IDLE if k[2] == str(settings.temp_dir))
    adopted = engine._IDLE[key]
    shared = engine.shared_connection()
    assert engine._INSTANCE is adopted and key not in engine._IDLE
    assert _setting(shared, "memory_limit") == limit and _setting(shared, "preserve_insertion_order") is True
    with engine.audit_database(settings) as con:   # a new database for the next audit
        con.execute("SET perfect_ht_threshold = 17")
        assert _setting(shared, "perfect_ht_threshold") == 12
    shared.close()


def test_a_database_opened_ahead_is_the_one_the_audit_takes(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """open_ahead opens the database on a thread of its own, once however often it is asked; the audit then
    waits for that database instead of opening a second one, and finds it set up as connect sets it."""
    settings = _settings(tmp_path)
    monkeypatch.setattr(engine, "_IDLE", {})
    monkeypatch.setattr(engine, "_AHEAD", {})
    opened: list[str] = []
    real_connect = engine.connect

    def connect(s):  # noqa: ANN001, ANN202
        opened.append(threading.current_thread().name)
        return real_connect(s)

    monkeypatch.setattr(engine, "connect", connect)
    engine.open_ahead(settings)
    engine.open_ahead(settings)   # already being opened: nothing more
    with engine.audit_database(settings) as con:
        assert _setting(con, "threads") == 1 and _setting(con, "preserve_insertion_order") is False
    assert opened == ["dcaudit-open-database"]
    engine.open_ahead(settings)   # one is idle now: nothing to open
    with engine.audit_database(settings):
        pass
    assert opened == ["dcaudit-open-database"] and not engine._AHEAD


def test_a_database_that_cannot_be_opened_ahead_leaves_the_error_to_the_audit(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A spill directory that cannot be made fails the thread quietly; the audit meets it and says so."""
    from dcaudit.errors import WorkspaceError

    (tmp_path / "home").write_text("a file where the workspace should be")
    settings = _settings(tmp_path)
    monkeypatch.setattr(engine, "_IDLE", {})
    monkeypatch.setattr(engine, "_AHEAD", {})
    engine.open_ahead(settings)
    with pytest.raises(WorkspaceError, match="spill directory"), engine.audit_database(settings):
        pass
