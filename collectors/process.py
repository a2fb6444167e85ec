"""Processes and threads: CPU, run-queue wait, context switches, affinity, where they ran, memory,
I/O rates, NUMA pages, cgroup and container, and the process tree.

Cost model (the host may run thousands of tasks; see BENCHMARKS.md): every interval, one
/proc/PID/stat per active process (idle ones outside the scope every 5th interval, kernel threads
outside it at the two ends only), plus io and each thread's stat and schedstat for the processes
in scope. At the start and the end only: status and io of every process, each scope thread's
status (rates over the window need only the two ends); outside the scope, run-queue wait and
context switches only for single-threaded processes, whose main thread is the whole process.
Expensive reads only for the processes in scope: maps and environ when a process joins the
scope, numa_maps at the end.

The scope is the given pids and their descendants; without pids, the processes recognised as AI
training/inference (name or command line, else framework libraries in maps or RANK/WORLD_SIZE in
environ, searched once when a process is first seen) and their descendants, plus the top CPU
consumers of the window so far. Kernel threads appear only when they used at least 1 % of a core.
"""

from __future__ import annotations

import heapq
import os
import time
from datetime import datetime, timezone
from functools import lru_cache

from witty_profiler.collectors.base import Collector, register
from witty_profiler.collectors.lib.procfs import (
    CLK_TCK,
    PAGE_SIZE,
    blkio_ticks,
    container_from_cgroup,
    delay_accounting,
    format_cpulist,
    parse_cgroup,
    parse_cmdline,
    parse_cpulist,
    parse_environ,
    parse_maps_libraries,
    parse_numa_maps,
    parse_stat,
    read_bytes,
    read_small,
    read_text,
)
from witty_profiler.collectors.lib.sampling import longest_busy_run, ratio_metrics, window_metrics
from witty_profiler.collectors.lib.tasks import (
    ProcState,
    ThreadState,
    list_pids,
    list_tids,
    read_io,
    read_schedstat,
    read_stat,
    read_status,
)
from witty_profiler.collectors.numa import cpu_to_node
from witty_profiler.topology import Edge, Entity, Graph
from witty_profiler.topology.gcpause import gc_paused
from witty_profiler.topology.ids import edge_id, entity_id, numa_id, process_id, thread_id
from witty_profiler.topology.privacy import filter_env, redact_argv, redact_cmdline
from witty_profiler.topology.vocabulary import E, M, T
from witty_profiler.topology.wording import counted
from witty_profiler.topology.workload import LIBRARY_MARKERS, RANK_MARKERS, classify_process, job_of, thread_role

TOP_CONSUMERS = 20
TOP_EVERY = 5  # samples between two rankings of the top CPU consumers
IDLE_AFTER = 3  # an out-of-scope process idle for this many samples in a row...
IDLE_EVERY = 5  # ...is read every 5th sample only, until it uses CPU again
KERNEL_THREAD_MIN_PCT = 1.0
MOSTLY_RAN_SHARE = 0.10  # a node holding >= 10 % of a task's run time counts as "where it ran"
TICK_PCT = 100.0 / CLK_TCK  # clock ticks per second -> % of one core

# A command line can be megabytes (`bash -c <script>`, `python -c <program>`); a graph keeps its first
# CMDLINE_MAX_CHARS, enough for a long launcher's arguments, so that one process cannot fill a view or
# an assistant's page.
CMDLINE_MAX_CHARS = 4096


@lru_cache(maxsize=4096)  # forked workers share one command line
def stored_cmdline(cmdline: str, argv: tuple[str, ...] | None = None) -> str:
    """The command line as a graph stores it: secrets redacted first (so a cut cannot keep half a
    secret readable), then bounded with a marker that says how much was left out. With `argv` (given
    where an argument holds white space, so that the joined line cannot tell its words apart) the
    arguments are redacted one by one: `--password 'a b'` loses all of `a b`."""
    text = " ".join(redact_argv(list(argv))) if argv else redact_cmdline(cmdline)
    if len(text) <= CMDLINE_MAX_CHARS:
        return text
    return f"{text[:CMDLINE_MAX_CHARS]}… [{len(text) - CMDLINE_MAX_CHARS} more characters]"


def _entity(g: Graph, kind: str, eid: str, attrs: dict, metrics: dict) -> None:
    g.add_entity(Entity(id=eid, type=kind, attrs=attrs, metrics=metrics))


def _node(g: Graph, host: str, node: int) -> None:
    """A bare NUMA node entity, so that runs_on/allocates_on never dangle without the numa collector."""
    nid = numa_id(host, node)
    if nid not in g:
        _entity(g, T.NUMA_NODE, nid, {"node": node}, {})


