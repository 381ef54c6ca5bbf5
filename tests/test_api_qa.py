"""The Python API as a notebook user meets it: wrong keyword types, paths with ``~``, results that cannot be
changed behind their back, damaged packages, hostile text in the notebook view, threads."""

from __future__ import annotations

import copy
import json
import re
import shutil
import threading
from html import unescape
from pathlib import Path

import pandas as pd
import polars as pl
import pytest

import dcaudit
from dcaudit.config import load_settings
from dcaudit.errors import SpecError

FRAME = pl.DataFrame({"id": [f"c{i}" for i in range(12)], "e": [i % 3 for i in range(12)],
                      "y": [int(i % 3 == 0 or i == 4) for i in range(12)]})


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DCAUDIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.parametrize("keyword", ["record", "force", "quiet", "report"])
def test_yes_no_keywords_are_bools_never_a_truthy_string(home: Path, keyword: str) -> None:
    """record="no" was true: the run was recorded in the workspace."""
    with pytest.raises(SpecError, match=f"{keyword} = 'no': give True or False"):
        dcaudit.audit(FRAME, evidence="e", claim="y = 1", **{keyword: "no"})
    assert not (home / "runs").exists()
    import numpy as np

    assert dcaudit.audit(FRAME, evidence="e", claim="y = 1", record=np.False_).package_dir is None


def test_run_refuses_a_force_that_is_not_a_bool(home: Path) -> None:
    with pytest.raises(SpecError, match="force = 'no'"):   # not force=True (a rerun) in disguise
        dcaudit.run("tox21", force="no")
    with pytest.raises(SpecError, match="give a built-in spec name"):
        dcaudit.run(5)


def test_a_table_changed_in_place_changes_nothing_in_the_result(tmp_path: Path) -> None:
    """Every read returned the same cached frame: drop_in_place or df[i, c] = v broke mixed() and the repr."""
    r = dcaudit.audit(FRAME, evidence="e", claim="y = 1", id="id")
    before = (r.mixed(), repr(r))
    r.candidates.drop_in_place("status")
    r.fibers.columns = [f"x{i}" for i in range(r.fibers.width)]
    summary = r.summary
    summary[0, "n_candidates"] = 999
    assert summary["n_candidates"][0] == 999                  # the caller's own frame did change
    assert r.mixed().equals(before[0]) and repr(r) == before[1]
    assert r.summary["n_candidates"][0] == 12 and "status" in r.candidates.columns
    loaded = dcaudit.load(r.save(tmp_path / "pkg"))
    assert all(loaded.tables[k].equals(r.tables[k]) for k in r.tables)


def test_the_manifest_is_read_only_and_save_writes_the_runs_own(tmp_path: Path) -> None:
    """result.manifest was a plain dict: editing it changed the resolved spec save() wrote."""
    r = dcaudit.audit(FRAME, evidence="e", claim="y = 1", id="id")
    with pytest.raises(TypeError, match="read-only"):
        r.manifest["resolved_spec"]["audits"][0]["claim"] = "y = 0"
    with pytest.raises(TypeError, match="read-only"):
        r.manifest["resolved_spec"]["audits"].append({})
    with pytest.raises(TypeError, match="read-only"):
        r.manifest.update(spec="other")
    mine = copy.deepcopy(r.manifest)             # an editable copy, of plain dicts and lists
    mine["resolved_spec"]["audits"][0]["claim"] = "y = 0"
    assert type(mine) is dict and type(mine["resolved_spec"]["audits"]) is list
    assert isinstance(r.manifest, dict) and r.manifest["resolved_spec"]["audits"][0]["claim"] == "y = 1"
    assert json.loads(json.dumps(r.manifest))["spec"] == mine["spec"]
    written = json.loads((r.save(tmp_path / "pkg") / "manifest.json").read_text())
    assert written["resolved_spec"]["audits"][0]["claim"] == "y = 1"
    with pytest.raises(AttributeError):
        r.notes = ()  # type: ignore[misc]


def test_results_compare_by_identity_not_by_an_ambiguous_frame_comparison() -> None:
    """r1 == r2 raised "the truth value of a DataFrame is ambiguous"."""
    r1 = dcaudit.audit(FRAME, evidence="e", claim="y = 1")
    r2 = dcaudit.audit(FRAME, evidence="e", claim="y = 1")
    assert r1 == r1 and r1 != r2 and len({r1, r2}) == 2


