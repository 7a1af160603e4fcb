"""The biLM's network, readable top to bottom: options, character ids, the token encoder (char CNN
and highways), the projected LSTM stack and its states across calls. :class:`spacy_elmo.bilm.BiLM`
(:mod:`spacy_elmo.bilm.bilm`) joins them one level up, beside the runtime its own calls on sentences
run on: nothing here reaches the runtime or what decides ``auto``."""
