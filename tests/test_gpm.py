"""NVML GPM metrics through the GPU collector: replayed answers of an HGX H100 (supported), of L4s
(not supported: Ada), of drivers without the GPM calls, of a MIG GPU; and the HBM pattern on them."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest
from diagnosis_graphs import device, new_graph, process, uses
from graph_checks import assert_known_names

from witty_profiler.collectors.base import Context
from witty_profiler.collectors.gpu import GpuCollector
from witty_profiler.collectors.lib.gpm import GPM_METRICS, METRIC_IDS
from witty_profiler.collectors.lib.nvml import RecordedNvml, RecordingNvml
from witty_profiler.diagnosis import diagnose

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"
MiB = 1024 * 1024
GPM_KEY = "nvmlGpmMetricsGet([2, 3, 5, 6, 7, 10, 20, 21, 60, 61])"


def window(nvml, sys_root: Path):
    c = GpuCollector(Context(host="n1", sys=sys_root), nvml=nvml)
    c.start()
    c.sample()
    return c, c.finish()


def variant(tmp_path: Path, fixture: str, change) -> Path:
    """A copy of a recording with some answers changed the way another driver or GPU would answer."""
    data = json.loads((FIXTURES / fixture).read_text())
    change(data)
    path = tmp_path / fixture
    path.write_text(json.dumps(data))
    return path


def test_metric_ids_are_nvmls():
    pynvml = pytest.importorskip("pynvml")
    names = {2: "SM_UTIL", 3: "SM_OCCUPANCY", 5: "ANY_TENSOR_UTIL", 6: "DFMA_TENSOR_UTIL", 7: "HMMA_TENSOR_UTIL",
             10: "DRAM_BW_UTIL", 20: "PCIE_TX_PER_SEC", 21: "PCIE_RX_PER_SEC", 60: "NVLINK_TOTAL_RX_PER_SEC",
             61: "NVLINK_TOTAL_TX_PER_SEC"}
    assert set(names) == set(GPM_METRICS) and METRIC_IDS == sorted(names)
    for metric_id, name in names.items():
        assert getattr(pynvml, f"NVML_GPM_METRIC_{name}") == metric_id
    assert pynvml.NVML_DEVICE_ARCH_HOPPER == 9


def test_h100_gpm_metrics(tmp_path):
    c, g = window(RecordedNvml(FIXTURES / "hgx-h100-8gpu.json"), tmp_path / "sys")
    assert c.status.status == "ok"
    assert_known_names(g)
    m = g.entity("gpu:n1:0000:1b:00.0").metrics
    # two intervals (start -> sample -> finish), each one nvmlGpmMetricsGet over a pair of samples
    assert m["sm_active_pct"] == pytest.approx((86.3 + 85.1) / 2) and m["sm_active_pct_max"] == 86.3
    assert m["sm_occupancy_pct"] == pytest.approx((41.2 + 40.7) / 2)
    assert m["tensor_active_pct"] == pytest.approx((47.8 + 46.9) / 2)
    assert m["tensor_hmma_active_pct"] == pytest.approx((47.1 + 46.3) / 2) and m["tensor_dfma_active_pct"] == 0
    assert m["hbm_bw_util_pct"] == pytest.approx((52.6 + 51.9) / 2)
    # NVML's own figures stay beside them: util_pct (a kernel ran) is far above sm_active_pct
    assert m["util_pct"] == pytest.approx(98.0) and m["mem_bw_util_pct"] == pytest.approx(59.67, abs=0.01)
    # PCIe from GPM (MiB/s over each interval) replaces the 20 ms nvmlDeviceGetPcieThroughput snapshots
    assert m["pcie_tx_bytes_per_s"] == pytest.approx((744.6 + 1103.2) / 2 * MiB, rel=1e-6)
    assert m["pcie_rx_bytes_per_s_max"] == pytest.approx(4878.3 * MiB, rel=1e-6)
    # NVLink keeps the field counters read at both ends (GPM agrees with them within 1 %)
    assert m["nvlink_tx_bytes_per_s"] == pytest.approx(152e9, rel=1e-3)
    slow = g.entity("gpu:n1:0000:61:00.0").metrics
    assert slow["sm_active_pct"] < 50 and slow["tensor_active_pct"] < 25 and slow["util_pct"] > 55
    assert not g.entities("gpu_instance")


def test_views_show_gpm_figures(tmp_path):
    """The compute view shows SM activity and tensor activity beside NVML's utilisation, the memory
    view GPM's share of peak HBM bandwidth beside NVML's memory-busy time."""
    from witty_profiler.converters import render_view

    _, g = window(RecordedNvml(FIXTURES / "hgx-h100-8gpu.json"), tmp_path / "sys")
    compute = render_view(g, "compute").text.splitlines()
    header = next(line for line in compute if "sm_active%" in line)
    assert header.split()[:7] == ["id", "idx", "name", "util%", "util_p95%", "sm_active%", "tensor%"]
    slow = next(line for line in compute if line.startswith("gpu:n1:0000:61:00.0"))
    assert "59.0%" in slow and "45.1%" in slow and "23.8%" in slow
    memory = render_view(g, "memory").text.splitlines()
    assert next(line for line in memory if "hbm_peak%" in line).split()[-2:] == ["hbm_bw%", "hbm_peak%"]
    assert next(line for line in memory if line.startswith("gpu:n1:0000:1b:00.0")).split()[-2:] == ["59.7%", "52.2%"]


def test_l4_is_not_supported_and_says_why(tmp_path):
    c, g = window(RecordedNvml(FIXTURES / "pcie-2x-l4.json"), tmp_path / "sys")
    assert c.status.status == "partial"
    assert c.status.reason == ("GPM not supported on 2x NVIDIA L4 (pre-Hopper): SM activity and occupancy, "
                               "tensor-pipe activity and HBM bandwidth share left out")
    m = g.entity("gpu:n1:0000:01:00.0").metrics
    assert "sm_active_pct" not in m and m["util_pct"] == pytest.approx(45.0)
    assert m["pcie_rx_bytes_per_s"] == pytest.approx(112666.67 * 1024, rel=1e-4)  # the snapshots stay


def test_driver_without_gpm_calls(tmp_path):
    def old_driver(data):
        for d in data["devices"]:
            d["nvmlGpmQueryDeviceSupport"] = [{"nvml_error": "NVML_ERROR_FUNCTION_NOT_FOUND"}]

    c, g = window(RecordedNvml(variant(tmp_path, "pcie-2x-l4.json", old_driver)), tmp_path / "sys")
    assert c.status.status == "partial" and len(g.entities("gpu")) == 2
    assert c.status.reason.startswith(
        "the NVIDIA driver (550.54.15) lacks nvmlGpmQueryDeviceSupport, so no GPM on 2x NVIDIA L4: ")

    def no_metrics_get(data):
        for d in data["devices"]:
            d[GPM_KEY] = [{"nvml_error": "NVML_ERROR_FUNCTION_NOT_FOUND"}]

    c, g = window(RecordedNvml(variant(tmp_path, "hgx-h100-8gpu.json", no_metrics_get)), tmp_path / "sys")
    assert c.status.status == "partial"
    assert c.status.reason.startswith("the NVIDIA driver lacks nvmlGpmMetricsGet: ")
    assert "sm_active_pct" not in g.entity("gpu:n1:0000:1b:00.0").metrics


def test_metric_a_gpu_does_not_answer_is_left_out(tmp_path):
    """Each metric carries its own nvmlReturn: NVLink metrics of a GPU without NVLink answer NOT_SUPPORTED."""
    def no_nvlink(data):
        for d in data["devices"]:
            for answer in d[GPM_KEY]:
                for metric in answer:
                    if metric["metricId"] in (60, 61):
                        metric["nvmlReturn"], metric["value"] = 3, 0.0

    c, g = window(RecordedNvml(variant(tmp_path, "hgx-h100-8gpu.json", no_nvlink)), tmp_path / "sys")
    m = g.entity("gpu:n1:0000:1b:00.0").metrics
    assert c.status.status == "ok" and "sm_active_pct" in m
    assert m["nvlink_tx_bytes_per_s"] == pytest.approx(152e9, rel=1e-3)  # the field counters still there


def test_nvlink_from_gpm_when_field_counters_are_missing(tmp_path):
    def no_fields(data):
        for d in data["devices"]:
            del d["nvmlDeviceGetFieldValues([(138, 4294967295), (139, 4294967295)])"]

    _, g = window(RecordedNvml(variant(tmp_path, "hgx-h100-8gpu.json", no_fields)), tmp_path / "sys")
    m = g.entity("gpu:n1:0000:1b:00.0").metrics
    tx = [a[9]["value"] for a in json.loads((FIXTURES / "hgx-h100-8gpu.json").read_text())["devices"][0][GPM_KEY]]
    assert m["nvlink_tx_bytes_per_s"] == pytest.approx(sum(tx) / 2 * MiB, rel=1e-6)
    assert m["nvlink_util_pct"] == pytest.approx(100 * max(m["nvlink_tx_bytes_per_s"], m["nvlink_rx_bytes_per_s"])
                                                 / (18 * 25e9), abs=0.01)


def test_mig_gpu_instances(tmp_path):
    """GPU 7 in MIG mode with two GPU instances: each sampled with nvmlGpmMigSampleGet."""
    def mig(data):
        d = data["devices"][7]
        d["nvmlDeviceGetMigMode"] = [[1, 1]]
        d["migGpuInstanceIds"] = [[1, 2]]
        for gi, share in ((1, 0.7), (2, 0.2)):
            d[f"nvmlGpmMigSampleGet({gi})"] = [100 + gi, 110 + gi, 120 + gi]
            d[f"nvmlGpmMetricsGet({gi},[2, 3, 5, 6, 7, 10, 20, 21, 60, 61])"] = [
                [{**m, "value": round(m["value"] * share, 1)} for m in answer] for answer in d[GPM_KEY]]

    c, g = window(RecordedNvml(variant(tmp_path, "hgx-h100-8gpu.json", mig)), tmp_path / "sys")
    assert c.status.status == "ok"
    assert_known_names(g)
    instances = {e.id: e for e in g.entities("gpu_instance")}
    assert set(instances) == {"gpu_instance:n1:0000:df:00.0:1", "gpu_instance:n1:0000:df:00.0:2"}
    big = instances["gpu_instance:n1:0000:df:00.0:1"]
    assert big.attrs["gpu_instance_id"] == 1
    assert big.metrics["sm_active_pct"] == pytest.approx((round(86.1 * 0.7, 1) + round(85.4 * 0.7, 1)) / 2)
    assert {(e.source, e.target) for e in g.edges("instance_of")} == {
        (i, "gpu:n1:0000:df:00.0") for i in instances}


def test_mig_gpu_whose_whole_gpu_sample_is_refused(tmp_path):
    """Where the driver reads a MIG GPU per instance only, the whole-GPU sample's refusal is no failure."""
    def mig(data):
        d = data["devices"][7]
        d["nvmlDeviceGetMigMode"] = [[1, 1]]
        d["migGpuInstanceIds"] = [[2]]
        d["nvmlGpmSampleGet"] = [{"nvml_error": "NVML_ERROR_NOT_SUPPORTED"}]
        d["nvmlGpmMigSampleGet(2)"] = [201, 202, 203]
        d["nvmlGpmMetricsGet(2,[2, 3, 5, 6, 7, 10, 20, 21, 60, 61])"] = d[GPM_KEY]

    c, g = window(RecordedNvml(variant(tmp_path, "hgx-h100-8gpu.json", mig)), tmp_path / "sys")
    assert c.status.status == "ok", c.status.reason
    assert "sm_active_pct" not in g.entity("gpu:n1:0000:df:00.0").metrics
    assert g.entity("gpu_instance:n1:0000:df:00.0:2").metrics["sm_active_pct"] == pytest.approx((86.1 + 85.4) / 2)