def test_paths_with_a_tilde_are_the_homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """save("~/pkg") made a folder named "~" in the current directory and failed with a raw FileNotFoundError
    (pyarrow expands "~", the staging directory did not); a "~/data.csv" input was "file not found"."""
    user, cwd = tmp_path / "user", tmp_path / "cwd"
    user.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.setenv("DCAUDIT_HOME", str(tmp_path / "ws"))
    monkeypatch.chdir(cwd)
    FRAME.write_csv(user / "data.csv")
    r = dcaudit.audit("~/data.csv", evidence="e", claim="y = 1", id="id")
    assert r.summary["n_candidates"][0] == 12
    assert r.save("~/pkg") == user / "pkg" and (user / "pkg" / "manifest.json").is_file()
    out = dcaudit.audit(FRAME, evidence="e", claim="y = 1", out="~/out")
    assert out.package_dir is not None and Path(out.package_dir).resolve() == (user / "out").resolve()
    assert dcaudit.load("~/pkg").summary.equals(r.summary)
    assert list(cwd.iterdir()) == []


def test_load_names_what_is_wrong_with_a_path(tmp_path: Path, home: Path) -> None:
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    for arg, message in [("", "give a package directory"), (" ", "give a package directory"),
                         (tmp_path / "nope", "no such package directory"),
                         (str(tmp_path / "nope"), "no such package directory"),
                         (tmp_path / "file.txt", "is a file"), (tmp_path / "empty", "no manifest.json")]:
        with pytest.raises(SpecError, match=message):
            dcaudit.load(arg)


def test_load_reads_only_the_tables_the_package_was_written_with(tmp_path: Path) -> None:
    """A Parquet file dropped into a package was loaded as a table (and save() then raised a raw ValueError)."""
    r = dcaudit.audit(FRAME, evidence="e", claim="y = 1")
    pkg = r.save(tmp_path / "pkg")
    shutil.copy(pkg / "fibers.parquet", pkg / "extra.parquet")
    shutil.copy(pkg / "fibers.parquet", pkg / "replay.parquet")   # a package table's name, not written
    loaded = dcaudit.load(pkg)
    assert sorted(loaded.tables) == sorted(r.tables) and loaded.replay is None
    assert any("extra.parquet, replay.parquet not read" in n for n in loaded.notes)
    assert (loaded.save(tmp_path / "again") / "manifest.json").is_file()


@pytest.mark.parametrize("field, value", [("notes", "one note"), ("notes", [1, 2]), ("run_id", 5)])
def test_load_refuses_a_manifest_whose_notes_or_run_id_are_damaged(tmp_path: Path, field: str, value) -> None:  # noqa: ANN001
    """notes = "abc" came back as the notes ('a', 'b', 'c'); run_id = 5 as a number."""
    pkg = dcaudit.audit(FRAME, evidence="e", claim="y = 1").save(tmp_path / "pkg")
    manifest = json.loads((pkg / "manifest.json").read_text())
    (pkg / "manifest.json").write_text(json.dumps({**manifest, field: value}))
    with pytest.raises(SpecError, match="damaged.*run_id must be text and notes a list"):
        dcaudit.load(pkg)


def test_the_text_view_shows_the_notes() -> None:
    """Leakage (evidence the claim reads, the id as evidence) was only in result.notes, not in repr()."""
    text = repr(dcaudit.audit(FRAME, evidence="e,y", claim="y = 1"))
    assert "note: audit: the claim reads evidence column(s) y" in text and "(leakage)" in text
    text = repr(dcaudit.audit(FRAME, evidence="e,id", claim="y = 1", id="id"))
    assert "note: audit: the evidence includes the id column 'id'" in text


