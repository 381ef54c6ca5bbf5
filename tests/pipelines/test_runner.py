"""`dcaudit run tox21` end to end on the real data: the published figures, the catalog, failures."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from dcaudit.catalog import Catalog
from dcaudit.cli import cli
from dcaudit.config import Settings
from dcaudit.pipelines.runner import run_spec
from dcaudit.spec import load_spec


def _invoke(settings: Settings, *args: str) -> object:
    env = {"DCAUDIT_HOME": str(settings.home), "DCAUDIT_MIRROR": str(settings.mirror), "DCAUDIT_OFFLINE": "1"}
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


@pytest.fixture(scope="module")
def first_run(tox21_settings: Settings):  # noqa: ANN201
    result = _invoke(tox21_settings, "run", "tox21")
    assert result.exit_code == 0, result.output
    return tox21_settings


def test_tox21_reproduces_the_published_fiber_audit(first_run: Settings) -> None:
    con = duckdb.connect(str(first_run.catalog_path), read_only=True)
    row = con.sql("SELECT n_candidates, n_fibers, n_mixed_fibers, certified_false, certified_true, ambiguous, "
                  "round(100 * ambiguous_fraction, 2) FROM summary WHERE audit_id = 'nr7-p53'").fetchall()
    assert row == [(4391, 43, 14, 86, 8, 4297, 97.86)]
    # every Tox21 compound is in the candidates table, the 3440 incomplete ones as 'excluded'
    counts = dict(con.sql("SELECT status, count(*) FROM candidates WHERE audit_id = 'nr7-p53' GROUP BY 1").fetchall())
    assert counts == {"ambiguous": 4297, "certified_false": 86, "certified_true": 8, "excluded": 3440}
    # the all-zero pattern is the big mixed fiber (3678 compounds, 19 active)
    assert con.sql("SELECT n, n_true FROM fibers WHERE audit_id = 'nr7-p53' AND evidence_key = '0,0,0,0,0,0,0'"
                   ).fetchall() == [(3678, 19)]


def test_min_support_moves_small_pure_fibers_to_unsupported(first_run: Settings) -> None:
    con = duckdb.connect(str(first_run.catalog_path), read_only=True)
    rows = con.sql("SELECT min_support, certified_true + certified_false, unsupported, ambiguous FROM summary "
                   "ORDER BY min_support").fetchall()
    assert [r[0] for r in rows] == [1, 2, 5, 50]
    assert all(cert + unsup == 94 and amb == 4297 for _, cert, unsup, amb in rows)
    assert [r[2] for r in rows] == sorted(r[2] for r in rows) and rows[-1][1] == 0  # no pure fiber reaches 50


def test_run_is_recorded_with_hashes_and_a_manifest(first_run: Settings) -> None:
    runs = Catalog(first_run).runs().to_pylist()
    assert runs[0]["status"] == "succeeded"
    run_dir = Path(Catalog(first_run).query("SELECT run_dir FROM runs").column(0)[0].as_py())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["row_counts"]["summary"] == 4 and manifest["spec"] == "tox21"
    assert len(manifest["inputs"]["tox21.csv.gz"]) == 64
    assert pq.read_table(run_dir / "summary.parquet").column("run_id")[0].as_py() == manifest["run_id"]


def test_query_command_reads_the_catalog(first_run: Settings) -> None:
    result = _invoke(first_run, "query", "--json", "SELECT claim, n_candidates FROM summary LIMIT 1")
    assert json.loads(result.output) == [{"claim": '"SR-p53" = 1', "n_candidates": 4391}]


def test_failed_write_keeps_the_earlier_run_and_is_marked_failed(first_run: Settings, monkeypatch) -> None:  # noqa: ANN001
    import dcaudit.storage as package

    before = Catalog(first_run).query("SELECT count(*) FROM summary").column(0)[0].as_py()
    calls = {"n": 0}
    real = package.pq.write_table

    def crash_on_second_table(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full (simulated)")
        return real(*args, **kwargs)

    monkeypatch.setattr(package.pq, "write_table", crash_on_second_table)
    with pytest.raises(OSError, match="simulated"):
        run_spec(load_spec("tox21"), first_run)
    monkeypatch.undo()
    catalog = Catalog(first_run)
    statuses = catalog.query("SELECT status, error FROM runs ORDER BY started_at").to_pylist()
    assert statuses[-1]["status"] == "failed" and "disk full" in statuses[-1]["error"]
    assert catalog.query("SELECT count(*) FROM summary").column(0)[0].as_py() == before
    assert not list(first_run.runs_dir.glob(".partial/*"))


def test_interrupted_run_is_marked_failed_by_the_next_run(first_run: Settings) -> None:
    catalog = Catalog(first_run)
    catalog.start_run("tox21-killed", spec="tox21", spec_hash="x", input_hashes={}, package_version="0",
                      git_sha=None, run_dir=first_run.runs_dir / "tox21-killed")  # as a kill -9 leaves it
    run_spec(load_spec("tox21"), first_run)
    row = catalog.query("SELECT status, error FROM runs WHERE run_id = 'tox21-killed'").to_pylist()[0]
    assert row["status"] == "failed" and "interrupted" in row["error"]


def test_duckdb_shell_reads_the_catalog(first_run: Settings) -> None:
    import shutil
    import subprocess
    import sys

    shell = Path(sys.executable).parent / "duckdb"
    shell = shell if shell.exists() else shutil.which("duckdb")
    assert shell, "the DuckDB shell (dev extra duckdb-cli) is not installed"
    out = subprocess.run([str(shell), "-readonly", "-csv", str(first_run.catalog_path),
                          "select n_candidates, ambiguous from summary where audit_id = 'nr7-p53' limit 1"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["n_candidates,ambiguous", "4391,4297"]


def test_unknown_spec_lists_the_builtin_ones(tox21_settings: Settings) -> None:
    result = CliRunner().invoke(cli, ["run", "nosuchspec"], env={"DCAUDIT_HOME": str(tox21_settings.home)})
    assert result.exit_code == 2 and "built-in: " in result.output and "tox21" in result.output


def test_console_shows_the_replay_costs(first_run: Settings) -> None:
    result = _invoke(first_run, "run", "tox21")  # unchanged: reuses the package, shows it again
    assert result.exit_code == 0, result.output
    assert "held-out replay" in result.output and "certify_then_acquire" in result.output


def test_a_typo_in_a_section_exits_2_before_the_source_is_prepared(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dcaudit.cli import cli

    spec = tmp_path / "typo.toml"
    spec.write_text('name = "typo"\n[source]\nconnector = "tox21"\nid = "mol_id"\n[[audits]]\nid = "a"\n'
                    'claim = \'"SR-p53" = 1\'\nevidence = ["NR-AR"]\n[replay]\nseedz = 3\n')
    home = tmp_path / "home"
    result = CliRunner().invoke(cli, ["run", str(spec)], env={"DCAUDIT_HOME": str(home), "DCAUDIT_OFFLINE": "1"})
    assert result.exit_code == 2 and "seedz" in result.output and "Traceback" not in result.output
    assert "did you mean 'seeds'?" in result.output
    assert not (home / "tables").exists()          # the source was never prepared
    assert not list((home / "runs").glob("*")) if (home / "runs").exists() else True  # and no run recorded
    catalog = home / "catalog.duckdb"
    if catalog.exists():
        import duckdb

        with duckdb.connect(str(catalog), read_only=True) as con:
            assert con.sql("select count(*) from runs").fetchall() == [(0,)]


def test_stage_warm_up_hooks_resolve_and_start_their_imports() -> None:
    """A run with a [replay] section starts scipy.special's import (~0.35 s) on a thread before the source is
    read; every stage's warm hook names a function that exists."""
    import sys

    from dcaudit.audits import price
    from dcaudit.pipelines.stages import STAGES

    for stage in STAGES.values():
        stage.warm_up()
    assert STAGES["replay"].warm is not None
    for thread in price._prefetching:
        thread.join(timeout=60)  # type: ignore[attr-defined]
    assert "scipy.special" in sys.modules


