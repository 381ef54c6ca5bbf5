"""The Python API: one front door for frames and files, one Result shape, save/load round trips, and the
CLI, spec and API building the same configuration."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import hypothesis.strategies as st
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings

import dcaudit
from dcaudit.cli import cli
from dcaudit.config import load_settings
from dcaudit.errors import DcauditError, SpecError
from tests.conftest import mirror_path

NR7 = ["NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD", "NR-PPAR-gamma"]
P53 = '"SR-p53" = 1'
# Columns that say where a table came from, not what it says
PROVENANCE = ("run_id", "source")


def content(result: dcaudit.Result) -> dict[str, pl.DataFrame]:
    return {name: df.drop([c for c in PROVENANCE if c in df.columns]) for name, df in result.tables.items()}


def same(a: dcaudit.Result, b: dcaudit.Result) -> None:
    ta, tb = content(a), content(b)
    assert sorted(ta) == sorted(tb)
    for name in ta:
        left, right = ta[name], tb[name]
        key = [c for c in ("audit_id", "fiber_key", "candidate_id", "policy", "seed", "step") if c in left.columns]
        assert left.sort(key, nulls_last=True).equals(right.sort(key, nulls_last=True)), name


@pytest.fixture(scope="module")
def tox21_csv() -> Path:
    return mirror_path("tox21/tox21.csv")


def test_tox21_from_every_input_type_gives_the_published_numbers(tox21_csv: Path, tmp_path: Path) -> None:
    frames = {
        "path": tox21_csv,
        "polars": pl.read_csv(tox21_csv),
        "lazy": pl.scan_csv(tox21_csv),
        "pandas": pd.read_csv(tox21_csv),
        "arrow": pacsv.read_csv(tox21_csv),
    }
    results = {k: dcaudit.audit(v, evidence=NR7, claim=P53, id="mol_id") for k, v in frames.items()}
    for name, r in results.items():
        s = r.summary.row(0, named=True)
        got = (s["n_candidates"], s["n_fibers"], s["n_mixed_fibers"], s["certified_true"], s["certified_false"],
               s["ambiguous"])
        assert got == (4391, 43, 14, 8, 86, 4297), name
        assert r.mixed().height == 4297
        assert r.mixed()["candidate_id"].n_unique() == 4297
        assert r.excluded().height == 7831 - 4391
    for name in ("polars", "lazy", "pandas", "arrow"):
        same(results["path"], results[name])
    saved = results["polars"].save(tmp_path / "pkg")
    loaded = dcaudit.load(saved)
    assert sorted(loaded.tables) == sorted(results["polars"].tables)
    for name, table in results["polars"].tables.items():
        assert loaded.tables[name].equals(table), name
    assert "4391 candidates" in repr(loaded)


def test_a_parquet_glob_and_a_duckdb_relation(tmp_path: Path) -> None:
    import duckdb

    frame = pl.DataFrame({"id": [f"c{i}" for i in range(40)], "e": [i % 3 for i in range(40)],
                          "y": [int(i % 3 == 0 or i == 7) for i in range(40)]})
    frame[:20].write_parquet(tmp_path / "part-1.parquet")
    frame[20:].write_parquet(tmp_path / "part-2.parquet")
    from_glob = dcaudit.audit(tmp_path / "part-*.parquet", evidence="e", claim="y = 1", id="id")
    con = duckdb.connect()
    con.register("f", frame.to_arrow())
    from_relation = dcaudit.audit(con.sql("SELECT * FROM f"), evidence="e", claim="y = 1", id="id")
    same(from_glob, from_relation)
    assert from_glob.summary["n_mixed_fibers"].to_list() == [1]


def test_a_lazy_frame_is_collected_once_per_run(tmp_path: Path) -> None:
    """A recorded run's input digest and its audit read one collection of a LazyFrame, not one each."""
    calls = []

    def counted(frame: pl.DataFrame) -> pl.DataFrame:
        calls.append(frame.height)
        return frame

    lazy = pl.LazyFrame({"id": [f"c{i}" for i in range(30)], "e": [i % 3 for i in range(30)],
                         "y": [int(i % 3 == 0) for i in range(30)]}).map_batches(counted)
    result = dcaudit.audit(lazy, evidence="e", claim="y = 1", id="id", out=tmp_path / "package")
    assert len(calls) == 1, calls
    assert result.summary["certified_true"].to_list() == [10]


