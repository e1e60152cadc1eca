"""The order the suite's processes take its test classes in (tests/scheduling.py), in a pytest run of its own."""

import os
import re
import subprocess
import sys
import textwrap

from tests import command_line, paths

# Five classes in one module, in this order: two of one `slow` test, three of quick tests, two of them with
# the most tests.
TESTS = textwrap.dedent("""
    import pytest


    class TestManyA:
        def test_1(self): pass
        def test_2(self): pass
        def test_3(self): pass


    @pytest.mark.slow
    class TestSlowOne:
        def test_job(self): pass


    class TestManyB:
        def test_1(self): pass
        def test_2(self): pass
        def test_3(self): pass


    class TestFew:
        def test_1(self): pass
        def test_2(self): pass


    @pytest.mark.slow
    class TestSlowTwo:
        def test_job(self): pass
    """)
# A test's class in the line `-v` prints when it passes (`[gw0] [ 10%] PASSED test_order.py::TestManyA::test_1`
# under pytest-xdist, `test_order.py::TestManyA::test_1 PASSED` without).
CLASS = re.compile(r"test_order\.py::(\w+)::")


def classes_run(tmp_path, plugins, workers=("-n", "1", "--dist", "loadscope")):
    """The test classes of TESTS in the order they ran, under `plugins`: by one pytest-xdist process by default."""
    (tmp_path / "test_order.py").write_text(TESTS)
    command = [sys.executable, "-m", "pytest", "-v", *workers, "-p", "no:cacheprovider",
               "--rootdir", str(tmp_path), "-c", os.devnull, "-o", "markers=slow: multi-process"]
    for plugin in plugins:
        command += ["-p", plugin]
    run = subprocess.run(command + ["test_order.py"], cwd=tmp_path,
                         env=command_line.environment({"PYTHONPATH": paths.REPO_ROOT}),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    ran = [CLASS.search(line) for line in run.stdout.splitlines() if "PASSED" in line]
    return list(dict.fromkeys(match.group(1) for match in ran if match))


def test_slow_classes_come_before_the_quick_ones_that_wait(tmp_path):
    # pytest-xdist's own order: the classes with the most tests first, the slow ones (one test each) last.
    assert classes_run(tmp_path, []) == ["TestManyA", "TestManyB", "TestFew", "TestSlowOne", "TestSlowTwo"]
    # The process's first class goes out as before (the most tests); the rest in the collection's order, the
    # slow classes first.
    assert classes_run(tmp_path, ["tests.scheduling"]) == [
        "TestManyA", "TestSlowOne", "TestSlowTwo", "TestManyB", "TestFew"]


def test_one_process_runs_the_slow_classes_first_too(tmp_path):
    assert classes_run(tmp_path, ["tests.scheduling"], workers=()) == [
        "TestSlowOne", "TestSlowTwo", "TestManyA", "TestManyB", "TestFew"]