def _edge(g: Graph, kind: str, source: str, target: str, metrics: dict | None = None,
          attrs: dict | None = None) -> None:
    g.add_edge(Edge(id=edge_id(kind, source, target), type=kind, source=source, target=target, attrs=attrs or {},
                    metrics=metrics or {}))


@register
class ProcessCollector(Collector):
    name = "process"
    reads = ("/proc/PID/{stat,status,io,numa_maps,cgroup,environ,cmdline}, task/TID/{stat,schedstat}, "
             "/proc/sys/kernel/task_delayacct")
    needs = "any user; root reads every process's io and numa_maps"
    order = 10  # finishes first, so that later collectors can read the scope it settled on

    # -- the window ---------------------------------------------------------------------------
    def start(self) -> None:
        self.proc = str(self.ctx.proc)
        self.delayacct = delay_accounting(f"{self.proc}/sys")  # else the blocked-on-I/O ticks stay 0
        self.node_of = cpu_to_node(self.ctx)
        self.boot_t0 = time.clock_gettime(time.CLOCK_BOOTTIME)
        self.btime = _boot_time(self.proc)
        self.requested = set(self.ctx.pids) if self.ctx.pids is not None else None
        self.procs: dict[int, ProcState] = {}
        self.by_name: dict[str, ProcState] = {}  # the same, keyed by the /proc entry name
        # names of the processes a steady-state sample may skip: idle ones by pid % IDLE_EVERY,
        # and out-of-scope kernel threads in the last set (see _sample)
        self.lazy: list[set[str]] = [set() for _ in range(IDLE_EVERY + 1)]
        self.not_pids: set[str] = set()  # /proc entries that are not processes
        self.busy: dict[int, ProcState] = {}  # processes that used CPU since first seen: the top consumers' pool
        self.scope: dict[int, ProcState] = {}  # the processes in scope, read thread by thread
        self.unreadable: dict[str, int] = {}
        self.scope_updates, self.scope_known = -1, -1  # see _update_scope
        self.samples_taken = 0
        t = time.monotonic()
        for pid in list_pids(self.proc):
            self._first_sight(pid, t)
        for p in list(self.procs.values()):
            self._classify(p)
        self._update_scope(t)
        self.ctx.cache["scope_pids"] = sorted(self.scope)  # as the window opens; finish() gives the final one
        for p in list(self.procs.values()):
            self._endpoint(p, t)

    def sample(self) -> None:
        with gc_paused():
            self._sample(everything=False)

    def _sample(self, everything: bool) -> None:
        """The hot path: one stat per process, split once, a few appends (see tasks.observe_fields).

        Outside the scope, two kinds of process are not read every interval (everything=True, at
        the end, reads them all): kernel threads, read at the start and the end only (a big host
        has thousands of per-CPU kworkers; only their rate over the window is reported), and
        processes idle for IDLE_AFTER samples in a row, read every IDLE_EVERY-th sample (spread
        by pid) until they use CPU again. Their rate over the window stays exact; their p95/max
        are over the coarser intervals. Most processes of a host sleep: this is most of the cost."""
        t = time.monotonic()
        proc, node_of = self.proc, self.node_of
        self.samples_taken += 1
        phase = self.samples_taken % IDLE_EVERY
        by_name = self.by_name  # keyed by the /proc entry name: no int() for the processes skipped
        lazy = self.lazy
        try:
            names = os.listdir(proc)
        except OSError:
            names = []
        # set arithmetic in C instead of a Python test per skipped entry
        skip = self.not_pids
        if not everything:
            skip = lazy[IDLE_EVERY].union(skip, *(b for i, b in enumerate(lazy[:IDLE_EVERY]) if i != phase))
        for name in [n for n in names if n not in skip]:
            p = by_name.get(name)
            if p is None and not name.isdigit():
                self.not_pids.add(name)  # 'self', 'sys', 'net'...
                continue
            raw = read_small(f"{proc}/{name}/stat")
            if not raw:
                if p is not None:
                    p.gone = True  # exited between the listing and the read
                continue
            if p is not None and raw == p.last_stat:
                # the same bytes as last time (a sleeping process): nothing to parse
                p.observe_unchanged(t)
                if p.idle_samples == IDLE_AFTER and not p.in_scope and not p.kernel:
                    lazy[p.pid % IDLE_EVERY].add(name)
                continue
            text = raw.decode("utf-8", "replace")
            fields = text[text.rfind(")") + 2:].split(None, 38)
            if p is None or p.starttime != int(fields[19]):  # new, or the pid was reused
                p = self._first_sight(int(name), t, parse_stat(text))
                if p is not None:
                    self._classify(p)
                    self._endpoint(p, t)
                continue
            idle_before = p.idle_samples >= IDLE_AFTER
            p.observe_fields(t, fields, node_of)
            p.last_stat = raw
            if p.cpu_ticks_seen:
                self.busy[p.pid] = p
            if (p.idle_samples >= IDLE_AFTER) != idle_before and not p.in_scope and not p.kernel:
                bucket = lazy[p.pid % IDLE_EVERY]
                bucket.add(name) if not idle_before else bucket.discard(name)
        for name in by_name.keys() - set(names):
            by_name[name].gone = True
        self._update_scope(t)
        for p in self.scope.values():
            if not p.gone:
                self._threads(p, t, stat=True, schedstat=True, status=False)
                if not p.kernel and p.io_read.values:  # per interval in scope: write bursts, p95/max
                    io = read_io(self.proc, p.pid)
                    if io is not None:
                        p.observe_io(t, io)

    def finish(self) -> Graph:
        with gc_paused():
            self._sample(everything=True)
        t = time.monotonic()
        for p in self.procs.values():
            if not p.gone:
                self._endpoint(p, t, end=True)
        for p in self.procs.values():
            if p.in_scope and not p.gone:
                self._numa_pages(p)
        self.ctx.cache["scope_pids"] = sorted(pid for pid, p in self.procs.items() if p.in_scope)
        # resident shared memory at the end (kB): the IPC collector reads the maps only of processes with some
        self.ctx.cache["rss_shmem_kb"] = {pid: _leading_int(p.status_last[1].get("RssShmem", ""))
                                          for pid, p in self.procs.items() if p.status_last and not p.gone}
        self._report_unreadable()
        with gc_paused():
            return self._graph()

    # -- reading ------------------------------------------------------------------------------
    def _first_sight(self, pid: int, t: float, st=None) -> ProcState | None:
        st = st or read_stat(f"{self.proc}/{pid}/stat")
        if st is None:
            return None
        started = st.starttime / CLK_TCK >= self.boot_t0
        p = ProcState(pid, st, started)
        p.observe_stat(t, st, self.node_of.get(st.processor))
        self.procs[pid] = p
        self.by_name[str(pid)] = p
        self.busy.pop(pid, None)  # a reused pid: the old process is forgotten
        self.scope.pop(pid, None)
        for lazy in self.lazy:  # a reused pid starts afresh
            lazy.discard(str(pid))
        if p.kernel:
            self.lazy[IDLE_EVERY].add(str(pid))
        if p.kernel:  # no command line, always in the root cgroups: nothing more to read
            p.cmdline, p.cgroups = "", {}
            self.ctx.cache.setdefault("proc_cgroups", {})[pid] = p.cgroups
            return p
        raw = read_text(f"{self.proc}/{pid}/cmdline") or ""
        p.cmdline = parse_cmdline(raw)
        if any(c in raw for c in " \t\n"):  # an argument holds white space: keep the words, for redaction
            p.extra["argv"] = tuple(a for a in raw.split("\0") if a)
        p.cgroups = parse_cgroup(read_text(f"{self.proc}/{pid}/cgroup") or "")
        self.ctx.cache.setdefault("proc_cgroups", {})[pid] = p.cgroups  # the cgroup collector reuses these
        return p

    def _endpoint(self, p: ProcState, t: float, end: bool = False) -> None:
        """status, io and all threads' schedstat/status: the two ends of the window's rates."""
        if p.kernel and not p.in_scope:
            return  # only a kernel thread's CPU use is reported: its stat is enough
        status = read_status(f"{self.proc}/{p.pid}/status")
        if status is not None:
            p.status_last = (t, status)
            if p.status_first is None:
                p.status_first = p.status_last
        # a scope process's io was read by the sample just before the end: a second read a few
        # ms later would turn any write in between into a huge per-interval rate
        io = read_io(self.proc, p.pid) if not (end and p.in_scope) else None
        if io is None:
            if not p.kernel and status is not None and not (end and p.in_scope):
                self._unreadable("io", p.pid)
        else:
            p.observe_io(t, io)
        if p.in_scope:
            # at the end, the sample just before read the threads' stat and schedstat
            self._threads(p, t, stat=not end, schedstat=not end, status=True)
        elif p.num_threads == 1 and not p.kernel:
            # outside the scope threads are not read one by one; a single-threaded process's
            # main-thread schedstat and status are the whole process's
            sched = read_schedstat(f"{self.proc}/{p.pid}/schedstat")
            if sched is not None:
                p.sched_last = (t, sched)
                if p.sched_first is None:
                    p.sched_first = p.sched_last

    def _threads(self, p: ProcState, t: float, stat: bool, schedstat: bool, status: bool) -> None:
        base = f"{self.proc}/{p.pid}/task"
        for tid in list_tids(self.proc, p.pid):
            th = p.threads.get(tid)
            if th is None:
                th = p.threads[tid] = ThreadState(tid)
            node = None
            if stat:
                tst = read_stat(f"{base}/{tid}/stat")
                if tst is None:
                    continue
                th.observe_stat(t, tst)
                node = self.node_of.get(tst.processor)
            if schedstat:
                values = read_schedstat(f"{base}/{tid}/schedstat")
                if values is not None:
                    th.observe_schedstat(t, values, node)
            if status:
                st = read_status(f"{base}/{tid}/status")
                if st is not None:
                    th.observe_status(t, st)
                    th.name = th.name or st.get("Name", "")

    def _classify(self, p: ProcState) -> dict:
        """Classification from name and command line (cheap, every process), parents first."""
        if "class" in p.extra:
            return p.extra["class"]
        p.extra["class"] = {}  # guards against a cycle from pid reuse
        parent = self.procs.get(p.ppid)
        parent_class = self._classify(parent) if parent is not None and parent is not p else None
        # forked workers repeat their parent's name and command line: classify each combination once
        key = (p.name, p.cmdline or "", tuple(sorted(parent_class.items())) if parent_class else None)
        cache = self.ctx.cache.setdefault("process_classes", {})
        if key not in cache:
            cache[key] = classify_process(p.name, p.cmdline or "", parent=parent_class)
        p.extra["class"] = dict(cache[key])
        if not p.extra["class"].get("ai") and not p.kernel:
            self._probe(p, key, parent_class)
        return p.extra["class"]

    def _probe(self, p: ProcState, key: tuple, parent_class: dict | None) -> None:
        """An AI process that its name and command line do not give away ('python app.py'): the
        framework libraries it maps or a RANK in its environment. Searched as bytes, nothing kept
        but the verdict; maps once per (name, command line, parent class), since forked workers
        repeat them, environ per process, since ranks differ."""
        cache = self.ctx.cache.setdefault("process_library_probe", {})
        if key not in cache:
            raw = read_bytes(f"{self.proc}/{p.pid}/maps") or b""
            cache[key] = [m.decode()[1:] for m in LIBRARY_MARKERS if m in raw]
        libraries = cache[key]
        raw = read_bytes(f"{self.proc}/{p.pid}/environ") or b""
        env: dict[str, str] = {}
        if any(raw.startswith(m) or b"\0" + m in raw for m in RANK_MARKERS):
            env = filter_env(parse_environ(raw.decode("utf-8", "replace")))  # allowlisted values only
        if libraries or env:
            p.extra["class"] = classify_process(p.name, p.cmdline or "", libraries, env, parent=parent_class)

    def _update_scope(self, t: float) -> None:
        """Roots and their descendants change only when processes appear (the scope never shrinks);
        the top consumers are re-ranked on the first sample and every TOP_EVERY samples."""
        self.scope_updates += 1
        wanted: set[int] = set()
        if len(self.procs) != self.scope_known:
            self.scope_known = len(self.procs)
            if self.requested is not None:
                wanted = {pid for pid in self.procs if pid in self.requested}
            else:
                wanted = {pid for pid, p in self.procs.items() if p.extra.get("class", {}).get("ai")}
            # descendants of the roots (not of the top consumers: a busy shell or container runtime
            # would otherwise pull in half the host), by following ppid until nothing changes
            children: dict[int, list[int]] = {}
            for pid, p in self.procs.items():
                children.setdefault(p.ppid, []).append(pid)
            stack = list(wanted)
            while stack:
                for child in children.get(stack.pop(), []):
                    if child not in wanted:
                        wanted.add(child)
                        stack.append(child)
        if self.requested is None and self.scope_updates % TOP_EVERY == 1:
            busy = heapq.nsmallest(TOP_CONSUMERS, ((-p.cpu_ticks_seen, pid) for pid, p in self.busy.items()
                                                   if not p.kernel and len(p.times) >= 2))
            wanted |= {pid for neg_ticks, pid in busy if neg_ticks < 0}
        for pid in wanted:
            p = self.procs[pid]
            if not p.in_scope and not p.gone:
                self._join_scope(p, t)

    def _join_scope(self, p: ProcState, t: float) -> None:
        """Expensive reads, once: mapped libraries and the allowlisted environment, then reclassify."""
        p.in_scope = True
        self.scope[p.pid] = p
        for lazy in self.lazy:  # read every interval from now on
            lazy.discard(str(p.pid))
        libraries: list[str] = []
        env: dict[str, str] = {}
        if not p.kernel:
            maps = read_text(f"{self.proc}/{p.pid}/maps")
            if maps is None:
                self._unreadable("maps", p.pid)
            else:
                libraries = parse_maps_libraries(maps)
            environ = read_text(f"{self.proc}/{p.pid}/environ")
            if environ is None:
                self._unreadable("environ", p.pid)
            else:
                env = filter_env(parse_environ(environ))  # values outside the allowlist are never kept
        p.extra["env"] = env
        parent = self.procs.get(p.ppid)
        parent_class = parent.extra.get("class") if parent is not None and parent is not p else None
        p.extra["class"] = classify_process(p.name, p.cmdline or "", libraries, env, parent=parent_class)
        self._threads(p, t, stat=True, schedstat=True, status=True)

    def _numa_pages(self, p: ProcState) -> None:
        if p.kernel:
            return
        text = read_text(f"{self.proc}/{p.pid}/numa_maps")
        if text is None:
            self._unreadable("numa_maps", p.pid)
            return
        p.extra["numa_pages"] = parse_numa_maps(text)

    def _unreadable(self, what: str, pid: int) -> None:
        """Count a file we could not read, unless the process has simply exited meanwhile."""
        if os.path.exists(f"{self.proc}/{pid}"):
            self.unreadable[what] = self.unreadable.get(what, 0) + 1

    def _report_unreadable(self) -> None:
        effects = {"io": "read/write byte rates missing", "maps": "mapped libraries not checked",
                   "environ": "ranks from the environment missing", "numa_maps": "NUMA pages missing"}
        for what, count in sorted(self.unreadable.items()):
            why = "needs root or the same user" if not self.ctx.is_root else "permission denied"
            self.partial(f"/proc/PID/{what} unreadable for {counted(count, 'processes')} ({why}; {effects[what]})")
        if not self.ctx.is_root:
            self.status.privileges = f"uid {os.geteuid()} (not root)"

    # -- the fragment ---------------------------------------------------------------------------
    def _graph(self) -> Graph:
        g = self.fragment()
        host = self.ctx.host
        emitted: set[int] = set()
        for pid in sorted(self.procs):
            p = self.procs[pid]
            metrics = _process_metrics(p)
            if self.delayacct and not p.kernel:
                metrics.update(_io_blocked(p))
            if p.kernel and not p.in_scope and metrics.get(M.CPU_UTIL_PCT, 0) < KERNEL_THREAD_MIN_PCT:
                continue
            emitted.add(pid)
            pid_id = process_id(host, pid)
            attrs = self._process_attrs(p)
            _entity(g, T.PROCESS, pid_id, attrs, metrics)
            self._job_edge(g, pid_id, p, attrs)
            self._numa_edges(g, pid_id, p)
            self._container_edge(g, pid_id, p)
            if p.in_scope:
                for tid in sorted(p.threads):
                    self._thread(g, pid_id, p, p.threads[tid])
        self.ctx.cache["process_pids"] = emitted  # the processes of the graph, for threads other collectors add
        for pid in sorted(emitted):
            ppid = self.procs[pid].ppid
            if ppid in emitted:
                _edge(g, E.PARENT_OF, process_id(host, ppid), process_id(host, pid))
        return g

    def _process_attrs(self, p: ProcState) -> dict:
        status = p.status_last[1] if p.status_last else {}
        attrs: dict = {"pid": p.pid, "ppid": p.ppid, "name": p.name, "state": p.state,
                       "cmdline": stored_cmdline(p.cmdline or "", p.extra.get("argv")), "in_scope": p.in_scope}
        if self.btime is not None:
            attrs["started_at"] = _iso(self.btime + p.starttime / CLK_TCK)
        if p.started_in_window:
            attrs["started_in_window"] = True
        if p.exited:
            attrs["exited_in_window"] = True
        if p.kernel:
            attrs["kernel_thread"] = True
        for key, name in (("Cpus_allowed_list", "cpus_allowed"), ("Mems_allowed_list", "mems_allowed")):
            if key in status:
                attrs[name] = status[key]
        ran_on = set(p.cpus)
        for th in p.threads.values():
            ran_on |= th.cpus if p.in_scope else set()
        attrs["ran_on_cpus"] = format_cpulist(ran_on)
        if p.cgroups:
            attrs["cgroup"] = _main_cgroup(p.cgroups)
        cls = p.extra.get("class") or {}
        attrs.update({k: v for k, v in cls.items() if v is not None})
        if p.extra.get("env"):
            attrs["env"] = p.extra["env"]
        if "numa_pages" in p.extra:
            attrs["numa_pages"] = {str(n): v for n, v in sorted(p.extra["numa_pages"].items())}
        return attrs

    def _numa_edges(self, g: Graph, pid_id: str, p: ProcState) -> None:
        host = self.ctx.host
        runtime = _runtime_by_node(p)
        total = sum(runtime.values())
        for node, ns in sorted(runtime.items()):
            _node(g, host, node)
            _edge(g, E.RUNS_ON, pid_id, numa_id(host, node), metrics={
                M.RUNTIME_NS_TOTAL: ns, M.RUNTIME_SHARE_PCT: round(ns / total * 100, 2)})
        pages = p.extra.get("numa_pages") or {}
        all_pages = sum(pages.values())
        for node, count in sorted(pages.items()):
            _node(g, host, node)
            _edge(g, E.ALLOCATES_ON, pid_id, numa_id(host, node), metrics={
                M.PAGES: count, M.PAGE_SHARE_PCT: round(count / all_pages * 100, 2) if all_pages else 0.0})
        if pages:
            metrics = g.entity(pid_id).metrics
            metrics[M.NUMA_PAGES_TOTAL] = all_pages
            ran_nodes = {n for n, ns in runtime.items() if total and ns / total >= MOSTLY_RAN_SHARE}
            if ran_nodes and all_pages:
                remote = sum(c for n, c in pages.items() if n not in ran_nodes)
                metrics[M.NUMA_REMOTE_PAGES_PCT] = round(remote / all_pages * 100, 2)
            if total and all_pages:  # overlap of the two distributions: 100 = pages where it runs
                metrics[M.CPU_MEM_COLOCATION_PCT] = round(sum(
                    min(runtime.get(n, 0) / total, pages.get(n, 0) / all_pages) for n in set(runtime) | set(pages)
                ) * 100, 2)
        if p.in_scope and p.status_last:
            self._allowed_edges(g, pid_id, p.status_last[1].get("Cpus_allowed_list", ""))

    def _allowed_edges(self, g: Graph, source: str, cpus_allowed: str) -> None:
        """allowed_on: the NUMA nodes holding at least one CPU the task may run on."""
        host = self.ctx.host
        nodes = {self.node_of[c] for c in parse_cpulist(cpus_allowed) if c in self.node_of} if cpus_allowed else set()
        for node in sorted(nodes):
            _node(g, host, node)
            _edge(g, E.ALLOWED_ON, source, numa_id(host, node))

    def _job_edge(self, g: Graph, pid_id: str, p: ProcState, attrs: dict) -> None:
        """A rank joins its job: one `job` entity per job, the same id on every host, so that the graphs
        of its hosts merge into one job with all its ranks."""
        if not p.in_scope:  # only the workload's ranks: a scoped window sees other jobs' ranks too
            return
        pod = next((found.get("pod") for found in map(container_from_cgroup, (p.cgroups or {}).values())
                    if found), None)
        job = job_of(attrs, p.extra.get("env") or {}, self.ctx.host, pod)
        if job is None or attrs.get("role") == "loader" or self._inherited_rank(p, attrs):
            return
        attrs["job"] = job["id"]
        known = g.entity(job["id"])
        job_attrs = {"scheduler": job["scheduler"], "job_id": job["job_id"]}
        for key in ("world_size", "master_addr"):
            if attrs.get(key) is not None:
                job_attrs[key] = attrs[key]
        if known is None:
            g.entity_of(T.JOB, job["id"], job_attrs)
        _edge(g, E.MEMBER_OF, pid_id, job["id"], attrs={
            k: attrs[k] for k in ("rank", "local_rank") if attrs.get(k) is not None})

    def _inherited_rank(self, p: ProcState, attrs: dict) -> bool:
        """A process a rank started (a shell, a compiler, a DataLoader worker) inherits its environment,
        RANK included: it is not another member of the job."""
        parent = self.procs.get(p.ppid)
        parent_class = (parent.extra.get("class") or {}) if parent is not None and parent is not p else {}
        return parent_class.get("rank") is not None and parent_class.get("rank") == attrs.get("rank")

    def _container_edge(self, g: Graph, pid_id: str, p: ProcState) -> None:
        for path in (p.cgroups or {}).values():
            found = container_from_cgroup(path)
            if found:
                cid = entity_id(T.CONTAINER, self.ctx.host, found["id"])
                attrs = {"container_id": found["id"], "runtime": found["runtime"]}
                if "pod" in found:
                    attrs["pod"] = found["pod"]
                g.entity_of(T.CONTAINER, cid, attrs)
                _edge(g, E.IN_CONTAINER, pid_id, cid)
                return

    def _thread(self, g: Graph, pid_id: str, p: ProcState, th: ThreadState) -> None:
        host = self.ctx.host
        tid_id = thread_id(host, p.pid, th.tid)
        attrs = {"tid": th.tid, "pid": p.pid, "name": th.name, "state": th.state,
                 "ran_on_cpus": format_cpulist(th.cpus)}
        if th.cpus_allowed:
            attrs["cpus_allowed"] = th.cpus_allowed
        if role := thread_role(th.name, bool(p.extra.get("class", {}).get("ai"))):
            attrs["role"] = role
        if th.node_ns:
            attrs["numa_runtime_ns"] = {str(n): v for n, v in sorted(th.node_ns.items())}
        if p.exited or (p.threads and th.run_ns.times and th.run_ns.times[-1] < p.last_t):
            attrs["exited_in_window"] = True
        metrics: dict = {}
        metrics.update(window_metrics(M.CPU_UTIL_PCT, th.run_ns, scale=1e-7, digits=2))  # ns/s -> % of a core
        metrics.update(window_metrics(M.CPU_USER_PCT, th.user_ticks, scale=TICK_PCT, digits=2))
        metrics.update(window_metrics(M.CPU_SYSTEM_PCT, th.system_ticks, scale=TICK_PCT, digits=2))
        metrics.update(_thread_runqueue(th))
        metrics.update(_ctx_switch_rates([(th.status_first, th.status_last)]))
        if th.cpus_allowed:
            metrics[M.CPUS_ALLOWED_COUNT] = len(parse_cpulist(th.cpus_allowed))
        _entity(g, T.THREAD, tid_id, attrs, metrics)
        _edge(g, E.HAS_THREAD, pid_id, tid_id)
        self._allowed_edges(g, tid_id, th.cpus_allowed)
        total = sum(th.node_ns.values())
        for node, ns in sorted(th.node_ns.items()):
            _node(g, host, node)
            _edge(g, E.RUNS_ON, tid_id, numa_id(host, node), metrics={
                M.RUNTIME_NS_TOTAL: ns, M.RUNTIME_SHARE_PCT: round(ns / total * 100, 2)})


