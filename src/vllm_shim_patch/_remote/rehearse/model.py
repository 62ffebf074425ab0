"""The model the rehearsal builds: its family and config (`--model` or `--arch`), and the
installed vLLM's class for its architecture."""

import json
import os
import stat

from . import families
from .answer import CannotRehearse, NoModelClass


def source(req):
    """(family, its config as given, the user's folder or None): the request's `model` (a
    checkpoint folder or its config.json), `arch` (a family's published preset), or the default
    family's preset."""
    path = req.model
    if path:
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        config_path = os.path.join(path, "config.json") if os.path.isdir(path) else path
        try:
            config = json.loads(_read_bounded(config_path))
        except (OSError, ValueError) as e:
            raise CannotRehearse(f"--model {path}: {e}") from None
        archs = config.get("architectures") or []
        family = next((families.for_architecture(a) for a in archs if families.for_architecture(a)), None)
        if family is None:
            raise CannotRehearse(f"--model {path}: architecture {', '.join(archs) or '(none)'} has no stand-ins "
                                 f"here (supported: {', '.join(families.supported())})")
        return family, config, folder
    name = req.arch or families.DEFAULT
    found = families.preset(name)
    if found is None:
        raise CannotRehearse(f"--arch {name}: no such preset (known: {', '.join(families.presets())})")
    family, config = found
    return family, config, None


# The tool checked the file (analysis/modelconfig.py); this guard only keeps a target run on its
# own from reading a FIFO or a device whole.
MAX_CONFIG = 4 << 20


def _read_bounded(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        data = f.read(MAX_CONFIG + 1)
    if len(data) > MAX_CONFIG:
        raise OSError(f"{path}: more than {MAX_CONFIG} bytes")
    return data


def modules(family, arch):
    """vLLM's modules to register in-process for `arch`: the one vLLM's model registry names first,
    then the family's MODULES this vLLM has. An architecture the registry lacks is a fact about
    this vLLM (NoModelClass), told before anything is stood in or imported."""
    import importlib.util

    from vllm.model_executor.models.registry import ModelRegistry

    if arch not in ModelRegistry.get_supported_archs():
        raise NoModelClass(arch, families.first_release(family, arch))
    named = getattr(ModelRegistry.models.get(arch), "module_name", None)
    modules = [named] if named else []
    for name in family.MODULES:
        if name not in modules and importlib.util.find_spec(name) is not None:
            modules.append(name)
    return modules
