"""The CPU report every run ends with (tests/cpu_report.py), in a pytest run of its own on two tiny tests."""

import os
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ElementTree

import pytest

from tests import command_line, cpu_report, paths

# What the busy test's child process burns, in CPU seconds; the idle test burns next to nothing.
BURN_S = 0.6
TESTS = textwrap.dedent("""
    import subprocess
    import sys

    BURN = "import time\\nstart = time.process_time()\\nwhile time.process_time() - start < %s:\\n    pass\\n"


    def test_busy_child():
        subprocess.run([sys.executable, "-c", BURN], check=True)


    def test_idle():
        pass
    """ % BURN_S)
REPORT_LINE = re.compile(r"^\s*(\d+\.\d) s CPU  (\S+)$", re.MULTILINE)


@pytest.mark.parametrize("workers", [None, 2], ids=["one_process", "xdist"])
def test_the_child_processes_cpu_is_counted_and_the_busiest_test_comes_first(tmp_path, workers):
    (tmp_path / "test_tiny.py").write_text(TESTS)
    junit = tmp_path / "junit.xml"
    command = ([sys.executable, "-m", "pytest", "-q"] + (["-n", str(workers)] if workers else [])
               + ["-p", "tests.cpu_report", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-c", os.devnull,
                  "--junitxml", str(junit), "test_tiny.py"])
    run = subprocess.run(command, cwd=tmp_path, env=command_line.environment({"PYTHONPATH": paths.REPO_ROOT}),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "most CPU: 2 tests" in run.stdout, run.stdout
    lines = REPORT_LINE.findall(run.stdout)
    assert [name for _, name in lines] == ["test_tiny.py::test_busy_child", "test_tiny.py::test_idle"], run.stdout
    busy, idle = (float(seconds) for seconds, _ in lines)
    assert busy >= BURN_S - 0.05 > idle, run.stdout
    total = re.search(r"^\s*(\d+\.\d) s CPU in all, 2 tests$", run.stdout, re.MULTILINE)
    assert total and abs(float(total.group(1)) - (busy + idle)) <= 0.1, run.stdout
    # The junit file holds each phase's figure as a property of its test.
    properties = {case.get("name"): {p.get("name"): float(p.get("value")) for p in case.iter("property")}
                  for case in ElementTree.parse(junit).getroot().iter("testcase")}
    phases = {"%s_%s" % (cpu_report.CPU_PROPERTY, phase) for phase in cpu_report.PHASES}
    assert set(properties["test_busy_child"]) == phases
    assert properties["test_busy_child"]["cpu_s_call"] >= BURN_S - 0.05
