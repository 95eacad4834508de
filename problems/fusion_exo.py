"""Exo realisation of a clustering (optional extra `exo`): Exo's own safety checks judge the fusion.

For programs of same-rate maps and folds, emit an Exo procedure with one loop per binding (folds
accumulate into a scalar initialised at the top), then reach the clustering with Exo's scheduling
primitives: `reorder_stmts` moves loops into cluster order (Exo checks the two loops commute),
`fuse` merges the loops of a cluster (Exo checks the iterations commute), and every array the
clustering contracts is shrunk to a scalar with Exo's buffer primitives (`sink_alloc`,
`resize_dim`, `unroll_buffer`; see `contract`), so the scheduled code allocates exactly the
intermediate arrays the objective counts. A clustering Exo refuses
raises `ExoRefused` naming the step. Filters, gathers, crosses, generates and externals have no
fixed-size Exo loop and are reported as unsupported.
"""

from __future__ import annotations
import __future__

import linecache
import re
from typing import Any

from tensorplan.problems.fusion import DEFAULT_RATE, FusionInstance, FusionSolution, labels_of

INSTALL = "pip install -e '.[exo]'"


class ExoRefused(RuntimeError):
    """Exo's checks rejected a scheduling step: the clustering is not realisable as asked."""


def _exo():
    try:
        import exo
        from exo.stdlib import scheduling
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise RuntimeError(f"the Exo realisation needs exo-lang: {INSTALL}") from err
    return exo, scheduling


def unsupported(inst: FusionInstance) -> str | None:
    """Why the program has no Exo realisation here, or None when it has one."""
    for k, b in enumerate(inst.bindings):
        if b.op not in ("map", "fold"):
            return f"bindings[{k}] is a {b.op}: only same-rate map and fold loops are emitted"
    labels = {dict(inst.input_rates).get(x, DEFAULT_RATE) for x in inst.inputs}
    if len(labels) > 1:
        return f"inputs have several rates ({', '.join(sorted(labels))}): one loop size only"
    return None


def _v(name: str) -> str:
    return "v_" + re.sub(r"\W", "_", name)


def _i(name: str) -> str:
    return "i_" + re.sub(r"\W", "_", name)


def exo_source(inst: FusionInstance) -> str:
    """Python source of the unfused Exo procedure: one loop per binding, in binding order."""
    reason = unsupported(inst)
    if reason:
        raise ValueError(f"no Exo realisation: {reason}")
    folds = {b.name for b in inst.bindings if b.op == "fold"}
    args = ["n: size"] + [f"{_v(x)}: f32[n] @ DRAM" for x in inst.inputs]
    for x in inst.outputs:
        if x in folds:
            args.append(f"o_{_v(x)[2:]}: f32[1] @ DRAM")
        elif x not in inst.inputs:
            args.append(f"{_v(x)}: f32[n] @ DRAM")
    head, loops, tail = [], [], []
    for b in inst.bindings:
        if b.op == "fold":
            head += [f"{_v(b.name)}: f32 @ DRAM", f"{_v(b.name)} = 0.0"]
        elif b.name not in inst.outputs:
            head.append(f"{_v(b.name)}: f32[n] @ DRAM")
    for b in inst.bindings:
        i = _i(b.name)
        terms = [f"{_v(x)}[{i}]" for x in b.inputs] + [_v(s) for s in b.scalars]
        if b.op == "map":
            body = f"{_v(b.name)}[{i}] = {' + '.join(terms)} + 1.0"
        else:
            body = f"{_v(b.name)} += {' + '.join(terms)}"
        loops.append(f"for {i} in seq(0, n):\n        {body}")
    for x in inst.outputs:
        if x in folds:
            tail.append(f"o_{_v(x)[2:]}[0] = {_v(x)}")
    name = re.sub(r"\W", "_", inst.name or "program")
    lines = [f"def {name}({', '.join(args)}):"] + [f"    {s}" for s in head + loops + tail]
    return "\n".join(lines) + "\n"


def exo_proc(inst: FusionInstance) -> Any:
    """The unfused Exo procedure (exo.Procedure)."""
    exo, _ = _exo()
    src = exo_source(inst)
    fname = f"<tensorplan-fusion-exo-{inst.name or 'program'}-{abs(hash(src))}>"
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)  # for Exo's getsource
    env: dict[str, Any] = {"DRAM": exo.DRAM}
    code = compile(
        src, fname, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True
    )
    exec(code, env)
    fn = next(v for k, v in env.items() if k not in ("DRAM", "__builtins__"))
    return exo.proc(fn)


