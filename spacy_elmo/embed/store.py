"""A finished ``spacy-elmo embed`` output read back as a feature store for the ``elmo`` component.

The store maps a sentence's tokens to its layers, (n_layers + 1, n_tokens, width). The component
looks up each biLM input (a doc, a sentence of it, or a window; see
:mod:`spacy_elmo.layers.segmentation`) and computes only what is missing, so ``spacy train``
runs over the same corpus pay for the biLM once. A stored value stands for what the biLM would
compute only if it is the same biLM (weights, checked by the fingerprint in the manifest) in the
same state mode, with products at least as precise as the biLM's setting asks
(:meth:`~spacy_elmo.bilm.precision.resolved.ResolvedPrecision.serves`); all are checked before the first lookup, and
a mismatch is an error.

The store is opened on first use: only the tokens are read then (an index held in memory); the
layers are read on demand, one Parquet row group (or HDF5 dataset) at a time, the most recently
used row groups kept.
"""

import json
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Dict, Hashable, List, Optional, Sequence, Tuple

import numpy

from ..bilm import ElmoOptions
from ..bilm.precision.resolved import ResolvedPrecision
from ..bilm.runtime import BiLMRuntime
from ..fileio import PathLike
from .hdf5 import SENTENCE_TO_INDEX, finished_manifest
from .manifest import MANIFEST_NAME, Manifest
from .settings import EmbedSettings, model_identity, output_tail_shape

Location = Tuple[str, int, int]  # (shard file, row group, row) or (dataset name, -1, -1) in HDF5
CACHED_ROW_GROUPS = 64


