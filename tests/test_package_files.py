"""How package tables are written: dictionary-encoded columns read back as text, and Parquet statistics are kept
where a reader can skip with them (run_id, numbers) and left out where they cost a decode and skip nothing; and
the console's line on excluded candidates, read off the candidates table."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dcaudit import arrays
from dcaudit.storage import constant_dictionary, read_table, statistics_columns, write_package


def _candidates(n: int) -> pa.Table:
    status = pa.DictionaryArray.from_arrays(pa.array([i % 3 for i in range(n)], pa.uint8()),
                                            arrays.strings(["certified_true", "ambiguous", "excluded"]))
    return pa.table({"source": constant_dictionary("src.csv", n), "audit_id": constant_dictionary("a", n),
                     "candidate_id": [f"c{i}" for i in range(n)], "fiber_key": pa.array(range(n), pa.int64()),
                     "claim_value": [i % 2 == 0 for i in range(n)], "status": status,
                     "excluded_reason": pa.nulls(n, pa.string())})


def test_statistics_are_written_for_run_id_and_plain_columns_only(tmp_path: Path) -> None:
    table = _candidates(10)
    assert statistics_columns(table) == ["fiber_key", "claim_value", "excluded_reason"]
    write_package(tmp_path / "p", "r1", {"candidates": table}, {})
    meta = pq.ParquetFile(tmp_path / "p" / "candidates.parquet").metadata.row_group(0)
    names = [meta.column(i).path_in_schema for i in range(meta.num_columns)]
    has = {name: meta.column(i).is_stats_set for i, name in enumerate(names)}
    assert has["run_id"] and has["fiber_key"] and has["claim_value"]
    assert not has["candidate_id"] and not has["status"] and not has["audit_id"]


def test_dictionary_columns_read_back_as_their_text(tmp_path: Path) -> None:
    table = _candidates(7)
    write_package(tmp_path / "p", "r1", {"candidates": table}, {})
    back = read_table(tmp_path / "p" / "candidates.parquet")
    assert back.schema.field("status").type == pa.string() and back.schema.field("run_id").type == pa.string()
    assert back.column("status").to_pylist() == table.column("status").to_pylist()
    assert back.column("run_id").to_pylist() == ["r1"] * 7
    assert back.column("candidate_id").to_pylist() == [f"c{i}" for i in range(7)]


def test_columns_with_a_value_on_every_row_are_written_required_and_read_back_whole(tmp_path: Path) -> None:
    """Required columns carry no definition levels (faster to write); a declared one that holds a NULL stays
    nullable rather than being refused, and every reader sees the same values as before."""
    import duckdb
    import polars as pl

    table = _candidates(9)
    with_null = table.set_column(table.column_names.index("source"), "source",
                                 pa.array(["s"] * 8 + [None], pa.string()))
    write_package(tmp_path / "p", "r1", {"candidates": table}, {})
    write_package(tmp_path / "q", "r2", {"candidates": with_null}, {})
    schema = pq.read_schema(tmp_path / "p" / "candidates.parquet")
    required = {f.name for f in schema if not f.nullable}
    assert required == {"run_id", "source", "audit_id", "candidate_id", "status"}
    assert "source" in {f.name for f in pq.read_schema(tmp_path / "q" / "candidates.parquet") if f.nullable}
    back = read_table(tmp_path / "p" / "candidates.parquet")
    for name in table.column_names:
        assert back.column(name).to_pylist() == table.column(name).to_pylist()
    # files of both kinds (and of packages written before) are one table to DuckDB, polars and pyarrow
    both = str(tmp_path / "*" / "candidates.parquet")
    assert duckdb.sql(f"SELECT count(*), count(source) FROM read_parquet('{both}', union_by_name = true)"
                      ).fetchall() == [(18, 17)]
    assert pl.read_parquet(both)["source"].null_count() == 1
    files = [str(tmp_path / d / "candidates.parquet") for d in ("p", "q")]
    assert pq.read_table(files, columns=["source"]).column("source").null_count == 1


def test_the_console_has_no_excluded_line_when_nothing_is_excluded() -> None:
    from dcaudit.reports.console import excluded_line

    table = _candidates(6)
    assert excluded_line(table) is None
    reasons = pa.array([None, "evidence_missing", None, "claim_missing", "evidence_missing", None], pa.string())
    with_reasons = table.set_column(table.column_names.index("excluded_reason"), "excluded_reason", reasons)
    assert excluded_line(with_reasons) == "3 of 6 candidates excluded: evidence_missing 2, claim_missing 1"


def test_a_derived_table_whose_bytes_changed_is_not_reused(tmp_path: Path) -> None:
    """A cached table in tables/ rewritten by another tool, or with a flipped bit, kept its metadata and was
    reused; its sha256 is noted beside it when written, and checked when the file's identity changed."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from dcaudit.storage import cached_table, write_table_atomic

    path = tmp_path / "t.parquet"
    write_table_atomic(pa.table({"x": [1, 2, 3]}), path, {"dcaudit.sha256": "k", "dcaudit.normaliser": "v1"})
    assert cached_table(path, "k", "v1")
    moved = tmp_path / "copy.parquet"  # the same bytes under another inode (a restore, cp): still intact
    shutil.copy(path, moved)
    shutil.copy(tmp_path / ".t.parquet.sha256", tmp_path / ".copy.parquet.sha256")
    assert cached_table(moved, "k", "v1")
    table = pq.read_table(path)
    pq.write_table(table.set_column(0, "x", pa.array([1, 2, 4])), path)  # same metadata, other values
    assert not cached_table(path, "k", "v1")
    (tmp_path / ".copy.parquet.sha256").unlink()  # a table without the note is derived again
    assert not cached_table(moved, "k", "v1")


