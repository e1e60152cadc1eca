"""The machine's CPU topology, read from `lscpu -e`: which vCPUs share a physical core.

On a machine with simultaneous multithreading two (or more) vCPUs are
hyperthreads of one physical core, and `lscpu -e` gives them the same
`CORE`. The benchmarks that emulate hosts of several cores carve the
machine into blocks of vCPUs; `Topology.order` lists the vCPUs this process
may use so that the hyperthreads of a core are next to each other, and a
block of 2k vCPUs is k whole cores (as a cloud instance of 2k vCPUs is).
Both `lscpu -e` and `lscpu` are kept as text, for the results.
"""

import dataclasses
import os
import shutil
import subprocess
from typing import Callable, Dict, List, Optional, Sequence, Tuple

LSCPU = "lscpu"
LSCPU_TIMEOUT_S = 30
# The columns of `lscpu -e` that place a vCPU; only CPU and CORE are required.
CPU_COLUMN, NODE_COLUMN, SOCKET_COLUMN, CORE_COLUMN, ONLINE_COLUMN = "CPU", "NODE", "SOCKET", "CORE", "ONLINE"
OFFLINE = "no"


@dataclasses.dataclass(frozen=True)
class Topology:
    """Where each online vCPU sits.

    Attributes:
      places: vCPU -> (NUMA node, socket, core); vCPUs with the same
        (socket, core) are hyperthreads of one physical core.
      lscpu_e: the text of `lscpu -e` it was parsed from ("" when unknown).
      lscpu: the text of `lscpu` ("" when unknown).
      note: why the topology is unknown, when it is.
    """

    places: Dict[int, Tuple[int, int, int]]
    lscpu_e: str = ""
    lscpu: str = ""
    note: str = ""

    @classmethod
    def parse(cls, lscpu_e: str, lscpu: str = "") -> "Topology":
        """The topology of `lscpu -e`'s output.

        Raises:
          ValueError: no header with CPU and CORE columns, or a row that does
            not fit it; the message quotes the line.
        """
        lines = [line for line in lscpu_e.splitlines() if line.strip()]
        if not lines:
            raise ValueError("lscpu -e: no output")
        header = lines[0].split()
        for column in (CPU_COLUMN, CORE_COLUMN):
            if column not in header:
                raise ValueError("lscpu -e: no %s column in the header %r" % (column, lines[0]))
        position = {name: index for index, name in enumerate(header)}
        places = {}
        for number, line in enumerate(lines[1:], start=2):
            fields = line.split()
            if len(fields) < len(header):
                raise ValueError("lscpu -e line %d: %d fields for the %d columns of %r: %r"
                                 % (number, len(fields), len(header), lines[0], line))
            if ONLINE_COLUMN in position and fields[position[ONLINE_COLUMN]] == OFFLINE:
                continue

            def number_in(column: str, default: Optional[int] = None, fields=fields, number=number,
                          line=line) -> int:
                if column not in position:
                    if default is None:
                        raise ValueError("lscpu -e: no %s column in the header %r" % (column, lines[0]))
                    return default
                value = fields[position[column]]
                try:
                    return int(value)
                except ValueError:
                    raise ValueError("lscpu -e line %d: %s %r is not a number: %r"
                                     % (number, column, value, line)) from None

            places[number_in(CPU_COLUMN)] = (number_in(NODE_COLUMN, 0), number_in(SOCKET_COLUMN, 0),
                                             number_in(CORE_COLUMN))
        return cls(places=places, lscpu_e=lscpu_e, lscpu=lscpu)

    @classmethod
    def unknown(cls, note: str) -> "Topology":
        """A topology that could not be read: every vCPU taken as a core of its own."""
        return cls(places={}, note=note)

    @property
    def known(self) -> bool:
        return bool(self.places)

    def core_of(self, cpu: int) -> Tuple[int, int]:
        """`(socket, core)` of a vCPU: its physical core (its own number where the topology is unknown)."""
        if cpu in self.places:
            return self.places[cpu][1:]
        return (-1, cpu)

    def order(self, cpus: Sequence[int]) -> List[int]:
        """`cpus` ordered by NUMA node, socket and core, the hyperthreads of a core next to each other.

        A vCPU the topology does not list keeps its own place after the known ones.
        """
        def key(cpu):
            place = self.places.get(cpu)
            return (0,) + place + (cpu,) if place else (1, 0, 0, cpu, cpu)
        return sorted(cpus, key=key)

    def physical_cores(self, cpus: Sequence[int]) -> int:
        """The physical cores `cpus` lie on."""
        return len({self.core_of(cpu) for cpu in cpus})

    def shared_cores(self, cpus: Sequence[int]) -> List[Tuple[int, ...]]:
        """The groups of `cpus` that are hyperthreads of one core (groups of two or more)."""
        groups: Dict[Tuple[int, int], List[int]] = {}
        for cpu in sorted(cpus):
            groups.setdefault(self.core_of(cpu), []).append(cpu)
        return [tuple(group) for group in groups.values() if len(group) > 1]

    def describe(self, cpus: Sequence[int]) -> str:
        """One sentence: how many vCPUs of `cpus`, on how many physical cores, which share one."""
        if not self.known:
            return "%d vCPUs, topology unknown (%s): each taken as a core of its own" % (len(cpus), self.note)
        cores = self.physical_cores(cpus)
        shared = self.shared_cores(cpus)
        sockets = len({self.core_of(cpu)[0] for cpu in cpus})
        if not shared:
            return ("%d vCPUs on %d physical cores (%d socket(s), `lscpu -e`): no two vCPUs share a core"
                    % (len(cpus), cores, sockets))
        return ("%d vCPUs on %d physical cores (%d socket(s), `lscpu -e`); hyperthreads of one core: %s"
                % (len(cpus), cores, sockets, ", ".join("+".join(map(str, group)) for group in shared)))

    def as_dict(self) -> Dict[str, object]:
        """For a results JSON: the texts and the places."""
        return {"lscpu_e": self.lscpu_e, "lscpu": self.lscpu, "note": self.note,
                "places": {str(cpu): list(place) for cpu, place in sorted(self.places.items())}}

    @classmethod
    def from_dict(cls, data: Optional[Dict]) -> Optional["Topology"]:
        """The topology a results JSON recorded (None for results written before it was recorded)."""
        if not data:
            return None
        return cls(places={int(cpu): tuple(place) for cpu, place in data.get("places", {}).items()},
                   lscpu_e=data.get("lscpu_e", ""), lscpu=data.get("lscpu", ""), note=data.get("note", ""))


def _run_lscpu(args: Sequence[str]) -> str:
    done = subprocess.run([LSCPU] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=LSCPU_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise OSError("%s %s exited with %d: %s" % (LSCPU, " ".join(args), done.returncode, done.stderr.strip()))
    return done.stdout


def read(run: Callable[[Sequence[str]], str] = _run_lscpu) -> Topology:
    """This machine's topology (`lscpu -e` and `lscpu`); an unknown one, saying why, where lscpu fails."""
    if run is _run_lscpu and shutil.which(LSCPU) is None:
        return Topology.unknown("no %s on PATH (Debian package util-linux)" % LSCPU)
    try:
        return Topology.parse(run(["-e"]), run([]))
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        return Topology.unknown(str(e))


def allowed_cpus() -> List[int]:
    """The vCPUs this process may run on."""
    return sorted(os.sched_getaffinity(0))
