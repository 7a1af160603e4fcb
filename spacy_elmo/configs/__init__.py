"""Example config.cfg files for spaCy training with the elmo component (package data)."""
