"""Spec keys and options that were silently ignored, or refused with a message naming the wrong thing (a QA
pass): each is now one line naming the key and its value (exit 2), and no run is recorded for a spec that
does not validate."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner, Result

from dcaudit.cli import cli
from dcaudit.errors import SpecError
from dcaudit.pipelines.stages import validate_spec
from dcaudit.spec import load_spec
from tests.conftest import small_spec_table

AUDIT = """
[[audits]]
id = "a1"
claim = "y = 1"
evidence = ["e1", "e2"]
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_spec_table(tmp_path_factory.mktemp("spec-options"), 11)


def write_spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def spec_text(data: Path, rest: str, *, source: str = "") -> str:
    return f'name = "opts"\n[source]\npath = "{data}"\nid = "cid"\n{source}{rest}'


def invoke(tmp_path: Path, args: list[str]) -> Result:
    return CliRunner().invoke(cli, args, env={"DCAUDIT_HOME": str(tmp_path / "home")})


def error_line(result: Result) -> str:
    """The one error line of a refused command (exit 2), with no traceback."""
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert "Traceback" not in result.output and "internal error" not in line
    return line


def assert_refused_unrecorded(tmp_path: Path, spec: Path, *expected: str) -> str:
    line = error_line(invoke(tmp_path, ["run", str(spec), "--no-report", "--quiet"]))
    for text in expected:
        assert text in line, line
    home = tmp_path / "home"
    assert sorted(home.glob("records/*.json")) == [] and sorted(home.glob("runs/*")) == []  # nothing recorded
    return line


def spec_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(str(write_spec(tmp_path, text)))
    return str(info.value)


# 1. a reference that only fixed tolerance widths would meet is read by nothing: refused like replay's


def test_sensitivity_reference_with_fixed_tolerances_is_refused_like_replay(data: Path, tmp_path: Path) -> None:
    base = [str(data), "--id", "cid", "--claim", "y = 1", "--evidence", "x", "--no-report", "--quiet"]
    sens = error_line(invoke(tmp_path, ["sensitivity", *base, "--tolerances", "0.1", "--reference", "ref"]))
    replay = error_line(invoke(tmp_path, ["replay", *base, "--tolerance", "0.1", "--reference", "ref",
                                          "--seeds", "2"]))
    assert "[sensitivity]: tolerances '0.1' is a fixed width" in sens
    # one wording (dcaudit.spec.fixed_width_reference) for both stages
    for line in (sens, replay):
        assert "fixed width, which no reference changes" in line and "(leave it out)" in line
    several = error_line(invoke(tmp_path, ["sensitivity", *base, "--tolerances", "0.1,0.2", "--reference", "ref"]))
    assert "tolerances ['0.1', '0.2'] are fixed widths" in several


def test_sensitivity_section_reference_with_fixed_tolerances(data: Path, tmp_path: Path) -> None:
    rest = ('[[audits]]\nid = "ax"\nclaim = "y = 1"\nevidence = ["x"]\n'
            '[sensitivity]\nrules = []\ntolerances = [0.5]\nreference = "ref"\n')
    assert_refused_unrecorded(tmp_path, write_spec(tmp_path, spec_text(data, rest)),
                              "[sensitivity]: tolerances 0.5 is a fixed width", "reference")


def test_sensitivity_reference_still_serves_mae_beside_a_width(data: Path, tmp_path: Path) -> None:
    rest = ('[[audits]]\nid = "ax"\nclaim = "y = 1"\nevidence = ["x"]\n'
            '[sensitivity]\ntolerances = [0.5, "mae"]\nreference = "ref"\n')
    spec = load_spec(str(write_spec(tmp_path, spec_text(data, rest))))
    validate_spec(spec)   # "mae" reads the reference: no error
    from dcaudit.audits.sensitivity import section_options

    options = section_options(spec.sections["sensitivity"])
    assert options.reference == "ref" and list(options.tolerances) == [0.5, "mae"]


def test_sensitivity_empty_reference_is_refused(data: Path, tmp_path: Path) -> None:
    rest = '[[audits]]\nid = "ax"\nclaim = "y = 1"\nevidence = ["x"]\n[sensitivity]\nreference = ""\n'
    assert_refused_unrecorded(tmp_path, write_spec(tmp_path, spec_text(data, rest)), "[sensitivity] reference = ''")


