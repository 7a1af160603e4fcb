"""Where a batch's LSTM states start: from zeros, from a warm state stored with the model, or from
where the previous batch ended (see :class:`~spacy_elmo.bilm.BiLM`'s ``state``; the runtime,
:meth:`~spacy_elmo.bilm.runtime.BiLMRuntime.initial_state`, picks the start)."""

from typing import Literal, Tuple

StateMode = Literal["zero", "warm", "carry"]
STATE_MODES: Tuple[StateMode, ...] = ("zero", "warm", "carry")
