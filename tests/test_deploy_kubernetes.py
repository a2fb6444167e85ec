"""deploy/kubernetes: the DaemonSet manifest checked offline against Kubernetes' own schemas
(kubernetes-validate, which ships the JSON schemas generated from each release's OpenAPI; strict:
a field the API does not know fails, as a typo would be dropped silently by a server), and the
properties this tool relies on. `kubectl apply --dry-run=client` cannot stand in: without an API
server it fails before validating ("unable to recognize ...: connection refused")."""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "deploy" / "kubernetes" / "witty-profiler-daemonset.yaml"
K8S_VERSION = "1.37"
NAMESPACE = "witty-profiler"
LABEL = ("app.kubernetes.io/name", "witty-profiler")
# the set the manifest comments on, one reason each; README.md names them too
CAPABILITIES = {"BPF", "PERFMON", "SYS_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH", "SYS_RESOURCE"}
HOST_PATHS = {"/sys", "/sys/kernel/tracing", "/sys/kernel/debug", "/lib/modules", "/usr/src"}


def _documents(text: str | None = None) -> list[dict]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text() if text is None else text) if d]


def _by_kind() -> dict[str, dict]:
    docs = _documents()
    kinds = {d["kind"]: d for d in docs}
    assert len(kinds) == len(docs), "one object of each kind"
    return kinds


def _pod(kinds: dict[str, dict] | None = None) -> dict:
    return (kinds or _by_kind())["DaemonSet"]["spec"]["template"]["spec"]


def _container() -> dict:
    (container,) = _pod()["containers"]
    return container


def test_every_document_is_valid_for_kubernetes_strictly():
    docs = _documents()
    assert [d["kind"] for d in docs] == ["Namespace", "ServiceAccount", "DaemonSet"]
    for doc in docs:
        assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION


@pytest.mark.parametrize("break_it", [
    pytest.param(lambda ds: ds["spec"]["template"]["spec"].__setitem__(
        "hostPid", ds["spec"]["template"]["spec"].pop("hostPID")), id="hostPid-typo"),
    pytest.param(lambda ds: ds["spec"]["template"]["spec"].__setitem__("hostPID", "yes"), id="hostPID-string"),
    pytest.param(lambda ds: ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]
                 .__setitem__("add", "BPF"), id="capabilities-not-a-list"),
    pytest.param(lambda ds: ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]
                 .__setitem__("readonly", True), id="readonly-lowercase"),
    pytest.param(lambda ds: ds["spec"].pop("selector"), id="no-selector"),
])
def test_a_broken_copy_is_rejected(break_it):
    """The check can fail: the same DaemonSet with one mistake a person makes is refused."""
    daemonset = copy.deepcopy(_by_kind()["DaemonSet"])
    break_it(daemonset)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, K8S_VERSION, strict=True)


def test_everything_is_in_the_namespace_and_found_by_the_selector():
    kinds = _by_kind()
    assert kinds["Namespace"]["metadata"]["name"] == NAMESPACE
    for kind in ("ServiceAccount", "DaemonSet"):
        assert kinds[kind]["metadata"]["namespace"] == NAMESPACE
    daemonset = kinds["DaemonSet"]
    key, value = LABEL
    assert daemonset["spec"]["selector"] == {"matchLabels": {key: value}}
    assert daemonset["spec"]["template"]["metadata"]["labels"][key] == value


def test_the_pod_sees_the_node_and_holds_no_token():
    kinds = _by_kind()
    pod = _pod(kinds)
    assert pod["hostPID"] is True and pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert kinds["ServiceAccount"]["automountServiceAccountToken"] is False
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == kinds["ServiceAccount"]["metadata"]["name"]


def test_it_runs_on_every_node_tainted_or_not():
    assert {"operator": "Exists"} in _pod()["tolerations"]


def test_the_container_idles_and_knows_its_node():
    container = _container()
    assert container["command"] == ["sleep", "infinity"]
    env = {e["name"]: e for e in container["env"]}
    assert env["WITTY_HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert set(container["resources"]) == {"requests", "limits"}


def test_capabilities_instead_of_privileged():
    security = _container()["securityContext"]
    assert security["privileged"] is False
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    added = security["capabilities"]["add"]
    assert len(added) == len(set(added)) and set(added) == CAPABILITIES
    # Kubernetes spells them without the prefix; the API refuses allowPrivilegeEscalation: false beside
    # "CAP_SYS_ADMIN" (and only that spelling)
    assert not any(c.startswith("CAP_") for c in added)
    assert "privileged" not in _pod().get("securityContext", {})


def test_each_capability_says_why_and_the_readme_names_it():
    lines = MANIFEST.read_text().splitlines()
    for cap in CAPABILITIES:
        (at,) = [i for i, line in enumerate(lines) if line.strip() == f"- {cap}"]
        assert lines[at - 1].strip().startswith("#"), f"{cap} has no comment above it"
    readme = (MANIFEST.parent / "README.md").read_text()
    assert all(cap in readme for cap in CAPABILITIES)


def test_host_paths_are_the_listed_ones_and_read_only():
    pod = _pod()
    volumes = {v["name"]: v for v in pod["volumes"]}
    host = {name: v["hostPath"]["path"] for name, v in volumes.items() if "hostPath" in v}
    assert set(host.values()) == HOST_PATHS  # no /dev, no container runtime socket, no /run
    mounts = _container()["volumeMounts"]
    assert {m["name"] for m in mounts} == set(volumes)
    for mount in mounts:
        if mount["name"] in host:
            assert mount.get("readOnly") is True, mount
            assert mount.get("mountPropagation", "None") == "None", mount
    # what is writable is the pod's own scratch space
    writable = {m["mountPath"]: volumes[m["name"]] for m in mounts if not m.get("readOnly")}
    assert "/tmp" in writable and all("emptyDir" in v for v in writable.values())
