"""`tensorplan generate`: the instance families of `problems/<problem>_gen.py` by name, with a
size, a seed and the family's own parameters, written as an instance file that `solve`,
`compare` and `batch` read.

Every family is one generator function; its parameters (names, types, defaults) are read from the
function itself, so a parameter added there shows up here. `--size` sets the parameter(s) the
family counts its size by (`Family.sized`); `-p NAME=VALUE` sets any other.
"""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import NoneType, UnionType
from typing import Any

from tensorplan.problems import allocation_gen, fusion_gen, layout_gen, schedule_gen
from tensorplan.problems.core import MAX_SEED, InstanceError

MAX_COUNT = 1_000_000
"""Largest value of a parameter that counts things to generate (a memory bound)."""
MAX_SCALE = 2**40
"""Largest value of a parameter that only scales numbers (sizes, steps, capacity, alignment):
far past any use, short of the loader's 2**62 (which still checks every total)."""
SCALES = frozenset({"horizon", "max_size", "max_life", "capacity", "alignment", "labels",
                    "checkpoint_every"})  # fmt: skip
ZERO_OK = frozenset({"n_long", "allocs"})
"""Integer parameters for which 0 means something (no long-lived buffers, no allocs)."""


@dataclass(frozen=True)
class Param:
    """One parameter of a family: its name here, the generator's name for it, the types it takes
    (int, float, the values of a Literal, None), its default, its largest value (integers) and
    what it means (with its default in words when the generator derives it)."""

    name: str
    arg: str
    kinds: tuple[Any, ...]
    default: Any
    most: int = MAX_COUNT
    text: str = ""

    def parse(self, value: str) -> Any:
        """`value` as this parameter takes it; an InstanceError says what it accepts."""
        where = f"-p {self.name}"
        text = value.strip()
        if None in self.kinds and text.lower() in ("none", "default"):
            return None
        choices = [k for k in self.kinds if isinstance(k, str)]
        if choices:
            if text in choices:
                return text
            raise InstanceError(where, f"must be one of {', '.join(choices)}, got {value!r}")
        if int in self.kinds:
            least = 0 if self.name in ZERO_OK else 1
            if text.isascii() and text.isdigit() and least <= int(text) <= self.most:
                return int(text)
            most = f"2**{self.most.bit_length() - 1}" if self.most == MAX_SCALE else self.most
            raise InstanceError(where, f"must be an integer in [{least}, {most}], got {value!r}")
        if float in self.kinds:
            try:
                number = float(text)
            except ValueError:
                number = math.nan
            if math.isfinite(number) and 0 <= number <= 1:
                return number
            raise InstanceError(where, f"must be a probability in [0, 1], got {value!r}")
        raise InstanceError(where, "cannot be set from the command line")

    def usage(self) -> str:
        """`-p NAME=TYPE: meaning (default X)`, as `--list` shows it."""
        kinds = "|".join(
            "none" if k is None else k if isinstance(k, str) else k.__name__ for k in self.kinds
        )
        default = "" if self.default is None else f" (default {self.default})"
        return f"-p {self.name}={kinds}" + (f": {self.text}" if self.text else "") + default


@dataclass(frozen=True)
class Family:
    """One generator family of a problem.

    `make(**size_args, seed=, **params)` is the generator; `sized` maps the generator parameters
    `--size` sets to how each follows from the size: the first is the size itself (hidden from
    `-p`), the others are defaults `-p` may override. `unit` is what the size counts,
    `default_size` what `--size` is when absent (None: the generator's own defaults),
    `max_size` keeps a request from running for hours. `rename` gives a generator parameter
    another name here (where its own would read as `--size`), `most` caps a parameter below
    the general bound, `texts` say what the parameters mean.
    """

    problem: str
    name: str
    make: Callable[..., Any]
    about: str
    unit: str
    sized: Mapping[str, Callable[[int], int]]
    default_size: int | None
    max_size: int
    rename: Mapping[str, str] = field(default_factory=dict)
    most: Mapping[str, int] = field(default_factory=dict)
    texts: Mapping[str, str] = field(default_factory=dict)

    def params(self) -> dict[str, Param]:
        """The parameters `-p` may set: every generator parameter but the seed, the instance's
        name and the size itself, by their name here."""
        hints = typing.get_type_hints(self.make)
        primary = next(iter(self.sized), None)
        out: dict[str, Param] = {}
        for p in inspect.signature(self.make).parameters.values():
            if p.name in ("seed", "name") or p.name == primary:
                continue
            name = self.rename.get(p.name, p.name)
            default = None if p.default is inspect.Parameter.empty else p.default
            most = self.most.get(name, MAX_SCALE if name in SCALES else MAX_COUNT)
            text = self.texts.get(name, "")
            out[name] = Param(name, p.name, _kinds(hints[p.name]), default, most, text)
        return out

    def generate(self, size: int | None, seed: int, given: Mapping[str, str]) -> Any:
        """The instance of this family for `size` (None: the default), `seed` and the `-p`
        values in `given` (text, parsed here); an InstanceError says what was refused."""
        if not 0 <= seed <= MAX_SEED:
            raise InstanceError("--seed", f"must be an integer in [0, {MAX_SEED}], got {seed}")
        params = self.params()
        unknown = [k for k in given if k not in params]
        if unknown:
            raise InstanceError(
                f"-p {unknown[0]}",
                f"{self.problem}/{self.name} has no such parameter; it takes "
                f"{', '.join(params) or 'none'} (tensorplan generate --list)",
            )
        kwargs: dict[str, Any] = {params[k].arg: params[k].parse(v) for k, v in given.items()}
        size = self.default_size if size is None else size
        if size is not None:
            if not 1 <= size <= self.max_size:
                raise InstanceError(
                    "--size",
                    f"{self.problem}/{self.name} takes 1 to {self.max_size} {self.unit}, "
                    f"got {size}",
                )
            for arg, rule in self.sized.items():
                kwargs.setdefault(arg, rule(size))
        try:
            made = self.make(seed=seed, **kwargs)
        except (ValueError, ZeroDivisionError, IndexError) as err:
            raise InstanceError(
                f"{self.problem}/{self.name}", f"the generator refused these parameters: {err}"
            ) from None
        return made[0] if isinstance(made, tuple) else made  # tight: (instance, its packing)


