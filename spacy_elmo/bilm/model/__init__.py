"""The biLM itself, readable top to bottom: options, character ids, the token encoder (char CNN and
highways), the projected LSTM stack, its states across calls, and :class:`~.bilm.BiLM` joining them."""
