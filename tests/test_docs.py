"""The user docs stay true to the code and to themselves: docs/component.md's settings tables list
every key of the ``elmo`` factory, of ``[components.elmo.model]`` and of the listener with its
default; every relative link in the docs reaches a file (and a heading, for an ``#anchor``); the
reference pages keep to their length budgets."""

import inspect
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest
from spacy.language import Language
from spacy.util import registry

import spacy_elmo.pipeline_component  # noqa: F401  (registers the elmo factory)

ROOT = Path(__file__).resolve().parents[1]
COMPONENT_DOC = ROOT / "docs" / "component.md"
LINKED_DOCS = [
    ROOT / "README.md",
    ROOT / "RELIABILITY.md",
    ROOT / "project" / "README.md",
    ROOT / "project" / "docs" / "lab-notebook.md",
    ROOT / "benchmarks" / "README.md",
    ROOT / "benchmarks" / "results" / "history.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
# Lines each page may take (issue 46): reference pages a newcomer reads through.
BUDGETS = {"README.md": 160, "docs/component.md": 250, "docs/bilm.md": 250}

LINK = re.compile(r"\]\(([^)\s]+)\)")


def config_text(value: Any) -> str:
    """A default as a config file writes it (``null``, ``true``, ``"auto"``, ``512.0``, ``{}``); a
    sub-layer's block as the name of its registered function."""
    if isinstance(value, dict) and "@architectures" in value:
        return value["@architectures"]
    return json.dumps(value)


def settings_tables(path: Path) -> List[Dict[str, str]]:
    """The tables of the page's "Settings" section, in order: key -> default as written.

    A row may name several keys (`a`, `b`): with as many defaults, each key takes its own; with
    one, they share it.
    """
    section = path.read_text(encoding="utf8").split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    tables: List[Dict[str, str]] = []
    for block in re.split(r"\n\s*\n", section):
        rows = [line for line in block.splitlines() if line.startswith("| `")]
        if not rows:
            continue
        table: Dict[str, str] = {}
        for row in rows:
            keys_cell, default_cell = (cell.strip() for cell in row.strip("|").split(" | ")[:2])
            keys = re.findall(r"`([^`]+)`", keys_cell)
            defaults = re.findall(r"`([^`]+)`", default_cell)
            table.update(zip(keys, defaults if len(defaults) == len(keys) else defaults * len(keys)))
        tables.append(table)
    return tables


def test_the_settings_tables_hold_every_key_with_its_default() -> None:
    config = Language.get_factory_meta("elmo").default_config
    factory = {key: config_text(value) for key, value in config.items()}
    model = {key: config_text(value) for key, value in config["model"].items() if key != "@architectures"}
    listener_signature = inspect.signature(registry.architectures.get("spacy_elmo.ElmoListener.v2"))
    listener = {name: config_text(p.default) for name, p in listener_signature.parameters.items()}
    assert settings_tables(COMPONENT_DOC) == [factory, model, listener]


def headings(path: Path) -> Set[str]:
    """The page's heading anchors as GitHub makes them: lower case, punctuation dropped, spaces to -."""
    found, fenced = set(), False
    for line in path.read_text(encoding="utf8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-"))
    return found


def broken_links(page: Path) -> List[str]:
    """The page's relative links whose file, or whose ``#anchor`` in a markdown file, is missing."""
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf8")):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        path = (page.parent / file_part).resolve() if file_part else page
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in headings(path)):
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", LINKED_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_reach_a_file_and_heading(page: Path) -> None:
    assert broken_links(page) == []


def test_a_link_to_a_missing_file_or_heading_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# A heading: `with` code\n", encoding="utf8")
    page = tmp_path / "page.md"
    page.write_text(
        "[a](other.md#a-heading-with-code) [b](missing.md) [c](other.md#nowhere) [d](https://x.org)\n", encoding="utf8"
    )
    assert broken_links(page) == ["missing.md", "other.md#nowhere"]


@pytest.mark.parametrize("name, budget", BUDGETS.items())
def test_reference_pages_keep_to_their_length(name: str, budget: int) -> None:
    lines = (ROOT / name).read_text(encoding="utf8").count("\n")
    assert lines <= budget, f"{name} has {lines} lines, over its budget of {budget}: move detail to another page"