def test_an_empty_table_of_a_source_blocks_only_the_audits_that_read_it(tmp_path: Path) -> None:
    """Matbench's RFLR submission has no predictions for the dielectric task: its predictions table is empty.
    An audit of the task table runs; an audit of the empty table is one line naming it."""
    from click.testing import CliRunner

    from dcaudit.cli import cli
    from tests.conftest import MIRROR

    env = {"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1", "DCAUDIT_MIRROR": str(MIRROR)}
    spec = tmp_path / "mb.toml"
    for table, code in (("dielectric", 0), ("predictions", 2)):
        spec.write_text('name = "qa-mb"\n[source]\nconnector = "matbench"\nid = "mbid"\ntasks = ["dielectric"]\n'
                        f'submissions = ["RFLR"]\n[[audits]]\nid = "a"\ntable = "{table}"\nclaim = "n > 2.0"\n'
                        'evidence = ["reduced_formula"]\n')
        result = CliRunner().invoke(cli, ["run", str(spec), "--no-report"], env=env)
        assert result.exit_code == code, result.output
    assert "table 'predictions' of source 'matbench' has no rows" in result.output


def test_a_folder_named_like_a_builtin_spec_is_neither_the_spec_nor_its_source(
        tox21_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a folder holding a tox21/ data folder, `dcaudit run tox21` was "spec tox21 is a directory"; and a
    connector named like a folder here was read as the user's file ("tox21: is a directory")."""
    from dcaudit.pipelines.runner import PreparedSource, prepare_source

    (tmp_path / "tox21").mkdir()
    monkeypatch.chdir(tmp_path)
    spec = load_spec("tox21")
    assert spec.connector == "tox21" and spec.raw["source"]["connector"] == "tox21"
    assert isinstance(prepare_source(spec, tox21_settings), PreparedSource)
    (tmp_path / "mine.toml").write_text('name = "mine"\n[source]\npath = "tox21"\n[[audits]]\nclaim = "y = 1"\n'
                                        'evidence = ["a"]\n')
    assert load_spec("mine.toml").connector is None   # a path stays the user's, whatever its name


def test_the_candidates_table_is_handed_on_once_the_fiber_stage_is_done(first_run: Settings, monkeypatch) -> None:  # noqa: ANN001
    """With sections to run after the fiber stage, compute_spec hands the final candidates table to on_final
    before they run (the run writes it meanwhile), and returns that same table; not when a section adds rows
    to it, nor when no section follows, nor for a table small enough to write at once (Tox21's, by default)."""
    import dataclasses

    from dcaudit.pipelines import runner
    from dcaudit.pipelines.stages import STAGES

    spec = load_spec("tox21")
    assert "replay" in spec.sections and not STAGES["replay"].adds_candidates and STAGES["vision"].adds_candidates
    prepared = runner.prepare_source(spec, first_run)
    handed: list[tuple[str, object]] = []

    def on_final(name: str, table: object) -> None:
        handed.append((name, table))
        _EVENTS.append(f"handed {name}")

    real_stage = STAGES["replay"]
    monkeypatch.setitem(STAGES, "replay", dataclasses.replace(real_stage, run="tests.pipelines.test_runner:_replay"))
    _EVENTS.clear()
    runner.compute_spec(spec, first_run, prepared, quiet=True, on_final=on_final)
    assert handed == [] and _EVENTS == ["replay ran"]   # 31,324 candidate rows: written with the rest
    monkeypatch.setattr(runner, "EARLY_WRITE_ROWS", 1)
    _EVENTS.clear()
    tables, _ = runner.compute_spec(spec, first_run, prepared, quiet=True, on_final=on_final)
    assert [(name, table is tables["candidates"]) for name, table in handed] == [("candidates", True)]
    assert _EVENTS == ["handed candidates", "replay ran"]
    handed.clear()
    monkeypatch.setitem(STAGES, "replay", dataclasses.replace(real_stage, adds_candidates=True))
    runner.compute_spec(spec, first_run, prepared, quiet=True, on_final=on_final)
    assert handed == []
    monkeypatch.setitem(STAGES, "replay", real_stage)
    runner.compute_spec(dataclasses.replace(spec, sections={}), first_run, prepared, quiet=True, on_final=on_final)
    assert handed == []


_EVENTS: list[str] = []


def _replay(ctx):  # noqa: ANN001, ANN202 - a stand-in replay stage that notes when it ran
    _EVENTS.append("replay ran")
    return {}


class _Stream:
    """A stand-in TableStream: records what it is handed."""

    def __init__(self) -> None:
        self.parts: list = []
        self.table = None
        self.abandoned = False

    def put(self, part) -> None:  # noqa: ANN001
        self.parts.append(part)

    def abandon(self) -> None:
        self.abandoned = True

    def done(self, table) -> bool:  # noqa: ANN001
        self.table = table
        return not self.abandoned


def test_the_candidates_of_one_audit_go_to_the_stream_while_they_are_computed(first_run: Settings, monkeypatch) -> None:  # noqa: ANN001
    """A spec of one audit (no per, no identity) and no sections streams its candidates: the parts, in order,
    make up the returned candidates table, which is the table the stream is said to be. A spec of several
    audits, an audit with an identity (the label-noise split) or a spec with sections (its candidates are
    written while the sections run) streams nothing."""
    import dataclasses

    import pyarrow as pa

    from dcaudit.audits import fibers
    from dcaudit.pipelines import runner

    spec = load_spec("tox21")
    prepared = runner.prepare_source(spec, first_run)
    plain = next(a for a in spec.audits if not a.identity)
    streams: list[_Stream] = []

    def stream(name: str) -> _Stream:
        assert name == "candidates"
        streams.append(_Stream())
        return streams[-1]

    monkeypatch.setattr(fibers, "ROW_GROUP_ROWS", 2048)   # parts of (at most) 2048 rows: 7,831 rows make four
    one = dataclasses.replace(spec, audits=(plain,), sections={})
    tables, _ = runner.compute_spec(one, first_run, prepared, quiet=True, stream=stream)
    assert len(streams) == 1 and streams[0].table is tables["candidates"] and len(streams[0].parts) > 1
    assert pa.concat_tables(streams[0].parts).equals(tables["candidates"])
    assert all(p.num_rows <= 2048 for p in streams[0].parts)
    runner.compute_spec(spec, first_run, prepared, quiet=True, stream=stream)
    runner.compute_spec(dataclasses.replace(spec, audits=(spec.audits[0],), sections={}), first_run, prepared,
                        quiet=True, stream=stream)
    completion = {"completion": {**spec.sections["completion"], "audit": plain.audit_id, "seeds": 2}}
    runner.compute_spec(dataclasses.replace(one, sections=completion), first_run, prepared, quiet=True, stream=stream)
    assert spec.audits[0].identity and len(streams) == 1


def test_candidates_out_of_row_order_abandon_the_stream(first_run: Settings, monkeypatch) -> None:  # noqa: ANN001
    """Should DuckDB hand the scan back out of row order, the stream is abandoned and the rows are read again
    and put in their order: the table is the one an ordered scan gives."""
    import dataclasses

    from dcaudit.audits import fibers
    from dcaudit.pipelines import runner

    spec = load_spec("tox21")
    prepared = runner.prepare_source(spec, first_run)
    one = dataclasses.replace(spec, audits=(next(a for a in spec.audits if not a.identity),), sections={})
    monkeypatch.setattr(fibers, "ROW_GROUP_ROWS", 2048)
    ordered, _ = runner.compute_spec(one, first_run, prepared, quiet=True)
    real = fibers.arrays.rising   # the second part out of order (Tox21's ids are text: no id check reads it)
    monkeypatch.setattr(fibers.arrays, "rising", lambda rows, after=None: (False, after) if after is not None
                        else real(rows, after))
    stream = _Stream()
    tables, _ = runner.compute_spec(one, first_run, prepared, quiet=True, stream=lambda name: stream)
    assert stream.abandoned and len(stream.parts) == 1   # the first part went before the second was out of order
    assert tables["candidates"].equals(ordered["candidates"])