def realise(inst: FusionInstance, sol: FusionSolution, *, shrink: bool = True) -> Any:
    """Schedule the unfused procedure into the clustering; every step is checked by Exo.

    Returns the scheduled procedure (one top-level loop per cluster, and with `shrink` every array
    the clustering contracts reduced to a scalar, see `contract`); raises ExoRefused when Exo's
    safety check rejects a reorder, a fusion or a contraction."""
    _, sched = _exo()
    from exo.API import SchedulingError

    p = exo_proc(inst)
    lab = labels_of(inst, sol)
    target = sorted(range(len(inst.bindings)), key=lambda k: (lab[k], k))
    cur = list(range(len(inst.bindings)))
    names = [b.name for b in inst.bindings]
    for t, k in enumerate(target):
        pos = cur.index(k)
        while pos > t:
            loop = p.find_loop(_i(names[k]))
            try:
                p = sched.reorder_stmts(p, loop.prev().expand(0, 1))
            except SchedulingError as err:
                raise ExoRefused(
                    f"reorder_stmts: cannot move {names[k]} before "
                    f"{names[cur[pos - 1]]}: {_first_line(err)}"
                ) from None
            cur[pos - 1], cur[pos] = cur[pos], cur[pos - 1]
            pos -= 1
    for names_c in sol.clusters:
        first, *rest = sorted(names_c, key=inst.node_of.__getitem__)
        for other in rest:
            try:
                p = sched.fuse(p, p.find_loop(_i(first)), p.find_loop(_i(other)))
            except SchedulingError as err:
                raise ExoRefused(
                    f"fuse: cannot fuse {other} into the loop of {first}: {_first_line(err)}"
                ) from None
    return contract(inst, sol, p) if shrink else p


def contracted(inst: FusionInstance, sol: FusionSolution) -> list[str]:
    """Intermediate arrays the clustering contracts: not a program output, and every consumer in
    the producer's own cluster (the seed's c_i = 0)."""
    lab = labels_of(inst, sol)
    g = inst.graph
    out = []
    for k, b in enumerate(inst.bindings):
        inside = all(lab[j] == lab[k] for j in g.succ[k])
        if b.op == "map" and b.name not in inst.outputs and g.succ[k] and inside:
            out.append(b.name)
    return out


def contract(inst: FusionInstance, sol: FusionSolution, p: Any) -> Any:
    """Shrink every contracted array of a fused procedure to a scalar with Exo's buffer primitives:
    `reorder_stmts` brings its allocation down to its cluster's loop, `sink_alloc` moves it into
    the loop body (Exo checks the buffer is used nowhere else and carries nothing across
    iterations), `resize_dim` shrinks it to one element (Exo checks every access is the current
    iteration's), `simplify` and `unroll_buffer` turn that element into a scalar. A step Exo
    refuses raises ExoRefused naming it."""
    _, sched = _exo()
    from exo.API import SchedulingError
    from exo.API_cursors import ForCursor

    lab = labels_of(inst, sol)
    first = {}
    for k in sorted(range(len(inst.bindings)), reverse=True):
        first[lab[k]] = inst.bindings[k].name
    for name in contracted(inst, sol):
        loop = _i(first[lab[inst.node_of[name]]])
        buf = _v(name)
        step = "reorder_stmts"
        try:
            alloc = p.find(f"{buf} : _")
            while not (isinstance(alloc.next(), ForCursor) and alloc.next().name() == loop):
                p = sched.reorder_stmts(p, alloc.expand(0, 1))
                alloc = p.find(f"{buf} : _")
            step = "sink_alloc"
            p = sched.sink_alloc(p, alloc)
            step = "resize_dim"
            p = sched.resize_dim(p, buf, 0, 1, loop)
            step = "unroll_buffer"
            p = sched.unroll_buffer(sched.simplify(p), buf, 0)
        except SchedulingError as err:
            raise ExoRefused(f"{step}: cannot contract {name}: {_first_line(err)}") from None
    return p


def top_level_loops(p: Any) -> int:
    """Number of top-level loops of a procedure (its printed form)."""
    return sum(1 for line in str(p).splitlines() if re.match(r"^    for ", line))


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