rows_strategy = st.lists(
    st.fixed_dictionaries({
        "e1": st.sampled_from([0, 1, None]), "e2": st.sampled_from([0.5, 1.5, float("nan"), None]),
        "y": st.sampled_from([0, 1, None])}),
    min_size=1, max_size=30)


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows_strategy, seed=st.randoms(use_true_random=False), rule=st.sampled_from(["exact", "quantile:2"]))
def test_any_frame_type_and_row_order_gives_the_csv_result(tmp_path: Path, rows: list[dict], seed, rule: str) -> None:  # noqa: ANN001
    table = pa.Table.from_pylist([{"id": f"c{i}", **r} for i, r in enumerate(rows)],
                                 schema=pa.schema([("id", pa.string()), ("e1", pa.int64()), ("e2", pa.float64()),
                                                   ("y", pa.int64())]))
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    base = dcaudit.audit(path, evidence=["e1", "e2"], claim="y = 1", id="id", fiber_rule=rule)
    order = list(range(table.num_rows))
    seed.shuffle(order)
    shuffled = table.take(order)
    frames = [shuffled, pl.from_arrow(shuffled)]
    if not any(r["e2"] != r["e2"] for r in rows if r["e2"] is not None):
        frames.append(shuffled.to_pandas())  # pandas reads NaN as missing: equal only without NaN
    for data in frames:
        same(base, dcaudit.audit(data, evidence=["e1", "e2"], claim="y = 1", id="id", fiber_rule=rule))
    s = base.summary.row(0, named=True)
    if s["n_candidates"]:
        total = s["certified_fraction"] + s["ambiguous_fraction"] + s["unsupported_fraction"]
        assert abs(total - 1) < 1e-12


def test_cli_and_api_write_the_same_package(tmp_path: Path) -> None:
    f = tmp_path / "bench.csv"
    pl.DataFrame({"c": [f"c{i}" for i in range(12)], "p": [i % 4 for i in range(12)],
                  "a": [int(i % 4 == 1 or i == 3) for i in range(12)]}).write_csv(f)
    env = {"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1"}
    out = tmp_path / "cli"
    result = CliRunner().invoke(cli, ["replay", str(f), "--id", "c", "--evidence", "p", "--claim", "a = 1",
                                      "--seeds", "7", "--min-support", "1", "--out", str(out)], env=env)
    assert result.exit_code == 0, result.output
    api = dcaudit.replay(f, evidence="p", claim="a = 1", id="c", seeds=7, min_support=1)
    same(dcaudit.load(out), api)


