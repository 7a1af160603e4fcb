"""Errors raised for bad ELMo files, so callers can tell them from bugs."""


class ElmoFileError(ValueError):
    """An options or weight file is missing, corrupt, or does not match the model it describes."""