# -- window arithmetic -------------------------------------------------------------------------------
def _process_metrics(p: ProcState) -> dict:
    m: dict = {}
    if len(p.times) >= 3 and p.times[-1] > p.times[0] and p.utime[0] == p.utime[-1] and p.stime[0] == p.stime[-1]:
        # idle all window (most processes): every interval is 0, no series to build
        for name in (M.CPU_UTIL_PCT, M.CPU_USER_PCT, M.CPU_SYSTEM_PCT):
            m[name] = m[f"{name}_p95"] = m[f"{name}_max"] = 0.0
    else:
        m.update(window_metrics(M.CPU_UTIL_PCT, p.series("cpu"), scale=TICK_PCT, digits=2))
        m.update(window_metrics(M.CPU_USER_PCT, p.series("utime"), scale=TICK_PCT, digits=2))
        m.update(window_metrics(M.CPU_SYSTEM_PCT, p.series("stime"), scale=TICK_PCT, digits=2))
    m.update(window_metrics(M.MAJOR_FAULTS_PER_S, p.series("majflt"), digits=2))
    m[M.RSS_BYTES] = p.rss_pages * PAGE_SIZE
    m[M.NUM_THREADS] = p.num_threads
    status = p.status_last[1] if p.status_last else {}
    if "Cpus_allowed_list" in status:
        m[M.CPUS_ALLOWED_COUNT] = len(parse_cpulist(status["Cpus_allowed_list"]))
    m.update(_process_runqueue(p))
    if p.in_scope:
        m.update(_ctx_switch_rates([(th.status_first, th.status_last) for th in p.threads.values()]))
    elif p.num_threads == 1:
        m.update(_ctx_switch_rates([(p.status_first, p.status_last)]))
    m.update(window_metrics(M.READ_BYTES_PER_S, p.io_read, digits=1))
    m.update(window_metrics(M.WRITE_BYTES_PER_S, p.io_write, digits=1))
    if p.in_scope and len(p.io_write) >= 2:
        m[M.WRITE_BURST_S] = round(longest_busy_run(p.io_write), 3)
    if p.in_scope:
        m[M.RUNNABLE_THREADS] = sum(1 for th in p.threads.values() if th.state == "R")
    return m


