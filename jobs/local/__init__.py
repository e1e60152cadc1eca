"""Jobs on this machine: local clusters, the supervision of their processes, emulated hosts.

`launcher`: a parameter-server cluster or Horovod ranks (the library behind
`python -m deepfm.launch`); `processes`: every task of a job started,
watched and stopped together; `hosts`: emulated hosts in network namespaces,
each started by `host_init` as its init; `memory`: a memory cgroup per
host, its limit, peak and OOM kills. Nothing here imports TensorFlow.

`jobs.local` was the launcher's module in earlier releases: its names
(`jobs.local.LaunchConfig`, `jobs.local.launch`, ...) still resolve here,
with a DeprecationWarning naming `jobs.local.launcher`.
"""

import importlib
import types
import warnings

LAUNCHER = "jobs.local.launcher"
# This package's modules: the import system loads them when they are not attributes yet.
SUBMODULES = ("launcher", "processes", "hosts", "host_init", "memory")
# The warning names the caller: this function -> its caller (importlib's frames are skipped).
CALLER_STACKLEVEL = 2


def __getattr__(name: str) -> object:
    """A name of the launcher's module, as `jobs.local.<name>` read it before the move, with a warning."""
    if name.startswith("__") or name in SUBMODULES:
        raise AttributeError("module 'jobs.local' has no attribute %r" % name)
    launcher = importlib.import_module(LAUNCHER)
    value = getattr(launcher, name, None)
    if value is None or isinstance(value, types.ModuleType):
        raise AttributeError("module 'jobs.local' has no attribute %r" % name)
    warnings.warn("jobs.local.%s moved to %s.%s; import it from there (this alias will be removed)"
                  % (name, LAUNCHER, name), DeprecationWarning, stacklevel=CALLER_STACKLEVEL)
    return value
