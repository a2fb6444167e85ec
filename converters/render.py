"""What every view shares: numbers with their units, aligned tables, and fitting into a budget.

A view is a list of blocks: `Lines` (a legend, a host line, findings) and `Table`s whose items
are ranked, most relevant first. `fit` renders the blocks into at most `max_tokens` tokens
(cl100k_base) without ever cutting a line: it keeps the pinned rows (cited by findings) first,
then hands out rows to the tables in turn, weighted, and folds the rest of each table into one
line that says how many were left out and the exact request that lists them (a command line or
an MCP tool call, converters.hints). Rows are formatted
and counted lazily, so a table of 100,000 threads costs only the rows that are shown.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from typing import Any

from witty_profiler.converters.tokens import count_tokens
from witty_profiler.topology.models import Fields

MIN_TOKENS = 200  # below this a view cannot say what it left out; the API refuses smaller budgets
NOTES_SHARE = 0.3  # the most of a budget that legends and notes may take


# -- numbers with units -----------------------------------------------------------------------
def num(value: Any, digits: int = 3) -> str:
    """A plain number, short: 3 significant digits, no float noise; ints exact."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        if abs(value) >= 10 ** digits:
            return str(round(value))
        return f"{value:.{digits}g}"
    return str(value)


def pct(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}%" if abs(value) < 100 else f"{value:.0f}%"


_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def size(value: Any, per_s: bool = False) -> str:
    """Bytes in binary units (1 KiB = 1024 B), 3 significant digits."""
    if value is None:
        return "-"
    value = float(value)
    step = 0
    while abs(value) >= 1024 and step < len(_BINARY) - 1:
        value /= 1024
        step += 1
    text = str(int(value)) if step == 0 else num(value)
    return f"{text}{_BINARY[step]}" + ("/s" if per_s else "")


def rate(value: Any, unit: str = "/s") -> str:
    """Events per second: 1.2k/s, 3.4M/s."""
    if value is None:
        return "-"
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{num(value / factor)}{suffix}{unit}"
    return f"{num(value)}{unit}"


def duration_ns(value: Any) -> str:
    if value is None:
        return "-"
    for factor, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if abs(value) >= factor:
            return f"{num(value / factor)}{unit}"
    return f"{num(value)}ns"


def duration_us(value: Any) -> str:
    return "-" if value is None else duration_ns(value * 1e3)


def duration_ms(value: Any) -> str:
    return "-" if value is None else duration_ns(value * 1e6)


# -- ranked rows ------------------------------------------------------------------------------
class _Sorted:
    """A list sorted by `key` only as far as it is read (heapq), fully once most of it is."""

    __slots__ = ("items", "key", "top", "all")

    def __init__(self, items: list[Any], key: Callable[[Any], Any]) -> None:
        self.items, self.key = items, key
        self.top: list[Any] = []
        self.all: list[Any] | None = None

    def get(self, j: int) -> Any:
        if self.all is not None:
            return self.all[j]
        if j >= len(self.top):
            want = max(500, 4 * len(self.top), j + 1)
            if want * 4 >= len(self.items):
                self.all = sorted(self.items, key=self.key)
                return self.all[j]
            self.top = heapq.nsmallest(want, self.items, key=self.key)
        return self.top[j]


class Ranked(Sequence):
    """`first` (the cited rows, in order), then `rest` by `key`, sorted only as far as it is read:
    a view of 100,000 threads under a budget reads a few hundred rows, so only those are ranked
    (heapq), and the full sort happens only for an unbounded view. `groups`, where given, are `rest`
    split by the leading part of the order (the workload's rows, then the others), each ranked by `key`
    on its own: the rows a budget reads are then mostly ranked among the workload's few."""

    def __init__(self, first: list[Any], rest: list[Any], key: Callable[[Any], Any],
                 groups: list[list[Any]] | None = None) -> None:
        self.first = first
        self._rest = rest
        self._runs = [_Sorted(group, key) for group in (groups if groups is not None else [rest])]

    def __len__(self) -> int:
        return len(self.first) + len(self._rest)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i < len(self.first):
            return self.first[i]
        j = i - len(self.first)
        for run in self._runs:
            if j < len(run.items):
                return run.get(j)
            j -= len(run.items)
        raise IndexError(i)

    def unordered(self) -> Iterator[Any]:
        """Every item, in no particular order (nothing gets sorted)."""
        return chain(self.first, self._rest)


