"""Layer 3, interconnect inside the host: NUMA placement, PCIe, NVLink/HCCS."""

from __future__ import annotations

from typing import Any

from witty_profiler.diagnosis import evidence as ev
from witty_profiler.diagnosis.catalog import (
    Param,
    Pattern,
    Threshold,
    Verdict,
    clear,
    finding,
    not_evaluated,
    number,
    worst,
)
from witty_profiler.diagnosis.models import Evidence
from witty_profiler.diagnosis.rules import host_or_scope_processes, metric_check, workload_devices
from witty_profiler.diagnosis.scope import Scope, num
from witty_profiler.topology import Entity
from witty_profiler.topology.cpulist import cpu_set, format_cpulist
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.placement import Placement, expected_remote_pct
from witty_profiler.topology.vocabulary import E, M, T


def _dist(values: dict[int, float]) -> dict[str, float]:
    total = sum(values.values())
    return {str(n): round(v / total * 100, 1) for n, v in sorted(values.items())} if total > 0 else {}


# -- interconnect.cross_numa_access -------------------------------------------------------
def _process_remote(scope: Scope, process: Entity, min_pages: float) -> tuple[float | None, Placement | None]:
    measured = num(process, M.NUMA_REMOTE_PAGES_PCT)
    p = scope.query.placement(process)
    # too small to matter; a measured share without known pages is still judged
    if sum(p.pages.values()) < min_pages and (measured is None or p.pages):
        return None, None
    return (measured if measured is not None else expected_remote_pct(p)), p


def _cross_numa_access(scope: Scope, t: dict[str, Any]) -> Verdict:
    levels = t["remote_access_pct"]
    if not scope.has_workload:
        nodes = scope.graph.entities(T.NUMA_NODE)
        return metric_check(scope, nodes, levels, M.NUMA_REMOTE_ALLOC_PCT, "NUMA nodes", ("numa", "memory"),
                            "{n:NUMA nodes|serve} many allocations for other nodes: {names}, {worst} remote "
                            "(threshold > {limit}).")
    measured, hits = 0, []
    for process in scope.processes:
        remote, p = _process_remote(scope, process, t["min_pages"])
        if remote is None:
            continue
        measured += 1
        sev = levels.severity(remote)
        if sev:
            hits.append((process, remote, p, sev))
    if not measured:
        return not_evaluated(scope.missing("no per-NUMA-node pages and run time of the workload's processes",
                                           "process", "numa"))
    if not hits:
        return clear(f"{ev.counted(measured, 'workload processes')} with NUMA placement; none with more than "
                     f"{number(levels.limit())} % of its memory accesses expected remote")
    hits.sort(key=lambda h: (h[3] != "critical", -h[1], h[0].id))
    items: list[Evidence] = []
    for process, remote, p, sev in hits[:ev.MAX_SUBJECTS]:
        items.append(ev.statistic([process.id], "remote_access_pct", remote, levels=levels, severity=sev,
                                  note=f"{ev.name_of(process)}: share of its memory accesses expected on another "
                                       f"node than the one it runs on"))
        if p and p.runtime:
            items.append(ev.statistic(p.runtime_ids, M.RUNTIME_SHARE_PCT, _dist(p.runtime), unit="%",
                                      note="run time by NUMA node"))
        if p and p.pages:
            items.append(ev.statistic(p.pages_ids, M.PAGES, {str(n): int(v) for n, v in sorted(p.pages.items())},
                                      unit="pages", note="pages by NUMA node"))
    if len(hits) > ev.MAX_SUBJECTS:
        items.append(ev.more(len(hits) - ev.MAX_SUBJECTS, "processes"))
    first = hits[0]
    return finding(worst(*(h[3] for h in hits)) or "warning",
                   f"{ev.counted(len(hits), 'workload processes', 'run')} away from {ev.their(len(hits))} memory: {ev.name_of(first[0])} has "
                   f"{ev.fmt(first[1], '%')} of its accesses expected on a remote NUMA node.",
                   items, subjects=[h[0].id for h in hits])


