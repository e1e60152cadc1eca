"""The package layout: layers that only look down, no import cycles, no TensorFlow in the job layer at start-up,
no command-line flag written by hand (every one is made from a configuration dataclass's field).

Every import statement of the project's packages is read from the source
(module level, inside functions and in `if TYPE_CHECKING:` blocks alike: an
import only the type checker follows still ties the two modules together),
and resolved to the project module it names. Each module belongs to a layer; a module may import its own layer and
the ones below:

    0  input_pipeline (the read path), cli (the start of every command line)
    1  dataprep (data preparation), strategies, deepfm.config
    2  deepfm.models; planner (the cost model, its fits, the layouts it picks)
    3  deepfm.runtime (the training runtime), deepfm.job_config (the job's configuration the
       trainer takes whole, and the record it writes); jobs (running jobs, beside it)
    4  deepfm (the package face: the API and the command lines)
"""

import ast
import os
from typing import Dict, Iterator, List, Optional, Set, Tuple

import tensorflow as tf
from absl.testing import parameterized

from tests import command_line, paths

PACKAGES = ("input_pipeline", "cli", "dataprep", "strategies", "planner", "deepfm", "jobs")
# Module-name prefix -> layer; the longest matching prefix decides.
LAYERS = {
    "input_pipeline": 0, "cli": 0,
    "dataprep": 1, "strategies": 1, "deepfm.config": 1,
    "deepfm.models": 2, "planner": 2,
    "deepfm.runtime": 3, "deepfm.job_config": 3, "jobs": 3,
    "deepfm": 4,
}
# Every command line's flags are made from its configuration's fields, here and nowhere else (`examples/` are
# scripts of a user's own, with argparse).
FLAG_MAKER = os.path.join("cli", "config_flags.py")
BENCHMARKS = "benchmarks"
# Modules of the job layer (and those it uses) that must start without TensorFlow.
TENSORFLOW_FREE = ("jobs", "cli", "strategies.strategy_names", "strategies.cluster", "planner.cost_model",
                   "planner.calibrated", "planner.layouts", "strategies.host_cores",
                   "input_pipeline.schema", "input_pipeline.formats", "input_pipeline.sharding",
                   "deepfm.config", "deepfm.launch", "deepfm.sagemaker", "deepfm.kubernetes")