def test_cli_spec_and_api_share_the_replay_defaults(tmp_path: Path) -> None:
    """A tolerance window certifies at 5 calibration neighbours by default, a fiber at 50 — everywhere."""
    f = tmp_path / "preds.csv"
    pl.DataFrame({"id": [f"m{i}" for i in range(60)], "pred": [i / 60 for i in range(60)],
                  "dft": [i / 60 + 0.01 * (i % 3) for i in range(60)]}).write_csv(f)
    env = {"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1"}
    out = tmp_path / "cli"
    args = ["replay", str(f), "--id", "id", "--evidence", "pred", "--claim", "dft > 0.5", "--seeds", "3",
            "--tolerance", "mae", "--reference", "dft", "--out", str(out)]
    assert CliRunner().invoke(cli, args, env=env).exit_code == 0
    cli_spec = json.loads((out / "manifest.json").read_text())["resolved_spec"]
    spec_file = tmp_path / "s.toml"
    spec_file.write_text(f'name = "s"\n[source]\npath = "{f}"\nid = "id"\n[[audits]]\nid = "audit"\n'
                         'claim = "dft > 0.5"\nevidence = ["pred"]\n[replay]\nseeds = 3\ntolerance = "mae"\n'
                         'reference = "dft"\n')
    from dcaudit.audits.replay import parse_section
    from dcaudit.spec import load_spec

    from_spec = parse_section(load_spec(str(spec_file)).sections["replay"])
    from_cli = parse_section(cli_spec["replay"])
    api = dcaudit.replay(f, evidence="pred", claim="dft > 0.5", id="id", seeds=3, tolerance="mae",
                         reference="dft")
    from_api = parse_section(api.manifest["resolved_spec"]["replay"])
    assert from_spec == from_cli == from_api
    assert from_api.config.min_support == 5
    fibers = parse_section(dcaudit.replay(f, evidence="pred", claim="dft > 0.5", id="id", seeds=2,
                                          fiber_rule="quantile:4").manifest["resolved_spec"]["replay"])
    assert fibers.config.min_support == 50


def test_record_puts_the_run_in_the_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCAUDIT_HOME", str(tmp_path / "home"))
    frame = pl.DataFrame({"id": ["a", "b", "c"], "e": [0, 0, 1], "y": [1, 0, 1]})
    r = dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", record=True, settings=load_settings())
    assert r.package_dir is not None and (r.package_dir / "summary.parquet").is_file()
    con = dcaudit.connect_catalog(load_settings())
    try:
        assert con.sql(f"select count(*) from summary where run_id = '{r.run_id}'").fetchall() == [(1,)]
    finally:
        con.close()
    assert dcaudit.load(r.run_id, settings=load_settings()).summary.equals(r.summary)


def test_unknown_options_are_named() -> None:
    frame = pl.DataFrame({"id": ["a"], "e": [0], "y": [1]})
    with pytest.raises(dcaudit.api.SpecError, match="seedz"):
        dcaudit.replay(frame, evidence="e", claim="y = 1", id="id", seedz=3)
    with pytest.raises(dcaudit.api.SpecError, match="cannot audit a builtins.dict"):
        dcaudit.audit({"e": [0]}, evidence="e", claim="y = 1")


@pytest.mark.parametrize("call, options, needle", [
    ("replay", {"seeds": 2.5}, "seeds must be an integer, got 2.5"),
    ("replay", {"seeds": True}, "seeds must be an integer, got True"),
    ("replay", {"prices": "0.1"}, "prices must be a list of numbers"),
    ("replay", {"seed_offset": 2**64}, "seed_offset must lie within"),
    ("complete", {"seeds": 1.5}, "seeds must be an integer, got 1.5"),
    ("complete", {"min_support": "x"}, "min_support must be an integer, got 'x'"),
])
def test_option_values_of_the_wrong_type_are_named_never_truncated(call: str, options: dict, needle: str) -> None:
    frame = pl.DataFrame({"id": list("abcdef"), "e": [1, 1, 0, 0, 1, 0], "p": [1, 0, 1, 0, 1, 1],
                          "y": [1, 0, 1, 0, 1, 1]})
    extra = {"probes": ["p"]} if call == "complete" else {}
    with pytest.raises(SpecError, match=re.escape(needle)):
        getattr(dcaudit, call)(frame, evidence="e", claim="y = 1", id="id", **extra, **options)


def test_numpy_integers_and_one_price_or_rule_are_accepted() -> None:
    import numpy as np

    frame = pl.DataFrame({"id": list("abcdef"), "e": [1, 1, 0, 0, 1, 0], "y": [1, 0, 1, 0, 1, 1]})
    r = dcaudit.replay(frame, evidence="e", claim="y = 1", id="id", seeds=np.int64(2), prices=0.1, min_support=1)
    assert r.replay is not None and 2 in set(r.replay["n_seeds"].drop_nulls().to_list())
    s = dcaudit.sensitivity(frame, evidence="e", claim="y = 1", id="id", rules="quantile:2")
    assert s.tables["sensitivity"]["fiber_rule"].to_list() == ["quantile:2"]


