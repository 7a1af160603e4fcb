"""The ELMo biLM: char-CNN token encoder + bidirectional LSTM stack (Peters et al., 2018).

Pure PyTorch: the network, its files (``options.json`` + ``weights.hdf5``, read and written by
:mod:`spacy_elmo.bilm.formats.files`) and one pass from token vectors and a start state to the
layers, :meth:`BiLM.layers_of`. How a call on sentences runs (precision, the token cache, where
states start, batching) is a :class:`~spacy_elmo.bilm.runtime.BiLMRuntime`'s, made by what runs the
biLM; a bare biLM's own calls run on its own, ``bilm.runtime``: so the class sits beside the runtime.
"""

from typing import Any, Dict, List, Optional, Sequence

import numpy
import torch
from torch import Tensor, nn

from ..fileio import PathLike
from .errors import module_property
from .formats.files import load_files, write_files
from .model.char_cnn import CharCNN
from .model.lstm import BiLMOutput, BiLSTMStack, LSTMState
from .model.options import ElmoOptions
from .model.token_encoder import LEGACY_STATE_PREFIX, STATE_PREFIX, TokenEncoder
from .precision.resolved import Precision
from .runtime import BiLMRuntime, BiLMSettings

__all__ = ["BiLM", "BiLMOutput", "BiLMSettings"]