def unordered(items: Sequence[Any]) -> Iterator[Any]:
    return items.unordered() if isinstance(items, Ranked) else iter(items)


# -- blocks -----------------------------------------------------------------------------------
def own_id(item: Any) -> tuple[str, ...]:
    """What a row of an entity shows: its own id (the default of Table.covers)."""
    return (item.id,)


# plain records on topology.models.Fields, not dataclasses: `convert` imports this module
class Lines(Fields):
    _FIELDS = ("lines", "essential")

    def __init__(self, lines: list[str], essential: bool = False) -> None:
        self.lines = lines
        self.essential = essential  # kept on budgets so tight that the optional blocks go


class Column(Fields):
    _FIELDS = ("header", "cell", "left", "optional")

    def __init__(self, header: str, cell: Callable[[Any], Any], left: bool = False, optional: bool = False) -> None:
        self.header = header
        self.cell = cell  # item -> text ('' / None / '-' = nothing to show)
        self.left = left  # text columns align left, numbers right
        # context, not evidence (a name, a ratio of other columns): the first to go when the rows that
        # findings cite would not fit otherwise
        self.optional = optional


class Table(Fields):
    _FIELDS = ("title", "columns", "items", "noun", "more", "pinned", "weight", "covers", "label", "slim")

    def __init__(self, title: str, columns: list[Column], items: Sequence[Any], noun: str, more: str,
                 pinned: int = 0, weight: float = 1.0, covers: Callable[[Any], tuple[str, ...]] = own_id,
                 label: Callable[[Any], str] | None = None, slim: bool = False) -> None:
        self.title = title
        self.columns = columns
        self.items = items  # ranked, most relevant first
        self.noun = noun  # what a row is, plural ("threads")
        self.more = more  # the exact request that lists what is left out (ctx.hints.query(...))
        self.pinned = pinned  # the first `pinned` items are cited by findings and shown before anything else
        self.weight = weight  # share of the budget relative to the other tables
        self.covers = covers  # ids a row shows
        self.label = label  # a cited row named on the fold line (default: the ids it shows)
        self.slim = slim  # render without the optional columns (set by fit for one budget)
        self._cells: dict[int, list[str]] = {}  # the rows' cells and costs, made once: not fields
        self._costs: dict[int, int] = {}

    def cost(self, i: int) -> int:
        """Estimated tokens of row i (cached: the same blocks serve several budgets)."""
        if i not in self._costs:
            self._costs[i] = _row_cost(self.cells(i))
        return self._costs[i]

    def cells(self, i: int) -> list[str]:
        if i not in self._cells:
            out = []
            for col in self.columns:
                value = col.cell(self.items[i])
                out.append("-" if value in (None, "") else str(value))
            self._cells[i] = out
        return self._cells[i]


Block = Lines | Table


CITED_NAMED = 5  # cited rows named on a fold line; beyond them, counted (the fold's command lists them all)


def _cited_rest(table: Table, shown: int) -> str:
    """The cited rows a budget left out, named compactly (a few, the rest counted: a finding that cites
    hundreds of rows must not push its own table out of the view)."""
    left = range(shown, table.pinned)
    rest = [table.label(table.items[i]) if table.label else " ".join(table.covers(table.items[i]))
            for i in left[:CITED_NAMED]]
    more = f" and {len(left) - CITED_NAMED} more" if len(left) > CITED_NAMED else ""
    return f" (cited: {', '.join(rest)}{more})" if rest else ""


def render_table(table: Table, shown: int) -> list[str]:
    total = len(table.items)
    if total == 0:
        return []
    if shown == 0:
        return [f"{table.title}: {total} {table.noun} left out{_cited_rest(table, 0)}: {table.more}"]
    rows = [table.cells(i) for i in range(shown)]
    keep = [c for c in range(len(table.columns)) if any(r[c] != "-" for r in rows)
            and not (table.slim and table.columns[c].optional)] or [0]
    title = f"{table.title} ({total})" if shown == total else f"{table.title} ({shown} of {total})"
    out = [title]
    grid = [[table.columns[c].header for c in keep]] + [[r[c] for c in keep] for r in rows]
    widths = [max(len(g[k]) for g in grid) for k in range(len(keep))]
    for g in grid:
        cells = [(v.ljust(w) if table.columns[keep[k]].left else v.rjust(w)) for k, (v, w) in
                 enumerate(zip(g, widths))]
        out.append("  ".join(cells).rstrip())
    if shown < total:
        out.append(f"… +{total - shown} more {table.noun}{_cited_rest(table, shown)}: {table.more}")
    return out