def test_a_package_rewritten_with_other_columns_is_refused_in_one_message(tmp_path: Path) -> None:
    """Files and manifest rewritten by another tool (hashes updated, so nothing looks damaged) with a count
    column gone and a count stored as text: load, report and compare name each table and column at once
    (exit 2 on the CLI), instead of failing inside a view with a KeyError or a type error."""
    import hashlib
    import json

    import pytest
    from click.testing import CliRunner

    import dcaudit
    from dcaudit.cli import cli
    from dcaudit.errors import SpecError
    from dcaudit.storage import schema_problems

    csv = tmp_path / "t.csv"
    csv.write_text("id,e,y\n1,0,1\n2,0,0\n3,1,1\n4,1,1\n")
    package = tmp_path / "pkg"
    dcaudit.audit(csv, id="id", evidence=["e"], claim="y = 1", out=package, report=False)
    assert schema_problems(package) == []   # as dcaudit writes it
    summary = pq.read_table(package / "summary.parquet").drop_columns(["n_fibers"])  # which the summary line reads
    pq.write_table(summary, package / "summary.parquet")
    fibers = pq.read_table(package / "fibers.parquet")
    fibers = fibers.set_column(fibers.column_names.index("n"), "n", fibers["n"].cast(pa.string()))
    pq.write_table(fibers, package / "fibers.parquet")
    manifest = json.loads((package / "manifest.json").read_text())
    for name in ("summary.parquet", "fibers.parquet"):
        manifest["files"][name] = hashlib.sha256((package / name).read_bytes()).hexdigest()
    (package / "manifest.json").write_text(json.dumps(manifest))

    problems = schema_problems(package)
    assert len(problems) == 2
    assert "fibers.parquet: 'n' is string, not BIGINT" in problems[0]
    assert "summary.parquet: lacks column(s) 'n_fibers'" in problems[1]
    with pytest.raises(SpecError, match="lacks column"):
        dcaudit.load(package)
    result = CliRunner().invoke(cli, ["report", str(package), "--out", str(tmp_path / "r.html")],
                                env={"DCAUDIT_HOME": str(tmp_path / "home")})
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "'n' is string, not BIGINT" in result.output and "'n_fibers'" in result.output
    assert not (tmp_path / "r.html").exists()


def _package(tmp_path: Path, name: str = "src") -> Path:
    return write_package(tmp_path / name, "r1", {"summary": pa.table({"n_candidates": [1]})}, {"spec": "s"})


