"""The items of a native graph document checked in bulk: the fast path of topology.validate.

A Python loop per item costs about as much as parsing the JSON. Here each field of every item is read
with one `map` over all of them, the types met are gathered into sets and compared with the format's
once, the metric values go into one list for their range, and the records are made with `map`: the
same checks as the item-by-item path, each a pass at C speed. Anything that is not plainly right (an
item that is not an object, a wrong type, a list of CPUs to look into, an id given twice, an edge to an
entity the file lacks, a number out of range, a field this version does not know) gives None, and
topology.validate goes through the items one by one and names the first problem as it always has.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from itertools import chain, repeat
from operator import is_not, itemgetter
from typing import Any

from witty_profiler.topology.models import ATTR_TYPES, Edge, Entity, made_edge, made_entity

MAX_MAGNITUDE = 1e18  # bytes, nanoseconds, pages: a real value stays far below; 1e308 would overflow the sums
_ENTITY_ORDER = ("id", "type", "attrs", "metrics")  # as the records take them
_EDGE_ORDER = ("id", "type", "source", "target", "attrs", "metrics")
ENTITY_FIELDS, EDGE_FIELDS = frozenset(_ENTITY_ORDER), frozenset(_EDGE_ORDER)
STR = frozenset((str,))
PARTS = frozenset((dict, type(None)))
NUMBER_TYPES = frozenset((int, float, type(None)))
_DICT = frozenset((dict,))


def bulk_records(items: list[Any], links: list[Any]) -> tuple[dict[str, Entity], dict[str, Edge]] | None:
    """(entities by id, edges by id) of a document whose every number is known to be finite, or None
    where the items must be looked at one by one (see above)."""
    if not (set(map(type, items)) <= _DICT and set(map(type, links)) <= _DICT):
        return None
    found = _fields(items, _ENTITY_ORDER), _fields(links, _EDGE_ORDER)
    if found[0] is None or found[1] is None:
        return None
    (ids, kinds, attrs, metrics), (eids, ekinds, sources, targets, eattrs, emetrics) = found
    # the ends of the edges need no look at their types: each must be the id of an entity, a string
    if not (set(map(type, chain(ids, kinds, eids, ekinds))) <= STR
            and set(map(type, chain(attrs, metrics, eattrs, emetrics))) <= PARTS
            and plain_attrs(chain(attrs, eattrs)) and plain_metrics(chain(metrics, emetrics))):
        return None
    entities = dict(zip(ids, map(made_entity, ids, kinds, attrs, metrics)))
    if len(entities) != len(ids) or not all(map(entities.__contains__, chain(sources, targets))):
        return None
    edges = dict(zip(eids, map(made_edge, eids, ekinds, sources, targets, eattrs, emetrics)))
    return (entities, edges) if len(edges) == len(eids) else None


def _fields(items: list[dict[str, Any]], names: tuple[str, ...]) -> list[Sequence[Any]] | None:
    """For each name, that field of every item (None where an item lacks it), or None where an item has a
    field not in `names`."""
    try:  # every field in every item, as this tool writes them: a pass per field (cheaper than a row per item
        # turned into columns), and the lengths say there is no other
        found = [list(map(itemgetter(name), items)) for name in names]
        if sum(map(len, items)) == len(names) * len(items):
            return found
    except KeyError:  # attrs or metrics left out (null)
        pass
    if not set(chain.from_iterable(items)) <= frozenset(names):
        return None
    return [list(map(dict.get, items, repeat(name))) for name in names]


def plain_attrs(found: Iterable[dict[str, Any] | None]) -> bool:
    """Every attribute the format knows has its type or null (a list of CPUs is not plain: its items need
    a look)."""
    dicts = list(filter(None, found))
    named = set(zip(chain.from_iterable(dicts), map(type, chain.from_iterable(map(dict.values, dicts)))))
    return all(map(plain_attr, named))


def plain_attr(named: tuple[str, type]) -> bool:
    """An attribute whose type needs no closer look: not a known one, null, or of its type (a list of CPUs
    is looked at item by item)."""
    allowed = ATTR_TYPES.get(named[0])
    return allowed is None or named[1] is type(None) or (named[1] in allowed and named[1] is not list)


def plain_metrics(found: Iterable[dict[str, Any] | None]) -> bool:
    """Every metric value a number or null, and within MAX_MAGNITUDE (the numbers known to be finite)."""
    values = list(chain.from_iterable(map(dict.values, filter(None, found))))
    return set(map(type, values)) <= NUMBER_TYPES and in_range(values)


def in_range(values: list[Any]) -> bool:
    """Whether the numbers among `values` (numbers and nulls) are all within MAX_MAGNITUDE."""
    try:
        return not values or (max(values) <= MAX_MAGNITUDE and min(values) >= -MAX_MAGNITUDE)
    except TypeError:  # a null among them: compared without the nulls
        known = list(filter(partial(is_not, None), values))
        return not known or (max(known) <= MAX_MAGNITUDE and min(known) >= -MAX_MAGNITUDE)