def _render(blocks: list[Block], shown: list[int], dropped: set[int]) -> str:
    out: list[str] = []
    for i, block in enumerate(blocks):
        if i in dropped:
            continue
        lines = block.lines if isinstance(block, Lines) else render_table(block, shown[i])
        out.extend(lines)
    return "\n".join(out) + "\n" if out else ""


class Fitted(Fields):
    _FIELDS = ("text", "tokens", "truncated", "omitted")

    def __init__(self, text: str, tokens: int, truncated: bool, omitted: dict[str, int]) -> None:
        self.text = text
        self.tokens = tokens
        self.truncated = truncated
        self.omitted = omitted


def _with_header(header: Callable[[int], str], body: str) -> tuple[str, int]:
    """Prefix the header line, which states the token count of the whole text (itself included)."""
    n = count_tokens(body) + count_tokens(header(0)) + 1
    for _ in range(5):
        text = header(n) + "\n" + body
        real = count_tokens(text)
        if real == n:
            break
        n = real
    return text, count_tokens(text)


def fit(blocks: list[Block], header: Callable[[int], str], max_tokens: int | None) -> Fitted:
    """Render `blocks` under `header` into at most `max_tokens` tokens (None = everything)."""
    tables = [i for i, b in enumerate(blocks) if isinstance(b, Table)]
    for i in tables:
        blocks[i].slim = False  # the same blocks serve several budgets
    shown = [len(b.items) if isinstance(b, Table) else 0 for b in blocks]
    dropped: set[int] = set()
    if max_tokens is not None and may_fit_whole(blocks, max_tokens):
        text, tokens = _with_header(header, _render(blocks, shown, dropped))
        if tokens <= max_tokens:  # a view that fits is returned whole
            return Fitted(text, tokens, False, {})
    if max_tokens is not None:
        shown = [min(b.pinned, len(b.items)) if isinstance(b, Table) else 0 for b in blocks]
        budget = max_tokens - count_tokens(header(max_tokens)) - 1
        # notes (legends, what was not measured) are context, not data: at most NOTES_SHARE of a budget
        for i in reversed(range(len(blocks))):
            notes = sum(count_tokens("\n".join(b.lines)) for k, b in enumerate(blocks)
                        if isinstance(b, Lines) and not b.essential and k not in dropped)
            if notes <= NOTES_SHARE * budget:
                break
            if isinstance(blocks[i], Lines) and not blocks[i].essential:
                dropped.add(i)
        base = count_tokens(_render(blocks, shown, dropped))
        # too tight even for titles and pinned rows: shed optional blocks, then pins, then whole tables
        for shed in _shedding(blocks, shown, dropped):
            if base <= budget:
                break
            shed()
            base = count_tokens(_render(blocks, shown, dropped))
        pins = [blocks[i].pinned if isinstance(blocks[i], Table) else 0 for i in range(len(blocks))]
        if any(shown[i] < pins[i] for i in tables):  # pins were shed: cited rows still go first
            base = count_tokens(_render(blocks, shown, dropped))
            _hand_out(blocks, tables, shown, dropped, budget - base, pins)
        base = count_tokens(_render(blocks, shown, dropped))
        _hand_out(blocks, tables, shown, dropped, budget - base)
        _trim(blocks, tables, shown, dropped, budget)
        _top_up(blocks, tables, shown, dropped, budget, pins)
    text, tokens = _with_header(header, _render(blocks, shown, dropped))
    omitted = {blocks[i].noun: len(blocks[i].items) - shown[i] for i in tables
               if shown[i] < len(blocks[i].items) or i in dropped}
    lines = sum(len(blocks[i].lines) for i in dropped if isinstance(blocks[i], Lines))
    if lines:
        omitted["lines"] = lines  # a legend or notes shed for room
    omitted = {k: v for k, v in omitted.items() if v}
    truncated = bool(omitted)
    return Fitted(text, tokens, truncated, omitted)


def may_fit_whole(blocks: list[Block], max_tokens: int) -> bool:
    """Whether the whole view could fit: each row and line costs at least two tokens, so a view with
    more than half a budget of them cannot, and is not rendered whole to find out."""
    rows = sum(len(b.items) + 2 if isinstance(b, Table) else len(b.lines) for b in blocks)
    return 2 * rows <= max_tokens


