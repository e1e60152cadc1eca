"""The examples use what a user installs: the packages of setup.cfg, never the checkout's benchmarks or tests."""

import ast
import configparser
import glob
import os
import unittest

from tests import paths
from tests.examples import examples_testing

# Top-level packages of the checkout that `pip install deepfm-strategies` does not install.
NOT_INSTALLED = ("benchmarks", "tests", "tools")


def imported_packages(path: str):
    """The top-level package of every import of the file at `path`, with its line."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module.split(".")[0], node.lineno


class ExampleImportsTest(unittest.TestCase):

    def test_the_examples_import_only_installed_packages(self):
        parser = configparser.ConfigParser()
        parser.read(os.path.join(paths.REPO_ROOT, "setup.cfg"))
        installed = {line.strip().split(".")[0] for line in parser["options.packages.find"]["include"].split()}
        self.assertTrue(installed.isdisjoint(NOT_INSTALLED), installed)
        examples = sorted(glob.glob(os.path.join(examples_testing.EXAMPLES_DIR, "*.py")))
        self.assertGreater(len(examples), 3)
        wrong = ["%s:%d imports %s" % (os.path.basename(path), line, package) for path in examples
                 for package, line in imported_packages(path) if package in NOT_INSTALLED]
        self.assertEqual([], wrong)


if __name__ == "__main__":
    unittest.main()