# 2. [replay] compare_modes: empty or repeated


@pytest.mark.parametrize(("value", "expected"), [
    ("[]", "[replay] compare_modes is empty"),
    ('["calibrated", "calibrated"]', "[replay] compare_modes names 'calibrated' more than once"),
    ('"calibrated, calibrated"', "[replay] compare_modes names 'calibrated' more than once"),
    ("5", "[replay] compare_modes must be a list of names"),
])
def test_compare_modes_empty_or_repeated(data: Path, tmp_path: Path, value: str, expected: str) -> None:
    spec = write_spec(tmp_path, spec_text(data, AUDIT + f"[replay]\nseeds = 2\ncompare_modes = {value}\n"))
    assert_refused_unrecorded(tmp_path, spec, expected)


# 3. [[audits]] models: a repeated or empty list


@pytest.mark.parametrize(("value", "expected"), [
    ('["0", "0"]', "audits[0]: models names '0' more than once"),
    ('"0, 0"', "audits[0]: models names '0' more than once"),
    ("[]", "audits[0]: models must be \"all\" or a non-empty list of names, not []"),
])
def test_models_repeated_or_empty(data: Path, tmp_path: Path, value: str, expected: str) -> None:
    spec = write_spec(tmp_path, spec_text(data, AUDIT + f'per = "p1"\nmodels = {value}\n'))
    assert_refused_unrecorded(tmp_path, spec, expected)


# 4. empty ids and names


@pytest.mark.parametrize(("key", "value"), [("id", '""'), ("id", '"  "'), ("table", '""'), ("identity", '""'),
                                            ("model", '""')])
def test_empty_audit_strings(data: Path, tmp_path: Path, key: str, value: str) -> None:
    rest = f'[[audits]]\n{key} = {value}\nclaim = "y = 1"\nevidence = ["e1"]\n'
    assert_refused_unrecorded(tmp_path, write_spec(tmp_path, spec_text(data, rest)), f"audits[0]: {key} = ")


@pytest.mark.parametrize("key", ["audit", "metric", "reference", "model_column"])
def test_empty_choice_strings(data: Path, tmp_path: Path, key: str) -> None:
    rest = ('[[audits]]\nid = "ax"\nclaim = "y = 1"\nevidence = ["x"]\n'
            '[replay]\nseeds = 2\ntolerance = "mae"\nreference = "ref"\nmodel_column = "p1"\n'
            f'[choice]\n{key} = ""\n')
    assert_refused_unrecorded(tmp_path, write_spec(tmp_path, spec_text(data, rest)), f"[choice] {key} = '' is empty")


# 5. messages that named the wrong thing


def test_a_source_key_typo_is_named_with_its_near_miss(data: Path, tmp_path: Path) -> None:
    text = f'name = "opts"\n[source]\npaht = "{data}"\nid = "cid"\n{AUDIT}'
    message = spec_error(tmp_path, text)
    assert "[source]: unknown key(s) ['paht'] ('paht': did you mean 'path'?)" in message
    assert_refused_unrecorded(tmp_path, write_spec(tmp_path, text), "'paht': did you mean 'path'?")


def test_a_connector_source_suggests_the_source_keys_too(tmp_path: Path) -> None:
    """duplicates is a [source] key of every source: 'duplicate' was 'unknown option; allowed: []' for tox21."""
    text = 'name = "opts"\n[source]\nconnector = "tox21"\nid = "mol_id"\nduplicate = "keep"\n' + AUDIT
    line = assert_refused_unrecorded(tmp_path, write_spec(tmp_path, text), "[source] connector 'tox21'",
                                     "'duplicate': did you mean 'duplicates'?")
    assert "allowed: ['connector', 'duplicates', 'id']" in line


def test_audits_written_under_source_says_so(data: Path, tmp_path: Path) -> None:
    """`audits = []` after [source] is a key of [source], and empty: not "missing required key 'audits'"."""
    message = spec_error(tmp_path, spec_text(data, "audits = []\n"))
    assert "audits = [] is empty, and written under [source]" in message and "missing" not in message
    moved = spec_error(tmp_path, spec_text(data, 'audits = [{claim = "y = 1", evidence = ["e1"]}]\n'))
    assert "is written under [source], so it is a key of [source]" in moved
    assert "missing required key 'audits'" in spec_error(tmp_path, spec_text(data, ""))


