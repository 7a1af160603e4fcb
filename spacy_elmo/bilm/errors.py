"""Errors raised for bad ELMo files, so callers can tell them from bugs; and the property of a
torch module whose errors reach the caller as they are."""

from typing import TYPE_CHECKING, Any, Optional


class ElmoFileError(ValueError):
    """An options or weight file is missing, corrupt, or does not match the model it describes."""


class _ModuleProperty(property):
    """A property of an ``nn.Module`` whose ``AttributeError`` surfaces, as a ``RuntimeError``
    that names the property and carries the original (``from``).

    An ``AttributeError`` raised anywhere under a plain property's getter (a torch call missing
    from an older release, a typo deep in the call) makes Python retry the lookup through
    ``nn.Module.__getattr__``, which replaces it with ``'BiLM' object has no attribute
    'products'``: the real cause is lost. Other errors pass unchanged.
    """

    def __get__(self, obj: Any, objtype: Optional[type] = None) -> Any:
        if obj is None:
            return self
        try:
            return super().__get__(obj, objtype)
        except AttributeError as err:
            name = getattr(self.fget, "__name__", "property")
            raise RuntimeError(f"{type(obj).__name__}.{name} failed: {type(err).__name__}: {err}") from err


# mypy reads a getter and its setter as one attribute only under ``property`` itself, not a subclass.
if TYPE_CHECKING:
    module_property = property
else:
    module_property = _ModuleProperty
