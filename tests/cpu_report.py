"""The suite's CPU cost per test, printed at the end of every run beside pytest's slowest durations.

On the 2 cores `make test` runs on, the suite is bound by CPU: a third test
process made it no faster (41 minutes, the cores 99% busy), and on a later
tree slower (a fresh clone's suite in 2,035 s, against 1,802 s with two
processes: the cores were already 90% busy, and more contention only slows
every multi-process test). Wall time
misleads there: a test that waits (a SageMaker MPI job's 30 s of the
toolkit's sleeps) costs the suite little, one that starts ten TensorFlow
processes costs it much. So every test's CPU seconds are measured: its
test process's own (user + system) and those of every child process it
started and waited for, with their own waited-for children (`getrusage`'s
`RUSAGE_CHILDREN`: a process that outlives its parent, or was never
waited for, is not counted, so the figure is a lower bound). Setup, call
and teardown are summed.

The terminal summary lists the `CPU_REPORT_COUNT` tests of most CPU and
the suite's total (under pytest-xdist, the controller sums what each
worker measured); `--junitxml` files hold every test's figure as its
`cpu_s` property.
"""

import resource
from typing import Dict

import pytest

CPU_REPORT_COUNT = 25
CPU_PROPERTY = "cpu_s"
PHASES = ("setup", "call", "teardown")
# Per test (node id): CPU seconds by phase, as the reports of the phases arrive.
_measured: Dict[str, Dict[str, float]] = {}


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _measure_phase(item, phase: str):
    start = _cpu_seconds()
    yield
    item.user_properties.append(("%s_%s" % (CPU_PROPERTY, phase), _cpu_seconds() - start))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _measure_phase(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _measure_phase(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _measure_phase(item, "teardown")


def pytest_runtest_logreport(report):
    """Collects each phase's CPU seconds (in the controller under pytest-xdist: the reports carry them)."""
    phases = _measured.setdefault(report.nodeid, {})
    for name, value in report.user_properties:
        for phase in PHASES:
            if name == "%s_%s" % (CPU_PROPERTY, phase):
                phases[phase] = value


def total_by_test() -> Dict[str, float]:
    """CPU seconds of every test measured so far, setup, call and teardown summed."""
    return {nodeid: sum(phases.values()) for nodeid, phases in _measured.items() if phases}


def pytest_terminal_summary(terminalreporter):
    """The tests of most CPU and the suite's total."""
    totals = total_by_test()
    if not totals:
        return
    terminalreporter.section("most CPU: %d tests (the test process and the processes it waited for)"
                             % min(CPU_REPORT_COUNT, len(totals)))
    for nodeid, seconds in sorted(totals.items(), key=lambda item: -item[1])[:CPU_REPORT_COUNT]:
        terminalreporter.write_line("%8.1f s CPU  %s" % (seconds, nodeid))
    terminalreporter.write_line("%8.1f s CPU in all, %d tests" % (sum(totals.values()), len(totals)))