CROSS_NUMA_ACCESS = Pattern(
    id="interconnect.cross_numa_access", layer=3, title="Cross-NUMA memory access",
    why="A remote NUMA access costs 1.5-3x a local one and competes for the inter-socket links; a process "
        "whose threads run on one node while its pages sit on another pays that on every miss.",
    metrics=("process.numa_remote_pages_pct", "runs_on.runtime_ns_total", "allocates_on.pages",
             "process.numa_pages", "numa_node.numa_remote_alloc_pct"),
    thresholds=(Threshold("remote_access_pct", "%", "above", "share of a process's memory accesses expected to be "
                          "remote: run time per node x pages on other nodes (or the node's remote allocation "
                          "share on the whole host)", critical=50, warning=30),),
    params=(Param("min_pages", 2560, "pages", "ignore processes with fewer pages than this (10 MiB of 4 KiB pages)"),),
    evidence="Each workload process over the threshold with its run time and pages by NUMA node; on the whole "
             "host, the NUMA nodes' remote allocation share over the window.",
    recommendations=(
        "Bind each process's CPUs and memory to the same node: numactl --cpunodebind=N --membind=N.",
        "Start data-loader workers after pinning, so they inherit the node.",
        "Enable automatic NUMA balancing (kernel.numa_balancing=1) if pinning is not possible.",
    ),
    check=_cross_numa_access)


# -- interconnect.device_numa_mismatch ----------------------------------------------------
def _significant(values: dict[int, float], share_pct: float = 5.0) -> list[int]:
    """Nodes holding at least `share_pct` of the run time or pages: the ones worth a distance."""
    total = sum(values.values())
    return [n for n, v in sorted(values.items()) if total > 0 and v / total * 100 >= share_pct]