def test_staging_never_touches_what_is_in_dot_partial_and_leaves_nothing(tmp_path: Path) -> None:
    mine = tmp_path / ".partial" / "pkg"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    write_package(tmp_path / "pkg", "r1", {"summary": pa.table({"n_candidates": [1]})}, {"spec": "s"})
    assert (mine / "notes.txt").read_text() == "mine"
    write_package(tmp_path / "elsewhere" / "pkg", "r1", {"summary": pa.table({"n_candidates": [1]})}, {})
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == ["pkg"]   # no .partial left behind


def _cli(tmp_path: Path, *args: str):  # noqa: ANN202
    from click.testing import CliRunner

    from dcaudit.cli import cli

    env = {"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1"}
    return CliRunner().invoke(cli, list(args), env=env)


def _csv(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "small.csv"
    path.write_text("cid,e1,y\n" + "".join(f"c{i},{i % 3},{i % 2}\n" for i in range(12)))
    return path


AUDIT = ("--id", "cid", "--evidence", "e1", "--claim", "y = 1", "--no-report")


def test_force_replaces_only_an_evidence_package_and_never_the_input(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    data = _csv(tmp_path / "data")
    (tmp_path / "data" / "README.txt").write_text("notes")
    result = _cli(tmp_path, "audit", str(data), *AUDIT, "--out", str(tmp_path / "data"), "--force")
    assert result.exit_code == 2 and "holds the input" in result.output, result.output
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.txt").write_text("notes")
    result = _cli(tmp_path, "audit", str(data), *AUDIT, "--out", str(tmp_path / "docs"), "--force")
    assert result.exit_code == 2 and "not an evidence package" in result.output, result.output
    assert data.exists() and (tmp_path / "docs" / "README.txt").read_text() == "notes"
    # an earlier package that the input was saved into: replacing it would delete the input
    earlier = tmp_path / "earlier"
    assert _cli(tmp_path, "audit", str(data), *AUDIT, "--out", str(earlier)).exit_code == 0
    inside = earlier / "small.csv"
    inside.write_text(data.read_text())
    result = _cli(tmp_path, "audit", str(inside), *AUDIT, "--out", str(earlier), "--force")
    assert result.exit_code == 2 and "holds the input" in result.output and inside.exists(), result.output
    monkeypatch.chdir(tmp_path / "data")
    result = _cli(tmp_path, "audit", str(data), *AUDIT, "--out", ".", "--force")
    assert result.exit_code == 2 and "current directory" in result.output
    package = tmp_path / "results"
    assert _cli(tmp_path, "audit", str(data), *AUDIT, "--out", str(package)).exit_code == 0
    again = _cli(tmp_path, "audit", str(data), *AUDIT, "--out", str(package), "--force")   # a package: replaced
    assert again.exit_code == 0 and (package / "manifest.json").is_file(), again.output
    (tmp_path / "empty").mkdir()
    assert _cli(tmp_path, "audit", str(data), *AUDIT, "--out", str(tmp_path / "empty")).exit_code == 0
    unwritable = _cli(tmp_path, "audit", str(data), *AUDIT, "--out", "/proc/dcaudit-test")
    assert unwritable.exit_code == 2 and "cannot be written" in unwritable.output


def test_export_replaces_files_only_with_force_and_never_a_packages(tmp_path: Path) -> None:
    data = _csv(tmp_path / "data")
    package = tmp_path / "pkg"
    assert _cli(tmp_path, "audit", str(data), *AUDIT, "--out", str(package)).exit_code == 0
    out = tmp_path / "exported"
    out.mkdir()
    (out / "summary.json").write_text('{"mine": true}')
    refused = _cli(tmp_path, "export", str(package), "--out", str(out))
    assert refused.exit_code == 2 and "summary.json" in refused.output and "--force" in refused.output
    assert (out / "summary.json").read_text() == '{"mine": true}'
    assert _cli(tmp_path, "export", str(package), "--out", str(out), "--force").exit_code == 0
    other = tmp_path / "pkg2"
    assert _cli(tmp_path, "audit", str(data), *AUDIT, "--out", str(other)).exit_code == 0
    into = _cli(tmp_path, "export", str(package), "--out", str(other), "--force")
    assert into.exit_code == 2 and "evidence package" in into.output


def test_query_output_is_strict_json_and_one_line_per_row(tmp_path: Path) -> None:
    import json

    data = _csv(tmp_path / "data")
    assert _cli(tmp_path, "audit", str(data), *AUDIT).exit_code == 0
    sql = "SELECT 'nan'::DOUBLE AS a, 'inf'::DOUBLE AS b, 'x' || chr(9) || 'y' || chr(10) || 'z\\w' AS t"
    rows = json.loads(_cli(tmp_path, "query", "--json", sql).output)   # json.loads would take bare NaN too:
    assert rows == [{"a": "NaN", "b": "Infinity", "t": "x\ty\nz\\w"}]  # so the values are checked
    assert _cli(tmp_path, "query", "--quiet", sql).output == "nan\tinf\tx\\ty\\nz\\\\w\n"
    for args in (("query", " "), ("query", "--json", "--quiet", "SELECT 1")):
        result = _cli(tmp_path, *args)
        assert result.exit_code == 2 and "Error:" in result.output


def test_a_package_that_appears_while_a_run_writes_is_kept(tmp_path: Path) -> None:
    from dcaudit.errors import SpecError

    target = tmp_path / "out"

    def another_run_finishes_first(partial: Path) -> None:
        target.mkdir()
        (target / "manifest.json").write_text('{"files": {}}')

    with pytest.raises(SpecError, match="appeared while this run was writing"):
        write_package(target, "r2", {"summary": pa.table({"n_candidates": [2]})}, {},
                      finalize=another_run_finishes_first)
    assert (target / "manifest.json").read_text() == '{"files": {}}' and not (tmp_path / ".partial").exists()


def test_what_a_killed_write_left_is_removed_by_the_next_and_a_live_ones_kept(tmp_path: Path) -> None:
    import os

    dead = tmp_path / ".partial" / "pkg.999999999.0a0b0c0d.tmp"   # no such process
    live = tmp_path / ".partial" / f"pkg.{os.getpid()}.0a0b0c0d.tmp"
    for folder in (dead, live):
        folder.mkdir(parents=True)
    write_package(tmp_path / "pkg", "r1", {"summary": pa.table({"n_candidates": [1]})}, {})
    assert not dead.exists() and live.exists()


def test_force_never_deletes_a_users_file_in_a_package_nor_follows_a_link(tmp_path: Path) -> None:
    data = _csv(tmp_path / "data")
    package = tmp_path / "pkg"
    assert _cli(tmp_path, "audit", str(data), *AUDIT, "--out", str(package)).exit_code == 0
    (package / "NOTES.txt").write_text("mine")
    kept = _cli(tmp_path, "audit", str(data), *AUDIT, "--out", str(package), "--force")
    assert kept.exit_code == 2 and "NOTES.txt" in kept.output and (package / "NOTES.txt").read_text() == "mine"
    (package / "NOTES.txt").unlink()
    assert _cli(tmp_path, "report", str(package)).exit_code == 0   # report.html is dcaudit's own: replaceable
    assert _cli(tmp_path, "audit", str(data), *AUDIT, "--out", str(package), "--force").exit_code == 0
    link = tmp_path / "link"
    link.symlink_to(package)
    linked = _cli(tmp_path, "audit", str(data), *AUDIT, "--out", str(link), "--force")
    assert linked.exit_code == 2 and "symbolic link" in linked.output and link.is_symlink()


def _listing(folder: Path) -> dict[str, bool]:
    """Every entry below ``folder`` (hidden ones too), with whether it is a directory."""
    return {str(p.relative_to(folder)): p.is_dir() for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("make", ["directory", "broken link", "fifo"])
def test_a_cached_table_that_is_not_a_file_is_named_not_derived_again(tmp_path: Path, make: str) -> None:
    """cached_table read a directory (or a link to nothing) at a table's path as "no table", and the rewrite
    then failed in os.replace as an internal error, leaving its temporary file behind."""
    import os

    from dcaudit.errors import DcauditError
    from dcaudit.storage import NotAFileError, cached_table

    path = tmp_path / "t.parquet"
    assert not cached_table(path, "k", "v1")            # nothing there: derived, as before
    if make == "directory":
        path.mkdir()
        (path / "mine.txt").write_text("keep")
    elif make == "broken link":
        path.symlink_to(tmp_path / "gone.parquet")
    else:
        os.mkfifo(path)
    before = _listing(tmp_path)
    with pytest.raises(NotAFileError) as caught:
        cached_table(path, "k", "v1")
    message = str(caught.value)
    assert str(path) in message and "\n" not in message and isinstance(caught.value, DcauditError)
    assert caught.value.exit_code == 2
    assert {"directory": "is a directory, not a file", "broken link": "gone.parquet, which does not exist",
            "fifo": "not a regular file"}[make] in message
    assert _listing(tmp_path) == before


def test_writing_a_table_onto_a_directory_stops_and_leaves_nothing(tmp_path: Path) -> None:
    from dcaudit.storage import NotAFileError, write_table_atomic

    path = tmp_path / "findings.parquet"
    path.mkdir()
    (path / "mine.txt").write_text("keep")
    before = _listing(tmp_path)
    with pytest.raises(NotAFileError, match=f"{path} is a directory, not a file"):
        write_table_atomic(pa.table({"x": [1]}), path, {"dcaudit.sha256": "k"})
    assert _listing(tmp_path) == before and (path / "mine.txt").read_text() == "keep"


def test_a_directory_that_appears_while_a_table_is_written_is_named_and_the_temporary_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process (or the user) puts a directory at the path between the check and the rename."""
    from dcaudit import storage
    from dcaudit.storage import NotAFileError, write_table_atomic

    path = tmp_path / "findings.parquet"
    real = storage.pq.write_table

    def write_then_block(table: pa.Table, where: object, **kwargs: object) -> None:
        real(table, where, **kwargs)
        path.mkdir()

    monkeypatch.setattr(storage.pq, "write_table", write_then_block)
    with pytest.raises(NotAFileError, match=f"{path} is a directory"):
        write_table_atomic(pa.table({"x": [1]}), path)
    assert _listing(tmp_path) == {"findings.parquet": True}


def test_a_failed_table_write_leaves_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dcaudit import storage
    from dcaudit.storage import write_table_atomic

    real = storage.pq.write_table

    def write_half(table: pa.Table, where: object, **kwargs: object) -> None:
        real(table, where, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(storage.pq, "write_table", write_half)
    with pytest.raises(OSError, match="No space"):
        write_table_atomic(pa.table({"x": [1]}), tmp_path / "t.parquet")
    assert _listing(tmp_path) == {}


def test_a_digest_note_that_is_a_directory_is_named(tmp_path: Path) -> None:
    """The note beside a derived table was read and written with OSError ignored: a directory there made every
    run derive the table again, silently."""
    from dcaudit.storage import NotAFileError, cached_table, write_table_atomic

    path = tmp_path / "t.parquet"
    write_table_atomic(pa.table({"x": [1]}), path, {"dcaudit.sha256": "k"})
    note = tmp_path / ".t.parquet.sha256"
    note.unlink()
    note.mkdir()
    with pytest.raises(NotAFileError, match=f"{note} is a directory"):
        cached_table(path, "k", None)
    written = path.read_bytes()
    with pytest.raises(NotAFileError, match=f"{note} is a directory"):
        write_table_atomic(pa.table({"x": [2]}), path, {"dcaudit.sha256": "k"})
    assert path.read_bytes() == written and note.is_dir()   # checked before anything is replaced


def test_atomic_bytes_onto_a_directory_or_under_a_file_stop_with_the_path(tmp_path: Path) -> None:
    """Records, caches and catalog stamps go through write_bytes_atomic; a cache caller that lets an OSError
    pass quietly (the catalog's) still can: the error is an OSError too."""
    from dcaudit.storage import NotAFileError, write_bytes_atomic, write_json_atomic

    record = tmp_path / "records" / "r1.json"
    record.mkdir(parents=True)
    before = _listing(tmp_path)
    with pytest.raises(NotAFileError, match=f"{record} is a directory") as caught:
        write_json_atomic(record, {"run_id": "r1"})
    assert isinstance(caught.value, OSError) and _listing(tmp_path) == before
    (tmp_path / "raw").write_text("a file where a directory belongs")
    with pytest.raises(NotAFileError, match=f"{tmp_path / 'raw'} is a file, not a directory; move "
                                            f"{tmp_path / 'raw'} out of the way"):
        write_bytes_atomic(tmp_path / "raw" / "x.bin", b"x")
    assert (tmp_path / "raw").read_text() == "a file where a directory belongs"


def test_a_tilde_target_is_the_users_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """write_package("~/pkg") made a folder named "~" in the working directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    written = write_package(Path("~/pkg"), "r1", {"candidates": _candidates(3)}, {})
    assert written == tmp_path / "home" / "pkg" and (written / "manifest.json").is_file()
    assert not (tmp_path / "~").exists()


def test_a_table_written_early_makes_the_package_write_package_makes(tmp_path: Path) -> None:
    """PackageWriter writes a table handed to write_early on its own thread while the run goes on; the package
    it commits is the one write_package writes from the same tables: the same files, bytes and manifest."""
    import json

    from dcaudit.storage import PackageWriter

    summary, candidates = pa.table({"n_candidates": [5]}), _candidates(5)
    write_package(tmp_path / "whole", "r1", {"summary": summary, "candidates": candidates}, {"spec": "s"})
    with PackageWriter(tmp_path / "early", "r1") as writer:
        writer.write_early("candidates", candidates)
        assert not (tmp_path / "early").exists()   # staged, not in place before the commit
        writer.commit({"summary": summary, "candidates": candidates}, {"spec": "s"})
    whole = json.loads((tmp_path / "whole" / "manifest.json").read_text())
    early = json.loads((tmp_path / "early" / "manifest.json").read_text())
    assert whole == early and list(early["row_counts"]) == ["summary", "candidates"]
    assert sorted(p.name for p in (tmp_path / "early").iterdir()) == sorted(p.name for p in (tmp_path / "whole").iterdir())


def test_a_table_the_run_replaced_after_writing_it_early_is_written_again(tmp_path: Path) -> None:
    from dcaudit.storage import PackageWriter

    with PackageWriter(tmp_path / "p", "r1") as writer:
        writer.write_early("candidates", _candidates(3))
        writer.write_early("fibers", pa.table({"fiber_key": [0]}))
        writer.commit({"candidates": _candidates(8)}, {})   # another table, and no fibers after all
    assert read_table(tmp_path / "p" / "candidates.parquet").num_rows == 8
    assert not (tmp_path / "p" / "fibers.parquet").exists()


def test_a_run_that_fails_after_an_early_write_leaves_the_old_package_and_nothing_else(tmp_path: Path) -> None:
    from dcaudit.storage import PackageWriter

    target = tmp_path / "p"
    write_package(target, "r0", {"candidates": _candidates(2)}, {})
    before = sorted((p.name, p.read_bytes()) for p in target.iterdir())
    with pytest.raises(RuntimeError, match="stage failed"), PackageWriter(target, "r1", replace_existing=True) as w:
        w.write_early("candidates", _candidates(50_000))
        raise RuntimeError("stage failed")
    assert sorted((p.name, p.read_bytes()) for p in target.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]   # no staging directory left


def test_an_early_write_that_fails_is_the_commits_error_and_leaves_nothing(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A write on the writer's thread that fails (a full disk) raises its own error from commit, in the run's
    thread, where the runner words it; the staging directory goes and no package appears."""
    import dcaudit.storage as storage
    from dcaudit.storage import PackageWriter

    real = storage.pq.write_table

    def full_disk(table, where, **kwargs):  # noqa: ANN001, ANN003, ANN202
        if str(where).endswith("candidates.parquet"):
            raise OSError(28, "No space left on device")
        return real(table, where, **kwargs)

    monkeypatch.setattr(storage.pq, "write_table", full_disk)
    with pytest.raises(OSError, match="No space left"), PackageWriter(tmp_path / "p", "r1") as writer:
        candidates = _candidates(4)
        writer.write_early("candidates", candidates)
        writer.commit({"summary": pa.table({"n_candidates": [4]}), "candidates": candidates}, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _put_in_parts(stream, table: pa.Table, sizes: list[int]) -> None:  # noqa: ANN001 - a TableStream
    at = 0
    for n in sizes:
        stream.put(table.slice(at, n))
        at += n


def test_a_table_streamed_in_parts_makes_the_package_a_whole_write_makes(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A TableStream's parts, of any sizes, are written on the writer's thread as they are put, gathered and cut
    into row groups of ROW_GROUP_ROWS rows: the package is the one write_package writes from the same tables
    (the same row groups, bytes and manifest)."""
    import json

    import dcaudit.storage as storage
    from dcaudit.storage import PackageWriter

    monkeypatch.setattr(storage, "ROW_GROUP_ROWS", 100)
    summary, candidates = pa.table({"n_candidates": [250]}), _candidates(250)
    write_package(tmp_path / "whole", "r1", {"summary": summary, "candidates": candidates}, {"spec": "s"})
    with PackageWriter(tmp_path / "streamed", "r1") as writer:
        stream = writer.stream("candidates")
        _put_in_parts(stream, candidates, [30, 100, 7, 113])
        assert stream.done(candidates)
        writer.commit({"summary": summary, "candidates": candidates}, {"spec": "s"})
    whole = json.loads((tmp_path / "whole" / "manifest.json").read_text())
    streamed = json.loads((tmp_path / "streamed" / "manifest.json").read_text())
    assert whole == streamed   # the files' sha256 among them
    meta = pq.ParquetFile(tmp_path / "streamed" / "candidates.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [100, 100, 50]


@pytest.mark.parametrize("how", ["abandoned", "fewer rows put", "a NULL after a part without one", "no parts"])
def test_a_stream_that_is_not_the_table_leaves_the_commit_to_write_it_whole(tmp_path: Path, how: str) -> None:
    """A stream abandoned, holding other rows than the table it is said to be, or whose later part has a NULL in
    a column the first part left without (REQUIRED there): the commit writes the table whole, as it would have
    (a column with a NULL stays nullable), and no file of the stream is left."""
    import json

    from dcaudit.storage import PackageWriter

    candidates = _candidates(40)
    if how == "a NULL after a part without one":
        ids = pa.array([None if i == 30 else f"c{i}" for i in range(40)], pa.string())
        candidates = candidates.set_column(candidates.schema.get_field_index("candidate_id"), "candidate_id", ids)
    write_package(tmp_path / "whole", "r1", {"candidates": candidates}, {})
    with PackageWriter(tmp_path / "p", "r1") as writer:
        stream = writer.stream("candidates")
        if how != "no parts":
            _put_in_parts(stream, candidates, [20] if how == "fewer rows put" else [20, 20])
        if how == "abandoned":
            stream.abandon()
        assert stream.done(candidates) is (how == "a NULL after a part without one")
        writer.commit({"candidates": candidates}, {})
    assert json.loads((tmp_path / "p" / "manifest.json").read_text()) == \
        json.loads((tmp_path / "whole" / "manifest.json").read_text())
    assert read_table(tmp_path / "p" / "candidates.parquet").equals(read_table(tmp_path / "whole" / "candidates.parquet"))
    if how == "a NULL after a part without one":
        assert pq.read_schema(tmp_path / "p" / "candidates.parquet").field("candidate_id").nullable


def test_a_run_that_fails_while_a_stream_is_open_ends_it_and_leaves_nothing(tmp_path: Path) -> None:
    """The writer's thread waits for a stream's next part; a run that fails before saying the stream is done
    ends it (the thread stops, the package is discarded) instead of waiting forever."""
    from dcaudit.storage import PackageWriter

    with pytest.raises(RuntimeError, match="stage failed"), PackageWriter(tmp_path / "p", "r1") as writer:
        writer.stream("candidates").put(_candidates(10))
        raise RuntimeError("stage failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
