"""Counts in sentences: "1 NUMA node", "3 NUMA nodes", "1 disk is", "2 disks are".

Every message the tool writes (diagnosis, views, collector reasons) says "1 thread", never
"1 thread(s)"; nouns and verbs are given in the plural, as they read for most counts.
"""

from __future__ import annotations

from typing import Any

SINGULAR_VERBS = {"are": "is", "have": "has", "were": "was"}
QUALIFIERS = {"in", "of", "with", "on", "for", "that", "from", "to", "feeding"}


def counted(n: int, noun: str, verb: str = "") -> str:
    """'1 NUMA node', '3 NUMA nodes', '1 process is', '2 threads spend', '1 consumer with samples':
    the noun phrase and the verb that follows it are given in the plural."""
    if verb:
        return f"{counted(n, noun)} {agree(n, verb)}"
    if n != 1:
        return f"{n} {noun}"
    words = noun.split(" ")
    # the noun is the last word before what qualifies it: "consumers with samples", "NUMA nodes"
    at = next((i for i, w in enumerate(words) if i and (w in QUALIFIERS or w.startswith("("))), len(words)) - 1
    words[at] = "/".join(_singular(part) for part in words[at].split("/"))
    return "1 " + " ".join(words)


def _singular(word: str) -> str:
    if word.endswith(("sses", "ches", "shes", "xes")):
        return word[:-2]
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def agree(n: int, verb: str) -> str:
    """A verb given in the plural, in the singular when one thing is its subject: 'are' -> 'is'."""
    if n != 1:
        return verb
    return SINGULAR_VERBS.get(verb, verb + ("es" if verb.endswith(("s", "sh", "ch", "x", "z")) else "s"))


def their(n: int) -> str:
    """The possessive for things counted: 'its' for one, 'their' for several."""
    return "its" if n == 1 else "their"


def listed(noun: str, items: list[Any], empty: str = "unknown") -> str:
    """'node 0', 'nodes 0, 1': a noun given in the singular, before the things it names."""
    if not items:
        return f"{noun} {empty}"
    return f"{noun}{'' if len(items) == 1 else 's'} {', '.join(map(str, items))}"


class Count(int):
    """A count that agrees with its noun in a sentence template: '{n:disks|are}' gives '1 disk is'
    or '2 disks are', '{n:devices}' '1 device' or '2 devices'."""

    def __format__(self, spec: str) -> str:
        if not spec:
            return str(int(self))
        noun, _, verb = spec.partition("|")
        return counted(int(self), noun, verb)
