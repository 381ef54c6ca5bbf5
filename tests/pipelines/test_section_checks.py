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
                    "budget must be a number above 0"),
    "price true": ('[completion]\naudit = "a1"\nprobes = ["p1"]\nseeds = 3\ncosts = { p1 = true }\n',
                   "price of p1 must be a number"),
    "probe twice": ('[completion]\naudit = "a1"\nprobes = ["p1", "p1"]\nseeds = 3\n', "more than once"),
    # found only after the audits ran, so recorded as a failed run
    "tolerance on two columns": ("[replay]\nseeds = 3\ntolerance = 0.5\n", "need one evidence column"),
    "sensitivity support zero": ('[sensitivity]\naudits = ["ax"]\nmin_support = 0\n', "min_support must be"),
    "mae without reference": ('[sensitivity]\naudits = ["ax"]\ntolerances = ["mae"]\n', "give reference too"),
    # [vision], [jarvis] and [matbench] converted with int()/float()/bool()/tuple() or passed on unchecked:
    # 2.5 bins ran with 2, "3" with 3, true with 1, "false" was true, a string became its characters
    "vision bins 2.5": ("[vision]\nconfidence_bins = 2.5\n", "[vision]: confidence_bins must be an integer, got 2.5"),
    "vision bins text": ('[vision]\nconfidence_bins = "3"\n', "confidence_bins must be an integer, got '3'"),
    "vision bins true": ("[vision]\nconfidence_bins = true\n", "confidence_bins must be an integer, got True"),
    "vision bins 1": ("[vision]\nconfidence_bins = 1\n", "confidence_bins must be from 2 to 1000, got 1"),
    "vision support 2.9": ("[vision]\nmin_support = 2.9\n", "[vision]: min_support must be an integer, got 2.9"),
    "vision support 0": ("[vision]\nmin_support = 0\n", "[vision]: min_support must be a whole number from 1"),
    "vision candidates text": ('[vision]\ncandidates = "false"\n', "candidates must be true or false, got 'false'"),
    "vision bootstrap -1": ("[vision]\nbootstrap = -1\n", "bootstrap must be from 0 (no interval) to 10000, got -1"),
    "vision bootstrap 2.5": ("[vision]\nbootstrap = 2.5\n", "bootstrap must be an integer, got 2.5"),
    "vision conditions a number": ("[vision]\nconditions = 5\n", "[vision] conditions must be a list of names"),
    "vision conditions twice": ('[vision]\nconditions = "jpeg, jpeg"\n', "names 'jpeg' more than once"),
    "vision clean among conditions": ('[vision]\nconditions = ["clean", "jpeg"]\n', "leave it out of them"),
    "vision clean empty": ('[vision]\nclean = " "\n', "[vision] clean = ' ' is empty"),
    "vision model_order a number": ("[vision]\nmodel_order = 2\n", "[vision] model_order must be a list of names"),
    "vision suite unknown": ('[vision]\nsuites = "all, every"\n', "choose from all, each, severity"),
    "baseline seeds 2.5": ("[jarvis.probe_baseline]\nseeds = 2.5\n",
                           "[jarvis.probe_baseline]: seeds must be an integer, got 2.5"),
    "baseline support text": ('[jarvis.probe_baseline]\nmin_support = "3"\n', "min_support must be an integer, got '3'"),
    "baseline fraction text": ('[jarvis.probe_baseline]\ncalibration_fraction = "0.7"\n',
                               "calibration_fraction must be a number, got '0.7'"),
    "baseline fraction 1": ("[jarvis.probe_baseline]\ncalibration_fraction = 1.0\n",
                            "[jarvis.probe_baseline]: calibration_fraction must lie in (0, 1)"),
    "baseline seeds 0": ("[jarvis.probe_baseline]\nseeds = 0\n", "[jarvis.probe_baseline]: seeds must be from 1"),
    "baseline window rule": ('[jarvis.probe_baseline]\nfiber_rule = "knn:5"\n', "fiber_rule knn:5 is a window"),
    "baseline key typo": ("[jarvis.probe_baseline]\nsead = 3\n", "'sead': did you mean 'seeds'?"),
    "baseline not a table": ("[jarvis]\nprobe_baseline = 3\n", "[jarvis.probe_baseline] must be a table"),
    "by_position text": ('[jarvis]\nby_position = "false"\n', "[jarvis]: by_position must be true or false, got 'false'"),
    "by_position without replay": ("[jarvis]\nby_position = true\n", "add one"),
    "matbench seeds 2.5": ('[[matbench.completion]]\naudits = ["a1"]\nprobes = ["p1"]\nseeds = 2.5\n',
                           "[[matbench.completion]] #1: seeds must be an integer, got 2.5"),
    "matbench fraction text": ('[[matbench.completion]]\naudits = ["a1"]\nprobes = ["p1"]\n'
                               'calibration_fraction = "0.5"\n', "calibration_fraction must be a number, got '0.5'"),
    "matbench unknown audit": ('[[matbench.completion]]\naudits = ["zz"]\nprobes = ["p1"]\n', "no audit 'zz'"),
    "matbench seeds 0": ('[[matbench.completion]]\naudits = ["a1"]\nprobes = ["p1"]\nseeds = 0\n',
                         "[[matbench.completion]] #1: seeds must be from 1"),
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


@pytest.mark.parametrize("name", ["jarvis", "matbench", "matbench-discovery", "spin_defects", "tox21", "vision"])
def test_builtin_specs_pass_their_section_checks(name: str) -> None:
    """The checks refuse mistakes, not the shipped specs: each built-in spec validates, typed as written."""
    from dcaudit.pipelines.stages import validate_spec
    from dcaudit.spec import load_spec

    spec = load_spec(name)
    validate_spec(spec)
    if name == "matbench":
        from dcaudit.pipelines.matbench import parse_matbench_section

        section = parse_matbench_section(spec.sections["matbench"], spec)
        assert len(section.completions) == 12  # two entries of six audits each
        assert {(c.seeds, c.random_draws, c.policies) for _, c in section.completions} == {
            (10, 5, ("response_rank", "random", "oracle"))}
        assert all(c.min_support == task.min_support for task, c in section.completions)
    if name == "vision":
        from dcaudit.audits.vision import VisionConfig

        cfg = VisionConfig.from_section(spec.sections["vision"])
        assert (cfg.suites, cfg.confidence_bins, cfg.min_support, cfg.bootstrap) == (
            ("all", "severity", "each"), 10, 1, 1000)
