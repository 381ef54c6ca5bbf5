"""The built-in jarvis spec end to end on the real mirror (fewer seeds than `make audit-jarvis`)."""

from __future__ import annotations

import copy
import tomllib
from importlib import resources
from pathlib import Path

import duckdb
import polars as pl
import pytest

from dcaudit.audits.groups import group_values
from dcaudit.config import Settings, load_settings
from dcaudit.connectors import jarvis
from dcaudit.errors import SpecError
from dcaudit.pipelines.runner import run_spec
from dcaudit.spec import load_spec, spec_from_dict
from tests.conftest import MIRROR, mirror_path


def _raw() -> dict:
    return tomllib.loads(resources.files("dcaudit.pipelines").joinpath("jarvis.toml").read_text())


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pl.DataFrame]:
    mirror_path(jarvis.CONTRIB_DIR)
    base = load_settings()
    settings = Settings(home=tmp_path_factory.mktemp("jarvis-run"), mirror=MIRROR, memory_limit=base.memory_limit,
                        threads=base.threads, offline=True)
    raw = copy.deepcopy(_raw())
    raw["replay"]["seeds"] = 3          # 50 in the built-in spec
    raw["completion"]["seeds"] = 40     # 200 in the built-in spec
    raw["sensitivity"]["audits"] = ["fe-gap"]
    raw["sensitivity"]["rules"] = ["quantile:20", "knn:25"]
    raw["jarvis"]["probe_baseline"]["seeds"] = 20  # 200 in the built-in spec
    result = run_spec(spec_from_dict(raw, origin="test"), settings, with_candidates=False)
    return {name: pl.from_arrow(t) for name, t in result.tables.items()}


def test_builtin_spec_parses() -> None:
    spec = load_spec("jarvis")
    assert spec.source == "jarvis" and spec.id_column == "jid"
    assert {a.audit_id: a.per for a in spec.audits} == {"fe-gap": "model", "fe-ehull": "model"}
    assert set(spec.sections) >= {"replay", "sensitivity", "completion", "choice"}


def test_fifteen_models_median_certified_zero(run: dict[str, pl.DataFrame]) -> None:
    summary = run["summary"].filter(pl.col("audit_id") == "fe-gap")
    assert summary["model"].n_unique() == 15 and summary.height == 15
    assert set(summary["fiber_rule"]) == {"quantile:20"} and set(summary["min_support"]) == {5}
    metrics = run["metrics"].filter(pl.col("experiment") == "fe-gap")
    value = dict(metrics.select("metric", "value").iter_rows())
    assert value["n_groups"] == 15
    assert value["median_certified_fraction"] == 0.0  # docs/reference.md: median certified 0 at 20 bins
    assert value["median_fiber_size"] == pytest.approx(279, abs=1)  # docs/reference.md
    assert run["summary"].filter(pl.col("audit_id") == "fe-ehull").height == 15


def test_replay_near_the_paper(run: dict[str, pl.DataFrame]) -> None:
    replay = run["replay"].filter(pl.col("audit_id") == "fe-gap")
    pooled = replay.filter(pl.col("seed").is_null() & pl.col("model").is_null())
    rate = dict(pooled.select("policy", "false_decision_rate").iter_rows())
    cert = dict(pooled.select("policy", "certified_fraction").iter_rows())
    # 3 seeds here; the paper (50 seeds, ALIGNN/AtomGPT/CGCNN read positionally) has 20.3 %, 0.128 %, 2.46 %
    assert rate["fiber_majority"] == pytest.approx(0.203, abs=0.02)
    assert rate["certify_then_acquire"] < 0.005 and 0.01 < cert["certify_then_acquire"] < 0.05
    per_model = replay.filter(pl.col("seed").is_not_null())
    assert per_model["model"].n_unique() == 15 and per_model["seed"].n_unique() == 3


def test_choice_and_completion(run: dict[str, pl.DataFrame]) -> None:
    choice = run["choice"].filter(pl.col("seed").is_not_null() & (pl.col("audit_id") == "fe-gap"))
    assert choice.height == 15 * 3
    per_seed = choice.group_by("seed").agg(pl.col("chosen_by_benchmark").sum(), pl.col("chosen_by_certification").sum())
    assert (per_seed["chosen_by_benchmark"] == 1).all() and (per_seed["chosen_by_certification"] == 1).all()
    best = choice.filter(pl.col("chosen_by_benchmark") == 1)["model"].unique().to_list()
    assert best == ["kgcnn_coGN"]  # lowest formation-energy MAE when predictions are read by name
    curve = run["completion"].filter(pl.col("seed").is_null() & (pl.col("policy") == "response_rank")).sort("step")
    assert curve["probe_added"][1] == "mbj_bandgap"
    assert curve["certified_fraction"][0] < 0.05 and curve["certified_fraction"][1] > 0.55  # MBJ resolves most


