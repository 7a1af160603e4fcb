"""How a biLM runs, kept apart from what it is (:class:`~spacy_elmo.bilm.BiLM`, the network):
:class:`BiLMRuntime`, made and owned by what runs the biLM (the ``elmo`` layer, ``embed``, ``spacy-elmo
bench``, pretraining's evaluation; a bare biLM's calls, pretraining's steps among them, run on its
own, ``bilm.runtime``): the precision setting and what it resolves to (:mod:`.precision.autotune`),
inference's weight copies made ahead and the float32 weights they let go to disk
(:mod:`.memory.offload`), the token cache, where a batch's LSTM states start (and those carried in
``"carry"`` mode), and the split of sentences into passes of ``max_batch_tokens``.
"""

import functools
import itertools
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Hashable, Iterable, Iterator, List, Optional, Protocol, Sequence, Tuple, TypeVar

import numpy
import torch
from torch import Tensor, nn

from .errors import module_property
from .kernels.int8_packs import check_no_gradient
from .memory.offload import evict, freeze_for_inference, return_freed_memory
from .memory.token_cache import TokenCache
from .memory.weight_copies import tensor_versions
from .model.lstm import BiLMOutput, BiLSTMStack, LSTMState
from .model.states import STATE_MODES, StateMode
from .model.token_encoder import SENTENCE_END, SENTENCE_START, TokenEncoder
from .precision import autotune
from .precision.decisions import Decisions
from .precision.hardware import MACHINE, Hardware
from .precision.kinds import REFERENCE
from .precision.resolved import Precision, ResolvedPrecision, check_precision, own_precision
from .precision.timed_passes import TunedModel, timed_pass

T = TypeVar("T")


@dataclass(frozen=True)
class BiLMSettings:
    """How a biLM runs, beyond what its files hold: the keyword arguments of :class:`~spacy_elmo.bilm.BiLM`.

    ``max_batch_tokens`` bounds the padded tokens (boundaries included) of one forward pass in
    :meth:`BiLMRuntime.batches`; ``cache_size`` is the number of token encodings kept (0: none);
    ``precision`` is that of the matrix products (see :mod:`spacy_elmo.bilm.precision.resolved`):
    float32 by default, so that a biLM reproduces its reference outputs unless asked otherwise.
    """

    state: StateMode = "zero"
    cache_size: int = 20_000
    max_batch_tokens: int = 4096
    dropout: float = 0.0
    precision: Precision = "fp32"

    def check(self) -> None:
        """A ValueError that says what to set, for a value that cannot work."""
        if self.state not in STATE_MODES:
            raise ValueError(f"state must be one of {STATE_MODES}, got {self.state!r}")
        if self.max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be at least 1, got {self.max_batch_tokens}")
        if self.cache_size < 0:
            raise ValueError(f"cache size must be 0 or more, got {self.cache_size}")
        check_precision(self.precision)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


class Network(TunedModel, Protocol):
    """What a runtime reads of its biLM (:class:`~spacy_elmo.bilm.BiLM`)."""

    token_encoder: TokenEncoder
    lstm: BiLSTMStack
    warm_hidden: Optional[Tensor]
    warm_memory: Optional[Tensor]

    @property
    def device(self) -> torch.device: ...

    @property
    def n_output_layers(self) -> int: ...

    @property
    def dropout(self) -> float: ...

    def warm_state(self, batch: int) -> LSTMState: ...

    def layers_of(
        self,
        table: Tensor,
        index: Tensor,
        lengths: Tensor,
        state: LSTMState,
        dtype: torch.dtype,
        mix: Optional[Sequence[float]] = None,
    ) -> BiLMOutput: ...