def _io_blocked(p: ProcState) -> dict:
    """The share of the window the process's main thread was blocked on block I/O (delayacct_blkio_ticks)."""
    last = blkio_ticks(p.last_stat) if p.last_stat else p.blkio_first
    span = p.last_t - p.first_t if p.times else 0.0
    if p.blkio_first is None or last is None or span <= 0 or last < p.blkio_first:
        return {}
    return {M.IO_BLOCKED_PCT: round(min(100.0, (last - p.blkio_first) * TICK_PCT / span), 2)}


def _runqueue(run: float, wait: float, slices: float, span: float) -> dict:
    m: dict = {}
    if run + wait > 0:
        m[M.RUNQUEUE_WAIT_PCT] = round(wait / (run + wait) * 100, 3)
    if span > 0:
        m[M.RUNQUEUE_WAIT_MS_PER_S] = round(wait / 1e6 / span, 3)
        m[M.TIMESLICES_PER_S] = round(slices / span, 2)
    if slices > 0:
        m[M.RUNQUEUE_WAIT_PER_SLICE_US] = round(wait / 1e3 / slices, 2)
    return m


def _thread_runqueue(th: ThreadState) -> dict:
    m: dict = {}
    m.update(ratio_metrics(M.RUNQUEUE_WAIT_PCT, th.wait_ns, th.run_ns, den_extra=th.wait_ns))
    m.update(window_metrics(M.RUNQUEUE_WAIT_MS_PER_S, th.wait_ns, scale=1e-6))
    m.update(ratio_metrics(M.RUNQUEUE_WAIT_PER_SLICE_US, th.wait_ns, th.slices, scale=1e-3, digits=2))
    m.update(window_metrics(M.TIMESLICES_PER_S, th.slices, digits=2))
    return m


