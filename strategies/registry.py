"""The registry: every strategy by name, the choices that stand for one, and how a config becomes an adapter.

Adapters register themselves by name when their module is imported
(`register`); a choice such as `auto` registers a function that picks an
adapter's name for this process (`register_choice`) and is resolved here,
before anything is built (`resolve`). `get(config)` builds the adapter that
runs; `make_config(name, **values)` sorts flat command-line values into a
`StrategyConfig` and the adapter's options.
"""

import dataclasses
import importlib
from typing import Callable, Dict, List, Optional, Tuple, Type

from absl import logging

from strategies import options as options_lib
from strategies.config import StrategyConfig
from strategies.strategy import Strategy

# The adapter modules of this package; each registers itself when imported.
ADAPTER_MODULES = ("single", "tower", "mirrored", "ps", "horovod", "hybrid", "auto")

# A choice: returns the name of the adapter to build for this process, and why.
Choice = Callable[[], Tuple[str, str]]

# A choice's change to the config of the adapter it picked (for `auto`: each of a host's ranks its vCPUs).
Adjust = Callable[[StrategyConfig], StrategyConfig]

_ADAPTERS: Dict[str, Type[Strategy]] = {}
_CHOICES: Dict[str, Choice] = {}
_ADJUSTS: Dict[str, Adjust] = {}


def register(name: str):
    """Class decorator registering a `Strategy` subclass under `name`."""
    def decorate(cls):
        _check_new(name)
        cls.name = name
        _ADAPTERS[name] = cls
        return cls
    return decorate


def register_choice(name: str, adjust: Optional[Adjust] = None):
    """Function decorator registering `name` as a choice: the function picks an adapter's name, and says why.

    Args:
      name: the choice's strategy name.
      adjust: applied by `get` to the config once its name is the picked
        adapter's (for example threads from the host's vCPUs).
    """
    def decorate(choice: Choice) -> Choice:
        _check_new(name)
        _CHOICES[name] = choice
        if adjust is not None:
            _ADJUSTS[name] = adjust
        return choice
    return decorate


def _check_new(name: str) -> None:
    if name in _ADAPTERS or name in _CHOICES:
        raise ValueError("strategy %r is registered twice" % name)


def _load_adapters() -> None:
    for module in ADAPTER_MODULES:
        importlib.import_module("strategies." + module)


def names() -> List[str]:
    """The registered strategy names (adapters and choices), sorted."""
    _load_adapters()
    return sorted(set(_ADAPTERS) | set(_CHOICES))


def _check_known(name: str) -> None:
    _load_adapters()
    if name not in _ADAPTERS and name not in _CHOICES:
        raise ValueError("--strategy must be one of %s, got %r" % (", ".join(names()), name))


def resolve(name: str, log: bool = False) -> str:
    """The name of the adapter that runs when `name` is asked for: `name` itself, or what a choice picks.

    Args:
      name: a registered name.
      log: log what a choice picked, and why.

    Raises:
      ValueError: no strategy of that name; the message lists the valid ones.
    """
    _check_known(name)
    if name not in _CHOICES:
        return name
    picked, reason = _CHOICES[name]()
    if log:
        logging.info("--strategy %s picked %r: %s", name, picked, reason)
    return picked


def adapter_class(name: str) -> Type[Strategy]:
    """The adapter class that runs for `name` (for a choice, the one it picks for this process).

    Raises:
      ValueError: no strategy of that name; the message lists the valid ones.
    """
    return _ADAPTERS[resolve(name)]


def options_class(name: str) -> type:
    """The options dataclass of the strategy `name`; a choice has none of its own (`NoOptions`).

    Raises:
      ValueError: no strategy of that name; the message lists the valid ones.
    """
    _check_known(name)
    if name in _CHOICES:
        return options_lib.NoOptions
    return _ADAPTERS[name].Options


def option_owners() -> Dict[str, List[str]]:
    """Each adapter option's name -> the strategies whose options have it."""
    owners: Dict[str, List[str]] = {}
    for name in names():
        for field in dataclasses.fields(options_class(name)):
            owners.setdefault(field.name, []).append(name)
    return owners


def make_config(name: str, **values) -> StrategyConfig:
    """A `StrategyConfig` from flat values, as the command line gives them.

    Each value goes to the config itself (the options of every strategy) or
    to the adapter's own options dataclass (for a choice such as `auto`, the
    adapter it picks); the others keep their defaults.

        make_config("tower", num_devices=2, device_type="cpu")

    Raises:
      ValueError: an unknown strategy, a value that belongs to other
        strategies' options only (the message names them), or a bad value.
    """
    common = {field.name for field in dataclasses.fields(StrategyConfig)} - {"name", "options"}
    concrete = resolve(name)
    options_type = options_class(concrete)
    own = {field.name for field in dataclasses.fields(options_type)}
    owners = option_owners()
    for key in values:
        if key in common or key in own:
            continue
        if key in owners:
            raise ValueError("--%s applies to --strategy %s, not %s" % (key, " or ".join(owners[key]), concrete))
        raise ValueError("%r is no option of any strategy" % key)
    return StrategyConfig(name=name, options=options_type(**{k: v for k, v in values.items() if k in own}),
                          **{k: v for k, v in values.items() if k in common})


def get(config: StrategyConfig) -> Strategy:
    """Builds the adapter that runs `config` (a choice resolved first; its name then is the adapter's).

    Building touches nothing: `Strategy.setup()` is the first step that does.

    Raises:
      ValueError: no strategy of that name (the message lists the valid
        ones), or options of another adapter.
    """
    asked = config.name
    name = resolve(asked, log=True)
    if name != asked:
        config = dataclasses.replace(config, name=name)
    if asked in _ADJUSTS:
        config = _ADJUSTS[asked](config)
    return _ADAPTERS[name](config)