def _shedding(blocks: list[Block], shown: list[int], dropped: set[int]):
    """Ways to make a view smaller, least harmful first (each a callable): notes, the fold lines
    of tables that cite nothing, the columns that other columns imply, and only then the rows that
    findings cite."""
    for i, b in enumerate(blocks):
        if isinstance(b, Lines) and not b.essential:
            yield lambda i=i: dropped.add(i)
    for i, b in reversed(list(enumerate(blocks))):
        if isinstance(b, Table) and not shown[i]:
            yield lambda i=i: dropped.add(i)
    for b in blocks:
        if isinstance(b, Table) and any(c.optional for c in b.columns):
            yield lambda b=b: setattr(b, "slim", True)
    for i, b in reversed(list(enumerate(blocks))):
        if isinstance(b, Table) and shown[i]:
            yield lambda i=i: shown.__setitem__(i, 0)
    for i, b in reversed(list(enumerate(blocks))):
        if i not in dropped:
            yield lambda i=i: dropped.add(i)


def _hand_out(blocks: list[Block], tables: list[int], shown: list[int], dropped: set[int], room: int,
              limits: list[int] | None = None) -> None:
    """Give rows to the tables in turn (by weight) while their estimated cost fits in `room`
    (and, with `limits`, up to that many rows per table)."""
    cap = limits or [len(b.items) if isinstance(b, Table) else 0 for b in blocks]
    open_ = [i for i in tables if i not in dropped and shown[i] < min(cap[i], len(blocks[i].items))]
    while open_ and room > 0:
        i = min(open_, key=lambda k: (shown[k] / blocks[k].weight, k))
        table: Table = blocks[i]  # type: ignore[assignment]
        cost = table.cost(shown[i])
        if shown[i] + 1 == len(table.items):
            cost -= count_tokens(f"… +1 more {table.noun}: {table.more}")  # the fold line goes away
        if shown[i] == 0:
            cells = table.cells(0)
            cost += _row_cost([c.header for c, v in zip(table.columns, cells) if v != "-"])
        if cost > room:
            open_.remove(i)
            continue
        shown[i] += 1
        room -= cost
        if shown[i] >= min(cap[i], len(table.items)):
            open_.remove(i)


def _top_up(blocks: list[Block], tables: list[int], shown: list[int], dropped: set[int], budget: int,
            pins: list[int], tries: int = 12) -> None:
    """Estimates err on the safe side: try the next rows for real while they fit (cited rows first)."""
    for _ in range(tries):
        open_ = [i for i in tables if i not in dropped and shown[i] < len(blocks[i].items)]
        if not open_:
            return
        i = min(open_, key=lambda k: (shown[k] >= pins[k], shown[k] / blocks[k].weight, k))
        shown[i] += 1
        if count_tokens(_render(blocks, shown, dropped)) > budget:
            shown[i] -= 1
            return


def _row_cost(cells: list[str]) -> int:
    """Estimated tokens of one aligned row: its cells, plus a little for the padding between them."""
    shown = [c for c in cells if c != "-"]
    return count_tokens(" ".join(shown)) + math.ceil(len(shown) / 2) + 1


def _trim(blocks: list[Block], tables: list[int], shown: list[int], dropped: set[int], budget: int) -> None:
    """Estimates are close but padding is not free: take back rows until the real count fits."""
    while True:
        over = count_tokens(_render(blocks, shown, dropped)) - budget
        if over <= 0:
            return
        floor = {i: blocks[i].pinned for i in tables}
        if not any(shown[i] > floor[i] for i in tables):
            floor = {i: 0 for i in tables}  # the pinned rows themselves do not fit
        candidates = [i for i in tables if shown[i] > floor[i]]
        if not candidates:
            live = [i for i in range(len(blocks)) if i not in dropped]
            if len(live) <= 1:
                return  # nothing left to take back: the minimum budget guarantees we never get here
            dropped.add(live[-1])
            continue
        saved = 0
        while saved < over and candidates:
            i = max(candidates, key=lambda k: (shown[k] / blocks[k].weight, k))
            shown[i] -= 1
            saved += blocks[i].cost(shown[i])
            if shown[i] <= floor[i]:
                candidates.remove(i)