def test_a_vision_spec_needs_no_audits(data: Path, tmp_path: Path) -> None:
    """[vision] audits the predictions itself: a path and the section are a whole spec (the README's form);
    without [vision] the audits stay required."""
    spec = load_spec(str(write_spec(tmp_path, f'name = "v"\n[source]\npath = "{data}"\n[vision]\nconditions = ["jpeg"]\n')))
    assert spec.audits == () or list(spec.audits) == []
    assert "missing required key 'audits'" in spec_error(tmp_path, f'name = "v"\n[source]\npath = "{data}"\n')


@pytest.mark.parametrize(("written", "shown"), [('models = ["0"]', "models = ['0']"), ('model = "m"', "model = 'm'"),
                                                ('models = "all"', "models = 'all'")])
def test_models_without_per_names_the_key_written(data: Path, tmp_path: Path, written: str, shown: str) -> None:
    """models / model without per group by a column 'model' (the shorthand's default): when the table has
    none, the message names the key the spec wrote, not per."""
    result = invoke(tmp_path, ["run", str(write_spec(tmp_path, spec_text(data, AUDIT + written + "\n"))),
                               "--no-report", "--quiet"])
    line = error_line(result)
    assert f"audit 'a1': {shown} needs per = \"<column>\"" in line and "column 'model'" in line
    assert "per names unknown column" not in line


def test_models_with_a_model_column_still_group_without_per(data: Path, tmp_path: Path) -> None:
    frame = pl.read_csv(data).with_columns(model=pl.Series([f"m{i % 2}" for i in range(40)]))
    path = tmp_path / "models.csv"
    frame.write_csv(path)
    result = invoke(tmp_path, ["run", str(write_spec(tmp_path, spec_text(path, AUDIT + 'model = "m1"\n'))),
                               "--no-report", "--quiet"])
    assert result.exit_code == 0, result.output


# 6. an unknown connector is an invalid spec: refused before anything is recorded


def test_an_unknown_connector_records_nothing(tmp_path: Path) -> None:
    text = 'name = "opts-conn"\n[source]\nconnector = "tox22"\nid = "mol_id"\n' + AUDIT
    assert_refused_unrecorded(tmp_path, write_spec(tmp_path, text), "[source] connector: unknown source 'tox22'",
                              "tox21")


def test_connector_option_types_are_checked_before_recording(tmp_path: Path) -> None:
    text = 'name = "opts-conn"\n[source]\nconnector = "jarvis"\nid = "jid"\nmodels = 5\n' + AUDIT
    assert_refused_unrecorded(tmp_path, write_spec(tmp_path, text), "[source] connector 'jarvis'", "models")


def test_api_sensitivity_reference_with_a_fixed_width(data: Path, settings: object) -> None:
    """The Python API builds the same [sensitivity] section, so it is refused the same way."""
    import dcaudit

    with pytest.raises(SpecError, match=r"\[sensitivity\]: tolerances 0.1 is a fixed width, which no reference"):
        dcaudit.sensitivity(data, evidence="x", claim="y = 1", id="cid", tolerances=0.1, reference="ref")


