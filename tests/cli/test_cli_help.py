"""Every help screen of ``spacy-elmo`` reads at 80 columns: no line wider, no ``<bool>`` beside a flag."""

import pytest
from typer.testing import CliRunner

from spacy_elmo.cli import app

COMMANDS = ["pretrain", "export", "copy-pretrained", "embed", "models", "download", "bench", "serve"]


@pytest.mark.parametrize("command", [[], *([name] for name in COMMANDS)])
def test_help_fits_80_columns_and_shows_no_type_beside_a_flag(command) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "<bool>" not in result.output
    assert [line for line in lines if len(line) > 80] == []
    assert any("--help" in line for line in lines)


def test_the_main_help_lists_every_command() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"})
    assert all(f"  {name} " in result.output for name in COMMANDS), result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_a_commands_description_is_wrapped_as_paragraphs_not_at_its_source_lines(command) -> None:
    """Each paragraph fills its lines up to the last: none breaks mid-sentence where the docstring did."""
    output = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80"}).output
    lines = [line.strip() for line in output.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("Usage:")) + 1
    end = next(i for i, line in enumerate(lines) if i > start and (line.endswith(":") or line.startswith("\u256d")))
    paragraphs = "\n".join(lines[start:end]).strip().split("\n\n")
    for paragraph in paragraphs:
        assert all(len(line) >= 50 for line in paragraph.splitlines()[:-1]), paragraph
