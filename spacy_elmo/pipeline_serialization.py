"""How the ``elmo`` component is saved and read back: ``to_disk`` / ``from_disk`` and
``to_bytes`` / ``from_bytes``, for :class:`~spacy_elmo.pipeline_component.Elmo`.

spaCy's convention (``TrainablePipe``): a serializer per name, and ``exclude`` skips names. The
names are "cfg" (the settings, a file ``cfg``) and "bilm" (the biLM's files in a folder ``bilm``,
or their bytes: see :mod:`spacy_elmo.bilm.formats.serialize`); "model", spaCy's name for a pipe's
weights, excludes "bilm". No vocab is written: the component keeps nothing in it.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Set, Union

import spacy.util
import srsly
from spacy.util import SimpleFrozenList
from thinc.api import Model

from .bilm.formats.serialize import bilm_from_bytes, bilm_from_directory, bilm_to_bytes, bilm_to_directory
from .layers import get_runtime

if TYPE_CHECKING:
    from .bilm import BiLM


class ElmoSerialization:
    """The serializers of the ``elmo`` component; the component gives its biLM, weights read
    first if need be (``_loaded_bilm``), and installs one read back (``_set_bilm``)."""

    if TYPE_CHECKING:
        cfg: Dict[str, Any]
        model: Model

        def _loaded_bilm(self) -> "BiLM": ...

        def _set_bilm(self, bilm: "BiLM") -> None: ...

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = SimpleFrozenList()) -> None:
        """Write ``cfg`` and the biLM's files in ``bilm/``: the standard ``options.json`` and
        ``weights.hdf5``, or an ELMoForManyLangs model's own directory (the saved pipeline needs
        nothing outside it)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        serializers: Dict[str, Callable[[Path], None]] = {
            "cfg": lambda p: srsly.write_json(p, self.cfg),
            "bilm": lambda p: bilm_to_directory(self._loaded_bilm(), p),
        }
        spacy.util.to_disk(path, serializers, _excluded(exclude))

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = SimpleFrozenList()) -> "ElmoSerialization":
        """What ``to_disk`` wrote, less ``exclude``."""
        deserializers: Dict[str, Callable[[Path], None]] = {
            "cfg": lambda p: self.cfg.update(srsly.read_json(p)),
            "bilm": lambda p: self._set_bilm(bilm_from_directory(p, self.model.attrs["bilm_settings"].to_dict())),
        }
        spacy.util.from_disk(path, deserializers, _excluded(exclude))
        return self

    def to_bytes(self, *, exclude: Iterable[str] = SimpleFrozenList()) -> bytes:
        """``cfg`` and the bytes of the biLM's files (see :func:`~spacy_elmo.bilm.formats.serialize.bilm_to_bytes`)."""
        serializers: Dict[str, Callable[[], object]] = {
            "cfg": lambda: self.cfg,
            "bilm": lambda: bilm_to_bytes(self._loaded_bilm(), get_runtime(self.model).settings),
        }
        # spaCy msgpacks what each getter gives (its own pipes give str or dict); its annotation says bytes.
        return spacy.util.to_bytes(serializers, _excluded(exclude))  # type: ignore[arg-type]

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = SimpleFrozenList()) -> "ElmoSerialization":
        """What ``to_bytes`` wrote, less ``exclude``; a part the bytes lack is left as it is."""

        def load_bilm(data: bytes) -> None:
            bilm = bilm_from_bytes(data, settings=self.model.attrs["bilm_settings"])
            if bilm is None:  # to_bytes writes a biLM always; empty bytes are a thinc shim's "no model"
                raise ValueError("elmo: the serialized component holds no biLM (its 'bilm' bytes are empty)")
            self._set_bilm(bilm)

        deserializers: Dict[str, Callable[[Any], object]] = {"cfg": self.cfg.update, "bilm": load_bilm}
        spacy.util.from_bytes(bytes_data, deserializers, _excluded(exclude))
        return self


def _excluded(exclude: Iterable[str]) -> Set[str]:
    """The serializer names ``exclude`` skips: "model" stands for "bilm" too."""
    names = set(exclude)
    return names | {"bilm"} if "model" in names else names
