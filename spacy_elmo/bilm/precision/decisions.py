"""The file that keeps ``precision = "auto"``'s decisions (:mod:`.autotune`): ``precision.json``
in the model cache, one entry per decision, keyed by a hash of what it depends on.

An entry: ``{"choice": "int8", "trials": {precision: {"tokens_per_s", "cosine", ...}}, "fields": {...},
"measured": date}``. ``fields`` are :func:`.autotune.decision_fields` (what the speeds depend on)
and ``weights``, the digest of the weights whose accuracy the cosines are (:mod:`.identity`). An
entry recorded before decisions named their weights has no ``weights`` field: its key is never
this format's, so it is never read as a model's decision, but it lends its speeds to models of
its fields (:func:`recorded_rates`). An unreadable file counts as empty and is rewritten.
"""

import contextlib
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, Optional, Sequence, Tuple

from filelock import FileLock

from ...fileio import atomic_path
from ...published.cache import cache_root
from ...published.settings import CACHE_ENV
from ..formats.identity import Weighted, weights_digest
from ..settings import PRECISION_ENV
from .resolved import check_precision

logger = logging.getLogger("spacy_elmo")


@dataclass(frozen=True)
class Trial:
    """One precision's measurement: median speed on the timed batch, its worst layer's mean
    per-token cosine to fp32, and its median speeds on a service's calls, a lone sentence and
    :data:`.timed_passes.FEW_ROWS` sentences (0.0: not timed)."""

    tokens_per_s: float
    cosine: float
    lone_tokens_per_s: float = 0.0
    few_tokens_per_s: float = 0.0

    def speeds(self) -> Tuple[float, float, float]:
        """Tokens/s on the batch, a lone sentence and a few sentences."""
        return self.tokens_per_s, self.lone_tokens_per_s, self.few_tokens_per_s


@dataclass(frozen=True)
class Decision:
    """What ``auto`` chose, and the measurements it chose from (empty when not measured)."""

    choice: str
    trials: Dict[str, Trial]
    # "measured"; "checked": speeds recorded for these shapes, accuracy measured for these weights;
    # "cache"; "env"; "tiny"
    source: str


@dataclass
class Decisions:
    """What one biLM's runtime has decided in this process, by (thread count, training), and its
    weights' digest, read at the first decision and kept: a decision made for a model stays that
    model's (a fine-tuning step would otherwise pay a full read of the weights). Decisions run on
    the compute thread (:func:`cpu_auto_precision`), one at a time."""

    made: Dict[Tuple[int, bool], Decision] = field(default_factory=dict)
    digest: Optional[str] = None

    def weights(self, model: Weighted) -> str:
        if self.digest is None:
            self.digest = weights_digest(model)
        return self.digest


DECISIONS_NAME = "precision.json"
TRIAL_FIELDS = {"tokens_per_s", "cosine"}
SERVICE_FIELDS = ("lone_tokens_per_s", "few_tokens_per_s")  # a trial's, where a service's calls were timed


def decisions_path() -> Path:
    """``precision.json`` in the model cache (``SPACY_ELMO_CACHE``, else the user's cache directory)."""
    return cache_root() / DECISIONS_NAME


def read_decisions(path: Path) -> Dict[str, Dict]:
    """The recorded decisions, by key; ``{}`` for a missing or unreadable file (rewritten at the next decision)."""
    try:
        data = json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {key: entry for key, entry in data.items() if _well_formed(entry)}


def _well_formed(entry: object) -> bool:
    try:
        check_precision(entry["choice"])  # type: ignore[index]
        trials = entry["trials"].values()  # type: ignore[index]
        fields = entry["fields"]  # type: ignore[index]
        return isinstance(fields, dict) and all(
            TRIAL_FIELDS <= set(t) <= TRIAL_FIELDS | set(SERVICE_FIELDS) for t in trials
        )
    except (TypeError, KeyError, ValueError, AttributeError):
        return False


@contextlib.contextmanager
def locked(path: Path) -> Iterator[bool]:
    """Hold the decisions file's lock; yields False where the cache directory cannot be used."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        lock.acquire()
    except OSError as err:
        logger.warning(
            "spacy-elmo: cannot keep precision decisions in %s (%s); set %s to a writable "
            "directory, or %s to skip measuring",
            path.parent,
            err,
            CACHE_ENV,
            PRECISION_ENV,
        )
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def record_decision(path: Path, key: str, entry: Dict[str, object]) -> None:
    """Add ``entry`` to the decisions file, replacing an unreadable file."""
    decisions = read_decisions(path)
    decisions[key] = entry
    try:
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(decisions, indent=1, sort_keys=True) + "\n", encoding="utf8")
    except OSError as err:
        logger.warning("spacy-elmo: cannot write %s (%s): precision 'auto' will be measured again", path, err)


def decision_key(fields: Dict[str, object]) -> str:
    """The cache file's key of a decision's fields."""
    return hashlib.sha256(_canonical(fields).encode()).hexdigest()[:16]


def _canonical(fields: Dict[str, object]) -> str:
    """``fields`` as the JSON text that keys and compares them (a tuple and its JSON list alike)."""
    return json.dumps(fields, sort_keys=True)


def recorded_rates(
    entries: Iterable[Dict], fields: Dict[str, object], precisions: Sequence[str]
) -> Optional[Dict[str, Tuple[float, ...]]]:
    """Tokens/s of each of ``precisions``, on the batch and a service's calls (:data:`SERVICE_FIELDS`,
    0.0: not timed), from a record of the same speed ``fields`` (another model's weights, or a
    record from before decisions named them), or None."""
    wanted = _canonical(fields)
    for entry in entries:
        speed_fields = {name: value for name, value in entry["fields"].items() if name != "weights"}
        if _canonical(speed_fields) == wanted and set(precisions) <= set(entry["trials"]):
            trials = entry["trials"]
            return {
                p: (float(trials[p]["tokens_per_s"]), *(float(trials[p].get(f, 0.0)) for f in SERVICE_FIELDS))
                for p in precisions
            }
    return None