def test_recorder_keeps_gpm_answers_in_the_replay_format():
    """A live answer is a ctypes array of c_nvmlGpmMetric_t; the recording holds it as plain values
    that RecordedNvml plays back to the collector."""
    import pynvml

    class Live:
        def __init__(self):
            self.pynvml = pynvml
            self.released = []

        def gpm_sample(self, index, gpu_instance=None):
            return 7 if gpu_instance is None else 70 + gpu_instance

        def gpm_metrics(self, index, first, second, metric_ids, gpu_instance=None):
            request = pynvml.c_nvmlGpmMetricsGet_t()
            for k, metric in enumerate(metric_ids):
                request.metrics[k].metricId = metric
                request.metrics[k].value = 12.5 * (k + 1)
            request.metrics[1].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            request.metrics[0].metricInfo.shortName = ctypes.c_char_p(b"sm_util")
            return [request.metrics[k] for k in range(len(metric_ids))]

        def gpm_release(self, number):
            self.released.append(number)

        def mig_instances(self, index):
            return [1, 2]

    live = Live()
    rec = RecordingNvml(live)
    first, second = rec.gpm_sample(0), rec.gpm_sample(0, 3)
    rec.gpm_metrics(0, first, second, [2, 10])
    rec.gpm_release(first)
    assert live.released == [7] and rec.mig_instances(0) == [1, 2]
    dev = rec.recording()["devices"][0]
    assert dev["nvmlGpmSampleGet"] == [7] and dev["nvmlGpmMigSampleGet(3)"] == [73]
    sm, dram = dev["nvmlGpmMetricsGet([2, 10])"][0]
    assert sm == {"metricId": 2, "nvmlReturn": 0, "value": 12.5,
                  "metricInfo": {"shortName": "sm_util", "longName": None, "unit": None}}
    assert dram["metricId"] == 10 and dram["nvmlReturn"] == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert dev["migGpuInstanceIds"] == [[1, 2]]


