"""Import the project's scripts (project/scripts/*.py, plain files, not a package) as modules."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PROJECT_DIR = Path(__file__).resolve().parents[2] / "project"


def load_script(name: str) -> ModuleType:
    """project/scripts/<name>.py as a module (cached in sys.modules under project_<name>).

    The scripts directory goes on ``sys.path``, as when a script runs, for their imports of
    each other (``from evaluate import ...``).
    """
    scripts_dir = str(PROJECT_DIR / "scripts")
    if scripts_dir not in sys.path:
        sys.path.append(scripts_dir)
    module_name = f"project_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, PROJECT_DIR / "scripts" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]