def test_an_option_given_twice_is_a_usage_error(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dcaudit.cli import cli

    data = tmp_path / "t.csv"
    data.write_text("cid,e,y\n" + "".join(f"c{i},{i % 3},{i % 2}\n" for i in range(9)))
    env = {"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1"}
    base = ["audit", str(data), "--id", "cid", "--evidence", "e", "--no-report"]
    for extra, needle in ((["--claim", "y = 1", "--claim", "y = 0"], "--claim is given twice"),
                          (["--claim=y = 1", "--claim", "y = 0"], "--claim is given twice"),
                          (["--claim", "y = 1", "--min-support", "2", "--min-support", "3"], "--min-support"),
                          (["--claim", "y = 1", "--no-report"], "--no-report is given twice")):
        result = CliRunner().invoke(cli, [*base, *extra], env=env)
        assert result.exit_code == 2 and needle in result.output, (extra, result.output)
    ok = CliRunner().invoke(cli, [*base, "--claim", "y = 1", "--fail-if", "n_candidates < 1",
                                  "--fail-if", "ambiguous_fraction > 1"], env=env)   # --fail-if may repeat
    assert ok.exit_code == 0, ok.output


def test_options_twice_before_the_command_and_values_that_look_like_options(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dcaudit.cli import cli

    env = {"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1"}
    twice = CliRunner().invoke(cli, ["--home", str(tmp_path / "a"), "--home", str(tmp_path / "b"), "specs"], env=env)
    assert twice.exit_code == 2 and "--home is given twice" in twice.output
    data = tmp_path / "t.csv"
    data.write_text("cid,e,y\n" + "".join(f"c{i},{i % 3},{i % 2}\n" for i in range(9)))
    # --evidence takes "--claim" as its value, as click reads it: one --claim, so no repeat (the column is unknown)
    read = CliRunner().invoke(cli, ["audit", str(data), "--id", "cid", "--evidence", "--claim", "--claim", "y = 1",
                                    "--no-report"], env=env)
    assert read.exit_code == 2 and "given twice" not in read.output and "'--claim'" in read.output, read.output


def test_a_file_named_with_a_leading_dash_audits(tmp_path: Path) -> None:
    import dcaudit

    data = tmp_path / "-dash.csv"
    data.write_text("cid,e,y\n" + "".join(f"c{i},{i % 3},{i % 2}\n" for i in range(9)))
    result = dcaudit.audit(data, evidence="e", claim="y = 1", id="cid", record=True)
    assert result.run_id is not None and result.run_id.startswith("dash-")


def test_a_list_option_written_as_one_string_is_split_like_every_name_list() -> None:
    """typed_fields splits a comma-separated string with split_names, the one splitter of names: a quoted name
    keeps its comma (it was cut in two), and an unclosed quote is the key's type error, not a bare message."""
    from dataclasses import dataclass

    from dcaudit.spec import typed_fields

    @dataclass(frozen=True)
    class Options:
        names: tuple[str, ...] = ()

    assert typed_fields(Options, {"names": '"b,c", d'}, "[x]") == {"names": ("b,c", "d")}
    assert typed_fields(Options, {"names": "a, b"}, "[x]") == {"names": ("a", "b")}
    with pytest.raises(SpecError, match=r"^\[x\]: names must be a list of strings, got '\"b,c'$"):
        typed_fields(Options, {"names": '"b,c'}, "[x]")


@pytest.mark.parametrize("rule", ["quantile:²", "quantile:٣", "knn:¹", "width:1_0", "width:inf", "width:0x10",
                                  "window:٠.٥", "quantile:", "width:-1"])
def test_rule_numbers_are_plain_ascii_numbers(rule: str) -> None:
    """'quantile:²' was an internal error (str.isdigit accepts it, int() does not), 'width:1_0' a width of 10
    (float() reads underscores) and 'quantile:٣' three bins."""
    from dcaudit.evidence_map import parse_fiber_rule

    with pytest.raises(SpecError, match=f"fiber rule {rule!r}"):
        parse_fiber_rule(rule)


@pytest.mark.parametrize(("rule", "written"), [("width: 0.5", "width:0.5"), (" quantile : 20 ", "quantile:20"),
                                               ("width:.5", "width:0.5"), ("width:5e-1", "width:0.5"),
                                               ("knn:025", "knn:25")])
def test_rule_numbers_as_written_by_hand(rule: str, written: str) -> None:
    from dcaudit.evidence_map import parse_fiber_rule

    assert str(parse_fiber_rule(rule)) == written


@pytest.mark.parametrize("tolerance", ["q²", "q٨٠", "1_0", "inf", "q0", "q100"])
def test_tolerance_numbers_are_plain_ascii_numbers(tolerance: str) -> None:
    from dcaudit.audits.replay import parse_tolerance

    with pytest.raises(SpecError, match="tolerance"):
        parse_tolerance(tolerance)


def test_a_threads_setting_in_other_digits_is_an_error_not_a_crash(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["query", "select 1"], env={"DCAUDIT_HOME": str(tmp_path), "DCAUDIT_THREADS": "²"})
    assert result.exit_code == 2 and "DCAUDIT_THREADS = '²'" in result.output
