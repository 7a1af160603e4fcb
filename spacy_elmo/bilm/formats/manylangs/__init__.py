"""ELMoForManyLangs models (HIT-SCIR, Che et al. 2018, "Towards Better UD Parsing"): read by directory.

A model directory holds ``config.json`` (training settings; its ``config_path`` names the network
config), ``char.dic`` and ``word.dic`` (``TOKEN<TAB>ID`` per line), and PyTorch state dicts
``token_embedder.pkl`` and ``encoder.pkl``. The reference implementation is the PyPI package
``elmoformanylangs`` (0.0.4.post2); what this package computes is its inference path
(``Embedder.sents2elmo``), read off its source, quirks included. One module per part:
:mod:`.network` (the sizes), :mod:`.vocabulary` (the dictionaries, and tokens' char and word ids),
:mod:`.modules` (the token encoder, a :class:`spacy_elmo.bilm.model.token_encoder.TokenEncoder`; the
LSTM stack is the biLM's own), :mod:`.weights` (the state dicts, tensors only, converted both ways),
:mod:`.layout` and :mod:`.directory` (the directory's files, read into a biLM and written from one).

Output: layer 0 is the token vector doubled, layers 1.. [forward; backward], as bilm-tf's. The
reference's encoder carries its state from one batch to the next; the biLM starts every batch
from zero unless told otherwise (``state``), so the two agree on a fresh reference's first batch.
The standard ``options.json`` + ``weights.hdf5`` cannot hold the vocabulary and the word embedding:
such a biLM is written in its own layout (:func:`write_manylangs`), which :func:`load_manylangs` reads.

Not supported (no published model uses them): the reference's LSTM token encoder, its plain-LSTM
encoder, and word-only models (``char_dim`` 0).
"""

from .directory import is_manylangs, load_manylangs, write_manylangs
from .layout import model_files
from .modules import ManyLangsTokenEncoder

__all__ = ["ManyLangsTokenEncoder", "is_manylangs", "load_manylangs", "model_files", "write_manylangs"]
