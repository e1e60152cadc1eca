"""`jobs.host_init` moved to `jobs.local.host_init`: an alias that warns; it will be removed."""

from jobs import _moved

_MODULES = _moved.follow("jobs.host_init", ("jobs.local.host_init",), __name__)


def __getattr__(name: str) -> object:
    return _moved.lookup(_MODULES, "jobs.host_init", name)