class BiLM(nn.Module):
    """A bidirectional language model whose layers are ELMo's representations.

    The keyword arguments (:class:`~spacy_elmo.bilm.runtime.BiLMSettings`) say how its own calls on
    sentences run (:attr:`runtime`): ``state``, where every batch's LSTM states start (``"zero"``;
    ``"warm"``, from a state stored with the model, :meth:`warm_up`; ``"carry"``, from where the same
    row of the previous batch ended, as bilm-tf does), and ``precision``, that of the matrix
    products; parameters, states and outputs stay float32.
    """

    warm_hidden: Optional[Tensor]
    warm_memory: Optional[Tensor]

    def __init__(self, options: ElmoOptions, token_encoder: Optional[TokenEncoder] = None, **settings: Any) -> None:
        super().__init__()
        loaded_with = BiLMSettings(**settings)
        loaded_with.check()  # before any module is built: a bad setting costs nothing
        self.options = options
        # Layer 0: bilm-tf's char CNN of ``options``, unless the model brings a token encoder of its
        # own (ELMoForManyLangs: a char vocabulary and a word embedding, see .manylangs).
        self.token_encoder: TokenEncoder = CharCNN(options) if token_encoder is None else token_encoder
        self.lstm = BiLSTMStack(options)
        self.dropout = loaded_with.dropout
        self.register_buffer("warm_hidden", None)  # the warm start: (n_layers, 2, width) each
        self.register_buffer("warm_memory", None)
        self._loaded_with = loaded_with
        self.register_load_state_dict_pre_hook(_renamed_token_encoder)

    @module_property
    def device(self) -> torch.device:
        return self.token_encoder.projection.weight.device

    @module_property
    def output_dim(self) -> int:
        return self.options.output_dim

    @module_property
    def n_output_layers(self) -> int:
        return self.options.n_layers + 1

    @module_property
    def dropout(self) -> float:
        """Dropout between the LSTM layers (active in training mode only)."""
        return float(self.lstm.dropout.p)

    @dropout.setter
    def dropout(self, p: float) -> None:
        self.lstm.dropout.p = p

    @classmethod
    def from_files(cls, options_file: PathLike, weight_file: PathLike, **settings: Any) -> "BiLM":
        """Load a standard ELMo dump (bilm-tf / AllenNLP layout) of any size, its weights read
        straight into the parameters (:func:`.files.load_files`). ``settings``: see :class:`BiLMSettings`."""
        return load_files(cls, options_file, weight_file, **settings)

    @classmethod
    def from_pretrained(cls, name_or_url_or_dir: str, **settings: Any) -> "BiLM":
        """Load a published biLM by registry name (``spacy-elmo models`` lists them), an http(s) URL
        of a directory or archive holding a model, or a local directory (bilm-tf's files, or
        ELMoForManyLangs' layout: :mod:`.manylangs`). A name or URL is downloaded into the cache
        once (:mod:`spacy_elmo.published.cache`). ``settings``: see :class:`BiLMSettings`."""
        from ..published.resolve import load_pretrained, manylangs_directory
        from .formats.manylangs import load_manylangs

        BiLMSettings(**settings).check()  # refuse bad settings now, not as a bad download after fetching it
        if (directory := manylangs_directory(name_or_url_or_dir)) is not None:
            return load_manylangs(cls, directory, **settings)
        return load_pretrained(
            name_or_url_or_dir,
            lambda options_file, weight_file, check_values: load_files(
                cls, options_file, weight_file, check_values, **settings
            ),
            # a name or URL of an archive holding an ELMoForManyLangs model, extracted in the cache
            load_directory=lambda model_dir, check_values: load_manylangs(
                cls, model_dir, check_values=check_values, **settings
            ),
        )

    # ------------------------------------------------------------------ files
    def to_files(self, options_file: PathLike, weight_file: PathLike) -> None:
        """Write ``options.json`` and ``weights.hdf5`` in the standard layout, each atomically. That
        layout holds bilm-tf's char CNN only: an ELMoForManyLangs biLM is refused (:func:`.files.layout`)."""
        write_files(self, options_file, weight_file)

    # ----------------------------------------------------------------- the network
    def layers_of(
        self,
        table: Tensor,
        index: Tensor,
        lengths: Tensor,
        state: LSTMState,
        dtype: torch.dtype,
        mix: Optional[Sequence[float]] = None,
    ) -> BiLMOutput:
        """The layers of a batch whose tokens' vectors are rows of ``table`` (n_distinct,
        projection_dim): position t of row b takes row ``index[b, t]`` (index (batch, time),
        positions past a row's length any row: they are zeroed). ``lengths`` (batch,) int64 on the
        host, boundaries included; ``state`` where the LSTM starts; ``dtype`` that of the
        products. With ``mix``, one weight per output layer, their weighted sum alone, each layer
        added as soon as it is computed, so that all of them are never held at once.
        """
        tokens = table[index.T.to(self.device)]  # (time, batch, projection_dim)
        # (n_layers + 1, batch, time, width), contiguous (callers view a batch's positions as rows):
        # the LSTM writes its layers into it, or adds them to the token layer with their ``mix`` weights.
        n_steps, batch, width = tokens.shape
        layers = tokens.new_empty((self.n_output_layers if mix is None else 1, batch, n_steps, 2 * width))
        by_row = tokens.transpose(0, 1)
        layers[0, :, :, :width] = by_row
        layers[0, :, :, width:] = by_row
        if mix is None:
            _, final_state = self.lstm(tokens, lengths, state, dtype, out=layers[1:])
        else:
            layers[0].mul_(mix[0])
            _, final_state = self.lstm(tokens, lengths, state, dtype, out=layers[0], mix=mix[1:])
        on_device = lengths.to(self.device)
        mask = torch.arange(n_steps, device=self.device) < on_device.unsqueeze(1)  # (batch, time)
        layers.mul_(mask.unsqueeze(-1).to(layers.dtype))  # padding zeroed in place
        return BiLMOutput(layers, on_device, final_state)

    def zero_state(self, batch: int) -> LSTMState:
        """Zeros for ``batch`` rows: one row broadcast (views: copy them to write into them)."""
        return LSTMState(*(s.expand(-1, -1, batch, -1) for s in self.lstm.zero_state(1, self.lstm.layer(0).bias)))

    def warm_state(self, batch: int) -> LSTMState:
        """The warm start (:meth:`warm_up`) for ``batch`` rows, one row broadcast."""
        if self.warm_hidden is None or self.warm_memory is None:
            raise ValueError(
                "state='warm' needs a warm start: call bilm.warm_up(sentences) or load files written after it"
            )
        return LSTMState(*(s.unsqueeze(2).expand(-1, -1, batch, -1) for s in (self.warm_hidden, self.warm_memory)))

    def weights_written(self) -> None:
        """Report that the parameters were written outside torch (thinc's optimizer writes them
        in place through array views), so that the runtime's fingerprint changes as for any torch write."""
        torch.autograd.graph.increment_version(list(self.parameters()))

    # ----------------------------------------------------------------- calls on sentences (its own runtime's)
    @module_property
    def runtime(self) -> BiLMRuntime:
        """Its own calls' runtime, made at the first (in ``__dict__``: the runtime holds the biLM)."""
        own = self.__dict__.get("_own_runtime")
        if own is None:
            own = self.__dict__["_own_runtime"] = BiLMRuntime(self, self._loaded_with)
        return own

    @module_property
    def settings(self) -> BiLMSettings:
        """The constructor arguments that the files do not hold, as its own runtime has them now."""
        return self.runtime.settings

    def forward(
        self,
        sentences: Sequence[Sequence[str]],
        state: Optional[LSTMState] = None,
        precision: Optional[Precision] = None,
        mix: Optional[Sequence[float]] = None,
    ) -> BiLMOutput:
        """The biLM over a batch of tokenized sentences, on its own runtime (:meth:`.BiLMRuntime.forward`)."""
        return self.runtime(sentences, state, precision, mix)

    def embed_sentences(self, sentences: Sequence[Sequence[str]]) -> List[numpy.ndarray]:
        """ELMo layers for each sentence, (n_layers + 1, n_tokens, 2 * projection_dim) float32
        arrays without boundary positions (:meth:`.BiLMRuntime.embed_sentences`)."""
        return self.runtime.embed_sentences(sentences)

    def warm_up(self, sentences: Sequence[Sequence[str]]) -> None:
        """Store the warm start, the state after ``sentences`` (:meth:`.BiLMRuntime.warm_up`; in :meth:`to_files`)."""
        self.runtime.warm_up(sentences)


def _renamed_token_encoder(module: nn.Module, state_dict: Dict[str, Any], prefix: str, *args: Any) -> None:
    """A ``load_state_dict`` pre-hook: ``char_cnn.*`` keys of a state dict saved before the rename
    load as ``token_encoder.*``."""
    legacy = prefix + LEGACY_STATE_PREFIX
    for key in [key for key in state_dict if key.startswith(legacy)]:
        state_dict[prefix + STATE_PREFIX + key[len(legacy) :]] = state_dict.pop(key)