def test_settings_and_out_are_checked_at_the_front_door(tmp_path: Path) -> None:
    import dataclasses

    frame = pl.DataFrame({"id": ["a", "b"], "e": [1, 0], "y": [1, 0]})
    for change, needle in [({"threads": 0}, "threads=0"), ({"threads": True}, "threads=True"),
                           ({"memory_limit": "abc"}, "give an amount")]:
        with pytest.raises(SpecError, match=re.escape(needle)):
            dataclasses.replace(load_settings(), **change)
    with pytest.raises(SpecError, match="give a dcaudit.config.Settings"):
        dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", settings="x")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="give a directory path"):
        dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", out=5)  # type: ignore[arg-type]
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpecError, match="is a file, so no directory can be made under it"):
        dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", out=tmp_path / "file" / "pkg")
    (tmp_path / "empty").mkdir()  # an empty directory holds nothing to lose: no force needed
    r = dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", out=tmp_path / "empty", report=False)
    assert r.summary["n_fibers"].to_list() == [2] and (tmp_path / "empty" / "summary.parquet").is_file()


def test_sensitivity_and_complete_through_the_api(tmp_path: Path) -> None:
    n = 120
    frame = pl.DataFrame({"id": [f"c{i}" for i in range(n)], "x": [i / n for i in range(n)],
                          "p": [i % 2 for i in range(n)], "q": [(i // 3) % 2 for i in range(n)],
                          "y": [int(i > n / 2 or i % 7 == 0) for i in range(n)]})
    sens = dcaudit.sensitivity(frame, evidence="x", claim="y = 1", id="id", rules=["quantile:4", "knn:10"])
    assert sens.sensitivity["fiber_rule"].to_list() == ["quantile:4", "knn:10"]
    # the summary is the first binned rule's audit (its sensitivity row), not the exact rule's (every
    # candidate of a numeric column a certified fiber of its own); with only windows, the default quantile:20
    first = sens.sensitivity.row(0, named=True)
    assert sens.summary.select("fiber_rule", "n_fibers", "certified_fraction").row(0) == \
        ("quantile:4", first["n_fibers"], first["certified_fraction"])
    windows = dcaudit.sensitivity(frame, evidence="x", claim="y = 1", id="id", rules=["knn:10"])
    assert windows.summary["fiber_rule"].to_list() == ["quantile:20"]
    # exact, when compared, is the summary's rule if no binned one is: a text column then audits as before
    letters = frame.with_columns(t=pl.Series([("a", "b", "c")[i % 3] for i in range(n)]))
    exact = dcaudit.sensitivity(letters, evidence="t", claim="y = 1", id="id", rules=["exact"])
    assert exact.summary.select("fiber_rule", "n_fibers").row(0) == ("exact", 3)
    done = dcaudit.complete(frame, evidence="p", claim="y = 1", probes=["q", "x"], id="id", seeds=3,
                            policies=["response_rank", "random"], random_draws=2)
    steps = done.completion.filter(pl.col("seed").is_null())
    assert set(steps["policy"]) == {"response_rank", "random"} and steps["step"].max() == 2


def test_notebook_view_renders_the_summary_and_mixed_fibers() -> None:
    frame = pl.DataFrame({"id": [f"c{i}" for i in range(12)], "e": [i % 3 for i in range(12)],
                          "y": [int(i % 3 == 0 or i == 4) for i in range(12)]})
    r = dcaudit.audit(frame, evidence="e", claim="y = 1", id="id")
    html = r._repr_html_()
    assert "<script" not in html and "c4" in html  # a member of the mixed fiber is listed
    assert "ambiguous" in html.lower()


@pytest.mark.parametrize("call, options, needle", [
    ("replay", {"epsilon": 0.1}, "only act in the calibrated and family-wise modes"),
    ("replay", {"reference": "p"}, "give tolerance"),
    ("complete", {"budget": 5.0}, "budget needs costs"),
    ("audit", {"id": ""}, "name the candidate id column"),
])
def test_options_that_would_be_silently_ignored_are_errors(call: str, options: dict, needle: str) -> None:
    frame = pl.DataFrame({"id": list("abcdef"), "e": [1, 1, 0, 0, 1, 0], "p": [1, 0, 1, 0, 1, 1],
                          "y": [1, 0, 1, 0, 1, 1]})
    kwargs = {"id": "id", **({"probes": ["p"]} if call == "complete" else {}), **options}
    with pytest.raises(SpecError, match=re.escape(needle)):
        getattr(dcaudit, call)(frame, evidence="e", claim="y = 1", **kwargs)


def test_a_probe_the_claim_reads_is_noted_as_leakage() -> None:
    frame = pl.DataFrame({"id": list("abcdef"), "e": [1, 1, 0, 0, 1, 0], "y": [1, 0, 1, 0, 1, 1]})
    r = dcaudit.complete(frame, evidence="e", claim="y = 1", id="id", probes=["y"], seeds=2, min_support=1)
    assert any("the claim reads probe(s) y" in n for n in r.notes)


def test_sensitivity_section_options_are_typed() -> None:
    from dcaudit.audits.sensitivity import section_options

    assert section_options({"rules": "quantile:5", "tolerances": "mae", "reference": "r"}).rules == ("quantile:5",)
    assert section_options({"rules": [], "tolerances": [0.5]}).rules == ()  # tolerance windows only
    with pytest.raises(SpecError, match="min_support must be an integer, got 2.5"):
        section_options({"min_support": 2.5})
    with pytest.raises(SpecError, match="rules is empty"):
        section_options({"rules": []})
    with pytest.raises(SpecError, match="give reference too"):
        section_options({"tolerances": "mae"})


def test_a_report_that_cannot_be_written_is_one_line_and_leaves_no_temporary_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    from dcaudit.errors import WorkspaceError
    from dcaudit.reports import html

    frame = pl.DataFrame({"id": ["a", "b"], "e": [1, 0], "y": [1, 0]})
    dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", out=tmp_path / "pkg", report=False)

    def read_only(*_: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "replace", read_only)
    with pytest.raises(WorkspaceError, match="Read-only file system"):
        html.write_report(tmp_path / "pkg")
    assert not [p for p in (tmp_path / "pkg").iterdir() if p.name.endswith(".tmp")]


def test_save_never_writes_into_the_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """save(..., force=True) replaced the workspace itself (catalog, runs, records gone), or a recorded
    package in runs/: refused like out=."""
    home = tmp_path / "home"
    monkeypatch.setenv("DCAUDIT_HOME", str(home))
    frame = pl.DataFrame({"e": [1, 1, 2], "y": [1, 0, 1]})
    result = dcaudit.audit(frame, evidence=["e"], claim="y = 1", record=True)
    for target in (home, home / "runs" / str(result.run_id), home / "tables"):
        with pytest.raises(SpecError, match="workspace"):
            result.save(target, force=True)
    assert (home / "catalog.duckdb").is_file() and (home / "runs" / str(result.run_id) / "manifest.json").is_file()
    assert (result.save(tmp_path / "elsewhere") / "summary.parquet").is_file()


@pytest.mark.parametrize("call, expected", [
    (lambda f: dcaudit.audit(f, evidence=None, claim="y = 1"), "evidence: give one name"),
    (lambda f: dcaudit.audit(f, evidence=5, claim="y = 1"), "evidence: give one name"),
    (lambda f: dcaudit.audit(f, evidence={"e", "s"}, claim="y = 1"), "a set has no order"),
    (lambda f: dcaudit.complete(f, evidence=["e"], claim="y = 1", probes=None), "probes: give one name"),
    (lambda f: dcaudit.complete(f, evidence=["e"], claim="y = 1", probes=["s"], seeds=2, costs=[1, 2]),
     "a price per probe"),
    (lambda f: dcaudit.sensitivity(f, evidence="x", claim="y = 1", rules=5), "rules: give one name"),
    (lambda f: dcaudit.load(None), "give a package directory"),
    (lambda f: dcaudit.audit(None, evidence=["e"], claim="y = 1"), "the data is None"),
    (lambda f: dcaudit.replay(f, evidence=["x"], claim="y = 1", seeds=2, tolerance="mae", reference="__row"),
     "unknown column"),
])
def test_wrong_arguments_are_dcaudit_errors(call, expected: str) -> None:  # noqa: ANN001
    frame = pl.DataFrame({"e": [1, 1, 2, 2], "s": [0, 1, 0, 1], "x": [0.1, 0.2, 0.3, 0.4], "y": [1, 0, 1, 1]})
    with pytest.raises(DcauditError, match=expected):
        call(frame)


def test_numpy_integers_are_whole_numbers_everywhere() -> None:
    import numpy as np

    frame = pl.DataFrame({"e": [1, 1, 2, 2], "y": [1, 1, 0, 0]})
    assert dcaudit.audit(frame, evidence=["e"], claim="y = 1", min_support=np.int64(2)).summary["min_support"][0] == 2
    replay = dcaudit.replay(frame, evidence=["e"], claim="y = 1", min_support=np.int32(2), seeds=np.int64(2))
    assert replay.summary["min_support"][0] == 2


def test_one_polars_frame_audited_from_threads_does_not_hang(tmp_path: Path) -> None:
    """polars can deadlock when threads ask one frame for its schema and its Arrow export at once; dcaudit
    exports a frame under a lock, so a thread pool over one frame finishes (it hung in ~15 % of processes)."""
    import subprocess
    import sys

    code = ("import threading, polars as pl, dcaudit\n"
            "frame = pl.DataFrame({'e': [i % 3 for i in range(3000)], 'y': [i % 2 for i in range(3000)]})\n"
            "def work():\n    dcaudit.audit(frame, evidence=['e'], claim='y = 1')\n"
            "for _ in range(5):\n"
            "    threads = [threading.Thread(target=work) for _ in range(4)]\n"
            "    [t.start() for t in threads]; [t.join() for t in threads]\n"
            "print('done')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "DCAUDIT_HOME": str(tmp_path / "home")})
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr[-2000:]


def test_excluded_by_reason_counts_each_model_of_a_per_model_audit_apart(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCAUDIT_HOME", str(tmp_path / "home"))
    pl.DataFrame({"id": [f"c{i}" for i in range(8)], "model": ["m1"] * 4 + ["m2"] * 4,
                  "e": [1, None, 2, 2, 1, None, 2, 1], "y": [1, 0, None, 1, 0, 1, 1, 0]}).write_csv(tmp_path / "t.csv")
    spec = tmp_path / "pm.toml"
    spec.write_text('name = "pm"\n[source]\npath = "t.csv"\nid = "id"\n\n[[audits]]\nid = "a"\nclaim = "y = 1"\n'
                    'evidence = ["e"]\nper = "model"\nmin_support = 1\n')
    rows = dcaudit.run(spec).excluded_by_reason()
    assert {(r["model"], r["excluded_reason"], r["n"]) for r in rows.to_dicts() if r["model"] in ("m1", "m2")} == {
        ("m1", "evidence_missing", 1), ("m1", "claim_missing", 1), ("m2", "evidence_missing", 1)}


def test_save_refuses_a_force_that_is_not_a_bool(tmp_path: Path) -> None:
    result = dcaudit.audit(pl.DataFrame({"e": [1, 2], "y": [1, 0]}), evidence="e", claim="y = 1")
    for call in (lambda: result.save(tmp_path / "p", force="no"), lambda: result.save("")):  # type: ignore[arg-type]
        with pytest.raises(SpecError):
            call()