def test_sensitivity_rows(run: dict[str, pl.DataFrame]) -> None:
    sens = run["sensitivity"]
    assert sens.filter(pl.col("fiber_rule") == "knn:25")["model"].n_unique() == 15
    knn = sens.filter(pl.col("fiber_rule") == "knn:25")["certified_fraction"].median()
    assert knn == pytest.approx(0.0983, abs=0.01)  # docs/reference.md: kNN-25 median 9.83 %


# ------------------------------------------------------------------------------------------ spec format


def test_models_option_validates_names() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('a', 1), ('b', 2)) v(model, x)")
    assert group_values(con, "t", "model") == ["a", "b"]
    with pytest.raises(SpecError, match=r"unknown model 'aa'.*did you mean a"):
        group_values(con, "t", "model", ["aa"])


def test_per_model_spec_keys() -> None:
    base = {"name": "x", "source": {"path": "x.csv"}}
    audit = {"claim": "y > 0", "evidence": "x", "fiber_rule": "quantile:4"}
    spec = spec_from_dict({**base, "audits": [{**audit, "per": "model", "models": ["a", "b"]}]})
    assert spec.audits[0].per == "model" and spec.audits[0].groups == ("a", "b")
    assert spec_from_dict({**base, "audits": [{**audit, "model": "a"}]}).audits[0].groups == ("a",)
    assert spec_from_dict({**base, "audits": [{**audit, "per": "model", "models": "all"}]}).audits[0].groups is None
    with pytest.raises(SpecError, match="models must be"):
        spec_from_dict({**base, "audits": [{**audit, "per": "model", "models": []}]})


def test_per_model_audit_on_a_small_table(tmp_path: Path) -> None:
    """Two models, each with its own quantile cuts; the median across them lands in metrics."""
    csv = tmp_path / "lb.csv"
    rows = ["model,cid,pred,truth"]
    rows += [f"good,{i},{i},{int(i >= 10)}" for i in range(20)]           # perfectly ordered: pure bins
    rows += [f"bad,{i},{i},{i % 2}" for i in range(20)]                   # alternating: every bin mixed
    csv.write_text("\n".join(rows) + "\n")
    base = load_settings()
    settings = Settings(home=tmp_path / "home", mirror=None, memory_limit=base.memory_limit, threads=base.threads,
                        offline=True)
    spec = spec_from_dict({"name": "lb", "source": {"path": str(csv), "id": "cid"}, "audits": [
        {"id": "a", "claim": "truth = 1", "evidence": "pred", "fiber_rule": "quantile:4", "per": "model"}]})
    tables = {k: pl.from_arrow(v) for k, v in run_spec(spec, settings).tables.items()}
    cert = dict(tables["summary"].select("model", "certified_fraction").iter_rows())
    assert cert == {"bad": 0.0, "good": 1.0}
    metrics = dict(tables["metrics"].select("metric", "value").iter_rows())
    assert metrics["median_certified_fraction"] == 0.5 and metrics["n_groups"] == 2
    assert set(tables["candidates"]["model"]) == {"good", "bad"}


def test_paper_reading_by_position(run: dict[str, pl.DataFrame]) -> None:
    """Read by position, ALIGNN's formation-energy 'prediction' is the reference: MAE 0.0 (docs/reference.md)."""
    metrics = dict(run["metrics"].filter(pl.col("experiment") == "jarvis:by-position")
                   .select("metric", "value").iter_rows())
    assert metrics["alignn_model:formation_energy_peratom:mae_by_position"] == 0.0
    assert metrics["alignn_model:formation_energy_peratom:mae"] == pytest.approx(0.0331, abs=5e-4)
    replay = run["replay"].filter(pl.col("seed").is_not_null() & (pl.col("policy") == "certified_only"))
    alignn = replay.filter(pl.col("model") == "alignn_model")
    by_name = alignn.filter(pl.col("audit_id") == "fe-gap")["certified_fraction"].mean()
    by_position = alignn.filter(pl.col("audit_id") == "fe-gap:by-position")["certified_fraction"].mean()
    assert by_position < 0.005 < by_name  # a zero-width window certifies (almost) nothing
    paper_choice = run["choice"].filter((pl.col("audit_id") == "fe-gap:by-position") & pl.col("seed").is_not_null()
                                        & (pl.col("chosen_by_benchmark") == 1))
    assert paper_choice["model"].unique().to_list() == ["alignn_model"]  # the paper's benchmark-MAE choice
    baseline = run["replay"].filter((pl.col("audit_id") == "probe-baseline") & pl.col("seed").is_null()
                                    & (pl.col("policy") == "certified_only"))
    assert baseline["n_test"][0] == pytest.approx(0.3 * 5572, rel=0.05)
    assert baseline["certified_fraction"][0] == pytest.approx(0.045, abs=0.02)  # the paper's 4.51 % baseline