def _device_numa_mismatch(scope: Scope, t: dict[str, Any]) -> Verdict:
    run_levels, page_levels = t["remote_runtime_pct"], t["remote_pages_pct"]
    processes = host_or_scope_processes(scope)
    pairs = [(p, edge, device) for p in processes for edge, device in scope.query.devices_of(p)]
    if not pairs:
        if scope.query.accelerators():
            return clear(f"no process of {scope.describe()} uses an accelerator")
        return not_evaluated(scope.missing("no GPU or NPU in this graph", "gpu", "npu", "nvml"))
    measured, unknown, hits = 0, 0, []
    for process, use, device in pairs:
        dnode, dnode_id = scope.query.device_node(device)
        if dnode is None:
            unknown += 1
            continue
        p = scope.query.placement(process)
        remote_run = p.remote_share(p.runtime, dnode)
        inferred = False
        if remote_run is None and p.allowed_nodes and dnode not in p.allowed_nodes:
            remote_run, inferred = 100.0, True  # it may only run on other nodes
        remote_pages = p.remote_share(p.pages, dnode)
        if remote_run is None and remote_pages is None:
            continue
        measured += 1
        sev = worst(run_levels.severity(remote_run), page_levels.severity(remote_pages))
        if not sev:
            continue
        host = host_of(process.id)
        others = {n for values in (p.runtime, p.pages) for n in _significant(values) if n != dnode}
        if inferred:
            others |= set(p.allowed_nodes) - {dnode}
        distances = {n: scope.query.numa_distance(host, n, dnode) for n in sorted(others)}
        known = [d for d, _ in distances.values() if d is not None]
        if known and max(known) <= t["near_distance"] and sev == "critical":
            sev = "warning"  # the remote nodes are siblings of the device's node: a smaller penalty
        hits.append((process, use, device, dnode, dnode_id, p, remote_run, inferred, remote_pages, distances, sev))
    if not measured:
        why = f"{ev.counted(unknown, 'devices')} without a known NUMA node" if unknown else "no run time, pages or allowed CPUs"
        return not_evaluated(scope.missing(f"cannot place the accelerator users: {why}", "process", "numa"))
    if not hits:
        return clear(f"{ev.counted(measured, 'process/device pairs')} checked; each runs and allocates mostly on its device's "
                     f"NUMA node (remote run time <= {number(run_levels.limit())} %, remote pages <= "
                     f"{number(page_levels.limit())} %)")
    hits.sort(key=lambda h: (h[10] != "critical", h[0].id, h[2].id))
    items: list[Evidence] = []
    for process, use, device, dnode, dnode_id, p, remote_run, inferred, remote_pages, distances, sev \
            in hits[:ev.MAX_SUBJECTS]:
        who = ev.name_of(process)
        items.append(ev.edge(use.id, E.USES_DEVICE, ev.name_of(device), note=f"{who} uses {ev.name_of(device)}"))
        node_ev = ev.edge if dnode_id != device.id else ev.entity
        items.append(node_ev(dnode_id, "numa_node", dnode, note=f"{ev.name_of(device)} is on NUMA node {dnode}"))
        own = cpu_set(process.attrs.get("cpus_allowed"))
        if own:
            own_nodes = sorted(scope.query.nodes_of_cpus(host_of(process.id), own))
            note = f"{who} may run on NUMA {ev.listed('node', own_nodes)}"
            if p.allowed_cpus != own:
                note += (f"; with its threads' own masks: CPUs {format_cpulist(p.allowed_cpus)} on "
                         f"{ev.listed('node', p.allowed_nodes)}")
            items.append(ev.entity(process.id, "cpus_allowed", format_cpulist(own), unit="CPUs", note=note))
        elif p.allowed_cpus:
            items.append(ev.statistic([process.id], "cpus_allowed", format_cpulist(p.allowed_cpus), unit="CPUs",
                                      note=f"{who}'s threads may run on NUMA {ev.listed('node', p.allowed_nodes)}"))
        if remote_run is not None:
            note = ("inferred from the allowed CPUs: none is on the device's node" if inferred
                    else "run time by NUMA node: " + ", ".join(f"{n}: {number(v)} %" for n, v in _dist(p.runtime).items()))
            items.append(ev.statistic(p.runtime_ids or [process.id], "remote_runtime_pct", remote_run,
                                      levels=run_levels, severity=run_levels.severity(remote_run), note=note))
        if remote_pages is not None:
            items.append(ev.statistic(p.pages_ids, "remote_pages_pct", remote_pages, levels=page_levels,
                                      severity=page_levels.severity(remote_pages),
                                      note="pages by NUMA node: " + ", ".join(
                                          f"{n}: {int(v)}" for n, v in sorted(p.pages.items()))))
        for node, (distance, did) in distances.items():
            if distance is not None and did:
                kind = ev.edge if "|" in did else ev.entity
                items.append(kind(did, E.NUMA_DISTANCE, distance, unit="SLIT",
                                  note=f"NUMA distance {node} -> {dnode} (10 = local)"))
    if len(hits) > ev.MAX_SUBJECTS:
        items.append(ev.more(len(hits) - ev.MAX_SUBJECTS, "process/device pairs"))
    parts = []
    for process, _, device, dnode, _, p, remote_run, inferred, remote_pages, _, _ in hits[:4]:
        where = p.main_node(p.runtime)
        ran = (f"runs on node {where}" if where is not None and not inferred
               else f"may only run on {ev.listed('node', p.allowed_nodes)}")
        parts.append(f"{ev.name_of(process)} uses {ev.name_of(device)} on NUMA node {dnode} but {ran}"
                     + (f" with {ev.fmt(remote_pages, '%')} of its pages elsewhere" if remote_pages is not None else ""))
    more = f" (and {len(hits) - 4} more)" if len(hits) > 4 else ""
    return finding(worst(*(h[10] for h in hits)) or "warning",
                   f"{ev.counted(len(hits), 'accelerator users', 'are')} placed away from {ev.their(len(hits))} device's NUMA node: "
                   + "; ".join(parts) + more + ".",
                   items, subjects=[h[0].id for h in hits] + [h[2].id for h in hits])


