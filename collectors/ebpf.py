"""eBPF on syscall tracepoints (bcc): how long each thread waits on futexes and how often another
thread wakes it, the measure of lock contention that /proc cannot give.

A futex wait is how a contended pthread mutex, a condition variable, Python's GIL and most user
space locks block. The program times every wait (sys_enter_futex with a waiting op, futex_waitv,
futex_wait) to its exit, per thread, and counts how many of them another thread ended by a
wake-up (return >= 0). Both are needed to tell contention from idleness: a thread waiting for a
lock holder is woken many times a second, while an idle one (a pool with no work, a queue polled
with a timeout) sleeps as long but is rarely woken. Of the waiting time, the lock wait share leaves
out the waits that ran to a timeout longer than 10 ms (a poller's sleeps) and keeps the short
timed waits: the GIL waits in 5 ms timed waits, and a Python thread contending for it spends most
of its wait there. A poller in a process whose other threads hold the GIL is woken tens of times
a second (GIL hand-overs) while it sleeps nearly all the time: its lock wait share stays small.
A wait still going on when the window ends counts up to the end. A wait that began before the
window counts from its start for the threads of the processes in scope when it opens (their
/proc/PID/task/TID/syscall says which are inside a futex wait then); other threads' waits count
from their first wait inside the window.

Cost (BENCHMARKS.md): compiling the program takes 0.25-0.6 s of CPU and ~130 MiB of memory for clang,
once per kernel: what clang made is kept on disk and loaded by later runs in a few milliseconds
(collectors.lib.bpfcache). The program is attached from `prepare` to the window's end. While it is attached, each
futex call pays about 1 µs inside the two probes plus the kernel's syscall-tracepoint path, and
every other syscall of the host ~0.2 µs for that path; it is detached when the window ends. Needs
root; collectors.bpfhost has the rest of what the host must have. Kprobes are never used: many
hosts disable them.

In a PID namespace of its own (a container without the host's), the program reports the ids of
that namespace, which /proc shows there, and ignores the tasks outside it.

The fragment holds every thread of the processes in scope (0 % for those that never waited) and,
host-wide, up to OUT_OF_SCOPE_MAX other threads that waited at least 1 % of the window and were
woken at least once a second, each linked to its process when the process collector reported it.
"""

from __future__ import annotations

import os
import re
import time
from typing import NamedTuple

from witty_profiler.collectors.base import Collector, register
from witty_profiler.collectors.lib.bpfhost import NotReady, kernel_headers, load_bcc, tracefs
from witty_profiler.collectors.lib.procfs import mapping_of, read_text
from witty_profiler.collectors.lib.tasks import list_tids
from witty_profiler.topology import Graph
from witty_profiler.topology.ids import process_id, thread_id
from witty_profiler.topology.vocabulary import E, M, T

# FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2: the ops that block
WAIT_OPS = (0, 6, 9, 11, 13)
FUTEX_CMD_MASK = 0x7F  # drops FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME
SYSCALLS = ("futex", "futex_waitv", "futex_wait")  # futex_waitv since 5.16, futex_wait since 6.7
# syscall numbers as /proc/PID/task/TID/syscall gives them: futex's differs by architecture,
# futex_waitv (449) and futex_wait (455) have one number everywhere
FUTEX_NR = {"x86_64": 202, "aarch64": 98, "riscv64": 98, "loongarch64": 98, "ppc64le": 221, "ppc64": 221,
            "s390x": 238, "i686": 240, "armv7l": 240}
FUTEX_WAITV_NR, FUTEX_WAIT_NR = 449, 455
BPF_NOEXIST = 1  # bpf_map_update_elem flag: leave an entry the program wrote meanwhile as it is
HOST_PIDNS_INO = 0xEFFFFFFC  # PROC_PID_INIT_INO: the inode of the initial PID namespace, on every kernel
# A wait that ran to its timeout after longer than this is a sleep (a queue polled with a timeout),
# not a lock: Python's GIL waits in 5 ms timed waits, a poller in tens of ms or more
LOCK_WAIT_MAX_MS = 10
OUT_OF_SCOPE_MAX = 100
OUT_OF_SCOPE_MIN_PCT = 1.0
OUT_OF_SCOPE_MIN_PER_S = 1.0

