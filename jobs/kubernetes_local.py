"""`jobs.kubernetes_local` moved to the package `jobs.kubernetes.local` (`run`, `faults`, `pod`, one module per
operator): an alias that warns; it will be removed."""

from jobs import _moved

_NEW = tuple("jobs.kubernetes.local." + name
             for name in ("run", "faults", "operator", "pod", "tfjob", "mpijob", "jobset"))
_MODULES = _moved.follow("jobs.kubernetes_local", _NEW, __name__)


def __getattr__(name: str) -> object:
    return _moved.lookup(_MODULES, "jobs.kubernetes_local", name)
