"""Executable semantics of a clustering: run the program unfused and as the clustering's loops.

Workers are fixed arithmetic by op, modulo M to keep integers small: map adds its inputs, 1 and its
scalars; fold sums; filter keeps x when (x + scalars) mod 3 != 0; gather indexes data modulo its
length; cross adds the pair; generate yields its index; an external sorts the concatenation of its
inputs, a scalar input counting as one element and no input giving an empty array (output k adds
k). An array used as a scalar (only an external's output) stands for its sum.

`reference` evaluates whole arrays with numpy, one binding at a time. `run_clustered` executes each
cluster as ONE pass over its loop rate, element by element: a filter runs the nodes of its sub-rate
only when it emits; a cross runs its product-rate nodes once per pair; arrays produced and consumed
inside one cluster never exist (only the current element does), every other array is materialised.
The counts (loops, array elements read and written, intermediate arrays) are what the objective
stands for; `measure` checks both runs give the same outputs and returns the clustered counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensorplan.problems.fusion_graph import (
    DEFAULT_RATE,
    FusionInstance,
    FusionSolution,
    iteration_rate,
    result_rate,
)

M = 1009


@dataclass(frozen=True)
class Counts:
    loops: int
    elements_read: int
    elements_written: int
    intermediate_arrays: int

    def as_dict(self) -> dict[str, int]:
        return {
            "loops": self.loops,
            "elements_read": self.elements_read,
            "elements_written": self.elements_written,
            "intermediate_arrays": self.intermediate_arrays,
        }


def make_data(inst: FusionInstance, seed: int = 0, size: int = 8) -> dict[str, Any]:
    """Random inputs: one length per rate label (between 1 and `size`), values in [0, M)."""
    rng = np.random.default_rng(seed)
    label = dict(inst.input_rates)
    labels = sorted(
        {label.get(x, DEFAULT_RATE) for x in inst.inputs}
        | {b.rate or DEFAULT_RATE for b in inst.bindings if b.op == "generate"}
    )
    sizes = {r: int(rng.integers(1, size + 1)) for r in labels}
    arrays = {
        x: rng.integers(0, M, sizes[label.get(x, DEFAULT_RATE)]).astype(np.int64)
        for x in inst.inputs
    }
    return {"arrays": arrays, "sizes": sizes}


def _scalar(value: Any) -> int:
    return (
        int(np.sum(np.asarray(value, dtype=np.int64)) % M) if not isinstance(value, int) else value
    )


def reference(inst: FusionInstance, data: Mapping[str, Any]) -> tuple[dict[str, Any], Counts]:
    """Whole-array evaluation, one loop per binding; returns (program outputs, unfused counts)."""
    env: dict[str, Any] = {x: np.asarray(v, dtype=np.int64) for x, v in data["arrays"].items()}
    sizes = dict(data["sizes"])
    reads = writes = 0
    for b in inst.bindings:
        s = sum(_scalar(env[x]) for x in b.scalars) % M
        ins = [env[x] for x in b.inputs]
        reads += (
            sum(np.size(env[x]) for x in set(b.inputs)) if b.op not in ("gather", "cross") else 0
        )
        if b.op == "map":
            out = (sum(ins) + 1 + s) % M
        elif b.op == "fold":
            out = int((s + int(np.sum(ins[0]) % M)) % M)
        elif b.op == "filter":
            out = ins[0][(ins[0] + s) % 3 != 0]
        elif b.op == "gather":
            data_arr, idx = ins
            reads += 2 * len(idx)
            out = (
                (data_arr[idx % len(data_arr)] + s) % M
                if len(data_arr)
                else np.full(len(idx), s, dtype=np.int64)
            )
        elif b.op == "cross":
            a, bb = ins
            reads += len(a) + len(a) * len(bb)
            out = ((a[:, None] + bb[None, :] + s) % M).ravel()
        elif b.op == "generate":
            out = (np.arange(sizes[b.rate or DEFAULT_RATE], dtype=np.int64) + s) % M
        else:  # external
            flat = np.sort(np.concatenate([np.atleast_1d(v) for v in ins] or [np.zeros(0, int)]))
            for k, name in enumerate(b.outputs):
                env[name] = (flat + s + k) % M
                writes += len(flat)
            continue
        env[b.name] = out
        if b.op != "fold":
            writes += len(out)
    inter = sum(
        1 for b in inst.bindings if b.op != "fold" for r in b.results if r not in inst.outputs
    )
    outputs = {x: env[x] for x in inst.outputs}
    return outputs, Counts(len(inst.bindings), reads, writes, inter)


def run_clustered(
    inst: FusionInstance, sol: FusionSolution, data: Mapping[str, Any]
) -> tuple[dict[str, Any], Counts]:
    """Execute each cluster as one streaming pass over its loop rate (the solution must be
    legal)."""
    bs = inst.bindings
    g = inst.graph
    node_of = inst.node_of
    arrays: dict[str, list[int]] = {x: [int(v) for v in a] for x, a in data["arrays"].items()}
    scal: dict[str, int] = {}
    label = dict(inst.input_rates)
    rate_of: dict[str, str] = {x: label.get(x, DEFAULT_RATE) for x in inst.inputs}
    for b in bs:
        for r in b.results:
            rate_of[r] = result_rate(b, [rate_of[x] for x in b.inputs])
    rate_size: dict[str, int] = dict(data["sizes"])
    for x in inst.inputs:
        rate_size[rate_of[x]] = len(arrays[x])
    consumers: dict[str, set[int]] = {}
    for k, b in enumerate(bs):
        for x in b.inputs:
            consumers.setdefault(x, set()).add(k)
    outputs = set(inst.outputs)
    counts = {"reads": 0, "writes": 0, "inter": 0}

    def scalar_value(x: str) -> int:
        return scal[x] if x in scal else sum(arrays[x]) % M

    for names in sol.clusters:
        ks = sorted(node_of[x] for x in names)
        cl = set(ks)
        if any(bs[k].op == "external" for k in ks):
            if len(ks) != 1:
                raise ValueError("an external must run alone")
            b = bs[ks[0]]
            s = sum(scalar_value(x) for x in b.scalars) % M
            values = {x: [scal[x]] if x in scal else arrays[x] for x in b.inputs}
            flat = sorted(v for x in b.inputs for v in values[x])
            counts["reads"] += sum(len(values[x]) for x in set(b.inputs))
            for k, name in enumerate(b.outputs):
                arrays[name] = [(v + s + k) % M for v in flat]
                counts["writes"] += len(flat)
                counts["inter"] += name not in outputs
            rate_size[f"ext:{b.name}"] = len(flat)
            continue
        mat = {
            bs[k].name
            for k in ks
            if bs[k].op != "fold"
            and (bs[k].name in outputs or any(c not in cl for c in consumers.get(bs[k].name, ())))
        }
        rates = {k: iteration_rate(bs[k], rate_of) for k in ks}
        loop = _common_rate(set(rates.values()), g.parent)
        svals = {k: sum(scalar_value(x) for x in bs[k].scalars) % M for k in ks}
        run = _Pass(inst, ks, rates, svals, mat, arrays)
        for _ in range(rate_size[loop]):
            run.step(loop)
            run.pos[loop] = run.pos.get(loop, 0) + 1
        counts["reads"] += run.reads
        counts["writes"] += run.writes
        for k in ks:
            b = bs[k]
            if b.op == "fold":
                scal[b.name] = run.acc[b.name]
            if b.op in ("filter", "cross"):
                child = f"{b.op}:{b.name}"
                rate_size[child] = run.pos.get(child, 0)
        for x, v in run.buf.items():
            arrays[x] = v
            counts["inter"] += x not in outputs
    result = {
        x: scal[x] if x in scal else np.asarray(arrays[x], dtype=np.int64) for x in inst.outputs
    }
    return result, Counts(len(sol.clusters), counts["reads"], counts["writes"], counts["inter"])


class _Pass:
    """One cluster's single pass: the current element of every array made inside it, fold
    accumulators, buffers of the arrays it materialises, and a position counter per rate."""

    def __init__(
        self,
        inst: FusionInstance,
        ks: list[int],
        rates: Mapping[int, str],
        svals: Mapping[int, int],
        mat: set[str],
        arrays: Mapping[str, list[int]],
    ) -> None:
        self.bs = inst.bindings
        self.arrays = arrays
        self.svals = svals
        self.produced = {self.bs[k].name for k in ks}
        self.nodes_at: dict[str, list[int]] = {}
        for k in ks:
            self.nodes_at.setdefault(rates[k], []).append(k)
        self.cur: dict[str, int] = {}
        self.acc = {self.bs[k].name: svals[k] for k in ks if self.bs[k].op == "fold"}
        self.buf: dict[str, list[int]] = {x: [] for x in mat}
        self.pos: dict[str, int] = {}
        self.seen: set[tuple[str, int]] = set()
        self.reads = self.writes = 0

    def read(self, x: str, r: str) -> int:
        """Element of x at rate r's current position: in-cluster values are free, a materialised
        array costs one read per element however many nodes of the pass use it."""
        if x in self.produced:
            return self.cur[x]
        p = self.pos.get(r, 0)
        if (x, p) not in self.seen:
            self.seen.add((x, p))
            self.reads += 1
        return self.arrays[x][p]

    def emit(self, x: str, v: int) -> None:
        self.cur[x] = v
        if x in self.buf:
            self.buf[x].append(v)
            self.writes += 1

    def step(self, r: str) -> None:
        """One element of rate r: run the nodes at r in binding order; a generator runs the nodes
        of its rate for each element it emits."""
        for k in self.nodes_at.get(r, ()):
            b, s = self.bs[k], self.svals[k]
            if b.op == "map":
                self.emit(b.name, (sum(self.read(x, r) for x in b.inputs) + 1 + s) % M)
            elif b.op == "fold":
                self.acc[b.name] = (self.acc[b.name] + self.read(b.inputs[0], r)) % M
            elif b.op == "filter":
                v = self.read(b.inputs[0], r)
                if (v + s) % 3 != 0:
                    self.emit(b.name, v)
                    self._child(f"filter:{b.name}")
            elif b.op == "gather":
                i = self.read(b.inputs[1], r)
                data_arr = self.arrays[b.inputs[0]]
                self.reads += 1
                self.emit(b.name, (data_arr[i % len(data_arr)] + s) % M if data_arr else s)
            elif b.op == "cross":
                a = self.read(b.inputs[0], r)
                for v in self.arrays[b.inputs[1]]:
                    self.reads += 1
                    self.emit(b.name, (a + v + s) % M)
                    self._child(f"cross:{b.name}")
            elif b.op == "generate":
                self.emit(b.name, (self.pos.get(r, 0) + s) % M)

    def _child(self, child: str) -> None:
        self.step(child)
        self.pos[child] = self.pos.get(child, 0) + 1


def _common_rate(rates: set[str], parent: Mapping[str, str | None]) -> str:
    """The deepest rate that is an ancestor-or-self of every rate in `rates`."""
    chains = []
    for r in rates:
        path = [r]
        while parent.get(path[-1]) is not None:
            path.append(parent[path[-1]])  # type: ignore[arg-type]
        chains.append(path)
    common = set(chains[0]).intersection(*map(set, chains[1:]))
    return next(r for r in chains[0] if r in common)


def same_outputs(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        np.array_equal(np.asarray(a[x]), np.asarray(b[x])) for x in a
    )


def measure(
    inst: FusionInstance, sol: FusionSolution, *, seed: int = 0, size: int = 8
) -> dict[str, int]:
    """Counts of the clustered run on seeded data, plus `outputs_match` (1 when equal to the
    unfused reference)."""
    data = make_data(inst, seed, size)
    ref, _ = reference(inst, data)
    got, counts = run_clustered(inst, sol, data)
    return {**counts.as_dict(), "outputs_match": int(same_outputs(ref, got))}
