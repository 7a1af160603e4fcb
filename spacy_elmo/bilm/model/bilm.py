"""The ELMo biLM: char-CNN token encoder + bidirectional LSTM stack (Peters et al., 2018).

Pure PyTorch. Reads and writes the standard ``options.json`` + ``weights.hdf5`` files through
:mod:`spacy_elmo.bilm.formats.files`.
"""

import itertools
from dataclasses import asdict, dataclass
from typing import Any, Dict, Hashable, Iterator, List, Optional, Sequence, Tuple

import numpy
import torch
from torch import Tensor, nn

from ...fileio import PathLike
from ..errors import module_property
from ..formats.files import load_files, write_files
from ..kernels.int8_packs import check_no_gradient
from ..memory.offload import evict, return_freed_memory
from ..memory.token_cache import TokenCache
from ..memory.weight_copies import tensor_versions
from ..precision.resolved import Precision, ResolvedPrecision, check_precision, own_precision
from ..precision.setting import make_inference_copies, resolve_for
from .char_cnn import CharCNN
from .lstm import BiLSTMStack, LSTMState
from .options import ElmoOptions
from .states import STATE_MODES, LSTMStates, StateMode
from .token_encoder import LEGACY_STATE_PREFIX, SENTENCE_END, SENTENCE_START, STATE_PREFIX, TokenEncoder


@dataclass(frozen=True)
class BiLMSettings:
    """How a biLM runs, beyond what its files hold: the keyword arguments of :class:`BiLM`.

    ``max_batch_tokens`` bounds the padded tokens (boundaries included) of one forward pass in
    :meth:`BiLM.batches`; ``cache_size`` is the number of token encodings kept (0: none);
    ``precision`` is that of the matrix products (see :mod:`spacy_elmo.bilm.precision.resolved`):
    float32 by default, so that a biLM reproduces its reference outputs unless asked otherwise.
    """

    state: StateMode = "zero"
    cache_size: int = 20_000
    max_batch_tokens: int = 4096
    dropout: float = 0.0
    precision: Precision = "fp32"

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class BiLMOutput:
    """What one forward pass gives.

    ``layers``: (n_layers + 1, batch, time, 2 * projection_dim), boundary positions included:
    position 0 is the sentence start, position ``lengths[b] - 1`` the sentence end. Layer 0 is
    the token encoding duplicated, layers 1.. are [forward; backward] LSTM outputs; of a pass
    with ``mix``, their weighted sum alone, (1, batch, time, 2 * projection_dim). Positions
    past a row's length are zero. ``lengths``: (batch,) int64, number of tokens + 2.
    ``state``: the LSTM states after each row's last token.
    """

    layers: Tensor
    lengths: Tensor
    state: LSTMState