def test_jarvis_section_parses_to_the_paper_protocol() -> None:
    """The built-in [jarvis] section, typed: the paper's baseline, which is also what absent keys mean."""
    from dcaudit.pipelines.jarvis import parse_jarvis_section

    spec = load_spec("jarvis")
    section = parse_jarvis_section(spec.sections["jarvis"], spec)
    assert section.by_position is True and section.replay is not None and str(section.replay.tolerance) == "mae"
    base = section.probe_baseline
    assert base is not None and base.table == "test_truth" and base.claim.text == "optb88vdw_bandgap > 1.0"
    assert base.evidence.columns == ("formation_energy_peratom",) and str(base.evidence.rule) == "quantile:64"
    assert (base.config.seeds, base.config.calibration_fraction, base.config.min_support) == (200, 0.7, 3)
    assert parse_jarvis_section({"probe_baseline": {}}, spec).probe_baseline == base
    assert parse_jarvis_section({}, spec) == parse_jarvis_section({"by_position": False}, spec)
    for raw, message in [({"probe_baseline": {"seeds": 2.5}}, "seeds must be an integer, got 2.5"),
                         ({"probe_baseline": {"min_support": "3"}}, "min_support must be an integer, got '3'"),
                         ({"probe_baseline": {"calibration_fraction": "0.7"}}, "must be a number, got '0.7'"),
                         ({"by_position": "false"}, "by_position must be true or false, got 'false'"),
                         ({"probe_baseline": {"evidence": "a, a"}}, "names 'a' more than once")]:
        with pytest.raises(SpecError, match=message):
            parse_jarvis_section(raw, spec)


def test_probe_baseline_runs_with_the_values_written(tmp_path: Path) -> None:
    """[jarvis.probe_baseline] on any table: the replay rows carry the section's seeds, support and fraction."""
    rows = ["cid,fe,gap"] + [f"c{i},{i / 10},{int(i % 7 < 3)}" for i in range(120)]
    csv = tmp_path / "truth.csv"
    csv.write_text("\n".join(rows) + "\n")
    base = load_settings()
    settings = Settings(home=tmp_path / "home", mirror=None, memory_limit=base.memory_limit, threads=base.threads,
                        offline=True)
    spec = spec_from_dict({"name": "pb", "source": {"path": str(csv), "id": "cid"},
                           "audits": [{"id": "a", "claim": "gap = 1", "evidence": "fe"}],
                           "jarvis": {"probe_baseline": {"table": "truth.csv", "evidence": "fe", "claim": "gap = 1",
                                                         "fiber_rule": "quantile:4", "seeds": 3, "min_support": 2,
                                                         "calibration_fraction": 0.6}}})
    replay = pl.from_arrow(run_spec(spec, settings).tables["replay"])
    assert set(replay["audit_id"]) == {"probe-baseline"}
    assert replay.filter(pl.col("seed").is_not_null())["seed"].unique().sort().to_list() == [0, 1, 2]
    assert set(replay["min_support"]) == {2} and set(replay["calibration_fraction"]) == {0.6}
    assert set(replay["fiber_rule"]) == {"quantile:4"}


def test_jarvis_section_names_the_join_columns_it_reads() -> None:
    """By position, [jarvis] joins the predictions on the audit table's model and jid columns: they are
    among the columns the section reads, so a glob lacking them in one file is reported, not joined to NULL."""
    from dcaudit.pipelines.stages import STAGES

    spec = load_spec("jarvis")
    read = set(STAGES["jarvis"].columns(spec.sections["jarvis"], spec, ()))
    assert {("jarvis", "model"), ("jarvis", "jid"), ("jarvis", "formation_energy_peratom")} <= read