DEVICE_NUMA_MISMATCH = Pattern(
    id="interconnect.device_numa_mismatch", layer=3, title="Device / NUMA placement mismatch",
    why="Every host-device copy, kernel launch and pinned-memory transfer of a process crosses the "
        "inter-socket link when the process runs or keeps its memory on another NUMA node than its GPU/NPU: "
        "higher latency for launches and lower bandwidth for copies.",
    metrics=(E.USES_DEVICE, E.LOCAL_TO, "gpu.numa_node", "npu.numa_node", "process.cpus_allowed",
             "runs_on.runtime_ns_total", "allocates_on.pages", "numa_distance.distance"),
    thresholds=(Threshold("remote_runtime_pct", "%", "above", "share of the process's run time on nodes other "
                          "than its device's", critical=80, warning=50),
                Threshold("remote_pages_pct", "%", "above", "share of the process's pages on nodes other than "
                          "its device's", critical=80, warning=50)),
    params=(Param("near_distance", 12, "SLIT", "remote nodes at this NUMA distance or less (siblings on one "
                  "package) lower a critical finding to a warning"),),
    evidence="For each process and device: the uses_device edge, the device's NUMA node (local_to edge or "
             "attribute), the CPUs the process may run on and their node, its run time and pages by node with "
             "the remote shares, and the NUMA distance from each remote node to the device's.",
    recommendations=(
        "Pin each worker to its device's node: numactl --cpunodebind=<device node> --membind=<device node> "
        "(or taskset with the device's local_cpulist).",
        "Map local ranks to devices by topology (CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES order "
        "matching the CPU binding), so rank i's CPUs and device i share a node.",
        "After rebinding, verify with witty-profiler compare BEFORE AFTER.",
    ),
    check=_device_numa_mismatch)


# -- interconnect.pcie_bottleneck ---------------------------------------------------------
def _pci_address(scope: Scope, eid: str) -> tuple[str, str] | None:
    """(host, PCI address) of a device, a NIC or a PCI function: one device seen as a GPU and as the
    pci_device that implements it has one address."""
    entity = scope.graph.entity(eid)
    if entity is None:
        return None
    address = entity.attrs.get("pci_address")
    if not address and entity.type in (T.GPU, T.NPU, T.PCI_DEVICE):
        address = eid.split(":", 2)[2]
    return (host_of(eid), str(address)) if address else None


def _on_degraded_links(scope: Scope, verdict: Verdict, what: str, links: bool = False) -> Verdict:
    """Relate a bottleneck to interconnect.pcie_link_degraded where that finding is about the same
    devices: a link running below its capacity fills sooner. `links`: only NVLink/HCCS links lost
    (fewer links up than its peers) count, not a PCIe link's width or speed."""
    degraded = scope.verdict("interconnect.pcie_link_degraded")
    if verdict.status != "finding" or degraded is None or degraded.status != "finding":
        return verdict
    lost = {i for e in degraded.evidence if e.metric == "link_capacity_pct" and e.threshold is not None
            and (not links or "links up" in (e.note or "")) for i in e.ids}
    lost_at = {a for a in (_pci_address(scope, i) for i in lost) if a is not None}
    same = [s for s in verdict.subjects if _pci_address(scope, s) in lost_at]
    if same:
        verdict.related = sorted({*verdict.related, "interconnect.pcie_link_degraded"})
        who = f"Its {what} is" if len(verdict.subjects) == 1 else f"{ev.counted(len(same), 'of them', 'have')} a"
        verdict.description += (f" {who} degraded{'' if len(verdict.subjects) == 1 else ' ' + what} (see "
                                "interconnect.pcie_link_degraded): it is full sooner.")
        verdict.reason = verdict.description
    return verdict


def _pcie_bottleneck(scope: Scope, t: dict[str, Any]) -> Verdict:
    devices = workload_devices(scope) + (scope.graph.entities(T.NIC) if not scope.has_workload else [])
    return _on_degraded_links(scope, metric_check(
        scope, devices, t["pcie_util_pct"], M.PCIE_UTIL_PCT, "devices", ("gpu", "npu", "nvml", "pci"),
        "PCIe is near its capacity on {n:devices}: {names} at {worst} (threshold > {limit})."), "PCIe link")


PCIE_BOTTLENECK = Pattern(
    id="interconnect.pcie_bottleneck", layer=3, title="PCIe bottleneck",
    why="Host-device copies, and peer traffic without NVLink, are limited by the PCIe link; near its capacity "
        "they queue and the device waits for data.",
    metrics=("gpu.pcie_util_pct", "gpu.pcie_tx_bytes_per_s", "gpu.pcie_rx_bytes_per_s"),
    thresholds=(Threshold("pcie_util_pct", "%", "above", "PCIe throughput, share of the link's capacity",
                          critical=95, warning=90),),
    needs="a GPU (NVML) or NPU collector with PCIe throughput",
    evidence="Each device of the workload over the threshold. When interconnect.pcie_link_degraded finds the "
             "link of the same device below its capacity, the finding relates to it.",
    recommendations=(
        "Keep data on the device between steps; avoid per-step host round trips (.cpu(), .item()).",
        "Use pinned memory and non_blocking copies so transfers overlap compute.",
        "Check the link trained at full width and speed (interconnect.pcie_link_degraded).",
    ),
    check=_pcie_bottleneck)