def gpu_with(**metrics):
    g = new_graph()
    process(g, 10, "train", cpu_util_pct=100.0)
    uses(g, 10, device(g, "gpu", "0000:3b:00.0", 0, **metrics))
    return g


@pytest.mark.parametrize("hbm, nvml, severity", [(84.9, 97.0, None), (85.1, 50.0, "warning"),
                                                 (95.1, 50.0, "critical")])
def test_hbm_bandwidth_limit_judged_on_gpm_where_present(hbm, nvml, severity):
    """NVML's mem_bw_util_pct is a share of time; GPM's is a share of peak bandwidth, and wins."""
    d = diagnose(gpu_with(hbm_bw_util_pct=hbm, mem_bw_util_pct=nvml))
    f = d.finding("memory.hbm_bandwidth_limit")
    if severity is None:
        assert f is None
        row = next(r for r in d.coverage if r.pattern == "memory.hbm_bandwidth_limit")
        assert row.status == "clear" and "84.9" in row.reason
        return
    assert f.severity == severity and f.subjects == ["gpu:h1:0000:3b:00.0"]
    (item,) = f.evidence
    assert item.metric == "hbm_bw_util_pct" and item.value == hbm
    assert "of peak (GPM DRAM counters" in f.description


def test_hbm_bandwidth_limit_mixes_gpm_and_nvml_devices():
    g = gpu_with(hbm_bw_util_pct=60.0, mem_bw_util_pct=70.0)
    uses(g, 10, device(g, "npu", "0000:c1:00.0", 0, mem_bw_util_pct=96.0))
    f = diagnose(g).finding("memory.hbm_bandwidth_limit")
    assert f.severity == "critical" and f.subjects == ["npu:h1:0000:c1:00.0"]
    assert [e.metric for e in f.evidence] == ["mem_bw_util_pct"]