def project_modules() -> Dict[str, str]:
    """Module name -> source path, for every module of the project's packages."""
    modules = {}
    for package in PACKAGES:
        for directory, subdirs, files in os.walk(os.path.join(paths.REPO_ROOT, package)):
            subdirs[:] = [d for d in subdirs if d != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    module = os.path.relpath(path, paths.REPO_ROOT)[:-len(".py")].replace(os.sep, ".")
                    modules[module[:-len(".__init__")] if module.endswith(".__init__") else module] = path
    return modules


def source_files(folders: Tuple[str, ...]) -> List[str]:
    """Every Python file under the repository's `folders`."""
    found = []
    for folder in folders:
        for directory, subdirs, files in os.walk(os.path.join(paths.REPO_ROOT, folder)):
            subdirs[:] = [d for d in subdirs if d != "__pycache__"]
            found += [os.path.join(directory, name) for name in sorted(files) if name.endswith(".py")]
    return found


def hand_written_flags(tree: ast.AST) -> List[Tuple[str, int]]:
    """The calls of `tree` that define a command-line flag themselves: absl's `DEFINE_*`, argparse's `add_argument`."""
    return sorted(((node.func.attr, node.lineno) for node in ast.walk(tree)
                   if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                   and (node.func.attr.startswith("DEFINE_") or node.func.attr == "add_argument")),
                  key=lambda item: item[1])


def imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[Tuple[str, int]]:
    """Every dotted name an import of `tree` names (a module, or a module's attribute), with its line."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                anchor = parts if is_package else parts[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                yield base + "." + alias.name, node.lineno
        stack.extend(ast.iter_child_nodes(node))


def resolve(name: str, modules: Dict[str, str]) -> Optional[str]:
    """The project module `name` refers to (itself, or the module holding the attribute), else None."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> Dict[str, Set[Tuple[str, int]]]:
    """Module -> the project modules it imports (with the line)."""
    modules = project_modules()
    graph = {}
    for module, path in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        edges = set()
        for name, line in imported_names(tree, module, path.endswith("__init__.py")):
            target = resolve(name, modules)
            if target is not None and target != module:
                edges.add((target, line))
        graph[module] = edges
    return graph


def layer(module: str) -> int:
    prefix = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[prefix]


def find_cycle(graph: Dict[str, Set[Tuple[str, int]]]) -> Optional[List[str]]:
    """One import cycle of `graph` (its modules in order), or None."""
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(module: str) -> Optional[List[str]]:
        state[module] = 1
        stack.append(module)
        for target, _ in sorted(graph[module]):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


class LayoutTest(tf.test.TestCase, parameterized.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.graph = import_graph()

    def test_every_module_has_a_layer(self):
        self.assertGreater(len(self.graph), 50)
        for module in self.graph:
            self.assertIn(layer(module), range(5), module)

    def test_no_import_runs_up_the_layers(self):
        upward = ["%s (layer %d) imports %s (layer %d) at line %d"
                  % (module, layer(module), target, layer(target), line)
                  for module, edges in sorted(self.graph.items()) for target, line in sorted(edges)
                  if layer(target) > layer(module)]
        self.assertEqual([], upward)

    def test_the_job_layer_never_imports_the_training_runtime(self):
        wrong = ["%s imports %s" % (module, target) for module, edges in sorted(self.graph.items())
                 for target, _ in edges
                 if module.startswith("jobs") and target.startswith(("deepfm.runtime", "deepfm.models"))]
        self.assertEqual([], wrong)

    def test_no_import_cycles(self):
        self.assertIsNone(find_cycle(self.graph))

    def test_a_cycle_is_found(self):
        graph = {"a": {("b", 1)}, "b": {("c", 1)}, "c": {("a", 1)}, "d": set()}
        self.assertEqual(["a", "b", "c", "a"], find_cycle(graph))

    def test_type_only_imports_count(self):
        tree = ast.parse("from typing import TYPE_CHECKING\n"
                         "if TYPE_CHECKING:\n    from input_pipeline import pipeline\n")
        self.assertIn("input_pipeline.pipeline", [resolve(n, project_modules()) for n, _ in
                                                  imported_names(tree, "input_pipeline.formats", False)])

    def test_relative_and_attribute_imports_resolve(self):
        tree = ast.parse("from . import lifecycle\nfrom strategies.lifecycle import Plan\nimport jobs.local.hosts\n")
        modules = project_modules()
        names = [resolve(n, modules) for n, _ in imported_names(tree, "strategies.tower", False)]
        self.assertCountEqual(["strategies.lifecycle", "strategies.lifecycle", "jobs.local.hosts"], names)

    def test_every_flag_is_made_from_a_config_field(self):
        found = []
        for path in source_files(PACKAGES + (BENCHMARKS,)):
            if os.path.relpath(path, paths.REPO_ROOT) == FLAG_MAKER:
                continue
            with open(path) as f:
                found += ["%s:%d: %s" % (os.path.relpath(path, paths.REPO_ROOT), line, name)
                          for name, line in hand_written_flags(ast.parse(f.read()))]
        self.assertEqual([], found)

    def test_a_hand_written_flag_is_found(self):
        tree = ast.parse("from absl import flags\nflags.DEFINE_integer('rows', 3, 'Rows.')\n"
                         "parser.add_argument('--rows', type=int, default=3)\n")
        self.assertEqual([("DEFINE_integer", 2), ("add_argument", 3)], hand_written_flags(tree))

    @parameterized.parameters(*TENSORFLOW_FREE)
    def test_starts_without_tensorflow(self, prefix):
        modules = sorted(m for m in self.graph if m == prefix or m.startswith(prefix + "."))
        self.assertNotEmpty(modules)
        script = ("import importlib, sys\nfor m in %r:\n    importlib.import_module(m)\n"
                  "print('tensorflow' in sys.modules)" % modules)
        # From the repository's root: benchmarks/ imports from there, as `python -m benchmarks...` does.
        result = command_line.run(["python", "-c", script], paths.REPO_ROOT, timeout=120)
        self.assertEqual(0, result.returncode, result.stderr[-2000:])
        self.assertEqual("False", result.stdout.strip().splitlines()[-1], modules)


if __name__ == "__main__":
    tf.test.main()
