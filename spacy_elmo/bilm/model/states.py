"""Where a batch's LSTM states start: from zeros, from a warm state stored with the model, or from
where the previous batch ended (see :class:`~spacy_elmo.bilm.BiLM`'s ``state``)."""

from typing import Literal, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from .lstm import BiLSTMStack, LSTMState

StateMode = Literal["zero", "warm", "carry"]
STATE_MODES: Tuple[StateMode, ...] = ("zero", "warm", "carry")


class LSTMStates(nn.Module):
    """The start states of the biLM's batches; :class:`~spacy_elmo.bilm.BiLM` is one.

    It reads the biLM's ``lstm``, ``state_mode`` and forward pass, and keeps the warm start in the
    buffers ``warm_hidden`` and ``warm_memory`` (n_layers, 2, width), and the state carried between
    batches in ``"carry"`` mode.
    """

    lstm: BiLSTMStack
    state_mode: StateMode
    warm_hidden: Optional[Tensor]
    warm_memory: Optional[Tensor]

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("warm_hidden", None)
        self.register_buffer("warm_memory", None)
        self._carried: Optional[LSTMState] = None

    def warm_up(self, sentences: Sequence[Sequence[str]]) -> None:
        """Store the state reached after reading ``sentences`` in order as the warm start.

        The text runs as one stream, a sentence at a time, with states carried between
        sentences as in training. The forward stack keeps its state after the last sentence's
        end; the backward stack its state after the last sentence's start. Saved by
        :meth:`to_files`, used in ``"warm"`` mode.
        """
        if not sentences:
            raise ValueError("warm_up needs at least one sentence")
        with torch.no_grad():
            state = self.lstm.zero_state(1, self.lstm.layer(0).bias)
            for sentence in sentences:
                state = self([sentence], state=state).state
        self.warm_hidden = state.hidden[:, :, 0].clone()
        self.warm_memory = state.memory[:, :, 0].clone()

    def reset_states(self) -> None:
        """Forget the states carried between batches in ``"carry"`` mode."""
        self._carried = None

    def initial_state(
        self, batch: int, mode: Optional[StateMode] = None, carried: Optional[LSTMState] = None
    ) -> LSTMState:
        """The LSTM states a batch of ``batch`` rows starts from, in ``mode`` (default: the model's).

        ``"carry"`` continues row r from row r of ``carried`` (default: the state the model
        carries from its previous batch); rows it lacks start from zero. Shapes:
        (n_layers, 2, batch, projection_dim) and (n_layers, 2, batch, lstm_dim). Zero and warm
        states are one row broadcast to ``batch`` rows (views, without memory per row: copy
        them to write into them).
        """
        mode = self.state_mode if mode is None else mode
        if mode not in STATE_MODES:
            raise ValueError(f"state must be one of {STATE_MODES}, got {mode!r}")
        if mode == "warm":
            if self.warm_hidden is None or self.warm_memory is None:
                raise ValueError(
                    "state='warm' needs a warm start: call bilm.warm_up(sentences) or load files written after it"
                )
            return LSTMState(
                self.warm_hidden.unsqueeze(2).expand(-1, -1, batch, -1),
                self.warm_memory.unsqueeze(2).expand(-1, -1, batch, -1),
            )
        zeros = LSTMState(*(s.expand(-1, -1, batch, -1) for s in self.lstm.zero_state(1, self.lstm.layer(0).bias)))
        carried = self._carried if carried is None else carried
        if mode == "zero" or carried is None:
            return zeros
        hidden, memory = (s.contiguous() for s in zeros)
        rows = min(batch, carried.hidden.shape[2])
        hidden[:, :, :rows] = carried.hidden[:, :, :rows]
        memory[:, :, :rows] = carried.memory[:, :, :rows]
        return LSTMState(hidden, memory)

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
