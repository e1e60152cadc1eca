"""`strategies.base` stays importable: every public name it held, re-exported from the module that now holds it."""

import importlib

import tensorflow as tf

from strategies import base

# Every public name of `strategies.base` before it was split, and the module that holds it now.
HOMES = {
    "check_choice": "options", "check_at_least": "options", "option": "options", "NoOptions": "options",
    "StrategyConfig": "config", "DEVICE_TYPES": "config",
    "EmbeddingTable": "tables", "VariableTable": "tables", "LargeBatchTable": "tables", "VariableTables": "tables",
    "variable_tables": "tables", "EmbeddingFactory": "tables",
    "ModelContext": "context", "MODEL_CONTEXT_PARAM": "context", "ModelFn": "context", "OptimizerFn": "context",
    "OptimizerWrapper": "context", "MetricFn": "context",
    "ROLE_WORKER": "topology", "ROLE_PS": "topology",
    "Strategy": "strategy",
    "register": "registry", "names": "registry", "options_class": "registry", "adapter_class": "registry",
    "option_owners": "registry", "make_config": "registry", "get": "registry", "ADAPTER_MODULES": "registry",
}


class AliasModuleTest(tf.test.TestCase):

    def test_every_old_name_is_the_object_of_its_new_home(self):
        for name, home in HOMES.items():
            module = importlib.import_module("strategies." + home)
            self.assertIs(getattr(module, name), getattr(base, name), name)
            self.assertIn(name, base.__all__)


if __name__ == "__main__":
    tf.test.main()
