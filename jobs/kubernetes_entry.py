"""`jobs.kubernetes_entry` moved to `jobs.kubernetes.entry`: an alias that warns; it will be removed."""

from jobs import _moved

_MODULES = _moved.follow("jobs.kubernetes_entry", ("jobs.kubernetes.entry",), __name__)


def __getattr__(name: str) -> object:
    return _moved.lookup(_MODULES, "jobs.kubernetes_entry", name)
