"""project.yml: the quick workflow (`make demo`) runs what its comparison tables read."""

import shlex
from typing import Dict, List

import srsly

from .scripts import PROJECT_DIR, load_script

compare = load_script("compare")
PROJECT = srsly.read_yaml(PROJECT_DIR / "project.yml")
COMMANDS: Dict[str, dict] = {command["name"]: command for command in PROJECT["commands"]}


def options(line: str, name: str) -> List[str]:
    """The values of every ``--NAME VALUE`` of a script line, as weasel splits it (shlex)."""
    words = shlex.split(line)
    return [words[i + 1] for i, word in enumerate(words) if word == f"--{name}"]


def test_every_workflow_step_is_a_command() -> None:
    for workflow, steps in PROJECT["workflows"].items():
        assert [step for step in steps if step not in COMMANDS] == [], workflow


def test_quick_compares_elmo_with_spacys_efficiency_config() -> None:
    quick = PROJECT["workflows"]["quick"]
    lines = COMMANDS["compare-quick"]["script"]
    assert len(lines) == 3
    for line in lines:
        systems = dict(compare.parse_system(system) for system in options(line, "system"))
        baselines = options(line, "baseline")
        assert baselines and set(baselines) <= set(systems), line
        elmo = [name for name in systems if "ELMo" in name]
        assert len(elmo) == 1 and elmo[0] not in baselines
        for directories in systems.values():  # every metrics directory is made by a step of quick
            system, task = directories[0].parts[-2:]
            assert f"evaluate-{system}-{task}" in quick and f"train-{system}-{task}" in quick, directories
        if "quick_ner" in line:  # spaCy's efficiency NER config is the CNN (a)
            assert baselines == [next(name for name in systems if "(a)" in name)]
        else:  # ELMo's own contribution: the shipped textcat (a bag of words + ELMo) against spaCy's bag of words
            assert baselines == [next(name for name in systems if "(s)" in name)]
            assert any("(a)" in name for name in systems)
    assert quick.index("evaluate-spacy-topics") < quick.index("compare-quick")


def test_the_published_tables_read_committed_files() -> None:
    """compare-published re-makes the README's table from project/docs/results, with no training."""
    for line in COMMANDS["compare-published"]["script"]:
        for _, directories in map(compare.parse_system, options(line, "system")):
            for directory in directories:
                files = list((PROJECT_DIR / directory).glob("*.json"))
                assert files and all(f.stem.startswith(("fold", "seed")) for f in files), directory
