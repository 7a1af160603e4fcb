"""The manifest of an embedding output: which model, which settings, which shards are finished.

``manifest.json`` sits beside the shards and is replaced atomically after each finished shard,
so it only ever lists shards that are complete on disk. It holds no timings or host names:
an interrupted run that is resumed leaves exactly the manifest an uninterrupted run leaves.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

from ..bilm.precision.resolved import ResolvedPrecision
from ..fileio import OutputError, atomic_path
from .settings import identity_differences, resume_identity

MANIFEST_NAME = "manifest.json"
FORMAT = "spacy-elmo embed"
VERSION = 1


def shard_name(shard: int) -> str:
    return f"shard-{shard:06d}.parquet"


@dataclass
class Manifest:
    """``model``: options and weight fingerprint (see :func:`settings.model_identity`).
    ``settings``: :class:`settings.EmbedSettings` as a dict. ``input``: the input files' names and
    sizes. ``shards``: finished shards by number: file, first index, sentences, tokens."""

    model: Dict[str, Any]
    settings: Dict[str, Any]
    input: List[Dict[str, Any]]
    total_shards: int
    total_sentences: int
    shards: Dict[int, Dict[str, Any]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.shards) == self.total_shards

    def to_dict(self) -> Dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "model": self.model,
            "settings": self.settings,
            "input": self.input,
            "total_shards": self.total_shards,
            "total_sentences": self.total_sentences,
            "complete": self.complete,
            "shards": [{"shard": k, **self.shards[k]} for k in sorted(self.shards)],
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any], source: str) -> "Manifest":
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            raise OutputError(f"{source} is not a manifest of spacy-elmo embed (version {VERSION})")
        shards = {int(entry["shard"]): {k: v for k, v in entry.items() if k != "shard"} for entry in data["shards"]}
        return cls(
            data["model"], data["settings"], data["input"], data["total_shards"], data["total_sentences"], shards
        )

    @classmethod
    def read(cls, directory: Path) -> "Manifest":
        path = directory / MANIFEST_NAME
        try:
            return cls.from_dict(json.loads(path.read_text(encoding="utf8")), str(path))
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise OutputError(f"{path} is damaged ({err}): remove the directory and run again") from err

    def write(self, directory: Path) -> None:
        with atomic_path(directory / MANIFEST_NAME) as tmp:
            tmp.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n", encoding="utf8")

    def check_resumable(self, other: "Manifest", output: Path) -> None:
        """Refuse to continue ``output`` (this manifest) with another model, settings or input.

        The products' precision is part of the model (bf16 and fp32 products give other bytes);
        the device is recorded nowhere, so a run may be finished on another machine, in the
        precision it started with.
        """
        stored, computed = self.model.get("products"), other.model.get("products")
        same_weights = not identity_differences({**self.model, "products": None}, {**other.model, "products": None})
        if stored and computed and stored != computed and same_weights:
            raise OutputError(
                f"{output} holds layers computed with {stored} matrix products, and this run would compute "
                f"{computed} ones (--precision {other.settings['precision']} on this device). Finish it with "
                f"--precision {ResolvedPrecision.from_recorded(stored).precision}, or write to a new OUTPUT "
                "(or delete this one)."
            )
        for what, mine, theirs in (
            ("model", self.model, other.model),
            ("settings", resume_identity(self.settings), resume_identity(other.settings)),
            ("input", {"files": self.input}, {"files": other.input}),
        ):
            changed = identity_differences(mine, theirs)
            if changed:
                raise OutputError(
                    f"{output} holds the output of a run with another {what} ({'; '.join(changed)}). "
                    "Rerun with the same model and options to finish it, or write to a new OUTPUT "
                    "(or delete this one)."
                )


def open_output(directory: Path, fresh: Manifest) -> Manifest:
    """The manifest to continue in ``directory``: its own if a compatible run started there,
    else ``fresh`` (written now). A directory with other content is refused."""
    if directory.exists() and not directory.is_dir():
        raise OutputError(f"{directory} exists and is not a directory: Parquet output needs a directory path")
    if (directory / MANIFEST_NAME).is_file():
        existing = Manifest.read(directory)
        existing.check_resumable(fresh, directory)
        return existing
    if directory.is_dir() and any(directory.iterdir()):
        raise OutputError(
            f"{directory} exists and holds other files (no {MANIFEST_NAME}): choose a new or empty OUTPUT"
        )
    directory.mkdir(parents=True, exist_ok=True)
    fresh.write(directory)
    return fresh