def test_evidence_that_leaves_most_candidates_alone_in_their_fiber_is_noted() -> None:
    """Float evidence under the exact rule made every candidate its own fiber, certified 100% without a word."""
    frame = FRAME.with_columns(x=pl.Series([i / 7 for i in range(12)]), half=pl.Series([min(i, 6) for i in range(12)]))
    notes = dcaudit.audit(frame, evidence="x", claim="y = 1", id="id").notes
    assert [n for n in notes if "alone" in n or "of its own" in n] == [
        "audit: every candidate is a fiber of its own: one observation decides its fiber, so each is certified by "
        "construction; a coarser fiber rule (quantile:K, width:W) or min_support 2 or more says more"]
    assert any(n.startswith("audit: 6 of 12 candidates (50%) are alone in their fiber")
               for n in dcaudit.audit(frame, evidence="half", claim="y = 1", id="id").notes)
    # with min_support 2 they are unsupported, not certified; and 3 fibers of 4 say nothing of the kind
    assert not any("alone" in n or "of its own" in n
                   for n in dcaudit.audit(frame, evidence="x", claim="y = 1", id="id", min_support=2).notes)
    assert not any("alone" in n or "of its own" in n
                   for n in dcaudit.audit(frame, evidence="e", claim="y = 1", id="id").notes)


def test_sensitivity_refuses_tolerances_without_an_order() -> None:
    frame = pl.DataFrame({"x": [i / 40 for i in range(40)], "y": [i % 2 for i in range(40)]})
    for tolerances in ({0.1, 0.2}, {"mae": 1}):
        with pytest.raises(SpecError, match="a set or dict has no order"):
            dcaudit.sensitivity(frame, evidence="x", claim="y = 1", tolerances=tolerances)


def test_the_notebook_view_escapes_and_shortens_hostile_text() -> None:
    evil = "<script>alert(1)</script>&\"'\u202e\n" + "x" * 500
    column = '<img src=x onerror=alert(2)>"&'
    frame = pl.DataFrame({"id": [f"{evil}{i}" for i in range(6)], column: [0, 0, 1, 1, 0, 1],
                          "s": [evil] * 3 + ["b"] * 3, "y": [1, 0, 1, 1, 0, 0]})
    quoted = '"' + column.replace('"', '""') + '"'
    r = dcaudit.audit(frame, evidence=[column, "s"], claim=f"{quoted} >= 0 and y = 1", id="id")
    html = r._repr_html_()
    assert "<script" not in html and "<img" not in html and "&lt;script&gt;" in html and "&lt;img" in html
    tags = set(re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)", html))
    assert tags <= {"div", "style", "h3", "h4", "p", "b", "span", "table", "thead", "tbody", "tr", "th", "td",
                    "ul", "li", "code", "bdi", "svg", "g", "path", "rect", "text", "defs", "clipPath", "use",
                    "figure", "title", "line", "polyline", "circle", "caption"}, tags
    shown = re.sub(r'title="[^"]*"', "", html)
    assert "x" * 500 not in shown and "x" * 500 in html                        # cut, whole in the tooltip
    ids = [unescape(re.sub(r"<[^>]*>", "", i)) for i in re.findall(r"<code><bdi>(.*?)</bdi></code>", html, re.S)]
    assert len(ids) == 4 and all(len(i) <= 120 and i.endswith("…") and i.startswith("<script>") for i in ids)
    member = re.search(r"<code><bdi><span [^>]*>[^<]*\u202e", html)
    assert member is not None                                  # a right-to-left override stays inside its id


