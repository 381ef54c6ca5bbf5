"""Seeds over the whole accepted range (offsets up to ±2^62): every table's ``seed`` is the exact int64 seed
and the split at a seed is that seed's, wherever it sits in a run's range (replay and completion alike)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import dcaudit
from dcaudit import defaults
from dcaudit.splits import split_sql, split_threshold

SEEDS = 3
# past INT32, past a double's 53-bit mantissa, and both ends of the accepted range
OFFSETS = [0, 2**31 - 2, 2**53 + 1, -defaults.MAX_SEED_OFFSET, defaults.MAX_SEED_OFFSET - SEEDS]
# differ from run to run, not from seed to seed
RUN_COLUMNS = {"seed_offset", "run_id"}


@pytest.fixture(autouse=True)
def _workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCAUDIT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DCAUDIT_OFFLINE", "1")


def _frame(n: int = 240) -> pa.Table:
    rng = np.random.default_rng(7)
    e = rng.integers(0, 3, n)
    p1, p2 = rng.integers(0, 2, n), rng.integers(0, 3, n)
    y = ((e + p1 + rng.integers(0, 2, n)) % 2).astype(np.int64)
    return pa.table({"id": [f"c{i}" for i in range(n)], "e": e, "p1": p1, "p2": p2,
                     "x": np.round(rng.normal(size=n), 3), "y": y})


def _replay(offset: int, seeds: int = SEEDS, *, windows: bool = False) -> dcaudit.Result:
    extra = {"tolerance": 0.5} if windows else {}
    return dcaudit.replay(_frame(), evidence="x" if windows else "e", claim="y = 1", id="id", seeds=seeds,
                          seed_offset=offset, min_support=2, report=False, **extra)


def _complete(offset: int, seeds: int = SEEDS) -> dcaudit.Result:
    return dcaudit.complete(_frame(), evidence="e", claim="y = 1", probes=["p1", "p2"], id="id", seeds=seeds,
                            seed_offset=offset, random_draws=3, report=False)


def _seeded(result: dcaudit.Result) -> dict[str, pa.Table]:
    tables = {name: result.arrow(name) for name in result.tables}
    return {name: t for name, t in tables.items() if "seed" in t.column_names}


def _assert_exact_seeds(tables: dict[str, pa.Table], offset: int, seeds: int, expect: set[str]) -> None:
    assert expect <= set(tables), sorted(tables)
    want = list(range(offset, offset + seeds))
    for name, table in tables.items():
        assert table.schema.field("seed").type == pa.int64(), name
        got = [s for s in table["seed"].to_pylist() if s is not None]
        assert sorted(set(got)) == want, name
        # every seed has as many rows as every other: none merged into a neighbour
        assert len({got.count(s) for s in want}) == 1, name


def _at_seed(table: pa.Table, seed: int) -> list[dict]:
    rows = table.filter(pc.equal(table["seed"], pa.scalar(seed, pa.int64())))
    assert rows.num_rows > 0
    return rows.drop_columns([c for c in RUN_COLUMNS if c in rows.column_names]).to_pylist()


def _n_test(seeds: list[int]) -> list[int]:
    """Test candidates per seed from the split's definition (dcaudit.splits), in SQL with the exact seeds."""
    con = duckdb.connect()
    con.register("f", _frame())
    cal = split_sql("hash(CAST(f.id AS VARCHAR))", "CAST(s.seed AS BIGINT)", split_threshold(0.5))
    values = ", ".join(f"({s})" for s in seeds)
    return [r[1] for r in con.execute(
        f"SELECT s.seed, count_if(NOT {cal}) FROM f CROSS JOIN (VALUES {values}) s(seed) "
        f"GROUP BY s.seed ORDER BY s.seed").fetchall()]


def _per_seed(table: pa.Table, column: str, where: pa.Array) -> list[float]:
    rows = table.filter(where).sort_by("seed")
    return rows[column].to_pylist()


@pytest.mark.parametrize("windows", [False, True], ids=["fibers", "windows"])
@pytest.mark.parametrize("offset", OFFSETS)
def test_replay_seed_columns_are_exact(offset: int, windows: bool) -> None:
    result = _replay(offset, windows=windows)
    tables = _seeded(result)
    _assert_exact_seeds(tables, offset, SEEDS, {"replay", "costs"})
    replay = tables["replay"]
    assert set(replay["seed_offset"].to_pylist()) == {offset}
    # the held-out half of each row is the one the split defines at that exact seed
    want = [float(n) for n in _n_test(list(range(offset, offset + SEEDS)))]
    rows = pc.and_(pc.equal(replay["policy"], "fiber_majority"), pc.is_valid(replay["seed"]))
    assert _per_seed(replay, "n_test", rows) == want


