"""`cli.config_flags`: flags made from dataclass fields, and their parsed values read back as the fields hold them."""

import dataclasses
from typing import Optional, Tuple

from absl import flags
from absl.testing import absltest

from cli import config_flags


@dataclasses.dataclass(frozen=True)
class Example:
    name: str = config_flags.field(help="A required name.")
    size: int = config_flags.field(3, "A size.")
    rate: Optional[float] = config_flags.field(None, "A rate.")
    widths: Tuple[int, ...] = config_flags.field((4, 2), "Widths.")
    tags: Tuple[str, ...] = config_flags.field((), "Tags.")
    mode: str = config_flags.field("a", "A mode.", choices=("a", "b"))
    fast: bool = config_flags.field(False, "Go fast.", flag="go_fast")
    hidden: int = 7


@dataclasses.dataclass(frozen=True)
class Sharing:
    size: int = config_flags.field(3, "The same size.")
    looked_up: int = config_flags.field(10, "Looked up unless given.", flag_default=None)


@dataclasses.dataclass(frozen=True)
class Clashing:
    size: int = config_flags.field(4, "Another default.")


@dataclasses.dataclass(frozen=True)
class Repeated:
    extra: Tuple[str, ...] = config_flags.field((), "One item per flag.", repeated=True)


def parse_pair(text: str) -> Tuple[str, int]:
    name, sep, count = text.partition("=")
    if not sep or not count.isdigit():
        raise ValueError("--pair %r must be NAME=COUNT" % text)
    return name, int(count)


@dataclasses.dataclass(frozen=True)
class Parsed:
    pairs: Tuple[Tuple[str, int], ...] = config_flags.field((), "NAME=COUNT; repeatable.", flag="pair",
                                                            repeated=True, parse=parse_pair)


@dataclasses.dataclass(frozen=True)
class Unsupported:
    table: dict = config_flags.field(None, "No flag carries a dict.")


class ConfigFlagsTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.flag_values = flags.FlagValues()
        config_flags.define_flags([Example, Sharing], self.flag_values)

    def parse(self, *args):
        self.flag_values(["program"] + list(args))
        return self.flag_values

    def test_each_flag_field_is_a_flag_of_its_type_default_and_choices(self):
        shown = {name: (self.flag_values[name].flag_type(), self.flag_values[name].default)
                 for name in self.flag_values}
        self.assertEqual({
            "name": ("string", None), "size": ("int", 3), "rate": ("float", None),
            "widths": ("comma separated list of strings", ["4", "2"]),
            "tags": ("comma separated list of strings", []), "mode": ("string enum", "a"),
            "go_fast": ("bool", False), "looked_up": ("int", None)}, shown)
        self.assertEqual(["a", "b"], self.flag_values["mode"].parser.enum_values)
        self.assertEqual("Go fast.", self.flag_values["go_fast"].help)

    def test_values_are_the_fields_values_lists_as_tuples_of_their_items(self):
        flag_values = self.parse("--name", "n", "--widths", "8,4,1", "--go_fast", "--tags", "x,y")
        self.assertEqual(
            dict(name="n", size=3, rate=None, widths=(8, 4, 1), tags=("x", "y"), mode="a", fast=True),
            config_flags.values(Example, flag_values))
        self.assertEqual(Example(name="n", widths=(8, 4, 1), tags=("x", "y"), fast=True),
                         Example(**config_flags.values(Example, flag_values)))

    def test_given_only_leaves_out_the_flags_not_on_the_command_line(self):
        flag_values = self.parse("--size", "5", "--rate", "0.5")
        self.assertEqual({"size": 5, "rate": 0.5}, config_flags.values(Example, flag_values, given_only=True))
        self.assertEqual({"size": 5}, config_flags.values(Sharing, flag_values, given_only=True))

    def test_a_shared_flag_gives_its_value_to_every_field(self):
        flag_values = self.parse("--size", "9")
        self.assertEqual(9, config_flags.values(Example, flag_values)["size"])
        self.assertEqual(9, config_flags.values(Sharing, flag_values)["size"])

    def test_a_repeated_flag_takes_one_item_each_time_commas_and_all(self):
        flag_values = flags.FlagValues()
        config_flags.define_flags([Repeated], flag_values)
        self.assertEqual("multi string", flag_values["extra"].flag_type())
        flag_values(["program", "--extra=--deep_layers=128,64", "--extra", "--exchange_fp16"])
        self.assertEqual(Repeated(extra=("--deep_layers=128,64", "--exchange_fp16")),
                         Repeated(**config_flags.values(Repeated, flag_values)))

    def test_the_required_flags_are_the_fields_without_a_default(self):
        self.assertEqual(["name"], config_flags.required_flags([Example, Sharing]))
        self.assertEqual([], config_flags.required_flags([Sharing, Parsed]))

    def test_a_parsed_flag_makes_each_item_with_its_function_and_keeps_its_error(self):
        flag_values = flags.FlagValues()
        config_flags.define_flags([Parsed], flag_values)
        self.assertEqual(([], "multi string"), (flag_values["pair"].default, flag_values["pair"].flag_type()))
        flag_values(["program", "--pair=a=1", "--pair", "b=22"])
        self.assertEqual(Parsed(pairs=(("a", 1), ("b", 22))), Parsed(**config_flags.values(Parsed, flag_values)))
        flag_values.unparse_flags()
        flag_values(["program", "--pair=a=x"])
        with self.assertRaisesRegex(ValueError, r"--pair 'a=x' must be NAME=COUNT"):
            config_flags.values(Parsed, flag_values)

    def test_a_list_item_of_the_wrong_type_names_the_flag_and_the_value(self):
        flag_values = self.parse("--widths", "8,x")
        with self.assertRaisesRegex(ValueError, r"--widths must be a list of integers, got '8,x'"):
            config_flags.values(Example, flag_values)

    def test_a_flag_shared_with_another_default_or_a_field_no_flag_carries_is_refused(self):
        with self.assertRaisesRegex(TypeError, "--size is defined twice, differently"):
            config_flags.flag_specs([Example, Clashing])
        with self.assertRaisesRegex(TypeError, "Unsupported.table: no flag carries"):
            config_flags.flag_specs([Unsupported])

    def test_the_flags_belong_to_the_module_that_asked_for_them(self):
        self.assertEqual({"name", "size", "rate", "widths", "tags", "mode", "go_fast", "looked_up"},
                         {flag.name for flag in self.flag_values.get_key_flags_for_module(__name__)})


if __name__ == "__main__":
    absltest.main()
