"""AllenNLP's ``allennlp elmo`` file, assembled from finished Parquet shards.

The layout (allennlp/commands/elmo.py, ``ElmoEmbedder.embed_file``): one float32 dataset per
sentence, named by its line number (``"0"``, ``"1"``, ...), of shape (3, n_tokens, 1024) with
``--all`` or (n_tokens, 1024) with ``--top`` / ``--average``; and a dataset ``sentence_to_index``
of shape (1,) holding one variable-length string, ``json.dumps({sentence: "line number"})``
(a sentence that occurs twice maps to its last line). Code written for those files reads ours
unchanged. Two additions that such code does not see: each dataset's attribute ``tokens`` (JSON
list, so a store can match sentences by tokens) and the file attribute ``spacy_elmo_manifest``.

Resuming: an HDF5 file cannot be written atomically piece by piece, so a run writes Parquet
shards into ``OUTPUT.parts/`` (resumable exactly as Parquet output), then assembles ``OUTPUT``
in one atomic step and removes the parts. A killed assembly leaves the parts; the rerun
assembles again.
"""

import json
from pathlib import Path
from typing import Optional

import h5py

from ..bilm import ElmoOptions
from ..fileio import OutputError, atomic_path
from .manifest import Manifest
from .parquet import arrays_of, iter_row_groups
from .settings import EmbedSettings, output_tail_shape

MANIFEST_ATTR = "spacy_elmo_manifest"
SENTENCE_TO_INDEX = "sentence_to_index"


def parts_directory(output: Path) -> Path:
    """Where the Parquet shards of an HDF5 output are kept until assembly."""
    return output.with_name(output.name + ".parts")


def finished_manifest(output: Path) -> Optional[Manifest]:
    """The manifest of a finished HDF5 output at ``output``, None if there is no file.

    A file that spacy-elmo embed did not write is refused: it is never overwritten.
    """
    if not output.exists():
        return None
    try:
        with h5py.File(output, "r") as f:
            data = f.attrs[MANIFEST_ATTR]
    except (OSError, KeyError) as err:
        raise OutputError(
            f"{output} exists and is not an output of spacy-elmo embed: choose another OUTPUT or remove it"
        ) from err
    return Manifest.from_dict(json.loads(data), str(output))


def assemble(parts: Path, manifest: Manifest, output: Path) -> None:
    """Write ``output`` from the finished shards in ``parts``, reading one row group at a time."""
    settings = EmbedSettings.from_dict(manifest.settings)
    tail_shape = output_tail_shape(ElmoOptions.from_dict(manifest.model["options"]), settings)
    sentence_to_index = {}
    with atomic_path(output) as tmp:
        with h5py.File(tmp, "w") as f:
            for shard in sorted(manifest.shards):
                for table in iter_row_groups(
                    parts / manifest.shards[shard]["file"], ["index", "text", "tokens", "layers"]
                ):
                    tokens = table["tokens"].to_pylist()
                    arrays = arrays_of(table["layers"], [len(t) for t in tokens], tail_shape)
                    for index, text, words, array in zip(
                        table["index"].to_pylist(), table["text"].to_pylist(), tokens, arrays
                    ):
                        dataset = f.create_dataset(str(index), array.shape, dtype="float32", data=array)
                        dataset.attrs["tokens"] = json.dumps(words)
                        sentence_to_index[text] = str(index)
            mapping = f.create_dataset(SENTENCE_TO_INDEX, (1,), dtype=h5py.special_dtype(vlen=str))
            mapping[0] = json.dumps(sentence_to_index)
            f.attrs[MANIFEST_ATTR] = json.dumps(manifest.to_dict(), sort_keys=True)
