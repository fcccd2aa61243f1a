"""The README's supported-models table is generated from the registry; it must be current."""

from pathlib import Path

from peregrine.tools.supported_table import BEGIN, END, render, splice

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_table_is_current():
    text = README.read_text()
    assert BEGIN in text and END in text
    assert splice(text, render()) == text, (
        "README supported-models table is stale: run "
        "`python -m peregrine.tools.supported_table --write README.md`"
    )


def test_readme_quickstart_has_the_two_commands():
    text = README.read_text()
    assert "make demo" in text and "make test" in text
