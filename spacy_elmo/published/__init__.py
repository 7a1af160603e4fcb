"""Published biLMs: the ones bundled in the package, and the registry, cache, downloads, archives
and on-disk layouts of those published elsewhere.

The bundled biLMs ship inside this package, as standard ELMo files. ``en`` is the English biLM
that ``project/`` pretrains (the ``base`` preset of ``spacy-elmo pretrain``, its token encoder
started from and kept near word2vec vectors; sizes, data and held-out perplexities in
``en/README.md``). It is the default of the ``elmo`` component, so ``nlp.add_pipe("elmo")`` gives
contextual vectors with no configuration.

The biLMs published by others (AllenNLP's, ELMoForManyLangs' and more) are named in
:mod:`.registry` (their languages: :mod:`.languages`) and downloaded (:mod:`.download`, archives
extracted by :mod:`.archive` and read by :mod:`.layout`) into the cache of :mod:`.cache`, as two
files or an archive (:mod:`.sources`), each recorded (:mod:`.records`); :mod:`.resolve` turns a
NAME, URL or DIRECTORY into local files. (Not to be confused with
:mod:`spacy_elmo.pretraining`, which trains a biLM.)
"""

from pathlib import Path
from typing import Tuple

from ..fileio import standard_files

PRETRAINED_DIR = Path(__file__).parent
PRETRAINED = ("en",)


def pretrained_files(name: str = "en") -> Tuple[Path, Path]:
    """``(options.json, weights.hdf5)`` of the bundled biLM ``name``, for ``BiLM.from_files``."""
    if name not in PRETRAINED:
        raise ValueError(f"no bundled biLM named {name!r}; the package ships: {', '.join(PRETRAINED)}")
    options_file, weight_file = standard_files(PRETRAINED_DIR / name)
    missing = [str(p) for p in (options_file, weight_file) if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"the bundled biLM {name!r} is incomplete, missing {', '.join(missing)}: reinstall spacy-elmo"
        )
    return options_file, weight_file
