"""Which stage limits a flow (topology.flow: which process feeds which, over what).

The limiting stage is named only from what the window measured, with the reason:

- ``backlog``: the reader of a queue holding at least ``MIN_BACKLOG`` bytes at the end of the window
  (the stage its writer waits on, as `dataplane.ipc_backlog` reads a queue: a socket's queued_toward,
  else the target) whose own output queues hold less: the stage the others wait on;
- ``busiest``: else the stage running or waiting for a CPU the largest share of the window
  (`diagnosis.rules.runnable_pct`), when that is at least ``BUSY_PCT`` of one core.

Where neither holds, no stage is named and the reason says what was missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from witty_profiler.diagnosis.evidence import fmt
from witty_profiler.topology import Entity
from witty_profiler.topology.flow import QUEUED_KINDS, Flow, pid_key, flows, queued, readers
from witty_profiler.topology.query import GraphQuery, runnable_pct

MIN_BACKLOG = 4096  # bytes queued in front of a stage for it to count as waited on
BUSY_PCT = 50.0  # % of one core, running or runnable, for the busiest stage to count as the limit


def judged_flows(query: GraphQuery, workload: Iterable[Entity] = ()) -> list[Flow]:
    """The graph's flows, each with the stage that limits it."""
    return flows(query, workload, judge=limit_of)


@dataclass
class Limit:
    stage: Entity | None
    basis: str  # backlog | busiest | none
    why: str  # what was measured, in words
    busiest: Entity | None = None  # the busiest stage, where it is not the limit itself


def limit_of(flow: Flow) -> Limit | None:
    """The stage that limits a flow of two or more stages, from measured backlog and CPU only."""
    if len(flow.stages) < 2:
        return None
    ids = {s.id: s for s in flow.stages}
    waiting: dict[str, float] = {}  # stage -> bytes queued for it to read
    backed: dict[str, float] = {}  # stage -> bytes it wrote that wait for a reader
    measured = False
    for link in flow.links:
        if link.kind not in QUEUED_KINDS or queued(link.edge) is None:
            continue
        measured = True
        q = queued(link.edge) or 0.0
        for r in readers(link.edge):
            waiting[r] = waiting.get(r, 0.0) + q
            for w in (link.edge.source, link.edge.target):
                if w != r:
                    backed[w] = backed.get(w, 0.0) + q
    busy = sorted(((runnable_pct(s), s) for s in flow.stages if runnable_pct(s) is not None),
                  key=lambda x: (-x[0], pid_key(x[1])))
    top = busy[0] if busy else None
    candidates = [(q, i) for i, q in waiting.items() if i in ids and q >= MIN_BACKLOG
                  and backed.get(i, 0.0) < MIN_BACKLOG]
    if candidates:
        q, sid = max(candidates, key=lambda x: (x[0], -pid_key(ids[x[1]])[0]))
        stage = ids[sid]
        out = backed.get(sid)
        why = (f"{_size(q)} queued for it to read at the end of the window, its own output "
               + (f"{_size(out)} queued" if out is not None else "not queued (no measured queue after it)")
               + ": the stages before it wait on it")
        cpu = runnable_pct(stage)
        if cpu is not None:
            why += f"; it ran or was runnable {cpu:.0f} % of one core"
        other = top[1] if top is not None and top[1].id != sid and top[0] >= BUSY_PCT else None
        return Limit(stage, "backlog", why, busiest=other)
    if top is not None and top[0] >= BUSY_PCT:
        nxt = f", next {_label(busy[1][1])} {busy[1][0]:.0f} %" if len(busy) > 1 else ""
        return Limit(top[1], "busiest", f"running or runnable {top[0]:.0f} % of one core{nxt}; "
                                        + ("no queue holds a backlog" if measured else "no queue depths measured"))
    parts = [f"no queue holds {_size(MIN_BACKLOG)} or more" if measured else "no queue depths measured",
             f"no stage busy {BUSY_PCT:.0f} % of one core or more" if busy else "no CPU use measured"]
    return Limit(None, "none", "; ".join(parts))


def _size(value: float | None) -> str:
    value = float(value or 0.0)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return fmt(value / scale, unit)
    return fmt(value, "bytes")


def _label(entity: Entity) -> str:
    name = entity.attrs.get("name")
    pid = entity.attrs.get("pid")
    return f"{name or '?'}({pid if pid is not None else entity.id})"
