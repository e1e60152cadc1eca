"""How an adapter declares its own options: dataclass fields that are command-line flags too.

Each adapter keeps its options in a frozen dataclass (`Strategy.Options`)
whose fields are made with `option`: the field's name is the flag's name,
its default the flag's default, and its metadata the flag's help text and
choices (`deepfm.train` defines the flags from them). The dataclass checks
its values in `__post_init__` with `check_choice` and `check_at_least`,
whose messages name the flag.
"""

import dataclasses
from typing import Dict, Optional, Sequence

# The metadata keys of an `option` field.
HELP = "help"
CHOICES = "choices"


def check_choice(flag: str, value, allowed) -> None:
    """Raises ValueError naming `--flag`, the bad value and the allowed ones."""
    if value not in allowed:
        raise ValueError("--%s must be one of %s, got %r" % (flag, ", ".join(map(str, allowed)), value))


def check_at_least(flag: str, value, minimum) -> None:
    """Raises ValueError naming `--flag` and the bad value unless `value >= minimum`."""
    if value < minimum:
        raise ValueError("--%s must be >= %g, got %r" % (flag, minimum, value))


def option(default, help: str, choices: Optional[Sequence] = None):  # pylint: disable=redefined-builtin
    """A field of an options dataclass, with the help text (and choices) its command-line flag shows.

    The field's name is the flag's name.
    """
    metadata: Dict[str, object] = {HELP: help}
    if choices is not None:
        metadata[CHOICES] = tuple(choices)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of an adapter that has none of its own."""
