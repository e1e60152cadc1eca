"""Command-line flags made from the fields of configuration dataclasses.

A field is a flag when its metadata holds a help text (`field`, or
`dataclasses.field(metadata=metadata(...))` for a required field, which type
checkers then see without a default); the metadata also holds the flag's
name, default and choices where they are not the field's. The flag's type
follows the field's annotation: `bool`, `int`, `float` and `str` (each also
`Optional`) are absl's bool, integer, float and string flags; a field with
choices is an enum flag (of the values' names); `Tuple[X, ...]` (X: int,
float or str) is a comma-separated list flag, read back as a tuple of X, or
with `repeated=True` a flag given once per item (`--f=a --f=b`, for items
that may hold commas); `Tuple[T, ...]` of any other item type takes a
`parse` function that makes a T of an item's text (its `ValueError` names
the flag and the value).

    @dataclasses.dataclass(frozen=True)
    class TrainConfig:
        model_dir: str = dataclasses.field(metadata=config_flags.metadata("Checkpoint directory."))
        batch_size: int = config_flags.field(1024, "Examples per replica and step.")

    define_flags([TrainConfig])                 # --model_dir, --batch_size
    TrainConfig(**values(TrainConfig, FLAGS))   # the parsed flags as field values

Several dataclasses may share a flag (the same name on fields of the same
type and default): it is defined once and its value goes to each. Only the
entry points define and read flags; the dataclasses themselves never read
them. This module imports nothing of the project.
"""

import dataclasses
import typing
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from absl import flags

# The flags this module defines belong to the module that asked for them (their key flags, which its --help
# lists), as if it had called absl's DEFINE_ functions itself.
flags.disclaim_key_flags()

# The metadata keys of a flag field.
HELP = "help"
FLAG = "flag"
CHOICES = "choices"
FLAG_DEFAULT = "flag_default"
REPEATED = "repeated"
PARSE = "parse"
# What the metadata holds where a flag's default is the field's own.
_SAME = object()

BOOL, INTEGER, FLOAT, STRING, ENUM, LIST, MULTI = "bool", "integer", "float", "string", "enum", "list", "multi"
# What a list flag's items must be, as its error message says.
ITEM_NAMES = {int: "integers", float: "numbers", str: "strings"}


def metadata(help: str, flag: Optional[str] = None,
             choices: Optional[Sequence] = None, flag_default: Any = _SAME, repeated: bool = False,
             parse: Optional[Callable[[str], Any]] = None) -> Dict[str, Any]:
    """The metadata of a field that is a flag (see `field`)."""
    meta: Dict[str, Any] = {HELP: help}
    if repeated:
        meta[REPEATED] = True
    if parse is not None:
        meta[PARSE] = parse
    if flag is not None:
        meta[FLAG] = flag
    if choices is not None:
        meta[CHOICES] = tuple(choices)
    if flag_default is not _SAME:
        meta[FLAG_DEFAULT] = flag_default
    return meta


def field(default: Any = dataclasses.MISSING, help: str = "", flag: Optional[str] = None,
          choices: Optional[Sequence] = None, flag_default: Any = _SAME, repeated: bool = False,
          parse: Optional[Callable[[str], Any]] = None) -> Any:
    """A dataclass field that is also a command-line flag.

    Args:
      default: the field's default (a required field is better made with
        `dataclasses.field(metadata=metadata(...))`, which type checkers see).
      help: the flag's help text.
      flag: the flag's name where it is not the field's.
      choices: the values allowed (an enum flag).
      flag_default: the flag's default where it is not the field's (e.g.
        None for a value the entry point otherwise looks up); a required
        field's flag defaults to None.
      repeated: a `Tuple[X, ...]` field's flag is given once per item
        (absl's multi flag) instead of comma-separated.
      parse: a `Tuple[T, ...]` field's item of its text, for a T other
        than int, float or str (raises `ValueError`, naming the flag).
    """
    return dataclasses.field(default=default, metadata=metadata(help, flag, choices, flag_default, repeated, parse))


class FlagSpec(NamedTuple):
    """One flag, as the fields that carry it define it.

    Attributes:
      name: the flag's name.
      kind: `BOOL`, `INTEGER`, `FLOAT`, `STRING`, `ENUM`, `LIST` or `MULTI`.
      default: the flag's default, as absl takes it.
      help: the help text.
      choices: an enum's values.
      item: what makes a list flag's item of its text (int, float, str or
        the field's `parse`).
    """

    name: str
    kind: str
    default: Any
    help: str
    choices: Tuple = ()
    item: Callable[[str], Any] = str


def flag_fields(config_class: type) -> List[dataclasses.Field]:
    """The fields of `config_class` that are flags."""
    return [item for item in dataclasses.fields(config_class) if HELP in item.metadata]


def flag_name(item: dataclasses.Field) -> str:
    """The flag of a field: its own name unless its metadata names another."""
    return item.metadata.get(FLAG, item.name)