# -- interconnect.pcie_link_degraded ------------------------------------------------------
GT_PER_GEN = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
LINKED_CLASSES = ("0x03", "0x12", "0x02", "0x0b", "0x0108")  # display, accelerators, network, processors, NVMe


def _link(e: Entity) -> tuple[float, float, float, float] | None:
    """(speed, max speed, width, max width) in GT/s and lanes."""
    speed, top = num(e, M.LINK_SPEED_GTS), num(e, M.LINK_SPEED_MAX_GTS)
    width, wmax = num(e, M.LINK_WIDTH), num(e, M.LINK_WIDTH_MAX)
    if None in (speed, top, width, wmax):
        gen, gmax = num(e, M.PCIE_LINK_GEN), num(e, M.PCIE_LINK_GEN_MAX)
        width, wmax = num(e, M.PCIE_LINK_WIDTH), num(e, M.PCIE_LINK_WIDTH_MAX)
        if None in (gen, gmax, width, wmax):
            return None
        speed, top = GT_PER_GEN.get(int(gen or 0)), GT_PER_GEN.get(int(gmax or 0))
        if speed is None or top is None:
            return None
    if not top or not wmax:
        return None
    return speed, top, width, wmax  # type: ignore[return-value]


def _link_word(device: Entity) -> str:
    return "HCCS" if device.type == T.NPU else "NVLink"


def _device_links(scope: Scope, levels: Any) -> tuple[int, list[tuple[Entity, float, tuple, str]]]:
    """NVLink/HCCS links up on each GPU/NPU against the most up on a device of the same model on its
    host. The peers set the expectation: a board may wire fewer links than the chip has (PCIe cards
    with bridges), but devices of one model in one host are wired alike, so one with fewer links up
    than its peers lost some. A model with no link up anywhere is not NVLink-connected at all."""
    groups: dict[tuple[str, str, Any], list[Entity]] = {}
    for device in scope.query.accelerators():
        if num(device, M.NVLINK_LINKS_UP) is not None:
            groups.setdefault((host_of(device.id), device.type, device.attrs.get("name")), []).append(device)
    measured, hits = 0, []
    for members in groups.values():
        best = max(num(d, M.NVLINK_LINKS_UP) or 0.0 for d in members)
        if best <= 0:
            continue
        peers = [d.id for d in members if num(d, M.NVLINK_LINKS_UP) == best]
        for device in members:
            measured += 1
            up = num(device, M.NVLINK_LINKS_UP) or 0.0
            capacity = up * 100 / best
            sev = levels.severity(capacity)
            if sev:
                hits.append((device, capacity, ("links", up, best, num(device, M.NVLINK_LINKS_DOWN), peers), sev))
    return measured, hits


