"""The biLM's network, readable top to bottom: options, character ids, the token encoder (char CNN
and highways), the projected LSTM stack and its states across calls; :class:`spacy_elmo.bilm.BiLM`
joins them one level up, beside the runtime its calls on sentences run on, which nothing here reaches."""
