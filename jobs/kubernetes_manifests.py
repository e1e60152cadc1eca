"""`jobs.kubernetes_manifests` moved to `jobs.kubernetes.manifests`: an alias that warns; it will be removed."""

from jobs import _moved

_MODULES = _moved.follow("jobs.kubernetes_manifests", ("jobs.kubernetes.manifests",), __name__)


def __getattr__(name: str) -> object:
    return _moved.lookup(_MODULES, "jobs.kubernetes_manifests", name)
