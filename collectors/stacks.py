"""On-CPU stack sampling (off by default; `collect --stacks`): which code each thread of the workload runs.

Native stacks: a bcc program on the software CPU-clock perf event (PERF_TYPE_SOFTWARE /
PERF_COUNT_SW_CPU_CLOCK, a timer every CPU has, so it works on VMs without a hardware PMU) fires
SAMPLE_HZ times a second on each CPU and counts, per thread, the pair (user stack, kernel stack) it
interrupted. In a window scoped with --pid/--job the program ignores every other process in the
kernel; host-wide it samples all and keeps the THREADS_MAX busiest threads. Addresses are resolved
with bcc's symbol cache (ELF symbol tables of each process's mappings, /proc/kallsyms); what it
cannot name stays in the stack as `[unknown]` and the share of samples that hold one is reported
(stack_unknown_pct), never hidden. User stacks are walked by frame pointers: code built without
them (most distributions' CPython, many -O2 libraries) gives short or `[unknown]` stacks.

Python frames: for every Python process in scope, py-spy (`pip install witty-profiler[stacks]`) runs
beside the window, `py-spy record --format raw --threads --function --nonblocking --pid PID`, from
outside the process (ptrace + process_vm_readv, the process is not paused). Reading the
interpreter's frames ourselves was considered and not done: it needs each CPython version's
private layouts (PyThreadState, _PyInterpreterFrame, code objects; they changed in 3.11, 3.12 and
3.13), locating _PyRuntime in stripped binaries and libpython, and following them as they move
with every release; py-spy does exactly that, is maintained for each release, ships as a static
binary wheel, and its raw output is already folded. Where py-spy sampled a thread, its stacks are
the thread's (the native ones of a CPython thread are `_PyEval_EvalFrameDefault` over and over);
its other threads keep their native stacks.

What each thread gets (attrs and metrics, topology.vocabulary): top_stacks, the TOP_STACKS most
sampled stacks folded root-first like stackcollapse (`main;outer;leaf`; kernel frames end with
`_[k]`), each with its share of the thread's samples; hot_function, the leaf function that got most
of the samples with its caller (`leaf ← caller`), and hot_function_pct; stack_samples_total and
stack_unknown_pct. `--stacks-out FILE` writes every sampled stack of the window, one `comm-pid/tid;
frames count` line each, which flamegraph.pl, speedscope and inferno read.

Cost (BENCHMARKS.md): compiling the program once per process (as the futex program, about 0.5 s
of CPU before the window opens); each sample a stack walk in the kernel, SAMPLE_HZ per CPU; py-spy
reads the interpreter's memory SAMPLE_HZ times a second per Python process. Needs root; a reason in
meta.collectors says what is missing (bcc, kernel headers, py-spy, ptrace).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter
from pathlib import Path

from witty_profiler.collectors.base import Collector, register
from witty_profiler.collectors.lib.bpfhost import NotReady, kernel_headers, load_bcc
from witty_profiler.collectors.lib.procfs import read_text
from witty_profiler.topology import Graph
from witty_profiler.topology.ids import process_id, thread_id
from witty_profiler.topology.vocabulary import E, M, T

SAMPLE_HZ = 49  # a prime below 50: never in step with timers of 10 ms or 100 Hz loops
CPU_CLOCK = (1, 0)  # PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK: the event the program samples on
TOP_STACKS = 5
THREADS_MAX = 50  # host-wide: the busiest threads only
FRAMES_MAX = 48  # frames kept of a stack in the graph, leaf side
UNKNOWN = "[unknown]"
KERNEL_SUFFIX = "_[k]"
ARROW = " \u2190 "  # leaf ← caller

PROGRAM = """
#include <uapi/linux/ptrace.h>
#include <uapi/linux/bpf_perf_event.h>
struct key_t { u32 pid; u32 tid; int user_stack; int kernel_stack; char comm[16]; };
BPF_HASH(counts, struct key_t, u64, 40960);
BPF_STACK_TRACE(stack_traces, 16384);
BPF_HASH(scope, u32, u8, 65536);

