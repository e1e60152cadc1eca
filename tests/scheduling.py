"""The order the suite's two processes take its test classes in: the slow ones first.

`make test` runs the suite in two processes (pytest-xdist's `loadscope`: a
test class, or a module's functions, goes whole to one process). `loadscope`
hands out the classes with the most tests first, so the classes of one test
come last: the multi-process jobs (a short soak, a documentation page, a
benchmark's real run), each a minute or two. Whichever process takes the last
of them works alone until it ends while the other has nothing left: the
suite's tail.

Here the classes that hold a test marked `slow` (multi-process, the suite's
cost) come first, in the order they are collected, and the in-process
classes, seconds each, after them: the run ends on tests short enough to
share out evenly. Each process still holds a class whole.
"""

from collections import OrderedDict
from typing import Dict, List

import pytest

SLOW_MARK = "slow"


def scope_of(nodeid: str) -> str:
    """The unit `loadscope` hands out whole: a test's class, or its module for a test function."""
    return nodeid.rsplit("::", 1)[0]


def slow_scopes_first(items: List[pytest.Item]) -> List[pytest.Item]:
    """`items` with every test of a scope holding a `slow` test first; otherwise in their order."""
    slow = {scope_of(item.nodeid) for item in items if item.get_closest_marker(SLOW_MARK)}
    return sorted(items, key=lambda item: scope_of(item.nodeid) not in slow)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Orders the collection: `loadscope` below hands the scopes out in this order."""
    items[:] = slow_scopes_first(items)


def _collection_order_scheduler():
    """pytest-xdist's `loadscope` scheduling, which hands out scopes in the collection's order."""
    from xdist.scheduler import LoadScopeScheduling

    class CollectionOrderScheduling(LoadScopeScheduling):
        """`loadscope`, each scope handed out in the order collected (not by its number of tests)."""

        def schedule(self) -> None:
            first = self.collection is None
            super().schedule()
            if not (first and self.collection):
                return
            # Each process's first scope went out by its number of tests (the most); the rest wait here.
            order: Dict[str, int] = {}
            for nodeid in self.collection:
                order.setdefault(scope_of(nodeid), len(order))
            self.workqueue = OrderedDict(sorted(self.workqueue.items(), key=lambda unit: order[unit[0]]))

    return CollectionOrderScheduling


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadscope` in the collection's order; any other distribution mode is pytest-xdist's own."""
    if config.getvalue("dist") != "loadscope":
        return None
    return _collection_order_scheduler()(config, log)
