"""The flat module paths of earlier releases, kept as aliases that warn (CHANGELOG.md lists them).

Each alias module (`jobs/sagemaker_env.py`, ...) calls `follow` and forwards
every name it is asked for to the module(s) that now hold it; run as a
program (`python -m jobs.sagemaker_processing ...`) it runs the new module.
"""

import importlib
import runpy
import types
import warnings
from typing import Sequence

MAIN = "__main__"
# `follow` -> the alias module -> its importer (importlib's own frames are skipped by `warnings`).
IMPORTER_STACKLEVEL = 3
ALIAS_STACKLEVEL = 2


def follow(old: str, new: Sequence[str], name: str) -> Sequence[types.ModuleType]:
    """Warns that `old` moved to `new` and returns the new modules; run as `__main__`, runs `new[0]` as a program.

    Args:
      old: the alias's module path.
      new: the modules that hold its names now (the first runs as the program).
      name: the alias's `__name__` (`__main__` when run with `python -m`).
    """
    if name == MAIN:
        warnings.warn("python -m %s moved to python -m %s; run that (this alias will be removed)" % (old, new[0]),
                      DeprecationWarning, stacklevel=ALIAS_STACKLEVEL)
        runpy.run_module(new[0], run_name=MAIN, alter_sys=True)
        return ()
    warnings.warn("%s moved to %s; import it from there (this alias will be removed)" % (old, " and ".join(new)),
                  DeprecationWarning, stacklevel=IMPORTER_STACKLEVEL)
    return [importlib.import_module(module) for module in new]


def lookup(modules: Sequence[types.ModuleType], old: str, attribute: str) -> object:
    """`attribute` of the first of `modules` that has it.

    Raises:
      AttributeError: none has it.
    """
    for module in modules:
        if hasattr(module, attribute):
            return getattr(module, attribute)
    raise AttributeError("module %r has no attribute %r" % (old, attribute))