int on_sample(struct bpf_perf_event_data *ctx) {
    u64 id = bpf_get_current_pid_tgid();
    u32 pid = id >> 32, tid = id;
    if (tid == 0)  /* the idle task */
        return 0;
#ifdef SCOPED
    if (scope.lookup(&pid) == 0)
        return 0;
#endif
    struct key_t key = {.pid = pid, .tid = tid};
    bpf_get_current_comm(&key.comm, sizeof(key.comm));
    key.user_stack = stack_traces.get_stackid(&ctx->regs, BPF_F_USER_STACK);
    key.kernel_stack = stack_traces.get_stackid(&ctx->regs, 0);
    counts.increment(key);
    return 0;
}
"""


def program(scoped: bool) -> str:
    return ("#define SCOPED 1\n" if scoped else "") + PROGRAM


# -- folding ------------------------------------------------------------------------------
def fold(user: list[str], kernel: list[str]) -> str:
    """Frames leaf-first as bcc walks them -> 'root;...;leaf', kernel frames last with `_[k]`."""
    return ";".join([*reversed(user), *(f + KERNEL_SUFFIX for f in reversed(kernel))])


def python_frame(frame: str) -> str:
    """py-spy's 'load (PIL/JpegImagePlugin.py:382)' -> 'PIL.JpegImagePlugin.load' (the module from the file as
    py-spy shortens it against sys.path; `<module>` frames keep the module's name)."""
    m = re.fullmatch(r"(.*) \((.*?)(?::\d+)?\)", frame)
    if not m:
        return frame
    name, path = m.groups()
    module = path[:-3] if path.endswith(".py") else path
    module = module.lstrip("./").replace("/", ".").replace("\\", ".").removesuffix(".__init__")
    if not module or path.startswith("<"):
        return name
    return f"{module}.{name}"


THREAD_FRAME = re.compile(r"thread \((0x[0-9A-Fa-f]+|\d+)\)(?:: (.*))?")


def parse_pyspy_raw(text: str) -> dict[int, tuple[str | None, Counter]]:
    """py-spy `record --format raw --threads` -> {os tid: (thread name, {folded python stack: samples})}.
    A thread py-spy gives by its pthread id (0x..., no OS id known) is left out: it cannot be matched."""
    out: dict[int, tuple[str | None, Counter]] = {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        m = THREAD_FRAME.fullmatch(frames[0])
        if not m or m.group(1).startswith("0x"):
            continue
        tid = int(m.group(1))
        name, counts = out.setdefault(tid, (m.group(2), Counter()))
        counts[";".join(python_frame(f) for f in frames[1:]) or UNKNOWN] += int(count)
    return out


def leaf_and_caller(stack: str) -> str:
    frames = stack.split(";")
    leaf = frames[-1]
    return leaf + (ARROW + frames[-2] if len(frames) > 1 else "")


def thread_summary(counts: Counter) -> tuple[dict, dict]:
    """One thread's stacks -> (attrs, metrics): top stacks with shares, the hot function, the unknown share."""
    total = sum(counts.values())
    top = [{"stack": _trim(s), "samples": n, "pct": round(n * 100 / total, 1)}
           for s, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_STACKS]]
    by_leaf: Counter = Counter()
    for s, n in counts.items():
        by_leaf[leaf_and_caller(s)] += n
    hot, hot_n = min(by_leaf.items(), key=lambda kv: (-kv[1], kv[0]))
    unknown = sum(n for s, n in counts.items() if UNKNOWN in s)
    attrs = {"top_stacks": top, "hot_function": hot}
    metrics = {M.STACK_SAMPLES_TOTAL: total, M.HOT_FUNCTION_PCT: round(hot_n * 100 / total, 1),
               M.STACK_UNKNOWN_PCT: round(unknown * 100 / total, 1)}
    return attrs, metrics


def _trim(stack: str) -> str:
    frames = stack.split(";")
    return stack if len(frames) <= FRAMES_MAX else ";".join(["...", *frames[-FRAMES_MAX:]])


def folded_lines(stacks: dict[tuple[int, int], tuple[str, Counter]]) -> list[str]:
    """Every stack of the window as 'comm-pid/tid;frames count' lines (flamegraph.pl's input)."""
    lines = []
    for (pid, tid), (comm, counts) in sorted(stacks.items()):
        root = f"{(comm or '?').replace(';', '_').replace(' ', '_')}-{pid}/{tid}"
        for s, n in sorted(counts.items()):
            lines.append(f"{root};{s} {n}")
    return lines


# -- the processes py-spy samples ---------------------------------------------------------
def is_python(proc: str, pid: int) -> bool:
    """A CPython process: its executable is python*, or it maps libpython (an embedding program)."""
    try:
        if Path(os.readlink(f"{proc}/{pid}/exe")).name.startswith("python"):
            return True
    except OSError:
        return False
    return "libpython" in (read_text(f"{proc}/{pid}/maps") or "")


def find_pyspy() -> str | None:
    """py-spy on PATH, else beside this interpreter (the extra's wheel installs it into the scripts folder)."""
    found = shutil.which("py-spy")
    if found:
        return found
    for folder in {sysconfig.get_path("scripts"), os.path.dirname(sys.executable)}:
        candidate = os.path.join(folder, "py-spy")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@register