_HEAD = """
struct wait_t { u64 ns; u64 lock_ns; u64 woken; char comm[16];  /* TASK_COMM_LEN */ };
struct lock_key_t { u64 id; u64 addr; };
struct start_t { u64 ts; u64 addr; };  /* when a wait began (CLOCK_MONOTONIC ns), on which futex word */
BPF_HASH(started, u64, struct start_t, 65536);  /* tgid << 32 | tid -> its wait in progress */
BPF_HASH(waits, u64, struct wait_t, 65536);
BPF_HASH(lock_waits, struct lock_key_t, u64, 65536);  /* thread, futex word -> lock wait ns */

/* tgid << 32 | tid as /proc shows them here: in a nested PID namespace (a container), the ids
   of that namespace, and 0 for a task outside it */
static u64 current_id(void) {
#ifdef PIDNS_INO
    struct bpf_pidns_info ns = {};
    if (bpf_get_ns_current_pid_tgid(PIDNS_DEV, PIDNS_INO, &ns, sizeof(ns)))
        return 0;
    return ((u64)ns.tgid << 32) | ns.pid;
#else
    return bpf_get_current_pid_tgid();
#endif
}

static int enter(u64 addr) {
    u64 id = current_id();
    if (id == 0)
        return 0;
    struct start_t s = {bpf_ktime_get_ns(), addr};
    started.update(&id, &s);
    return 0;
}

static int leave(long ret) {
    u64 id = current_id();
    struct start_t *s = started.lookup(&id);
    if (s == 0)
        return 0;
    u64 took = bpf_ktime_get_ns() - s->ts;
    u64 addr = s->addr;
    started.delete(&id);
    struct wait_t zero = {};
    struct wait_t *w = waits.lookup_or_try_init(&id, &zero);
    if (w == 0)
        return 0;
    if (w->ns == 0)
        bpf_get_current_comm(&w->comm, sizeof(w->comm));
    w->ns += took;
    if (ret >= 0)  /* woken by another thread; < 0: timed out, interrupted, or the word had changed */
        w->woken += 1;
    if (ret >= 0 || took <= LOCK_WAIT_MAX_NS) {  /* not a long sleep that ran to its timeout */
        w->lock_ns += took;
        struct lock_key_t key = {id, addr};
        u64 none = 0;
        u64 *on = lock_waits.lookup_or_try_init(&key, &none);
        if (on != 0)
            *on += took;
    }
    return 0;
}
"""
_FUTEX_ENTER = """
TRACEPOINT_PROBE(syscalls, sys_enter_futex) {
    int op = args->op & %d;
    if (%s)
        return 0;
    return enter((u64)args->uaddr);
}
""" % (FUTEX_CMD_MASK, " && ".join(f"op != {op}" for op in WAIT_OPS))
_ENTER = """
TRACEPOINT_PROBE(syscalls, sys_enter_%s) { return enter(%s); }
"""
_EXIT = """
TRACEPOINT_PROBE(syscalls, sys_exit_%s) { return leave(args->ret); }
"""


def program(syscalls: list[str], pidns: tuple[int, int] | None = None) -> str:
    """The C text for the futex syscalls this kernel has tracepoints for; `pidns` (device, inode of
    /proc/self/ns/pid) when this process runs in a PID namespace other than the host's."""
    parts = [f"#define LOCK_WAIT_MAX_NS {LOCK_WAIT_MAX_MS * 1_000_000}ULL\n",
             f"#define PIDNS_DEV {pidns[0]}ULL\n#define PIDNS_INO {pidns[1]}ULL\n" if pidns else "", _HEAD]
    for name in syscalls:
        # futex_wait waits on one word; futex_waitv on a vector of them: no single address
        parts.append(_FUTEX_ENTER if name == "futex" else _ENTER % (name, "(u64)args->uaddr" if name == "futex_wait"
                                                                    else "0"))
        parts.append(_EXIT % name)
    return "".join(parts)


