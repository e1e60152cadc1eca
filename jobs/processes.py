"""`jobs.processes` moved to `jobs.local.processes`: an alias that warns; it will be removed."""

from jobs import _moved

_MODULES = _moved.follow("jobs.processes", ("jobs.local.processes",), __name__)


def __getattr__(name: str) -> object:
    return _moved.lookup(_MODULES, "jobs.processes", name)