def _pcie_link_degraded(scope: Scope, t: dict[str, Any]) -> Verdict:
    levels = t["link_capacity_pct"]
    candidates = scope.query.accelerators() + scope.graph.entities(T.NIC) + [
        d for d in scope.graph.entities(T.PCI_DEVICE) if str(d.attrs.get("class", "")).lower().startswith(LINKED_CLASSES)]
    measured, idle_skipped, hits = 0, 0, []
    for device in candidates:
        link = _link(device)
        if link is None:
            continue
        measured += 1
        speed, top, width, wmax = link
        util = num(device, M.UTIL_PCT)
        if width >= wmax and speed < top and (util is None or util < t["min_util_pct"]):
            idle_skipped += 1  # idle devices lower their link speed to save power; only width loss counts then
            continue
        capacity = speed * width * 100 / (top * wmax)
        sev = levels.severity(capacity)
        if sev:
            hits.append((device, capacity, ("pcie", *link), sev))
    linked, link_hits = _device_links(scope, levels)
    hits += link_hits
    if not measured and not linked:
        return not_evaluated(scope.missing("no PCIe link speed/width of devices in this graph", "pci", "gpu", "nvml"))
    if not hits:
        parts = []
        if measured:
            extra = f" ({ev.counted(idle_skipped, 'idle devices')} at reduced speed ignored: power saving)" if idle_skipped else ""
            parts.append(f"{ev.counted(measured, 'PCIe links')} checked; each at its maximum width and speed{extra}")
        if linked:
            parts.append(f"{ev.counted(linked, 'devices')} with NVLink/HCCS links checked; none has fewer links up than its "
                         f"peers of the same model")
        return clear("; ".join(parts))
    hits.sort(key=lambda h: (h[3] != "critical", h[1], h[0].id))
    items = []
    for device, capacity, detail, sev in hits[:ev.MAX_SUBJECTS]:
        if detail[0] == "pcie":
            _, speed, top, width, wmax = detail
            items.append(ev.entity(device.id, "link_capacity_pct", capacity, levels=levels, severity=sev,
                                   note=f"{ev.name_of(device)}: x{number(width)} at {number(speed)} GT/s of "
                                        f"x{number(wmax)} at {number(top)} GT/s"))
            continue
        _, up, best, down, peers = detail
        word = _link_word(device)
        items.append(ev.entity(device.id, "link_capacity_pct", capacity, levels=levels, severity=sev,
                               note=f"{ev.name_of(device)}: {number(up)} {word} links up where its peers of the "
                                    f"same model have {number(best)}"))
        if down:
            items.append(ev.entity(device.id, M.NVLINK_LINKS_DOWN, down, unit="links",
                                   note=f"{word} links of {ev.name_of(device)} reported inactive"))
        items.append(ev.statistic(peers, M.NVLINK_LINKS_UP, best, unit="links",
                                  note=f"the most {word} links up on a device of this model on the host"))
        xids = device.attrs.get("xid_codes")
        if xids:
            items.append(ev.entity(device.id, "xid_codes", xids, note="XID errors during the window (74: NVLink "
                                                                        "error)"))
    if len(hits) > ev.MAX_SUBJECTS:
        items.append(ev.more(len(hits) - ev.MAX_SUBJECTS, "degraded links"))
    device, capacity, detail, _ = hits[0]
    if detail[0] == "pcie":
        _, speed, top, width, wmax = detail
        text = (f"{ev.counted(len(hits), 'device links')} below capacity: {ev.name_of(device)} runs PCIe x{number(width)} "
                f"at {number(speed)} GT/s instead of x{number(wmax)} at {number(top)} GT/s "
                f"({ev.fmt(capacity, '%')} of its bandwidth).")
    else:
        _, up, best, _, _ = detail
        text = (f"{ev.counted(len(hits), 'device links')} below capacity: {ev.name_of(device)} has {number(up)} of "
                f"{number(best)} {_link_word(device)} links up ({ev.fmt(capacity, '%')} of its peers' "
                f"{_link_word(device)} bandwidth).")
    return finding(worst(*(h[3] for h in hits)) or "warning", text, items, subjects=[h[0].id for h in hits])


