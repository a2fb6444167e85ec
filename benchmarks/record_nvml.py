"""Record this GPU host's NVML answers over one collection window, as a fixture to replay.

The GPU collector runs its usual window (start, a sample every interval, finish) against the live
driver through `collectors.nvml.RecordingNvml`, which writes down every answer in the format
`RecordedNvml` replays (tests/fixtures/gpu/README.md). Replaying the file gives the collector the
same answers in the same order, so the graph it builds from the recording is the graph it built
live, minus what comes from sysfs. On Hopper and later GPUs that includes the GPM samples and the
metric values each pair of them gave (SM activity, occupancy, tensor pipes, HBM bandwidth).

    python3 -m benchmarks.record_nvml -o tests/fixtures/gpu/h200.json [--duration 10] [--interval 1]

Exit status 2 with one line on stderr when NVML cannot be used here (no driver, no GPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from witty_profiler.collectors.base import Context
from witty_profiler.collectors.gpu import GpuCollector
from witty_profiler.collectors.lib.nvml import LiveNvml, NvmlUnavailable, RecordingNvml
from witty_profiler.topology import Graph


def record(nvml: Any, duration_s: float, interval_s: float, source: str = "", sys_root: Path = Path("/sys"),
           host: str = "recorded") -> tuple[dict, GpuCollector, Graph]:
    """Run one GPU-collector window over `nvml`, keeping its answers: (recording, collector, graph)."""
    recorder = RecordingNvml(nvml, source)
    collector = GpuCollector(Context(host=host, sys=sys_root, duration_s=duration_s, interval_s=interval_s),
                             nvml=recorder)
    started = time.monotonic()
    collector.start()
    while interval_s > 0 and time.monotonic() - started + interval_s < duration_s:
        time.sleep(interval_s)
        collector.sample()
    time.sleep(max(0.0, duration_s - (time.monotonic() - started)))
    graph = collector.finish()
    return recorder.recording(), collector, graph


def describe(recording: dict) -> str:
    """'1x NVIDIA H200, driver 580.159.04, recorded 2026-12-02T10:00Z' for the recording's source."""
    names = [d.get("nvmlDeviceGetName", ["?"])[0] for d in recording.get("devices", [])]
    driver = (recording.get("nvmlSystemGetDriverVersion") or ["?"])[0]
    kinds = sorted(set(map(str, names)))
    count = ", ".join(f"{names.count(k)}x {k}" for k in kinds) or "no GPU"
    when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    devices = recording.get("devices", [])
    gpm = sum(1 for d in devices if any(isinstance(a, int) for a in d.get("nvmlGpmSampleGet", [])))
    return (f"{count}, driver {driver}, recorded {when} by benchmarks/record_nvml.py"
            + (f"; GPM samples from {gpm} of {len(devices)} GPUs" if gpm else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.record_nvml", description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True, help="file to write the recording to ('-' = stdout)")
    parser.add_argument("--duration", type=float, default=10.0, help="window length in seconds (default 10)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    parser.add_argument("--source", default="", help="what was running, for the recording's 'source' field")
    args = parser.parse_args(argv)
    try:
        nvml = LiveNvml()
    except NvmlUnavailable as e:
        print(f"record_nvml: {e}", file=sys.stderr)
        return 2
    recording, collector, graph = record(nvml, args.duration, args.interval)
    if collector.status.status == "unavailable":
        print(f"record_nvml: {collector.status.reason}", file=sys.stderr)
        return 2
    if collector.status.status == "partial":
        print(f"record_nvml: recorded, but {collector.status.reason}", file=sys.stderr)
    recording["source"] = describe(recording) + (f"; {args.source}" if args.source else "")
    text = json.dumps(recording, indent=1) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}: {len(recording['devices'])} GPU(s), "
              f"{sum(len(v) for d in recording['devices'] for v in d.values())} answers "
              f"({collector.status.status}, {len(graph.entities('gpu'))} gpu entities)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
