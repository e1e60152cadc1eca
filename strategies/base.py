"""The names `strategies.base` held before it was split, one concept per module; import them from there.

`strategies.base` stays importable and re-exports every public name it had:

* `strategies.options`: `option`, `check_choice`, `check_at_least`, `NoOptions` (an adapter's options);
* `strategies.config`: `StrategyConfig`, `DEVICE_TYPES`;
* `strategies.tables`: `EmbeddingTable`, `VariableTable`, `LargeBatchTable`, `VariableTables`,
  `variable_tables`, `EmbeddingFactory`;
* `strategies.context`: `ModelContext`, `MODEL_CONTEXT_PARAM`, `ModelFn`, `OptimizerFn`,
  `OptimizerWrapper`, `MetricFn`;
* `strategies.topology`: `Topology`, `ROLE_WORKER`, `ROLE_PS`;
* `strategies.lifecycle`: `Plan`, `LifecycleError` (the steps of a strategy's life);
* `strategies.strategy`: `Strategy`;
* `strategies.registry`: `register`, `register_choice`, `resolve`, `get`, `names`, `make_config`,
  `options_class`, `adapter_class`, `option_owners`, `ADAPTER_MODULES`.
"""

# pylint: disable=unused-import
from strategies.config import DEVICE_TYPES, StrategyConfig
from strategies.context import MODEL_CONTEXT_PARAM, MetricFn, ModelContext, ModelFn, OptimizerFn, OptimizerWrapper
from strategies.lifecycle import LifecycleError, Plan
from strategies.options import NoOptions, check_at_least, check_choice, option
from strategies.registry import (
    ADAPTER_MODULES,
    adapter_class,
    get,
    make_config,
    names,
    option_owners,
    options_class,
    register,
    register_choice,
    resolve,
)
from strategies.strategy import Strategy
from strategies.tables import (
    EmbeddingFactory,
    EmbeddingTable,
    LargeBatchTable,
    VariableTable,
    VariableTables,
    variable_tables,
)
from strategies.topology import ROLE_PS, ROLE_WORKER, Topology

__all__ = ["ADAPTER_MODULES", "DEVICE_TYPES", "EmbeddingFactory", "EmbeddingTable", "LargeBatchTable",
           "LifecycleError", "MODEL_CONTEXT_PARAM", "MetricFn", "ModelContext", "ModelFn", "NoOptions", "OptimizerFn",
           "OptimizerWrapper", "Plan", "ROLE_PS", "ROLE_WORKER", "Strategy", "StrategyConfig", "Topology",
           "VariableTable", "VariableTables", "adapter_class", "check_at_least", "check_choice", "get", "make_config",
           "names", "option", "option_owners", "options_class", "register", "register_choice", "resolve",
           "variable_tables"]
