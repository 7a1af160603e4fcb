"""Registry files for the pretrained tests (tests/pretrained/conftest.py serves the biLM they name)."""

import json
from pathlib import Path
from typing import Dict

from ..helpers import WIDTH


def tiny_entry(host, **fields: object) -> Dict[str, object]:
    """A registry entry for ``tiny`` on ``host`` (a ``FakeHost`` of conftest.py), with ``fields``."""
    return {"options_url": f"{host.url}/tiny/options.json", "weights_url": f"{host.url}/tiny/weights.hdf5",
            "width": WIDTH, "language": "en", **fields}


def write_registry(path: Path, **entries: Dict[str, object]) -> None:
    path.write_text(json.dumps(entries), encoding="utf8")