PCIE_LINK_DEGRADED = Pattern(
    id="interconnect.pcie_link_degraded", layer=3, title="PCIe or NVLink/HCCS link degraded",
    why="A link that trained at fewer lanes or a lower generation than it supports (a bad riser, a dirty "
        "slot, a BIOS setting) silently halves or quarters the device's host bandwidth; a GPU or NPU that lost "
        "NVLink/HCCS links carries its collectives on the ones left, and every rank waits for it.",
    metrics=("pci_device.link_speed_gts", "pci_device.link_speed_max_gts", "pci_device.link_width",
             "pci_device.link_width_max", "gpu.pcie_link_gen", "gpu.pcie_link_width", "gpu.nvlink_links_up",
             "gpu.nvlink_links_down", "npu.nvlink_links_up", "npu.nvlink_links_down"),
    thresholds=(Threshold("link_capacity_pct", "%", "below", "PCIe: current speed x width as a share of the "
                          "maximum; NVLink/HCCS: links up as a share of the most up on a device of the same "
                          "model on the host", critical=50, warning=100),),
    params=(Param("min_util_pct", 10, "%", "a device less busy than this may lower its PCIe link speed to save "
                  "power; then only a width loss counts"),),
    evidence="Each accelerator, NIC or NVMe link below its maximum, with current and maximum width and speed; "
             "each GPU/NPU with fewer NVLink/HCCS links up than its peers, with its links down, the peers "
             "that have the most up and its XID errors.",
    recommendations=(
        "Reseat the device or its riser and check the slot's wiring (x16 slot wired x8?).",
        "Check BIOS PCIe settings (forced generation, bifurcation).",
        "Compare with lspci -vv (LnkSta vs LnkCap) under load; replace the riser or cable if it persists.",
        "NVLink: nvidia-smi nvlink -s and -e show the inactive link and its error counters; if it stays down "
        "after a GPU reset, have the baseboard or NVSwitch tray serviced (NPU: npu-smi info -t hccs).",
    ),
    check=_pcie_link_degraded)


# -- interconnect.nvlink_contention -------------------------------------------------------
def _fewer_links(device: Entity) -> list[Evidence]:
    down = num(device, M.NVLINK_LINKS_DOWN)
    if not down:
        return []
    return [ev.entity(device.id, M.NVLINK_LINKS_DOWN, down, unit="links",
                      note=f"{number(num(device, M.NVLINK_LINKS_UP) or 0)} {_link_word(device)} links up: the "
                           f"traffic shares fewer links (interconnect.pcie_link_degraded)")]


def _nvlink_contention(scope: Scope, t: dict[str, Any]) -> Verdict:
    devices = workload_devices(scope)
    if devices and all(d.type == T.NPU and num(d, M.NVLINK_UTIL_PCT) is None for d in devices):
        return not_evaluated(scope.missing(
            # what gives the figure; why it is missing here (a legacy file, a collector that failed) is
            # what scope.missing appends from the collectors' statuses
            "no HCCS utilisation of the NPUs: npu-smi info -t hccs (link speeds) and -t hccs-bw (throughput) "
            "give it, and not every NPU model or driver answers them", "npu"))
    return _on_degraded_links(scope, metric_check(
        scope, devices, t["nvlink_util_pct"], M.NVLINK_UTIL_PCT, "accelerators of the workload",
        ("gpu", "npu", "nvml", "nvlink"), "NVLink/HCCS is contended on {n:devices}: {names} at {worst} (threshold > "
        "{limit}).", extra=_fewer_links), "set of NVLink/HCCS links", links=True)


NVLINK_CONTENTION = Pattern(
    id="interconnect.nvlink_contention", layer=3, title="NVLink/HCCS contention",
    why="Collectives and tensor-parallel exchanges share the device links; past about 40 % sustained use "
        "they start to queue behind each other and the step waits on communication.",
    metrics=("gpu.nvlink_util_pct", "gpu.nvlink_tx_bytes_per_s", "gpu.nvlink_rx_bytes_per_s", "npu.nvlink_util_pct",
             "npu.nvlink_tx_bytes_per_s", "npu.nvlink_rx_bytes_per_s", "gpu.nvlink_links_down"),
    thresholds=(Threshold("nvlink_util_pct", "%", "above", "NVLink/HCCS throughput, share of the links' capacity",
                          critical=80, warning=40),),
    needs="a GPU (NVML NVLink counters) or NPU (npu-smi -t hccs and -t hccs-bw) collector",
    evidence="Each device of the workload over the threshold, with its links down if it lost some; when "
             "interconnect.pcie_link_degraded finds that device with fewer links up than its peers, the finding "
             "relates to it.",
    recommendations=(
        "Overlap communication with compute (bucketed all-reduce, async tensor-parallel collectives).",
        "Reduce tensor-parallel degree or place TP groups on fully connected device sets.",
        "Compress or lower the precision of gradients/activations exchanged.",
    ),
    check=_nvlink_contention)


PATTERNS = [CROSS_NUMA_ACCESS, DEVICE_NUMA_MISMATCH, PCIE_BOTTLENECK, PCIE_LINK_DEGRADED, NVLINK_CONTENTION]