def _kinds(hint: Any) -> tuple[Any, ...]:
    """The accepted types of an annotation: int, float, the values of a Literal, None."""
    if isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(k for h in typing.get_args(hint) for k in _kinds(h))
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    if hint is NoneType:
        return (None,)
    return (hint,)


def _same(n: int) -> int:
    return n


_OBJECTIVE = {"objective": "what to minimise"}
_P = "chance a binding is a"

FAMILIES: dict[str, dict[str, Family]] = {
    "allocation": {
        f.name: f
        for f in (
            Family(
                "allocation", "random", allocation_gen.random_family,
                "uniform sizes, starts and lifetimes", "buffers", {"n": _same}, 20, 1_000_000,
                texts={"horizon": "steps the buffers start in (default size / 2, at least 4)",
                       "max_size": "largest size", "max_life": "longest lifetime, steps"},
            ),
            Family(
                "allocation", "aligned", allocation_gen.aligned_family,
                "small, mixed sizes, alignment 3, 4 or 8: hard for exact searches",
                "buffers (lo = hi = size)", {"lo": _same, "hi": _same}, None, 100_000,
                most={"hi": 100_000},
                texts={"hi": "most buffers, the count drawn in [size, hi]; with --size "
                             "alone, hi = size"},
            ),
            Family(
                "allocation", "mixed", allocation_gen.mixed_family,
                "a few long-lived large buffers (weights) among short-lived activations",
                "buffers", {"n": _same}, 20, 1_000_000,
                texts={"n_long": "long-lived buffers (default size / 10, at most 64)"},
            ),
            Family(
                "allocation", "pow2", allocation_gen.pow2_family,
                "power-of-two sizes with an alignment, as allocators round them", "buffers",
                {"n": _same}, 20, 1_000_000, texts={"alignment": "the alignment, bytes"},
            ),
            Family(
                "allocation", "layered", allocation_gen.layered_family,
                "a training step: activations kept for the backward pass, short-lived "
                "gradients", "layers (3 buffers each)", {"layers": _same}, 8, 300_000,
            ),
            Family(
                "allocation", "concurrent", allocation_gen.concurrent_family,
                "concurrent lifetimes: streams that sync by messages (vector clocks), "
                "written as conflict pairs", "buffers", {"n": _same}, 20, 5_000,
                texts={"streams": "streams (workers) with their own timelines",
                       "syncs": "messages between streams (default size / 8)",
                       "max_size": "largest size"},
            ),
            Family(
                "allocation", "tight", allocation_gen.tight_family,
                "buffers cut from a capacity x time rectangle: optimum = max load = capacity",
                "buffers (about)", {"n": _same}, 150, 200_000,
                texts={"capacity": "the rectangle's height, the optimum (default random in "
                                   "[2**16, 2**20])",
                       "horizon": "the rectangle's width, steps (default: the size, at least 16)",
                       "pinwheel": "chance a cut is a non-guillotine pinwheel",
                       "holes": "most pieces dropped far from the peak step"},
            ),
        )
    },
    "schedule": {
        f.name: f
        for f in (
            Family(
                "schedule", "adversary", schedule_gen.adversary,
                "random DAG, mostly local edges, allocs shared by ops far apart", "ops",
                {"n": _same}, 20, 100_000,
                texts={"edge_p": "chance of an edge from a far op (default 2 / size)",
                       "allocs": "allocs (default: the size)", **_OBJECTIVE},
            ),
            Family(
                "schedule", "recompute", schedule_gen.recompute,
                "training step with recomputation: forward, recompute, backward chains",
                "layers (about 2.7 ops each)", {"layers": _same}, 8, 100_000,
                texts={"checkpoint_every": "keep every k-th activation live", **_OBJECTIVE},
            ),
            Family(
                "schedule", "tree", schedule_gen.tree,
                "random tree, each op's output read by its children", "ops", {"n": _same}, 20,
                300_000, texts=_OBJECTIVE,
            ),
            Family(
                "schedule", "bifurcating", schedule_gen.bifurcating,
                "splits in two `size` times, then merges pairwise back",
                "levels (about 3 x 2**size ops)", {"depth": _same}, 3, 16, texts=_OBJECTIVE,
            ),
            Family(
                "schedule", "grid", schedule_gen.grid,
                "op (i, j) after (i-1, j) and (i, j-1), its output read by both successors",
                "rows", {"rows": _same, "cols": _same}, 4, 500, most={"cols": 500},
                texts={"cols": "columns (default: the size, a square)", **_OBJECTIVE},
            ),
            Family(
                "schedule", "layered", schedule_gen.layered,
                "layers of ops, each after 1-3 random ops of the layer before, its output read"
                " by them", "layers", {"depth": _same, "width": _same}, 4, 2_000,
                most={"width": 2_000},
                texts={"width": "ops per layer (default: the size)", **_OBJECTIVE},
            ),
        )
    },
    "layout": {
        f.name: f
        for f in (
            Family(
                "layout", "random", layout_gen.random_graph,
                "random unwinding graph of view ops, barriers, sums and valued pairs", "ops",
                {"num_ops": _same, "size": lambda n: max(4, n)}, 20, 20_000,
                rename={"size": "elements"}, most={"elements": 100_000, "tiles": 4096},
                texts={"elements": "elements of each sink (default: the size, at least 4)",
                       "tiles": "tiles a target layout is spread over",
                       "num_sinks": "sink tensors (default ops / 6 + 1, at most 8)"},
            ),
            Family(
                "layout", "exercise", layout_gen.scaled_exercise,
                "the objective-function exercise with n-element tensors", "elements",
                {"n": _same}, 100, 1_000_000,
                texts={"labels": "distinct labels of the sources (default 2 x size: all distinct)"},
            ),
        )
    },
    "fusion": {
        f.name: f
        for f in (
            Family(
                "fusion", "random", fusion_gen.random_program,
                "random well-formed program of maps, folds, filters, gathers, crosses, "
                "externals", "bindings", {"n": _same}, 20, 100_000, most={"inputs": 1000},
                texts={"filter_p": f"{_P} filter", "gather_p": f"{_P} gather",
                       "cross_p": f"{_P} cross", "external_p": f"{_P}n external",
                       "generate_p": f"{_P} generate", "fold_p": f"{_P} fold",
                       "inputs": "input arrays",
                       "scalar_external_p": "chance an external reads scalars only"},
            ),
        )
    },
}  # fmt: skip
"""Every generator family, by problem then name; the first of each problem is its default."""


