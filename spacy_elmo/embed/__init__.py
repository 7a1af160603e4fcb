"""``spacy-elmo embed``: ELMo layers of a whole corpus, computed once and stored.

Pure of spaCy components: it reads text (:mod:`.reader`), runs the biLM shard by shard
(:mod:`.engine`, locally or on Ray), writes Parquet shards with a manifest (:mod:`.parquet`,
:mod:`.manifest`) or AllenNLP's HDF5 file (:mod:`.hdf5`), and reads a finished output back as a
feature store for the ``elmo`` component (:mod:`.store`).
"""

from ..fileio import OutputError
from .run import run_embed
from .settings import EmbedSettings, parse_layers

__all__ = ["EmbedSettings", "OutputError", "parse_layers", "run_embed"]