class FeatureStore:
    """Stored layers by sentence tokens; see the module docstring."""

    def __init__(self, path: PathLike) -> None:
        self.path = Path(path)
        self._index: Optional[Dict[Tuple[str, ...], Location]] = None
        self._manifest: Optional[Manifest] = None
        self._checked: Optional[Tuple] = None  # (its runtime's fingerprint, precision setting) last checked
        self._row_groups: "OrderedDict[Tuple[str, int], List[numpy.ndarray]]" = OrderedDict()
        self._warned_missing = False

    def __len__(self) -> int:
        return len(self._open())

    def __reduce__(self) -> Tuple[type, Tuple[Path]]:
        """Thinc copies models (e.g. ``nlp.replace_listeners``), and a pipeline sent to worker processes
        is pickled: the copy reopens the same path on first use, without the index read here."""
        return FeatureStore, (self.path,)

    def get_many(self, keys: Sequence[Hashable], runtime: BiLMRuntime) -> List[Optional[numpy.ndarray]]:
        """The stored layers of each key (a tuple of token strings), or None where not stored.

        A store that is gone (a pipeline trained with one, loaded on another machine) serves
        nothing: the biLM computes every layer, after one warning. Training checks the path
        earlier, in :meth:`check`, where a missing store is an error.
        """
        if self._index is None and not self.path.exists():
            if not self._warned_missing:
                warnings.warn(
                    f"elmo features: the store {self.path} does not exist here; the biLM computes every layer",
                    stacklevel=2,
                )
                self._warned_missing = True
            return [None] * len(keys)
        index = self._open()
        self._check(runtime)
        return [self._read(index[key]) if key in index else None for key in keys]

    # ------------------------------------------------------------------ opening and checks
    def check(self) -> None:
        """Open the store now: an error if ``path`` is not a finished output of ``embed``."""
        self._open()

    def _open(self) -> Dict[Tuple[str, ...], Location]:
        if self._index is not None:
            return self._index
        if self.path.is_dir() and (self.path / MANIFEST_NAME).is_file():
            self._manifest = Manifest.read(self.path)
            self._index = self._parquet_index()
        elif self.path.is_file():
            self._manifest = finished_manifest(self.path)
            self._index = self._hdf5_index()
        else:
            raise FileNotFoundError(
                f"elmo features: {self.path} is not an output of spacy-elmo embed (a Parquet directory with "
                f"{MANIFEST_NAME} or an .hdf5 file). Make it with `spacy-elmo embed`, or set "
                "[components.elmo] features = null."
            )
        settings = self._settings
        if settings.layers != "all" or settings.state == "carry":
            raise ValueError(
                f"elmo features: {self.path} holds --layers {settings.layers} in the {settings.state} state; the "
                "component needs every layer in the zero or warm state: rerun spacy-elmo embed with "
                "--layers all and --state zero (or warm)"
            )
        return self._index

    @property
    def _settings(self) -> EmbedSettings:
        assert self._manifest is not None
        return EmbedSettings.from_dict(self._manifest.settings)

    def _check(self, runtime: BiLMRuntime) -> None:
        """Refuse a biLM other than the store's, a more precise setting than the store's products,
        or another state mode (checked once per weights and precision)."""
        checked = (runtime.fingerprint(), runtime.precision)  # the setting: auto and fp32 may resolve alike
        if self._checked == checked:
            return
        assert self._manifest is not None
        identity = model_identity(runtime)
        stored, current = self._manifest.model["fingerprint"], identity["fingerprint"]
        if stored != current:
            raise ValueError(
                f"elmo features: {self.path} was computed by another biLM (fingerprint {stored[:12]}, this "
                f"pipeline's is {current[:12]}). Recompute it with `spacy-elmo embed` and this pipeline's "
                "biLM (--options-file/--weight-file), or set [components.elmo] features = null."
            )
        held = ResolvedPrecision.from_recorded(self._manifest.model["products"])
        asked = ResolvedPrecision.from_recorded(identity["products"])
        if not held.serves(runtime.precision):
            raise ValueError(
                f"elmo features: {self.path} holds layers computed with {held.recorded} matrix products, and "
                f"this pipeline's biLM asks for {asked.recorded} ([components.elmo.model] precision = "
                f'"{runtime.precision}"). Either accept the store\'s: set [components.elmo.model] '
                'precision = "auto" '
                f'(bf16 or int8 where the hardware is fast at it) or "{held.precision}"; or recompute '
                f"the store: spacy-elmo embed ... --precision {asked.precision}"
            )
        if runtime.state_mode != self._settings.state:
            raise ValueError(
                f"elmo features: {self.path} was computed in the {self._settings.state!r} state but the biLM runs "
                f"in {runtime.state_mode!r}: set the component's state to match, or recompute with --state "
                f"{runtime.state_mode}"
            )
        self._checked = checked

    # ------------------------------------------------------------------ Parquet
    def _parquet_index(self) -> Dict[Tuple[str, ...], Location]:
        import pyarrow.parquet as pq

        assert self._manifest is not None
        index: Dict[Tuple[str, ...], Location] = {}
        for shard in sorted(self._manifest.shards):
            name = self._manifest.shards[shard]["file"]
            shard_file = pq.ParquetFile(self.path / name)
            for group in range(shard_file.num_row_groups):
                tokens = shard_file.read_row_group(group, columns=["tokens"])["tokens"].to_pylist()
                for row, words in enumerate(tokens):
                    index.setdefault(tuple(words), (name, group, row))
        return index

    def _read(self, location: Location) -> numpy.ndarray:
        name, group, row = location
        if group < 0:
            return self._read_hdf5(name)
        key = (name, group)
        if key not in self._row_groups:
            self._row_groups[key] = self._decode_row_group(name, group)
            if len(self._row_groups) > CACHED_ROW_GROUPS:
                self._row_groups.popitem(last=False)
        self._row_groups.move_to_end(key)
        return self._row_groups[key][row]

    def _decode_row_group(self, name: str, group: int) -> List[numpy.ndarray]:
        import pyarrow.parquet as pq

        from .parquet import arrays_of

        table = pq.ParquetFile(self.path / name).read_row_group(group, columns=["tokens", "layers"])
        lengths = [len(words) for words in table["tokens"].to_pylist()]
        assert self._manifest is not None
        tail_shape = output_tail_shape(ElmoOptions.from_dict(self._manifest.model["options"]), self._settings)
        return arrays_of(table["layers"], lengths, tail_shape)

    # ------------------------------------------------------------------ HDF5
    def _hdf5_index(self) -> Dict[Tuple[str, ...], Location]:
        import h5py

        index: Dict[Tuple[str, ...], Location] = {}
        with h5py.File(self.path, "r") as f:
            for name in sorted((n for n in f.keys() if n != SENTENCE_TO_INDEX), key=int):
                index.setdefault(tuple(json.loads(f[name].attrs["tokens"])), (name, -1, -1))
        return index

    def _read_hdf5(self, name: str) -> numpy.ndarray:
        import h5py

        with h5py.File(self.path, "r") as f:
            return f[name][()]