def family(problem: str, name: str | None = None) -> Family:
    """Family `name` of `problem` (None: the problem's default); errors name the known ones."""
    if problem not in FAMILIES:
        raise InstanceError("problem", f"unknown problem {problem!r}; known: {', '.join(FAMILIES)}")
    table = FAMILIES[problem]
    if name is None:
        return next(iter(table.values()))
    if name not in table:
        raise InstanceError(
            "--family", f"{problem} has no family {name!r}; known: {', '.join(table)}"
        )
    return table[name]


def parse_params(items: Sequence[str]) -> dict[str, str]:
    """`["horizon=10", "objective=peak"]` -> {"horizon": "10", "objective": "peak"}."""
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = (x.strip() for x in item.partition("="))
        if not eq or not key:
            raise InstanceError("-p", f"expected NAME=VALUE, got {item!r}")
        if key in out:
            raise InstanceError(f"-p {key}", f"given twice ({out[key]} and {value})")
        out[key] = value
    return out


def describe(problems: Sequence[str] | None = None, width: int = 80) -> list[str]:
    """`tensorplan generate --list`: each family, what its size counts, its default size and
    the parameters `-p` sets, with their defaults."""
    import textwrap

    def wrap(text: str, first: str, then: str) -> list[str]:
        return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=then)

    out: list[str] = []
    for p in problems or list(FAMILIES):
        if out:
            out.append("")
        out.append(f"{p} (the first family is the default):")
        for f in FAMILIES[p].values():
            size = "the generator's" if f.default_size is None else str(f.default_size)
            out += wrap(f"{f.name}: {f.about}", "  ", "    ")
            out += wrap(f"--size: {f.unit}, default {size}, at most {f.max_size}", "    ", "      ")
            for prm in f.params().values():
                out += wrap(prm.usage(), "    ", "      ")
    return out