class BiLM(LSTMStates):
    """A bidirectional language model whose layers are ELMo's representations.

    ``state`` chooses where every batch's LSTM states start:

    - ``"zero"`` (default): from zeros, so a sentence's vectors do not depend on its batch,
      its row or what ran before.
    - ``"warm"``: from a fixed state stored with the model (see :meth:`warm_up`); just as
      deterministic, without the cold start the model never saw in training.
    - ``"carry"``: row r starts from where row r of the previous batch ended, exactly as
      bilm-tf and AllenNLP do. Outputs depend on call history; use it for parity checks.

    ``precision`` sets the dtype of the matrix products: ``"fp32"``, ``"bf16"``, ``"int8"``
    (inference on a CPU), or ``"auto"`` (on a GPU bf16 where it multiplies it natively; on a CPU
    the fastest that keeps the accuracy contract, measured once per machine: see
    :mod:`spacy_elmo.bilm.precision.autotune`). Parameters, states and outputs stay float32 in every mode;
    see :mod:`spacy_elmo.bilm.precision.resolved`.
    """

    _precision: Precision

    def __init__(
        self,
        options: ElmoOptions,
        state: StateMode = BiLMSettings.state,
        cache_size: int = BiLMSettings.cache_size,
        max_batch_tokens: int = BiLMSettings.max_batch_tokens,
        dropout: float = BiLMSettings.dropout,
        precision: Precision = BiLMSettings.precision,
        token_encoder: Optional[TokenEncoder] = None,
    ) -> None:
        super().__init__()
        if state not in STATE_MODES:
            raise ValueError(f"state must be one of {STATE_MODES}, got {state!r}")
        if max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be at least 1, got {max_batch_tokens}")
        self.options = options
        self.state_mode: StateMode = state
        self.precision = precision
        self.max_batch_tokens = max_batch_tokens
        # Layer 0: bilm-tf's char CNN of ``options``, unless the model brings a token encoder of its
        # own (ELMoForManyLangs: a char vocabulary and a word embedding, see .manylangs).
        self.token_encoder: TokenEncoder = CharCNN(options) if token_encoder is None else token_encoder
        self.lstm = BiLSTMStack(options)
        self.dropout = dropout
        self.token_cache = TokenCache(cache_size)
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

    @module_property
    def settings(self) -> BiLMSettings:
        """The constructor arguments that the files do not hold."""
        return BiLMSettings(
            self.state_mode, self.token_cache.max_entries, self.max_batch_tokens, self.dropout, self.precision
        )

    @classmethod
    def from_files(cls, options_file: PathLike, weight_file: PathLike, **settings: Any) -> "BiLM":
        """Load a standard ELMo dump (bilm-tf / AllenNLP layout) of any size, at file speed: no
        random initial values drawn first, the weights read straight into the parameters
        (:func:`.files.load_files`; a saved pipeline's biLM loads so).

        ``settings``: keyword arguments of the constructor (see :class:`BiLMSettings`).
        """
        return load_files(cls, options_file, weight_file, **settings)

    @classmethod
    def from_pretrained(cls, name_or_url_or_dir: str, **settings: Any) -> "BiLM":
        """Load a published biLM by registry name (``"original-5.5b"``; ``spacy-elmo models`` lists
        them), an http(s) URL of a directory holding ``options.json`` and ``weights.hdf5`` or of an
        archive (zip, tar.gz, tar.bz2) holding a model, or a local directory. A name or URL is
        downloaded into the cache once (an archive extracted there), then read from there with no
        network access (see :mod:`spacy_elmo.published.cache`).

        ``settings``: keyword arguments of the constructor (see :class:`BiLMSettings`).

        A local directory in ELMoForManyLangs' layout (``config.json``, ``char.dic``, ``word.dic``,
        ``token_embedder.pkl``, ``encoder.pkl``) is read as such (see :mod:`.manylangs`), and so is
        such a model extracted from an archive (the ``manylangs-*`` names).

        The weights are read once, straight into the parameters (:func:`.files.load_files`): on
        a download, the load that checks the new files is the model returned; from the cache,
        files unchanged since that check are neither hashed nor checked for NaN again.
        """
        from ...published.resolve import load_pretrained, manylangs_directory
        from ..formats.files import skip_random_init
        from ..formats.manylangs import load_manylangs

        with skip_random_init():  # refuse bad settings now, not as a bad download after fetching it
            cls(ElmoOptions(lstm_dim=1, projection_dim=1, n_layers=1, filters=((1, 1),)), **settings)
        directory = manylangs_directory(name_or_url_or_dir)
        if directory is not None:
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

    # ------------------------------------------------------------------ precision
    @module_property
    def precision(self) -> Precision:
        """``"fp32"``, ``"bf16"``, ``"int8"`` or ``"auto"``: the setting, as given (see :attr:`resolved_precision`)."""
        return self._precision

    @precision.setter
    def precision(self, precision: Precision) -> None:
        check_precision(precision)
        self._precision = precision

    @module_property
    def resolved_precision(self) -> ResolvedPrecision:
        """What a call now runs its matrix products in: :meth:`resolved_precision_for` training while
        gradients reach the parameters, else inference."""
        return self.resolved_precision_for(training=self._training_now())

    def resolved_precision_for(self, training: bool, setting: Optional[Precision] = None) -> ResolvedPrecision:
        """``setting`` (default: :attr:`precision`) resolved on the model's device for training or
        for inference, whatever the gradient mode now (an ``embed`` manifest records inference's):
        see :class:`~spacy_elmo.bilm.precision.resolved.ResolvedPrecision`. ``"auto"`` on a CPU is this
        model's measured decision for that use, made once per machine, shapes and weights
        (:mod:`spacy_elmo.bilm.precision.autotune`)."""
        return resolve_for(self, self.precision if setting is None else setting, training)

    def _training_now(self) -> bool:
        return torch.is_grad_enabled() and self.token_encoder.projection.weight.requires_grad

    def prepare_inference(self) -> None:
        """Freeze the biLM for inference: make now, not in the first call, what inference's
        products need (``auto``'s decision, the low-precision weight copies or int8 packs), and
        let the float32 weights those copies replace move to disk (:mod:`..memory.offload`), now and
        whenever a copy is made again. The first batch then does not hold the weights in two
        forms beside its own working memory, and a service's first request waits for none of it.
        Not for a biLM being trained: an optimizer would write its weights back into memory.
        """
        make_inference_copies(self, self.precision)

    def release_product_copies(self) -> None:
        """Forget every low-precision weight copy and int8 pack, the token encoder's and the
        LSTM's (the next pass remakes those of its precision), drop the float32 weights' pages read
        back from disk (:func:`..memory.offload.evict`) and hand the freed memory back to the system.
        ``auto``'s measurement calls it after each candidate's pass, so that memory holds one
        candidate's weights at a time."""
        self.token_encoder.release_copies()
        self.lstm.release_copies()
        evict(self.parameters())
        return_freed_memory()

    # ------------------------------------------------------------------ files
    def to_files(self, options_file: PathLike, weight_file: PathLike) -> None:
        """Write ``options.json`` and ``weights.hdf5`` in the standard layout, each atomically. That
        layout holds bilm-tf's char CNN only: an ELMoForManyLangs biLM is refused (:func:`.files.layout`)."""
        write_files(self, options_file, weight_file)

    # ----------------------------------------------------------------- forward pass
    def forward(
        self,
        sentences: Sequence[Sequence[str]],
        state: Optional[LSTMState] = None,
        precision: Optional[Precision] = None,
        mix: Optional[Sequence[float]] = None,
    ) -> BiLMOutput:
        """Run the biLM over a batch of tokenized sentences; boundaries are added here.

        ``mix``, one weight per output layer: the output is their weighted sum alone, each layer
        added as soon as it is computed, so that all of them are never held at once (what a
        pipeline that keeps only a fixed mix needs: a third of the memory at two LSTM layers).

        ``state`` overrides the model's state mode for this call: shapes
        (n_layers, 2, batch, projection_dim) and (n_layers, 2, batch, lstm_dim). An autocast
        around the call does not apply, nor TF32 in ``"fp32"``: the products run at the model's
        ``precision`` (see :func:`~spacy_elmo.bilm.precision.resolved.own_precision`), or at ``precision``
        for this call (what ``auto``'s measurement times), its token vectors then all computed
        afresh: the token cache holds the model's.
        """
        if len(sentences) == 0:
            raise ValueError("BiLM.forward needs at least one sentence (an empty one is fine)")
        if mix is not None and len(mix) != self.n_output_layers:
            raise ValueError(f"BiLM.forward: mix has {len(mix)} weights, the biLM {self.n_output_layers} output layers")
        if precision is None:
            resolved = self.resolved_precision
        else:
            resolved = self.resolved_precision_for(self._training_now(), precision)
        if not resolved.kind.trains:
            check_no_gradient(list(self.parameters()))
        sequences = [(SENTENCE_START, *sentence, SENTENCE_END) for sentence in sentences]
        with own_precision(self.device, resolved.dtype):
            if precision is None:
                table, index = self.token_table(sequences)
            else:
                distinct, index = _token_index(sequences)
                table = self._encode(distinct, range(len(distinct)), resolved)
            return self._forward(sentences, table, index, state, resolved.dtype, mix)

    def _forward(
        self,
        sentences: Sequence[Sequence[str]],
        table: Tensor,
        index: Tensor,
        state: Optional[LSTMState],
        dtype: torch.dtype,
        mix: Optional[Sequence[float]],
    ) -> BiLMOutput:
        """The LSTM over the sentences' token vectors: row ``index[b, t]`` of ``table`` (see
        :meth:`token_table`); with ``mix``, their weighted sum (see :meth:`forward`)."""
        host_lengths = torch.tensor([len(s) + 2 for s in sentences], dtype=torch.int64)
        lengths = host_lengths.to(self.device)
        # Padding positions take row 0, the first sentence's start: masked below.
        tokens = table[index.T.to(self.device)]  # (time, batch, projection_dim)
        carry = state is None and self.state_mode == "carry"
        if state is None:
            state = self.initial_state(len(sentences))
        # The output's layout, (n_layers + 1, batch, time, width), contiguous, so that callers
        # can view a batch's positions as rows; the LSTM writes its layers into it, or adds them
        # to the token layer with their weights of ``mix``.
        n_steps, batch, width = tokens.shape
        layers = tokens.new_empty((self.n_output_layers if mix is None else 1, batch, n_steps, 2 * width))
        by_row = tokens.transpose(0, 1)
        layers[0, :, :, :width] = by_row
        layers[0, :, :, width:] = by_row
        if mix is None:
            _, final_state = self.lstm(tokens, host_lengths, state, dtype, out=layers[1:])
        else:
            layers[0].mul_(mix[0])
            _, final_state = self.lstm(tokens, host_lengths, state, dtype, out=layers[0], mix=mix[1:])
        if carry:
            self._remember(final_state)
        mask = torch.arange(n_steps, device=self.device) < lengths.unsqueeze(1)  # (batch, time)
        layers.mul_(mask.unsqueeze(-1).to(layers.dtype))  # padding zeroed in place
        return BiLMOutput(layers, lengths, final_state)

    def embed_sentences(self, sentences: Sequence[Sequence[str]]) -> List[numpy.ndarray]:
        """ELMo layers for each sentence, without boundary positions.

        Returns one float32 array per sentence, shape (n_layers + 1, n_tokens, 2 * projection_dim).
        In ``"carry"`` mode the sentences form one batch, row by row, as in AllenNLP's
        ``embed_batch``; otherwise they are batched by length within ``max_batch_tokens``.
        """
        results: List[Optional[numpy.ndarray]] = [None] * len(sentences)
        with torch.no_grad():
            for batch in self.batches(sentences):
                output = self.forward([sentences[i] for i in batch])
                layers = output.layers.float().cpu().numpy()
                for row, i in enumerate(batch):
                    results[i] = numpy.ascontiguousarray(layers[:, row, 1 : len(sentences[i]) + 1])
        return results  # type: ignore[return-value]

    def embed_tokens(self, tokens: Sequence[Hashable]) -> Tensor:
        """Layer 0 for distinct tokens (strings, or the boundary keys). Shape: (n, projection_dim).

        When no gradient is recorded, vectors come from :attr:`token_cache` where present.
        """
        resolved = self.resolved_precision
        if torch.is_grad_enabled():
            return self._encode(tokens, range(len(tokens)), resolved)
        return self.token_cache.lookup(tokens, self.fingerprint(), lambda todo: self._encode(tokens, todo, resolved))

    def token_table(self, sequences: Sequence[Sequence[Hashable]]) -> Tuple[Tensor, Tensor]:
        """The distinct tokens' vectors, each encoded once, and where each position takes its vector.

        Returns the table (n_distinct, projection_dim) and an index (n_sequences, max_length)
        into it; positions past a sequence's end point at row 0.
        """
        distinct, index = _token_index(sequences)
        return self.embed_tokens(distinct), index

    def fingerprint(self) -> Tuple:
        """Changes whenever a parameter or buffer is replaced, moved or written, or the precision
        of inference's products changes.

        Caches of what the model computes without gradients (token encodings, features, a store's
        check) key on it, so a result of another precision, or of older weights, is never served.
        Inference's products computed those values, whatever the gradient mode now (a frozen biLM
        under ``spacy train`` is fingerprinted with gradients on, and must not decide training's
        ``auto``). Writes that torch does not track must be reported with :meth:`weights_written`.
        """
        dtype = self.resolved_precision_for(training=False).dtype
        return (dtype, tensor_versions(itertools.chain(self.parameters(), self.buffers())))

    def weights_written(self) -> None:
        """Report that the parameters were written outside torch (thinc's optimizer writes them
        in place through array views), so that :meth:`fingerprint` changes as for any torch write."""
        torch.autograd.graph.increment_version(list(self.parameters()))

    # ------------------------------------------------------------------ helpers
    def _encode(self, tokens: Sequence[Hashable], positions: Sequence[int], resolved: ResolvedPrecision) -> Tensor:
        """Layer 0 of ``tokens[p] for p in positions`` (:meth:`.TokenEncoder.encode`), products in
        the token encoder's dtype of ``resolved`` (:attr:`.precision.ResolvedPrecision.token_encoder_dtype`).
        Shape: (len(positions), projection_dim)."""
        return self.token_encoder.encode([tokens[p] for p in positions], resolved.token_encoder_dtype)

    def batches(self, sentences: Sequence[Sequence[str]]) -> Iterator[List[int]]:
        """Indices of sentences per batch: all as given in carry mode, else length-sorted."""
        if self.state_mode == "carry":
            yield list(range(len(sentences)))
            return
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        batch: List[int] = []
        for i in order:
            width = len(sentences[i]) + 2
            if batch and width * (len(batch) + 1) > self.max_batch_tokens:
                yield batch
                batch = []
            batch.append(i)
        if batch:
            yield batch


def _renamed_token_encoder(module: nn.Module, state_dict: Dict[str, Any], prefix: str, *args: Any) -> None:
    """A ``load_state_dict`` pre-hook: ``char_cnn.*`` keys of a state dict saved before the rename
    load as ``token_encoder.*``."""
    legacy = prefix + LEGACY_STATE_PREFIX
    for key in [key for key in state_dict if key.startswith(legacy)]:
        state_dict[prefix + STATE_PREFIX + key[len(legacy) :]] = state_dict.pop(key)


def _token_index(sequences: Sequence[Sequence[Hashable]]) -> Tuple[List[Hashable], Tensor]:
    """The distinct tokens in order of appearance, and an index (n_sequences, max_length) int64
    into them; positions past a sequence's end point at row 0."""
    rows: Dict[Hashable, int] = {}
    index = numpy.zeros((len(sequences), max(map(len, sequences), default=0)), dtype=numpy.int64)
    for r, sequence in enumerate(sequences):
        index[r, : len(sequence)] = [rows.setdefault(token, len(rows)) for token in sequence]
    return list(rows), torch.from_numpy(index)