REPO = Path(__file__).resolve().parents[1]


def test_gpu_session_load_runs_without_a_gpu():
    """gpm_load.py falls back to numpy on the CPU, so gpm.sh can be checked on any host."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(REPO / "benchmarks/gpu_session/gpm_load.py"), "--phase", "memory",
                           "--seconds", "0.2", "--backend", "numpy", "--buffer-gib", "0.01"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("memory load on cpu, numpy ") and lines[1] == "READY"
    result = json.loads(lines[-1])
    assert result["phase"] == "memory" and result["steps"] >= 10 and result["gbytes_per_s"] > 0


def test_gpu_session_summary_replays_a_recording(tmp_path):
    """gpm_summary.py on a session's files: the graph's GPM figures, the load's own bandwidth against
    the peak, and the NVML recording replayed through the collector with all its samples."""
    import shutil
    import subprocess
    import sys

    c, g = window(RecordedNvml(FIXTURES / "hgx-h100-8gpu.json"), tmp_path / "sys")
    gpu = g.entity("gpu:n1:0000:1b:00.0")
    for phase, load in (("tensor", {"phase": "tensor", "tflops": 612.4}),
                        ("memory", {"phase": "memory", "gbytes_per_s": 4113.0})):
        graph = {"meta": {"collectors": {"gpu": {"status": c.status.status}}},
                 "entities": [{"id": gpu.id, "type": "gpu", "metrics": gpu.metrics}]}
        (tmp_path / f"graph-gpm-{phase}.json").write_text(json.dumps(graph))
        (tmp_path / f"gpm-{phase}.log").write_text(f"{phase} load on cuda\nREADY\n{json.dumps(load)}\n")
    shutil.copy(FIXTURES / "hgx-h100-8gpu.json", tmp_path / "nvml-gpm-tensor.json")
    (tmp_path / "diagnosis-gpm-memory.json").write_text(json.dumps({"findings": [
        {"pattern": "memory.hbm_bandwidth_limit", "severity": "warning", "description": "saturated"}]}))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks/gpu_session/gpm_summary.py"), str(tmp_path), "4800"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "[tensor] gpu collector: ok" in out and "[tensor] expected tensor_active_pct > 30: yes" in out
    assert "[memory] the load's own bandwidth: 4113.0 GB/s = 85.7 % of 4800 GB/s; GPM hbm_bw_util_pct 52.25" in out
    replayed = [line for line in out.splitlines() if line.startswith("[tensor] replayed recording: ")]
    assert len(replayed) == 8 and "tensor_active_pct 47.35" in replayed[0]
    assert "'nvmlGpmMetricsGet([2, 3, 5, 6, 7, 10, 20, 21, 60, 61])'" in out and "[memory] no NVML recording" in out
    assert out.rstrip().endswith("memory.hbm_bandwidth_limit: FOUND warning: saturated")


def test_live_wrapper_builds_nvml_requests_from_nvidia_ml_py_structs():
    """LiveNvml's GPM calls against nvidia-ml-py's own structs, with the driver calls standing in: the
    request carries the version, the count, both samples and each metric id, and every sample it
    allocated is freed."""
    import types

    import pynvml

    from witty_profiler.collectors.lib.nvml import LiveNvml

    allocated, freed, requests = [], [], []

    def alloc():
        sample = pynvml.c_nvmlGpmSample_t()  # a NULL pointer of the right type, told apart by identity
        allocated.append(sample)
        return sample

    def metrics_get(request):
        requests.append((request.version, request.numMetrics, request.sample1, request.sample2))
        for k in range(request.numMetrics):
            m = request.metrics[k]
            m.value, m.nvmlReturn = 10.0 * m.metricId, 0 if m.metricId != 60 else pynvml.NVML_ERROR_NOT_SUPPORTED
        return request

    fake = types.SimpleNamespace(**{n: getattr(pynvml, n) for n in dir(pynvml) if n.startswith(("NVML", "c_nvml"))})
    fake.NVMLError = pynvml.NVMLError
    fake.nvmlDeviceGetHandleByIndex = lambda i: f"handle{i}"
    fake.nvmlGpmSampleAlloc = alloc
    fake.nvmlGpmSampleGet = lambda handle, sample: sample
    fake.nvmlGpmMigSampleGet = lambda handle, gi, sample: sample
    fake.nvmlGpmMetricsGet = metrics_get
    fake.nvmlGpmSampleFree = freed.append
    fake.nvmlShutdown = lambda: None

    def mig_handle(parent, k):
        if k == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return f"{parent}/mig{k}"

    fake.nvmlDeviceGetMaxMigDeviceCount = lambda h: 3
    fake.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    fake.nvmlDeviceGetGpuInstanceId = lambda h: {"handle0/mig0": 1, "handle0/mig2": 5}[h]

    live = LiveNvml.__new__(LiveNvml)
    live.pynvml, live._handles, live._events = fake, {}, None
    live._gpm_samples, live._gpm_next = {}, 0
    first, second = live.gpm_sample(0), live.gpm_sample(0, 5)
    answers = live.gpm_metrics(0, first, second, [2, 10, 60])
    assert [(a.metricId, a.value, a.nvmlReturn) for a in answers] == [
        (2, 20.0, 0), (10, 100.0, 0), (60, 600.0, pynvml.NVML_ERROR_NOT_SUPPORTED)]
    version, count, s1, s2 = requests[0]
    assert (version, count) == (pynvml.NVML_GPM_METRICS_GET_VERSION, 3)
    assert s1 is not None and s2 is not None
    assert live.mig_instances(0) == [1, 5]  # the empty slot 1 skipped
    live.gpm_release(first)
    live.close()
    assert [id(s) for s in freed] == [id(s) for s in allocated]


def test_recording_source_says_whether_gpm_was_recorded(tmp_path):
    from benchmarks.record_nvml import describe, record

    recording, collector, _ = record(RecordedNvml(FIXTURES / "hgx-h100-8gpu.json"), 0.0, 0.0, sys_root=tmp_path)
    assert collector.status.status == "ok"
    assert describe(recording).endswith("by benchmarks/record_nvml.py; GPM samples from 8 of 8 GPUs")
    assert len(recording["devices"][0]["nvmlGpmSampleGet"]) == 2  # start and finish: one pair, one answer
    assert len(recording["devices"][0][GPM_KEY]) == 1
    l4, _, _ = record(RecordedNvml(FIXTURES / "pcie-2x-l4.json"), 0.0, 0.0, sys_root=tmp_path)
    assert "GPM" not in describe(l4)