@pytest.mark.parametrize("windows", [False, True], ids=["fibers", "windows"])
@pytest.mark.parametrize("offset", OFFSETS)
def test_replay_split_depends_on_the_seed_alone(offset: int, windows: bool) -> None:
    """Seed offset + 2 as the last of three seeds and as the only one: the same rows in every table."""
    three, one = _seeded(_replay(offset, windows=windows)), _seeded(_replay(offset + 2, 1, windows=windows))
    assert set(three) == set(one)
    for name in three:
        assert _at_seed(three[name], offset + 2) == _at_seed(one[name], offset + 2), name


@pytest.mark.parametrize("offset", OFFSETS)
def test_completion_seed_columns_are_exact(offset: int) -> None:
    tables = _seeded(_complete(offset))
    _assert_exact_seeds(tables, offset, SEEDS, {"completion"})
    completion = tables["completion"]
    rows = pc.and_(pc.and_(pc.equal(completion["policy"], "response_rank"), pc.equal(completion["step"], 0)),
                   pc.is_valid(completion["seed"]))
    # the same split as the replay's at the exact seed
    assert _per_seed(completion, "n_test", rows) == [float(n) for n in _n_test(list(range(offset, offset + SEEDS)))]


@pytest.mark.parametrize("offset", OFFSETS)
def test_completion_split_depends_on_the_seed_alone(offset: int) -> None:
    three, one = _seeded(_complete(offset)), _seeded(_complete(offset + 2, 1))
    assert set(three) == set(one)
    for name in three:
        assert _at_seed(three[name], offset + 2) == _at_seed(one[name], offset + 2), name


def _choice_run(tmp_path: Path, offset: int, seeds: int) -> dcaudit.Result:
    """Per-model error windows pooled over two models, and the model choice on their splits (a spec run)."""
    rng = np.random.default_rng(3)
    n = 120
    ref = rng.normal(size=n)
    rows = [{"cid": f"{m}-{i}", "m": m, "pred": round(float(ref[i] + rng.normal(scale=s)), 4),
             "ref": float(ref[i]), "y": int(ref[i] > 0)} for m, s in (("A", 0.1), ("B", 0.4)) for i in range(n)]
    data = tmp_path / "models.csv"
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "models.parquet")
    duckdb.sql(f"COPY (SELECT * FROM read_parquet('{tmp_path / 'models.parquet'}')) TO '{data}' (HEADER)")
    spec = tmp_path / f"choice{seeds}.toml"
    spec.write_text(f'name = "seeds-choice"\n[source]\npath = "{data}"\nid = "cid"\n[[audits]]\nid = "p"\n'
                    'claim = "y = 1"\nevidence = ["pred"]\nfiber_rule = "quantile:5"\nper = "m"\n[replay]\n'
                    f'seeds = {seeds}\nseed_offset = {offset}\ntolerance = "mae"\nreference = "ref"\n'
                    'model_column = "m"\nmin_support = 3\n[choice]\n')
    return dcaudit.run(str(spec), force=True, report=False)


@pytest.mark.parametrize("offset", OFFSETS)
def test_pooled_windows_and_model_choice_seeds_are_exact(tmp_path: Path, offset: int) -> None:
    three, one = _seeded(_choice_run(tmp_path, offset, SEEDS)), _seeded(_choice_run(tmp_path, offset + 2, 1))
    _assert_exact_seeds(three, offset, SEEDS, {"replay", "costs", "choice"})
    for name in three:
        assert _at_seed(three[name], offset + 2) == _at_seed(one[name], offset + 2), name


@pytest.mark.parametrize(("command", "offset"), [("replay", 2**53 + 1), ("complete", 2**31 - 2),
                                                 ("complete", -defaults.MAX_SEED_OFFSET)])
def test_cli_writes_exact_seeds(tmp_path: Path, command: str, offset: int) -> None:
    from dcaudit.cli import cli

    path = tmp_path / "data.csv"
    pq.write_table(_frame(), tmp_path / "data.parquet")
    duckdb.sql(f"COPY (SELECT * FROM read_parquet('{tmp_path / 'data.parquet'}')) TO '{path}' (HEADER)")
    extra = ["--probes", "p1,p2"] if command == "complete" else ["--min-support", "2"]
    result = CliRunner().invoke(cli, [command, str(path), "--id", "id", "--evidence", "e", "--claim", "y = 1",
                                      "--seeds", str(SEEDS), "--seed-offset", str(offset), "--no-report",
                                      "--out", str(tmp_path / "pkg"), *extra])
    assert result.exit_code == 0, result.output
    tables = {p.stem: pq.read_table(p) for p in (tmp_path / "pkg").glob("*.parquet")}
    seeded = {name: t for name, t in tables.items() if "seed" in t.column_names}
    _assert_exact_seeds(seeded, offset, SEEDS, {"replay", "costs"} if command == "replay" else {"completion"})
