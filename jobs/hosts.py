"""`jobs.hosts` moved to `jobs.local.hosts`: an alias that warns; it will be removed."""

from jobs import _moved

_MODULES = _moved.follow("jobs.hosts", ("jobs.local.hosts",), __name__)


def __getattr__(name: str) -> object:
    return _moved.lookup(_MODULES, "jobs.hosts", name)