class StacksCollector(Collector):
    name = "stacks"
    default_enabled = False  # collect --stacks
    reads = (f"on-CPU stacks at {SAMPLE_HZ} Hz: a bcc program on the software CPU-clock perf event (kernel and "
             "user stacks, bcc's symbol cache) and py-spy for Python processes")
    needs = "root, bcc (python3-bpfcc), kernel headers; py-spy (witty-profiler[stacks]) and ptrace for Python frames"
    order = 92  # after the process collector, whose scope it reads

    def prepare(self) -> None:
        self.bpf, self.problem, self.notes = None, None, []
        self.pyspy: dict[int, tuple[subprocess.Popen, str]] = {}
        if not self.ctx.is_root:
            self.problem = "stack sampling needs root (CAP_BPF and CAP_PERFMON, ptrace for py-spy): run as root"
            return
        try:
            bcc = load_bcc()
            tree, note = kernel_headers(os.uname().release)
        except NotReady as exc:
            self.problem = str(exc)
            return
        self.bcc = bcc
        self.notes.append(note)
        from witty_profiler.collectors.lib.bpfimage import PROG_PERF_EVENT  # see EbpfCollector.prepare
        from witty_profiler.collectors.lib.bpfload import load_program
        try:  # bcc is loaded all the same: it names the sampled addresses
            self.bpf, said = load_program(lambda: bcc, program(self.ctx.pids is not None), str(tree) if tree else None,
                                          prog_types={"on_sample": PROG_PERF_EVENT})
        except (RuntimeError, OSError) as exc:  # clang's or the kernel's reason
            self.problem = f"bcc could not load the stack program: {exc}"
            return
        self.status.extra.update(said)

    def start(self) -> None:
        # py-spy samples the workload: the processes asked for, else those the process collector found
        scope = sorted(self.ctx.pids if self.ctx.pids is not None else self.ctx.cache.get("scope_pids") or ())
        if self.bpf is not None:
            try:
                if self.ctx.pids is not None:
                    table = self.bpf[b"scope"]
                    for pid in scope:
                        table[table.Key(pid)] = table.Leaf(1)
                self.bpf.attach_perf_event(*CPU_CLOCK, "on_sample", sample_freq=SAMPLE_HZ)
            except Exception as exc:  # noqa: BLE001 - bcc's tables raise bare Exceptions
                self.problem = f"the stack program could not be started (its scope map, the CPU-clock perf event): {exc}"
                self.bpf.cleanup()
                self.bpf = None
        if self.ctx.is_root:
            self._start_pyspy(scope)

    def _start_pyspy(self, scope: list[int]) -> None:
        pythons = [pid for pid in scope if is_python(str(self.ctx.proc), pid)]
        if not pythons:
            return
        exe = find_pyspy()
        if exe is None:
            self.pyspy_problem = ("py-spy is not installed (pip install 'witty-profiler[stacks]'): "
                                  f"no Python frames for {len(pythons)} Python processes")
            return
        self.outdir = tempfile.mkdtemp(prefix="witty-stacks-")
        seconds = str(max(1, int(self.ctx.duration_s + 2)))  # stopped at the window's end
        for pid in pythons:
            out = os.path.join(self.outdir, f"{pid}.txt")
            argv = [exe, "record", "--format", "raw", "--threads", "--function", "--nonblocking", "--rate",
                    str(SAMPLE_HZ), "--duration", seconds, "--pid", str(pid), "--output", out]
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, start_new_session=True)
            except OSError as exc:
                self.pyspy_problem = f"py-spy did not start: {exc}"
                return
            self.pyspy[pid] = (proc, out)

    pyspy_problem: str | None = None

    def _python_stacks(self) -> dict[int, dict[int, tuple[str | None, Counter]]]:
        """Stop every py-spy (SIGINT: it writes what it sampled) and read its stacks, per pid."""
        out: dict[int, dict[int, tuple[str | None, Counter]]] = {}
        failed = []
        for pid, (proc, _) in self.pyspy.items():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for pid, (proc, path) in self.pyspy.items():
            try:
                _, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            text = read_text(path)
            if text:
                out[pid] = parse_pyspy_raw(text)
            else:
                said = " ".join((err or b"").decode("utf-8", "replace").split())
                failed.append(f"pid {pid}: {_pyspy_reason(said)}")
        if getattr(self, "outdir", None):
            shutil.rmtree(self.outdir, ignore_errors=True)
        if failed:
            self.pyspy_problem = "py-spy sampled no Python frames of " + "; ".join(failed[:3])
        return out

    def finish(self) -> Graph:
        python = self._python_stacks() if self.pyspy else {}
        if self.bpf is None and not python:
            reason = "; ".join(r for r in (self.problem, self.pyspy_problem) if r)
            return self.unavailable(reason or "the stack program was not loaded")
        native: dict[tuple[int, int], tuple[str, Counter]] = {}
        if self.bpf is not None:
            try:
                native = self._native_stacks()
            finally:
                self.bpf.cleanup()
        return self._graph(native, python)

    def _native_stacks(self) -> dict[tuple[int, int], tuple[str, Counter]]:
        bpf = self.bpf
        self.bpf.detach_perf_event(*CPU_CLOCK)
        sym, ksym = self.bcc.BPF.sym, self.bcc.BPF.ksym
        traces = bpf[b"stack_traces"]
        out: dict[tuple[int, int], tuple[str, Counter]] = {}
        lost = 0
        for key, value in bpf[b"counts"].items():
            n = value.value
            user = self._frames(traces, key.user_stack, lambda a, pid=key.pid: sym(a, pid).decode("utf-8", "replace"))
            kernel = self._frames(traces, key.kernel_stack, lambda a: ksym(a).decode("utf-8", "replace"))
            if key.user_stack < 0 and key.kernel_stack < 0:
                lost += n
            if not user and not kernel:
                user = [UNKNOWN]
            comm, counts = out.setdefault((key.pid, key.tid), (key.comm.decode("utf-8", "replace"), Counter()))
            counts[fold(user, kernel)] += n
        self.lost = lost
        return out

    @staticmethod
    def _frames(traces, stack_id: int, name) -> list[str]:
        """The frames of one stack, leaf first; [] when the walk gave none (-EFAULT: no stack in that mode)."""
        if stack_id < 0:
            return []
        try:
            return [name(addr) for addr in traces.walk(stack_id)]
        except KeyError:  # the stack was overwritten in the map (a hash collision)
            return [UNKNOWN]

    def _graph(self, native: dict[tuple[int, int], tuple[str, Counter]],
               python: dict[int, dict[int, tuple[str | None, Counter]]]) -> Graph:
        g = self.fragment()
        host = self.ctx.host
        shown = self.ctx.cache.get("process_pids")  # None: the process collector did not run
        stacks = dict(native)
        from_python = set()
        for pid, threads in python.items():
            for tid, (name, counts) in threads.items():
                comm = native.get((pid, tid), (name or "python", None))[0]
                stacks[(pid, tid)] = (comm, counts)
                from_python.add((pid, tid))
        chosen = sorted(stacks, key=lambda k: (-sum(stacks[k][1].values()), k))
        if self.ctx.pids is None:
            chosen = chosen[:THREADS_MAX]
        total = unknown = 0
        for pid, tid in chosen:
            if shown is not None and pid not in shown:
                continue  # a process the graph does not hold: its thread would dangle
            comm, counts = stacks[(pid, tid)]
            attrs, metrics = thread_summary(counts)
            attrs.update(tid=tid, pid=pid, stacks_from="py-spy" if (pid, tid) in from_python else "bcc")
            if comm:
                attrs["name"] = comm
            tid_id = thread_id(host, pid, tid)
            g.entity_of(T.THREAD, tid_id, attrs, metrics)
            if shown is not None:
                g.edge_of(E.HAS_THREAD, process_id(host, pid), tid_id)
            total += metrics[M.STACK_SAMPLES_TOTAL]
            unknown += round(metrics[M.STACK_SAMPLES_TOTAL] * metrics[M.STACK_UNKNOWN_PCT] / 100)
        out = self.ctx.cache.get("stacks_out")
        if out:
            Path(out).write_text("".join(line + "\n" for line in folded_lines({k: stacks[k] for k in chosen})))
        self.status.extra.update(samples=total, threads=len(chosen), sample_hz=SAMPLE_HZ,
                                 unknown_pct=round(unknown * 100 / total, 1) if total else 0.0,
                                 python_processes=len(python))
        reasons = [r for r in (self.problem, self.pyspy_problem) if r]
        if reasons:
            self.partial("; ".join(reasons))
        return g


def _pyspy_reason(said: str) -> str:
    """py-spy's complaint in a few words: ptrace denied (a container without CAP_SYS_PTRACE, Yama), the process
    gone, not a Python it knows."""
    low = said.lower()
    if "permission denied" in low or "operation not permitted" in low:
        return "ptrace denied (CAP_SYS_PTRACE; kernel.yama.ptrace_scope)"
    return said[:160] or "no samples (the process ended, or never ran Python code on a CPU)"