class Waits(NamedTuple):
    """One thread's futex waits in the window."""
    ns: int
    lock_ns: int  # of which ended by a wake-up, or within LOCK_WAIT_MAX_MS
    woken: int
    comm: str | None


def thread_metrics(wait_ns: int, lock_ns: int, woken: int, window_s: float) -> dict[str, float]:
    def share(ns: int) -> float:
        return round(min(100.0, ns / (window_s * 1e9) * 100), 2)

    return {M.FUTEX_WAIT_PCT: share(wait_ns), M.FUTEX_LOCK_WAIT_PCT: share(lock_ns),
            M.FUTEX_WAKEUPS_PER_S: round(woken / window_s, 2)}


def map_items(table) -> list[tuple[int, object]]:
    """A map's (key, value) pairs, keys as ints; values as ints where they are numbers."""
    try:  # one syscall per batch instead of two per key (7x faster at 1,500 threads)
        pairs = list(table.items_lookup_batch())
    except Exception:  # noqa: BLE001 - kernels before 5.6 have no batch lookups; bcc raises bare Exceptions
        pairs = list(table.items())
    # batch lookups give ints for numbers, items() ctypes numbers
    return [(getattr(key, "value", key), getattr(value, "value", value)) for key, value in pairs]


def thread_of(key: int) -> tuple[int, int]:
    """The program's tgid << 32 | tid key -> (pid, tid)."""
    return key >> 32, key & 0xFFFFFFFF


def wait_rows(table) -> dict[tuple[int, int], Waits]:
    """(pid, tid) -> its waits, for every thread in the program's `waits` map."""
    return {thread_of(key): Waits(value.ns, value.lock_ns, value.woken, value.comm.decode("utf-8", "replace"))
            for key, value in map_items(table)}


def nested_pid_namespace(proc: str, release: str) -> tuple[int, int] | None:
    """(device, inode) of this process's PID namespace when it is not the host's (a container),
    else None. The program then reports ids as /proc shows them here; that needs the helper
    bpf_get_ns_current_pid_tgid (kernel 5.7): on older kernels the ids could not be matched."""
    try:
        ns = os.stat(f"{proc}/self/ns/pid")
    except OSError:
        return None
    if ns.st_ino == HOST_PIDNS_INO:
        return None
    if kernel_version(release) < (5, 7):
        raise NotReady(f"this process runs in a PID namespace of its own and kernel {release} (before 5.7) "
                       "cannot give eBPF its ids: run in the host's PID namespace (docker --pid=host, "
                       "Kubernetes hostPID: true)")
    return ns.st_dev, ns.st_ino


def kernel_version(release: str) -> tuple[int, int]:
    """'6.1.0-57-amd64' -> (6, 1)."""
    match = re.match(r"(\d+)\.(\d+)", release)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def futex_wait_address(syscall: str | None, machine: str) -> int | None:
    """The futex word a thread is blocked on, from /proc/PID/task/TID/syscall ("202 0x55.. 0x189 ...":
    the syscall number, then its arguments); 0 in futex_waitv (a vector of words); None when it is
    not in a futex wait ("running", "-1 ..." outside a syscall, no text)."""
    parts = (syscall or "").split()
    if len(parts) < 3 or not parts[0].isdigit():
        return None
    nr = int(parts[0])
    if nr == FUTEX_WAITV_NR:
        return 0
    if nr == FUTEX_WAIT_NR or (nr == FUTEX_NR.get(machine) and int(parts[2], 16) & FUTEX_CMD_MASK in WAIT_OPS):
        return int(parts[1], 16)
    return None


