"""The package's layering: pretrained (files and downloads) | bilm (pure torch) | layers (thinc)
| component + architectures (spaCy) | pretraining | embed (no component code) | serve (no pretraining,
embed or CLI) | cli, with no import cycle. Read from the source, imports inside functions included."""

import ast
import functools
from pathlib import Path
from typing import Dict, List, Set, Union

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "spacy_elmo"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> Set[str]:
    """Every module ``path`` imports (absolute names; ``from p import x`` counts ``p``, and ``p.x``
    where that is a module)."""
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
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)  # ``from .precision import autotune``
    return found


@functools.cache  # the source does not change during a run; the tests only read the graph
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
        (
            "spacy_elmo.layers",
            {
                "spacy_elmo.batching",
                "spacy_elmo.bilm",
                "spacy_elmo.fileio",
                "spacy_elmo.layers",
                "spacy_elmo.published",
            },
        ),
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
        # The service runs a pipeline: the component and what it stands on, never pretraining, embed or the CLI.
        (
            "spacy_elmo.serve",
            {
                "spacy_elmo.serve",
                "spacy_elmo.batching",
                "spacy_elmo.pipeline_component",
                "spacy_elmo.vector_hooks",
                "spacy_elmo.layers",
                "spacy_elmo.published",
                "spacy_elmo.bilm",
                "spacy_elmo.fileio",
            },
        ),
    ],
)
def test_rooms_import_only_below_them(room: str, allowed: Set[str]) -> None:
    for name, targets in graph().items():
        if name == room or name.startswith(room + "."):
            upward = {t for t in targets if not any(t == a or t.startswith(a + ".") for a in allowed)}
            assert not upward, f"{name} imports {upward}"


# Inside the biLM: kernels and memory serve the network and the tuner, never the reverse, not even
# through another module (what a room reaches, not only what it imports).
BILM_INNER_RULES = [
    (
        "spacy_elmo.bilm.kernels",
        {
            "spacy_elmo.bilm.model",
            "spacy_elmo.bilm.precision.autotune",
            "spacy_elmo.bilm.precision.timed_passes",
            "spacy_elmo.bilm.formats",
        },
    ),
    (
        "spacy_elmo.bilm.memory",
        {"spacy_elmo.bilm.model", "spacy_elmo.bilm.kernels", "spacy_elmo.bilm.precision", "spacy_elmo.bilm.formats"},
    ),
    (
        "spacy_elmo.bilm.model",
        {"spacy_elmo.bilm.runtime", "spacy_elmo.bilm.precision.autotune", "spacy_elmo.bilm.precision.timed_passes"},
    ),
]


def reached(edges: Dict[str, Set[str]], start: str) -> Set[str]:
    """Every module ``start`` imports, directly or through others."""
    found: Set[str] = set()
    todo = [start]
    while todo:
        for target in edges.get(todo.pop(), ()):
            if target not in found:
                found.add(target)
                todo.append(target)
    return found


@pytest.mark.parametrize("room,forbidden", BILM_INNER_RULES)
def test_biLM_concepts_reach_only_below_them(room: str, forbidden: Set[str]) -> None:
    edges = graph()
    for name in edges:
        if name == room or name.startswith(room + "."):
            wrong = {t for t in reached(edges, name) if any(t == f or t.startswith(f + ".") for f in forbidden)}
            assert not wrong, f"{name} reaches {wrong}"


def test_reached_follows_imports_through_other_modules() -> None:
    assert reached({"a": {"b"}, "b": {"c"}, "c": {"a"}}, "a") == {"a", "b", "c"}


def test_biLM_top_level_holds_few_modules() -> None:
    top = [p.name for p in (PACKAGE / "bilm").glob("*.py")]
    assert len(top) <= 8, sorted(top)


def test_the_biLM_is_pure_torch() -> None:
    for path in (PACKAGE / "bilm").rglob("*.py"):
        assert not {t.split(".")[0] for t in imports_of(path)} & {"spacy", "thinc"}, path


def test_only_the_command_line_imports_the_service() -> None:
    """The library runs without the serve extra: nothing outside spacy_elmo.serve imports it but the CLI."""
    importers = {
        name
        for name, targets in graph().items()
        if any(t.startswith("spacy_elmo.serve") for t in targets)
        and not name.startswith(("spacy_elmo.serve", "spacy_elmo.cli"))
    }
    assert importers == set()


# The only modules that read environment variables: the biLM's switches and the downloads'
# settings. The rest of the package takes the values from them.
ENVIRONMENT_READERS = {"spacy_elmo.bilm.settings", "spacy_elmo.published.settings"}
ENVIRONMENT_NAMES = {"environ", "environb", "getenv", "getenvb"}


def environment_reads(source: str) -> List[int]:
    """The lines of ``source`` that read the process environment: ``os.environ`` (``os`` under any
    name), ``os.getenv``, or either imported from ``os``; not assigning or deleting a variable
    (``os.environ[NAME] = value``: setting it for a child process)."""
    tree = ast.parse(source)
    os_names = {
        alias.asname or "os"
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "os"
    }
    written = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del))
    }
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ENVIRONMENT_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id in os_names
            and id(node) not in written
        ):
            lines.append(node.lineno)
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and {a.name for a in node.names} & ENVIRONMENT_NAMES
        ):
            lines.append(node.lineno)
    return sorted(lines)


def test_only_the_settings_modules_read_the_environment() -> None:
    readers = {module_name(path): environment_reads(path.read_text(encoding="utf8")) for path in PACKAGE.rglob("*.py")}
    assert {name for name, lines in readers.items() if lines} == ENVIRONMENT_READERS, {
        name: lines for name, lines in readers.items() if lines and name not in ENVIRONMENT_READERS
    }


@pytest.mark.parametrize(
    "source, lines",
    [
        ("import os\nx = os.environ.get('A')", [2]),
        ("import os as system\nx = system.getenv('A')", [2]),
        ("import os\nx = os.environ['A']", [2]),
        ("from os import environ", [1]),
        ("import os\nos.environ['A'] = '1'\ndel os.environ['B']", []),
        ("import os\nx = os.path.join('a', 'b')", []),
    ],
)
def test_environment_reads_sees_reads_not_writes(source: str, lines: List[int]) -> None:
    assert environment_reads(source) == lines


# Budgets that keep the code readable: a module a reader can hold, a function a screen can show.
MODULE_LINES = 420
FUNCTION_BODY_LINES = 60


def body_lines(function: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> int:
    """Lines of a function's body, its docstring left out."""
    body = function.body
    first = body[1] if len(body) > 1 and ast.get_docstring(function, clean=False) is not None else body[0]
    return (function.end_lineno or first.lineno) - first.lineno + 1


def test_modules_and_functions_keep_to_their_budgets() -> None:
    over = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf8")
        if len(text.splitlines()) > MODULE_LINES:
            over.append(f"{path.relative_to(PACKAGE)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and body_lines(node) > FUNCTION_BODY_LINES:
                over.append(f"{path.relative_to(PACKAGE)}::{node.name}: a body of {body_lines(node)} lines")
    assert not over, over


def test_body_lines_leaves_the_docstring_out() -> None:
    source = 'def f():\n    """Doc\n    string."""\n    a = 1\n    return a\n'
    assert body_lines(ast.parse(source).body[0]) == 2
