"""Spec sections are checked when the spec loads: a mistake in [replay], [sensitivity], [choice] or
[completion] is one line naming the key (exit 2) and no run is recorded — never an internal error, never a
failed run after the audits already ran, never an option silently ignored, never the wrong numbers."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from dcaudit.cli import cli
from tests.conftest import small_spec_table

BASE = """name = "checks"

[source]
path = "{csv}"
id = "cid"

[[audits]]
id = "a1"
claim = 'y = 1'
evidence = ["e1", "e2"]
min_support = 2

[[audits]]
id = "ax"
claim = 'y = 1'
evidence = ["x"]
min_support = 2
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_spec_table(tmp_path_factory.mktemp("checks"), 7, model=True)


BAD = {
    # [choice] on a two-column audit computed its windows on the first column alone (wrong numbers)
    "choice on two columns": ('[replay]\nseeds = 3\naudits = ["ax"]\ntolerance = "mae"\nreference = "ref"\n'
                              'model_column = "model"\n[choice]\naudit = "a1"\n', "one prediction column"),
    "choice without replay": ("[choice]\n", "add a [replay] section"),
    # values of the wrong type were internal errors
    "replay audits a number": ("[replay]\nseeds = 3\naudits = 5\n", "[replay] audits must be a list of names"),
    "sensitivity audits a number": ("[sensitivity]\naudits = 5\n", "[sensitivity] audits must be a list of names"),
    "replay model_column a number": ('[replay]\nseeds = 3\ntolerance = 0.5\naudits = ["ax"]\nmodel_column = 7\n',
                                     "model_column must be a string"),
    "sensitivity model_column a number": ('[sensitivity]\naudits = ["ax"]\nrules = ["knn:5"]\nmodel_column = 3\n',
                                          "model_column must be a string"),
    "sensitivity reference a number": ('[sensitivity]\naudits = ["ax"]\nrules = ["knn:5"]\nreference = 5\n',
                                       "reference must be a string"),
    "sensitivity rules of numbers": ('[sensitivity]\naudits = ["ax"]\nrules = [5]\n', "rules must be a list of names"),
    # options that nothing reads were silently ignored
    "model_column on a fiber replay": ('[replay]\nseeds = 3\nmodel_column = "model"\n', "a fiber replay does not read it"),
    "reference with a fixed tolerance": ('[replay]\nseeds = 3\ntolerance = 0.5\nreference = "ref"\naudits = ["ax"]\n',
                                         "fixed width, which no reference changes"),
    "replay audits empty": ("[replay]\nseeds = 3\naudits = []\n", "[replay] audits is empty"),
    "random_draws without random": ('[completion]\naudit = "a1"\nprobes = ["p1"]\nseeds = 3\n'
                                    'policies = ["response_rank"]\nrandom_draws = 3\n', "random_draws"),
    "price given twice": ("[replay]\nseeds = 3\nprices = [0.1, 0.1]\n", "more than once"),
    "price beyond the range": ("[replay]\nseeds = 3\nprices = [0.0, 1e300]\n", "prices must be"),
    "calibration half empty": ("[replay]\nseeds = 3\ncalibration_fraction = 0.9999999\n", "test half empty"),
    "budget zero": ('[completion]\naudit = "a1"\nprobes = ["p1"]\nseeds = 3\ncosts = { p1 = 1.0 }\nbudget = 0\n',
                    "budget must be a positive number"),
    "price true": ('[completion]\naudit = "a1"\nprobes = ["p1"]\nseeds = 3\ncosts = { p1 = true }\n',
                   "price of p1 must be a number"),
    "probe twice": ('[completion]\naudit = "a1"\nprobes = ["p1", "p1"]\nseeds = 3\n', "more than once"),
    # found only after the audits ran, so recorded as a failed run
    "tolerance on two columns": ("[replay]\nseeds = 3\ntolerance = 0.5\n", "need one evidence column"),
    "sensitivity support zero": ('[sensitivity]\naudits = ["ax"]\nmin_support = 0\n', "min_support must be"),
    "mae without reference": ('[sensitivity]\naudits = ["ax"]\ntolerances = ["mae"]\n', "give reference too"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_section_is_one_line_and_records_no_run(case: str, data: Path, tmp_path: Path) -> None:
    section, expected = BAD[case]
    spec = tmp_path / "s.toml"
    spec.write_text(BASE.format(csv=data) + "\n" + section)
    home = tmp_path / "home"
    result = CliRunner().invoke(cli, ["run", str(spec), "--no-report"], env={"DCAUDIT_HOME": str(home)})
    assert result.exit_code == 2, result.output
    (error,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert expected in error and "internal error" not in error and "Traceback" not in result.output
    assert sorted(home.glob("records/*.json")) == [] and sorted(home.glob("runs/*")) == []  # no run recorded


def test_choice_on_one_column_still_runs(data: Path, tmp_path: Path) -> None:
    """The check does not refuse the working case: a [choice] on the one-column audit of the [replay]."""
    spec = tmp_path / "s.toml"
    spec.write_text(BASE.format(csv=data) + '\n[replay]\nseeds = 3\naudits = ["ax"]\ntolerance = "mae"\n'
                    'reference = "ref"\nmodel_column = "model"\n[choice]\naudit = "ax"\n')
    result = CliRunner().invoke(cli, ["run", str(spec), "--no-report", "--json"],
                                env={"DCAUDIT_HOME": str(tmp_path / "home")})
    assert result.exit_code == 0, result.output
    package = Path(json.loads(result.stdout)["package_dir"])
    choice = pl.read_parquet(package / "choice.parquet")
    assert set(choice["model"]) == {"m0", "m1"}


def test_cli_duplicate_prices_and_empty_lists_are_errors(data: Path, tmp_path: Path) -> None:
    """On the CLI too: a probe priced twice kept the last price, an empty --rules or --policies meant the
    defaults, a repeated rule wrote its row twice, --reference with a fixed --tolerance did nothing."""
    env = {"DCAUDIT_HOME": str(tmp_path / "home")}
    base = [str(data), "--id", "cid", "--claim", "y = 1", "--no-report"]
    cases = [
        (["complete", *base, "--evidence", "e2", "--seeds", "3", "--probes", "e1,p1", "--costs", "e1=1,e1=2,p1=1"],
         "'e1' has two prices"),
        (["sensitivity", *base, "--evidence", "x", "--rules", ""], "rules must be a list of names"),
        (["sensitivity", *base, "--evidence", "x", "--rules", "knn:5,knn:5"], "more than once"),
        (["complete", *base, "--evidence", "e2", "--seeds", "3", "--probes", "e1", "--policies", ""],
         "policies must be a list of names"),
        (["replay", *base, "--evidence", "x", "--tolerance", "0.5", "--reference", "ref", "--seeds", "3"],
         "no reference changes"),
    ]
    for args, expected in cases:
        result = CliRunner().invoke(cli, args, env=env)
        assert result.exit_code == 2, (args, result.output)
        assert expected in result.output, (args, result.output)
