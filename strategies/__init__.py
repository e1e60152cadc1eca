"""Interchangeable distribution strategies for any Estimator model_fn.

Where each concept lives:

* `strategy.py`: `Strategy`, the interface every adapter implements;
* `lifecycle.py`: its steps, `setup()` then `prepare(Plan)`, and the `Plan`;
* `input_plan.py`: `InputPlan`, how a process reads its input; `run_settings.py`: `RunSettings`, what
  `prepare` agreed on; `memory_share.py`: `MemoryShare`, what a job's processes hold;
* `topology.py`: `Topology`, where a process sits in its job;
* `context.py`: `ModelContext`, what a model_fn gets; `tables.py`: its embedding tables;
* `config.py`: `StrategyConfig`; `options.py`: how an adapter declares its options;
* `registry.py`: the adapters by name (`get`, `names`, `make_config`);
* one module per adapter: `single`, `tower`, `mirrored`, `ps`, `horovod`, `hybrid`, `auto`;
* `strategy_names.py`: the names and how each strategy's processes start, without TensorFlow.

The names below are loaded on first use, so tools that need only
`strategies.strategy_names`, `strategies.cluster` or `strategies.host_cores`
(the launchers, the job layer) start without TensorFlow.
"""

import importlib

# Public name -> the module that defines it.
_HOMES = {
    "EmbeddingTable": "strategies.tables", "ModelContext": "strategies.context", "NoOptions": "strategies.options",
    "Strategy": "strategies.strategy", "StrategyConfig": "strategies.config", "Plan": "strategies.lifecycle",
    "LifecycleError": "strategies.lifecycle", "Topology": "strategies.topology",
    "adapter_class": "strategies.registry", "get": "strategies.registry", "make_config": "strategies.registry",
    "names": "strategies.registry", "option_owners": "strategies.registry", "options_class": "strategies.registry",
    "register": "strategies.registry", "resolve": "strategies.registry",
}
__all__ = sorted(_HOMES)


def __getattr__(name):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError("module 'strategies' has no attribute %r" % name)