def required_flags(config_classes: Iterable[type]) -> List[str]:
    """The flags of the classes' fields that have no default (for absl's `mark_flags_as_required`)."""
    return [flag_name(item) for config_class in config_classes for item in flag_fields(config_class)
            if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING]


def unwrap_optional(annotation: Any) -> Any:
    """`X` of `Optional[X]`; any other annotation as it is."""
    if typing.get_origin(annotation) is typing.Union:
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def spec_of(config_class: type, item: dataclasses.Field) -> FlagSpec:
    """The flag a field defines.

    Raises:
      TypeError: a field type no flag can carry (a programming error).
    """
    annotation = unwrap_optional(typing.get_type_hints(config_class)[item.name])
    if FLAG_DEFAULT in item.metadata:
        default = item.metadata[FLAG_DEFAULT]
    elif item.default is not dataclasses.MISSING:
        default = item.default
    else:
        default = None
    name, help_text = flag_name(item), item.metadata[HELP]
    choices = item.metadata.get(CHOICES)
    if choices:
        return FlagSpec(name, ENUM, getattr(default, "name", default), help_text, tuple(choices))
    if annotation is bool:
        return FlagSpec(name, BOOL, default, help_text)
    if annotation is int:
        return FlagSpec(name, INTEGER, default, help_text)
    if annotation is float:
        return FlagSpec(name, FLOAT, default, help_text)
    if annotation is str:
        return FlagSpec(name, STRING, default, help_text)
    if typing.get_origin(annotation) is tuple:
        item_type = item.metadata.get(PARSE) or typing.get_args(annotation)[0]
        if item_type in ITEM_NAMES or PARSE in item.metadata:
            return FlagSpec(name, MULTI if item.metadata.get(REPEATED) else LIST,
                            None if default is None else [str(v) for v in default], help_text, item=item_type)
    raise TypeError("%s.%s: no flag carries a field of type %r" % (config_class.__name__, item.name, annotation))


def flag_specs(config_classes: Iterable[type]) -> Dict[str, FlagSpec]:
    """The flags of the classes' fields, by name; a flag several fields share, once.

    Raises:
      TypeError: two fields share a flag name but not its type or default.
    """
    specs: Dict[str, FlagSpec] = {}
    for config_class in config_classes:
        for item in flag_fields(config_class):
            spec = spec_of(config_class, item)
            known = specs.setdefault(spec.name, spec)
            if (known.kind, known.default, known.choices) != (spec.kind, spec.default, spec.choices):
                raise TypeError("--%s is defined twice, differently: %r and %r" % (spec.name, known, spec))
    return specs


def define(specs: Iterable[FlagSpec], flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines each flag of `specs` in `flag_values`."""
    for spec in specs:
        if spec.kind == ENUM:
            flags.DEFINE_enum(spec.name, spec.default, list(spec.choices), spec.help, flag_values=flag_values)
        elif spec.kind == LIST:
            flags.DEFINE_list(spec.name, spec.default, spec.help, flag_values=flag_values)
        elif spec.kind == MULTI:
            flags.DEFINE_multi_string(spec.name, spec.default, spec.help, flag_values=flag_values)
        else:
            defines: Dict[str, Callable[..., Any]] = {
                BOOL: flags.DEFINE_bool, INTEGER: flags.DEFINE_integer, FLOAT: flags.DEFINE_float,
                STRING: flags.DEFINE_string}
            define_flag = defines[spec.kind]
            define_flag(spec.name, spec.default, spec.help, flag_values=flag_values)


def define_flags(config_classes: Iterable[type], flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines one flag per flag field of `config_classes` (a shared one, once)."""
    define(flag_specs(config_classes).values(), flag_values)


def field_value(spec: FlagSpec, value: Any) -> Any:
    """A flag's parsed value as its field holds it: a list flag's items as a tuple of their type.

    Raises:
      ValueError: an item that is not of the type; the message names the flag.
    """
    if spec.kind not in (LIST, MULTI) or value is None:
        return value
    if spec.item not in ITEM_NAMES:
        return tuple(spec.item(v) for v in value)
    try:
        return tuple(spec.item(v) for v in value)
    except ValueError as e:
        raise ValueError("--%s must be a list of %s, got %r" % (spec.name, ITEM_NAMES[spec.item], ",".join(value))) \
            from e


def values(config_class: type, flag_values: flags.FlagValues = flags.FLAGS,
           given_only: bool = False) -> Dict[str, Any]:
    """The parsed flags of `config_class`'s flag fields, by field name, as the fields hold them.

    Args:
      config_class: the dataclass.
      flag_values: the parsed flags.
      given_only: only the flags given on the command line (to override
        values from elsewhere, e.g. a configuration file).

    Raises:
      ValueError: a list flag's item of the wrong type, named.
    """
    found = {}
    for item in flag_fields(config_class):
        flag = flag_values[flag_name(item)]
        if given_only and not flag.present:
            continue
        found[item.name] = field_value(spec_of(config_class, item), flag.value)
    return found