def main_locks(table) -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, tid) -> (the futex word it spent the most lock wait on, that wait in ns), from the
    program's `lock_waits` map."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for key, ns in map_items(table):
        thread = thread_of(key.id)
        if key.addr and (thread not in out or (ns, -key.addr) > (out[thread][1], -out[thread][0])):
            out[thread] = (key.addr, ns)
    return out


def started_rows(table) -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, tid) -> (when the wait it is in began, its futex word), from the program's `started` map."""
    return {thread_of(key): (value.ts, value.addr) for key, value in map_items(table)}


@register
class EbpfCollector(Collector):
    name = "ebpf"
    reads = "futex syscall tracepoints through bcc (wait time and wake-ups per thread)"
    needs = "root, bcc (python3-bpfcc), kernel headers, tracefs"
    order = 90  # finishes after the process collector, whose scope it reads

    def prepare(self) -> None:
        self.bpf, self.problem, self.note, self.pidns = None, None, "", None
        if not self.ctx.is_root:
            self.problem = "eBPF needs root (CAP_BPF and CAP_PERFMON): run as root for futex wait times"
            return
        try:
            events = tracefs(read_text(f"{self.ctx.proc}/self/mounts") or "") / "events" / "syscalls"
            present = [s for s in SYSCALLS if (events / f"sys_enter_{s}").is_dir()]
            if "futex" not in present:
                raise NotReady(f"no futex syscall tracepoints in {events} (kernel without CONFIG_FTRACE_SYSCALLS)")
            release = os.uname().release
            tree, self.note = kernel_headers(release)
            self.pidns = nested_pid_namespace(str(self.ctx.proc), release)
        except NotReady as exc:
            self.problem = str(exc)
            return
        self.syscalls = present
        # imported where a program is loaded: every collect imports this module, most without root or bcc
        from witty_profiler.collectors.lib.bpfload import load_program
        try:  # bcc (libbcc, clang) is loaded only where the program is not kept compiled
            self.bpf, said = load_program(load_bcc, program(present, self.pidns), str(tree) if tree else None,
                                          events.parent.parent)
            self.bpf.attach_tracepoints()
        except NotReady as exc:
            self.problem = str(exc)
            return
        except (RuntimeError, OSError) as exc:  # clang's or the kernel's reason
            if self.bpf is not None:
                self.bpf.cleanup()
                self.bpf = None
            raise RuntimeError(f"bcc could not load the futex program: {exc}") from None
        self.status.extra.update(said)

    def start(self) -> None:
        if self.bpf is None:
            return
        try:
            self._seed_started()
        except BaseException:  # the engine calls no finish after a failed start: nothing may stay attached
            self.bpf.cleanup()
            self.bpf = None
            raise

    def _seed_started(self) -> None:
        self.t0_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)  # the clock of bpf_ktime_get_ns
        # waits the program cannot have seen begin: those of the scope's threads count from now
        scope = self.ctx.cache.get("scope_pids") or self.ctx.pids or ()
        table = self.bpf[b"started"]
        for pid in scope:
            for tid in list_tids(str(self.ctx.proc), pid):
                addr = self._futex_wait_address(pid, tid)
                if addr is not None:
                    table.update(table.Key((pid << 32) | tid), table.Leaf(self.t0_ns, addr), BPF_NOEXIST)

    def finish(self) -> Graph:
        if self.bpf is None:
            return self.unavailable(self.problem or "the eBPF program was not loaded")
        try:
            waited = wait_rows(self.bpf[b"waits"])
            locks = main_locks(self.bpf[b"lock_waits"])
            going = started_rows(self.bpf[b"started"])
            now_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        finally:
            self.bpf.cleanup()  # detached: between windows the host pays nothing
        return self._graph(waited, locks, going, now_ns)

    def _mapping(self, pid: int, address: int) -> str | None:
        """Where the lock lives: in the program's data (a runtime's global lock, e.g. CPython's GIL in
        python3.11 or libpython), [heap], an anonymous mapping; maps read once per process."""
        maps = self._maps.get(pid)
        if maps is None:
            maps = self._maps[pid] = read_text(f"{self.ctx.proc}/{pid}/maps") or ""
        return mapping_of(maps, address)

    def _futex_wait_address(self, pid: int, tid: int) -> int | None:
        return futex_wait_address(read_text(f"{self.ctx.proc}/{pid}/task/{tid}/syscall"), os.uname().machine)

    def _graph(self, waited: dict[tuple[int, int], Waits], locks: dict[tuple[int, int], tuple[int, int]],
               going: dict[tuple[int, int], tuple[int, int]], now_ns: int) -> Graph:
        g = self.fragment()
        host = self.ctx.host
        window_s = (now_ns - self.t0_ns) / 1e9
        self._maps: dict[int, str] = {}
        scope = set(self.ctx.cache.get("scope_pids") or ())
        shown = self.ctx.cache.get("process_pids")  # None: the process collector did not run
        none = Waits(0, 0, 0, None)
        # a wait still going on counts up to now, for the threads that may be shown (out of scope: woken
        # often enough); the thread must still be inside it (one that died waiting leaves its entry behind).
        # Whether it will end by a wake-up is not known yet: it counts as a lock wait too.
        often = OUT_OF_SCOPE_MIN_PER_S * window_s
        for key, (began, addr) in going.items():
            if (key[0] in scope or waited.get(key, none).woken >= often) and self._futex_wait_address(*key) is not None:
                w, ns = waited.get(key, none), now_ns - max(began, self.t0_ns)
                waited[key] = w._replace(ns=w.ns + ns, lock_ns=w.lock_ns + ns)
                main, main_ns = locks.get(key, (0, 0))
                if addr and (addr == main or ns > main_ns):  # on its main lock, or outweighing it
                    locks[key] = (addr, ns + (main_ns if addr == main else 0))
        chosen = {key for key in waited if key[0] in scope}
        for pid in sorted(scope):
            chosen.update((pid, tid) for tid in list_tids(str(self.ctx.proc), pid))
        others = []
        for key, w in waited.items():
            m = thread_metrics(w.ns, w.lock_ns, w.woken, window_s)
            if key[0] not in scope and m[M.FUTEX_WAIT_PCT] >= OUT_OF_SCOPE_MIN_PCT \
                    and m[M.FUTEX_WAKEUPS_PER_S] >= OUT_OF_SCOPE_MIN_PER_S:
                others.append((-w.ns, key))
        chosen.update(key for _, key in sorted(others)[:OUT_OF_SCOPE_MAX])
        for pid, tid in sorted(chosen):
            if shown is not None and pid not in shown:
                continue  # a process too short-lived or idle for the graph: its thread would dangle
            w = waited.get((pid, tid), none)
            attrs = {"tid": tid, "pid": pid}
            if w.comm:
                attrs["name"] = w.comm
            if (pid, tid) in locks:
                attrs["futex_addr"] = f"0x{locks[pid, tid][0]:x}"
                where = self._mapping(pid, locks[pid, tid][0])
                if where:
                    attrs["futex_mapping"] = where
            tid_id = thread_id(host, pid, tid)
            g.entity_of(T.THREAD, tid_id, attrs, thread_metrics(w.ns, w.lock_ns, w.woken, window_s))
            if shown is not None:
                g.edge_of(E.HAS_THREAD, process_id(host, pid), tid_id)
        notes = [self.note] + (["ids of this PID namespace: threads outside it are not traced"] if self.pidns else [])
        if any(notes):
            traced_on = f"futex waits traced on {', '.join(self.syscalls)}"
            self.status.reason = "; ".join([traced_on] + [n for n in notes if n])
        return g