def _process_runqueue(p: ProcState) -> dict:
    """Sum over the threads seen at both ends (a thread that exited mid-window is not counted);
    outside the scope, only for a single-threaded process (its main thread's schedstat)."""
    if not p.in_scope:
        if p.sched_first is None or p.sched_last is None or p.sched_last[0] <= p.sched_first[0]:
            return {}
        (t0, a), (t1, b) = p.sched_first, p.sched_last
        return _runqueue(b[0] - a[0], b[1] - a[1], b[2] - a[2], t1 - t0)
    run = wait = slices = 0
    counted = False
    for th in p.threads.values():
        if len(th.run_ns) >= 2 and th.run_ns.delta() is not None and th.wait_ns.delta() is not None:
            run += th.run_ns.delta()
            wait += th.wait_ns.delta()
            slices += th.slices.delta() or 0
            counted = True
    span = p.last_t - p.first_t
    return _runqueue(run, wait, slices, span) if counted else {}


def _leading_int(text: str) -> int | None:
    """'123 kB' -> 123; None where the kernel gave no such line (RssShmem: before 4.5)."""
    head = text.split(" ", 1)[0]
    return int(head) if head.isdigit() else None


def _ctx_switch_rates(pairs) -> dict:
    """Sum over tasks of each one's context-switch rate between its first and last status read."""
    rates = {"voluntary_ctxt_switches": 0.0, "nonvoluntary_ctxt_switches": 0.0}
    counted = False
    for first, last in pairs:
        if not first or not last or last[0] <= first[0]:
            continue
        span = last[0] - first[0]
        for key in rates:
            try:
                delta = int(last[1][key]) - int(first[1][key])
            except (KeyError, ValueError):
                continue
            if delta >= 0:
                rates[key] += delta / span
                counted = True
    return {f"{k}_per_s": round(v, 2) for k, v in rates.items()} if counted else {}


def _runtime_by_node(p: ProcState) -> dict[int, int]:
    """On-CPU ns per NUMA node: from the threads' schedstat where they were sampled, else from the
    process's CPU ticks attributed to the node of the CPU its main thread was seen on."""
    by_node: dict[int, int] = {}
    if p.in_scope:
        for th in p.threads.values():
            for node, ns in th.node_ns.items():
                by_node[node] = by_node.get(node, 0) + ns
    if not by_node:
        by_node = {node: ticks * (1_000_000_000 // CLK_TCK) for node, ticks in p.node_ticks.items()}
    return by_node


def _main_cgroup(cgroups: dict[str, str]) -> str:
    """The most telling cgroup path: the v2 one where it is not the root, else the v1 cpu, memory
    or systemd one."""
    for key in ("", "cpu", "memory", "name=systemd"):
        path = cgroups.get(key)
        if path and path != "/":
            return path
    return next((p for p in cgroups.values() if p != "/"), "/")


def _boot_time(proc: str) -> float | None:
    for line in (read_text(f"{proc}/stat") or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
