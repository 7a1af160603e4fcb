"""The listeners an ``elmo`` component feeds, for :class:`~spacy_elmo.pipeline_component.Elmo`.

spaCy's listener protocol, as its ``tok2vec`` has it: ``listening_components``, ``add_listener``,
``remove_listener`` and ``find_listeners``, which ``nlp.initialize()``, ``nlp.replace_listeners``
and the pipeline's assembly call. Each :class:`~spacy_elmo.layers.ElmoListener` registered here
gets the biLM's sizes as soon as they are known (:meth:`ElmoListeners._size_listener`).
"""

from typing import TYPE_CHECKING, Dict, List

from thinc.api import Model

from .layers import ElmoListener


class ElmoListeners:
    """The component's registry of listeners, by the name of the component that holds them
    (``listener_map``, set by the component)."""

    if TYPE_CHECKING:
        model: Model
        name: str
        listener_map: Dict[str, List[ElmoListener]]

    @property
    def listeners(self) -> List[ElmoListener]:
        """Every listener fed by this component, in pipeline order."""
        return [listener for name in self.listening_components for listener in self.listener_map[name]]

    @property
    def listening_components(self) -> List[str]:
        return list(self.listener_map)

    def add_listener(self, listener: ElmoListener, component_name: str) -> None:
        listener.component_name = component_name
        self._size_listener(listener)
        listeners = self.listener_map.setdefault(component_name, [])
        if listener not in listeners:
            listeners.append(listener)

    def remove_listener(self, listener: ElmoListener, component_name: str) -> bool:
        listeners = self.listener_map.get(component_name, [])
        if listener not in listeners:
            return False
        listeners.remove(listener)
        if not listeners:
            del self.listener_map[component_name]
        return True

    def find_listeners(self, component) -> None:
        """Register the ElmoListener layers of ``component`` whose upstream is "*" or our name."""
        if isinstance(getattr(component, "model", None), Model):
            for node in component.model.walk():
                if isinstance(node, ElmoListener) and node.upstream_name in ("*", self.name):
                    self.add_listener(node, component.name)

    def _size_listener(self, listener: ElmoListener) -> None:
        """Give the listener the biLM's (n_layers, width) once they are known: at registration for a
        fresh biLM, at :meth:`Elmo.initialize` for one from files (see
        :class:`~spacy_elmo.layers.ElmoListener`). A listener sized for another biLM is refused."""
        if self.model.has_dim("nO") is True and self.model.has_dim("nL") is True:
            listener.take_sizes(self.model.get_dim("nL"), self.model.get_dim("nO"), self.name)
