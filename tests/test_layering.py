"""The package's layering: pretrained (files and downloads) | bilm (pure torch) | layers (thinc)
| component + architectures (spaCy) | pretraining | embed (no component code) | cli, with no import
cycle. Read from the source, imports inside functions included."""

import ast
from pathlib import Path
from typing import Dict, List, Set

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "spacy_elmo"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> Set[str]:
    """Every module ``path`` imports (absolute names; ``from . import x`` counts the package)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            else:
                found.add(node.module or "")
    return found


def graph() -> Dict[str, Set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}

    def resolve(target: str) -> str:
        while target and target not in modules:  # "pkg.module.Name" -> "pkg.module"
            target = target.rpartition(".")[0]
        return target

    return {
        name: {resolve(t) for t in imports_of(path) if t.startswith("spacy_elmo") and resolve(t) not in ("", name)}
        for name, path in modules.items()
    }


def find_cycle(edges: Dict[str, Set[str]]) -> List[str]:
    """A cycle among modules (ignoring a package importing its own submodules), or []."""
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(node: str) -> List[str]:
        state[node] = 1  # on the current path
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt.startswith(node + "."):
                continue  # a package's __init__ re-exporting its submodules
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2  # done
        stack.pop()
        return []

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_no_import_cycle() -> None:
    assert find_cycle(graph()) == []


def test_find_cycle_sees_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


@pytest.mark.parametrize(
    "room,allowed",
    [
        ("spacy_elmo.published", {"spacy_elmo.published", "spacy_elmo.fileio"}),
        ("spacy_elmo.bilm", {"spacy_elmo.bilm", "spacy_elmo.fileio", "spacy_elmo.published"}),
        ("spacy_elmo.layers", {"spacy_elmo.bilm", "spacy_elmo.fileio", "spacy_elmo.layers", "spacy_elmo.published"}),
        (
            "spacy_elmo.pretraining",
            {"spacy_elmo.bilm", "spacy_elmo.fileio", "spacy_elmo.option_fields", "spacy_elmo.pretraining"},
        ),
        (
            "spacy_elmo.embed",
            {
                "spacy_elmo.bilm",
                "spacy_elmo.fileio",
                "spacy_elmo.option_fields",
                "spacy_elmo.published",
                "spacy_elmo.pretraining",
                "spacy_elmo.embed",
            },
        ),
    ],
)
def test_rooms_import_only_below_them(room: str, allowed: Set[str]) -> None:
    for name, targets in graph().items():
        if name == room or name.startswith(room + "."):
            upward = {t for t in targets if not any(t == a or t.startswith(a + ".") for a in allowed)}
            assert not upward, f"{name} imports {upward}"


def test_the_biLM_is_pure_torch() -> None:
    for path in (PACKAGE / "bilm").rglob("*.py"):
        assert not {t.split(".")[0] for t in imports_of(path)} & {"spacy", "thinc"}, path