class BiLMRuntime(nn.Module):
    """What one biLM's calls on sentences run with (see the module's docstring), called on sentences
    (:meth:`forward`): a module holding the biLM, which thinc's shim trains, moves and saves.

    Two runtimes, of one biLM or of two, share nothing but the biLM's weights (and their copies) and
    the files ``auto``'s decisions are recorded in. Pickles and copies keep the settings and the
    carried states, not the caches (they are remade).
    """

    tuning = autotune.Tuning()  # what auto measures with: every runtime's, unless its own is set (tests)

    def __init__(self, model: Network, settings: BiLMSettings) -> None:
        settings.check()
        super().__init__()
        self.model = model  # a submodule: the biLM is an nn.Module
        self.state_mode = settings.state
        self.max_batch_tokens = settings.max_batch_tokens
        self.token_cache = TokenCache(settings.cache_size)
        self._precision: Precision = settings.precision
        self._carried: Optional[LSTMState] = None
        self.decisions = Decisions()  # auto's, made or read in this process
        self.hardware: Hardware = MACHINE  # what the precision asks of the machine (a test sets a fake one)
        # The torch thread count auto decides for, where the caller plans one (the elmo component's
        # ``threads``: a busy moment runs a call on fewer, and decides nothing new); None: torch's.
        self.planned_threads: Optional[int] = None

    @module_property
    def settings(self) -> BiLMSettings:
        """The settings as they are now (they may be set after the biLM was made)."""
        return BiLMSettings(
            self.state_mode, self.token_cache.max_entries, self.max_batch_tokens, self.model.dropout, self.precision
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
        chosen = self.precision if setting is None else setting
        measured = functools.partial(autotune.cpu_auto_precision, self, training)
        return ResolvedPrecision.resolve(chosen, self.model.device, training, measured, self.hardware)

    def _training_now(self) -> bool:
        return torch.is_grad_enabled() and self.model.token_encoder.projection.weight.requires_grad

    def prepare_inference(self) -> None:
        """Freeze the biLM for inference: make now, by one zero-state pass over one token, not in
        the first call, what inference's products need (``auto``'s decision, the low-precision
        weight copies or int8 packs), and let the float32 weights those copies replace move to disk
        (:mod:`.memory.offload`), now and whenever a copy is made again, so that the first batch
        does not hold the weights in two forms. Not for a biLM being trained: an optimizer would
        write its weights back."""
        freeze_for_inference(self.model.parameters())
        precision = self.resolved_precision_for(training=False).precision
        if precision != REFERENCE:
            timed_pass(self, [["."]], precision)

    def release_product_copies(self) -> None:
        """Forget every low-precision weight copy and int8 pack (the next pass remakes those of its
        precision), drop the float32 weights' pages read back from disk (:func:`.memory.offload.evict`)
        and hand the freed memory back to the system: ``auto``'s measurement, after each candidate."""
        self.model.token_encoder.release_copies()
        self.model.lstm.release_copies()
        evict(self.model.parameters())
        return_freed_memory()

    # ----------------------------------------------------------------- calls
    def forward(
        self,
        sentences: Sequence[Sequence[str]],
        state: Optional[LSTMState] = None,
        precision: Optional[Precision] = None,
        mix: Optional[Sequence[float]] = None,
    ) -> BiLMOutput:
        """The biLM over a batch of tokenized sentences; boundaries are added here.

        ``state`` overrides where the states start for this call: shapes (n_layers, 2, batch,
        projection_dim) and (n_layers, 2, batch, lstm_dim). The products run at the runtime's
        ``precision`` (no autocast around the call applies, nor TF32 in ``"fp32"``), or at
        ``precision`` for this call (what ``auto`` times), its token vectors then computed afresh,
        not cached. ``mix``: see :meth:`~spacy_elmo.bilm.BiLM.layers_of`.
        """
        model = self.model
        if len(sentences) == 0:
            raise ValueError("BiLM.forward needs at least one sentence (an empty one is fine)")
        if mix is not None and len(mix) != model.n_output_layers:
            raise ValueError(
                f"BiLM.forward: mix has {len(mix)} weights, the biLM {model.n_output_layers} output layers"
            )
        resolved = self.resolved_precision_for(self._training_now(), precision)  # None: the model's
        if not resolved.kind.trains:
            check_no_gradient(list(model.parameters()))
        sequences = [(SENTENCE_START, *sentence, SENTENCE_END) for sentence in sentences]
        with own_precision(model.device, resolved.dtype):
            if precision is None:
                table, index = self.token_table(sequences)
            else:
                distinct, index = token_index(sequences)
                table = self._encode(distinct, range(len(distinct)), resolved)
            carry = state is None and self.state_mode == "carry"
            start = self.initial_state(len(sentences)) if state is None else state
            lengths = torch.tensor([len(s) + 2 for s in sentences], dtype=torch.int64)
            output = model.layers_of(table, index, lengths, start, resolved.dtype, mix)
        if carry:
            self._remember(output.state)
        return output

    def embed_sentences(self, sentences: Sequence[Sequence[str]]) -> List[numpy.ndarray]:
        """ELMo layers for each sentence, without boundary positions.

        Returns one float32 array per sentence, shape (n_layers + 1, n_tokens, 2 * projection_dim).
        In ``"carry"`` mode the sentences form one batch, row by row, as in AllenNLP's
        ``embed_batch``; otherwise they are batched by length within ``max_batch_tokens``.
        """
        results: List[Optional[numpy.ndarray]] = [None] * len(sentences)
        with torch.no_grad():
            for batch in self.batches(sentences):
                layers = self([sentences[i] for i in batch]).layers.float().cpu().numpy()
                for row, i in enumerate(batch):
                    results[i] = numpy.ascontiguousarray(layers[:, row, 1 : len(sentences[i]) + 1])
        return results  # type: ignore[return-value]

    def batches(self, sentences: Sequence[Sequence[str]]) -> Iterator[List[int]]:
        """Indices of sentences per batch: all as given in carry mode, else length-sorted within
        ``max_batch_tokens`` padded tokens (boundaries counted)."""
        if self.state_mode == "carry":
            yield list(range(len(sentences)))
            return
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        yield from token_groups(order, lambda i: len(sentences[i]) + 2, self.max_batch_tokens, padded=True)

    # ------------------------------------------------------------------ token vectors
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
        distinct, index = token_index(sequences)
        return self.embed_tokens(distinct), index

    def _encode(self, tokens: Sequence[Hashable], positions: Sequence[int], resolved: ResolvedPrecision) -> Tensor:
        """Layer 0 of ``tokens[p] for p in positions`` (:meth:`.TokenEncoder.encode`), products in
        the token encoder's dtype of ``resolved``. Shape: (len(positions), projection_dim)."""
        dtype = resolved.token_encoder_dtype(self.hardware)
        return self.model.token_encoder.encode([tokens[p] for p in positions], dtype)

    def fingerprint(self) -> Tuple:
        """Changes whenever a parameter or buffer is replaced, moved or written, or the precision
        of inference's products changes. Caches of what the model computes without gradients (token
        encodings, features, a store's check) key on it, so a result of another precision, or of
        older weights, is never served; it is inference's precision whatever the gradient mode now
        (a frozen biLM under ``spacy train`` must not decide training's ``auto``). Writes torch does
        not track must be reported with ``BiLM.weights_written``.
        """
        dtype = self.resolved_precision_for(training=False).dtype
        return (dtype, tensor_versions(itertools.chain(self.parameters(), self.buffers())))  # the biLM's

    # ------------------------------------------------------------------ LSTM states
    def initial_state(
        self, batch: int, mode: Optional[StateMode] = None, carried: Optional[LSTMState] = None
    ) -> LSTMState:
        """The LSTM states a batch of ``batch`` rows starts from, in ``mode`` (default: the runtime's).

        ``"carry"`` continues row r from row r of ``carried`` (default: the state carried from the
        previous batch); rows it lacks start from zero. Shapes: (n_layers, 2, batch, projection_dim)
        and (n_layers, 2, batch, lstm_dim); zero and warm states are one row broadcast (views).
        """
        mode = self.state_mode if mode is None else mode
        if mode not in STATE_MODES:
            raise ValueError(f"state must be one of {STATE_MODES}, got {mode!r}")
        if mode == "warm":
            return self.model.warm_state(batch)
        zeros = self.model.zero_state(batch)
        carried = self._carried if carried is None else carried
        if mode == "zero" or carried is None:
            return zeros
        hidden, memory = (s.contiguous() for s in zeros)
        rows = min(batch, carried.hidden.shape[2])
        hidden[:, :, :rows] = carried.hidden[:, :, :rows]
        memory[:, :, :rows] = carried.memory[:, :, :rows]
        return LSTMState(hidden, memory)

    def reset_states(self) -> None:
        """Forget the states carried between batches in ``"carry"`` mode."""
        self._carried = None

    def _remember(self, final: LSTMState) -> None:
        """Carry mode: rows of this batch replace the stored rows; rows beyond it are kept."""
        final = LSTMState(final.hidden.detach(), final.memory.detach())
        if self._carried is None or self._carried.hidden.shape[2] <= final.hidden.shape[2]:
            self._carried = final
            return
        rows = final.hidden.shape[2]
        hidden, memory = self._carried.hidden.clone(), self._carried.memory.clone()
        hidden[:, :, :rows] = final.hidden
        memory[:, :, :rows] = final.memory
        self._carried = LSTMState(hidden, memory)

    def warm_up(self, sentences: Sequence[Sequence[str]]) -> None:
        """Store the state reached after reading ``sentences`` in order, one stream carried from
        sentence to sentence as in training, as the warm start (``"warm"`` mode, saved by
        ``BiLM.to_files``): the forward stack's after the last sentence's end, the backward stack's
        after its start."""
        if not sentences:
            raise ValueError("warm_up needs at least one sentence")
        with torch.no_grad():
            state = self.model.zero_state(1)
            for sentence in sentences:
                state = self([sentence], state=state).state
        self.model.warm_hidden = state.hidden[:, :, 0].clone()
        self.model.warm_memory = state.memory[:, :, 0].clone()


def token_groups(
    items: Iterable[T], width: Callable[[T], int], max_tokens: int, padded: bool = False
) -> Iterator[List[T]]:
    """``items`` in order, in consecutive groups of at most ``max_tokens`` tokens (an item larger
    than that alone): the sum of their ``width``, or with ``padded`` the group's widest times its
    size. The one grouping of the biLM's batches, ``Elmo.pipe``'s groups and ``embed``'s chunks;
    ``items`` is read lazily, a group at a time."""
    group: List[T] = []
    total = widest = 0
    for item in items:
        size = width(item)
        cost = max(widest, size) * (len(group) + 1) if padded else total + size
        if group and cost > max_tokens:
            yield group
            group, total, widest = [], 0, 0
        group.append(item)
        total, widest = total + size, max(widest, size)
    if group:
        yield group


def token_index(sequences: Sequence[Sequence[Hashable]]) -> Tuple[List[Hashable], Tensor]:
    """The distinct tokens in order of appearance, and an index (n_sequences, max_length) int64
    into them; positions past a sequence's end point at row 0."""
    rows: Dict[Hashable, int] = {}
    index = numpy.zeros((len(sequences), max(map(len, sequences), default=0)), dtype=numpy.int64)
    for r, sequence in enumerate(sequences):
        index[r, : len(sequence)] = [rows.setdefault(token, len(rows)) for token in sequence]
    return list(rows), torch.from_numpy(index)