def test_audits_in_threads_with_their_own_settings_and_a_load_alongside(tmp_path: Path) -> None:
    import dataclasses

    base = dcaudit.audit(FRAME, evidence="e", claim="y = 1", id="id")
    pkg = base.save(tmp_path / "pkg")
    one = dataclasses.replace(load_settings(), threads=1, memory_limit="300MB")
    two = dataclasses.replace(load_settings(), threads=2, memory_limit="600MB")
    inputs = [FRAME, FRAME.to_pandas(), FRAME.to_arrow()]
    results: dict[str, dcaudit.Result] = {}
    errors: list[BaseException] = []

    def work(key: str, call) -> None:  # noqa: ANN001
        try:
            results[key] = call()
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"a{i}", lambda i=i: dcaudit.audit(
        inputs[i % 3], evidence="e", claim="y = 1", id="id", settings=(one, two)[i % 2]))) for i in range(4)]
    threads += [threading.Thread(target=work, args=(f"l{i}", lambda: dcaudit.load(pkg))) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 6
    for key, r in results.items():
        for name, table in base.tables.items():
            assert r.tables[name].drop("run_id", "source").equals(table.drop("run_id", "source")), (key, name)


def test_categorical_text_gives_the_fibers_plain_text_gives(tmp_path: Path) -> None:
    """Unordered categoricals (pandas, polars, Arrow dictionaries) audit like the same text in a CSV."""
    frame = pl.DataFrame({"id": [f"c{i}" for i in range(8)], "g": list("abbaabab"), "y": [1, 0, 1, 1, 0, 0, 1, 0]})
    frame.write_csv(tmp_path / "g.csv")
    pdf = frame.to_pandas()
    pdf["g"] = pdf["g"].astype("category")
    forms = {"csv": tmp_path / "g.csv", "pandas": pdf, "polars": frame.with_columns(pl.col("g").cast(pl.Categorical)),
             "arrow": frame.to_arrow().set_column(1, "g", frame.to_arrow()["g"].dictionary_encode()),
             "pandas_str": pd.DataFrame(frame.to_dict(as_series=False))}
    got = {k: dcaudit.audit(v, evidence="g", claim="y = 1", id="id") for k, v in forms.items()}
    want = got["csv"].fibers.drop("run_id", "source")
    for name, r in got.items():
        assert r.fibers.drop("run_id", "source").equals(want), name
        assert r.candidates.drop("run_id", "source").equals(got["csv"].candidates.drop("run_id", "source")), name


def test_evidence_from_an_index_series_or_array_of_names_in_order() -> None:
    """evidence=df.columns[1:] (a pandas Index), a numpy array or a Series of names was refused, and the
    refusal quoted the Series' repr over many lines."""
    import numpy as np

    pdf = FRAME.to_pandas()[["e", "id", "y"]]
    want = dcaudit.audit(pdf, evidence=["e"], claim="y = 1").fibers.drop("run_id")
    for names in (pdf.columns[:1], np.array(["e"]), pl.Series(["e"]), pd.Series(["e"])):
        assert dcaudit.audit(pdf, evidence=names, claim="y = 1").fibers.drop("run_id").equals(want), type(names)
    r = dcaudit.complete(pdf, evidence=pdf.columns[:1], probes=np.array(["id"]), claim="y = 1", seeds=2)
    assert r.completion is not None and r.completion.height > 0
    for wrong in (pl.DataFrame({"e": [1]}), pdf, np.array([["e"]])):
        with pytest.raises(SpecError, match="give one name, a comma-separated string or a list of names") as info:
            dcaudit.audit(pdf, evidence=wrong, claim="y = 1")
        assert "\n" not in str(info.value)
    with pytest.raises(SpecError, match=r"the names must be strings, got \[1, 2\]"):
        dcaudit.audit(pdf, evidence=np.array([1, 2]), claim="y = 1")


def test_save_never_writes_a_package_load_would_refuse(tmp_path: Path) -> None:
    """A result rebuilt with another table saved with a raw ValueError; one whose summary lost a column was
    written, and load() then called it damaged."""
    import dataclasses

    r = dcaudit.audit(FRAME, evidence="e", claim="y = 1")
    with pytest.raises(SpecError, match="'mine' is no evidence-package table"):
        dataclasses.replace(r, tables={**r.tables, "mine": FRAME}).save(tmp_path / "a")
    with pytest.raises(SpecError, match="the summary table lacks column.*'n_fibers'"):
        dataclasses.replace(r, tables={**r.tables, "summary": r.summary.drop("n_fibers")}).save(tmp_path / "b")
    text = r.summary.with_columns(pl.lit("many").alias("n_fibers"))
    with pytest.raises(SpecError, match="save\\(\\): .*n_fibers"):
        dataclasses.replace(r, tables={**r.tables, "summary": text}).save(tmp_path / "c")
    assert not any(tmp_path.iterdir()) or all(not (p / "manifest.json").exists() for p in tmp_path.iterdir())


def test_a_path_too_long_to_ask_about_is_a_spec_error(tmp_path: Path) -> None:
    """save(), out= and load() of a 300-character name raised a raw OSError (File name too long)."""
    r = dcaudit.audit(FRAME, evidence="e", claim="y = 1")
    long = tmp_path / ("n" * 300)
    for call in (lambda: r.save(long), lambda: dcaudit.audit(FRAME, evidence="e", claim="y = 1", out=long),
                 lambda: dcaudit.load(long), lambda: dcaudit.load("n" * 300)):
        with pytest.raises(SpecError, match="File name too long; give another path"):
            call()


def test_a_path_with_a_nul_character_is_a_spec_error(tmp_path: Path) -> None:
    """save(), out= and the data path raised a raw ValueError (embedded null byte)."""
    r = dcaudit.audit(FRAME, evidence="e", claim="y = 1")
    bad = str(tmp_path / "a\x00b")
    for call in (lambda: r.save(bad), lambda: dcaudit.audit(FRAME, evidence="e", claim="y = 1", out=bad),
                 lambda: dcaudit.load(bad), lambda: dcaudit.audit(bad + ".csv", evidence="e", claim="y = 1")):
        with pytest.raises(SpecError, match="NUL character"):
            call()


def test_load_never_mixes_a_package_with_the_one_replacing_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A load overlapping save(force=True) to the same directory returned the old manifest and run_id with the
    new package's tables (or a raw KeyError / FileNotFoundError)."""
    from dcaudit import storage

    a = dcaudit.audit(FRAME, evidence="e", claim="y = 1", id="id")
    b = dcaudit.audit(FRAME.with_columns(pl.col("e") * 0), evidence="e", claim="y = 1", id="id")
    pkg = a.save(tmp_path / "pkg")
    real, replaced = storage.read_table, []

    def read_while_replaced(path):  # noqa: ANN001, ANN202
        if not replaced:     # another process replaces the package just as its first table is read
            replaced.append(path)
            b.save(pkg, force=True)
        return real(path)

    monkeypatch.setattr(storage, "read_table", read_while_replaced)
    loaded = dcaudit.load(pkg)
    assert replaced and loaded.run_id == b.run_id
    assert sorted(loaded.tables) == sorted(b.tables) and all(loaded.tables[k].equals(b.tables[k]) for k in b.tables)


def test_load_names_tables_whose_run_id_is_not_the_manifests(tmp_path: Path) -> None:
    pkg = dcaudit.audit(FRAME, evidence="e", claim="y = 1").save(tmp_path / "pkg")
    manifest = json.loads((pkg / "manifest.json").read_text())
    (pkg / "manifest.json").write_text(json.dumps({**manifest, "run_id": "another-run"}))
    with pytest.raises(SpecError, match="damaged: .*carry another run_id than"):
        dcaudit.load(pkg)


def test_load_refuses_a_manifest_that_records_no_digests(tmp_path: Path) -> None:
    """A manifest whose 'files' was deleted loaded its tables unchecked (the path kept for "older packages",
    though every version of dcaudit records the digests)."""
    pkg = dcaudit.audit(FRAME, evidence="e", claim="y = 1").save(tmp_path / "pkg")
    manifest = json.loads((pkg / "manifest.json").read_text())
    del manifest["files"]
    (pkg / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SpecError, match=r"damaged: .*manifest.json: records no sha256 digests \('files'\)"):
        dcaudit.load(pkg)


def test_option_lists_from_numpy_are_lists() -> None:
    """prices=np.linspace(...) was "prices must be a list of numbers, got array([...])"."""
    import numpy as np

    frame = pl.DataFrame({"e": [i % 4 for i in range(80)], "y": [int(i % 7 == 0) for i in range(80)]})
    kw = {"evidence": "e", "claim": "y = 1", "seeds": 2, "min_support": 2}
    by_array = dcaudit.replay(frame, prices=np.array([0.01, 0.1]), **kw).costs
    by_list = dcaudit.replay(frame, prices=[0.01, 0.1], **kw).costs
    assert by_array is not None and by_list is not None
    assert by_array.drop("run_id").equals(by_list.drop("run_id"))
    done = dcaudit.complete(frame.with_columns(p=pl.col("e") % 2), evidence="e", probes="p", claim="y = 1", seeds=2,
                            policies=np.array(["response_rank", "random"]))
    assert done.completion is not None and set(done.completion["policy"]) == {"response_rank", "random"}


def test_settings_with_a_tilde_home_use_the_users_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dataclasses.replace(load_settings(), home="~/ws") made a workspace named "~" in the current directory,
    and record=True failed with a raw FileNotFoundError."""
    import dataclasses

    user, cwd = tmp_path / "user", tmp_path / "cwd"
    user.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.chdir(cwd)
    settings = dataclasses.replace(load_settings(), home="~/ws")
    r = dcaudit.audit(FRAME, evidence="e", claim="y = 1", record=True, report=False, settings=settings)
    assert r.package_dir is not None and Path(r.package_dir).is_relative_to(user / "ws")
    assert list(cwd.iterdir()) == []
