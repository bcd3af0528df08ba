#!/usr/bin/env bash
# deploy/kubernetes: every manifest valid against Kubernetes' own schemas (kubernetes-validate
# from PyPI, in its own virtual environment), the kustomization complete (`kubectl kustomize`
# where kubectl is installed), and the DaemonSet consistent with the daemon's config and with what
# a node needs: the socket directory as a hostPath shared with the example engine pod, a volume for
# every tier directory, the node name from spec.nodeName, the arena budget tied to the memory
# limit, the socket group the image's fixed gid, the seccomp profile present and allowing
# io_uring, probes on /health at the metrics port, the PodMonitor selecting the pods, and the
# PrometheusRule holding the rules of deploy/kvstream-alerts.yml. The container test runs the
# image under the same seccomp profile; daemon_config_test parses the config.
# Usage: kubernetes_test.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
venv="${KVSTREAM_K8S_VENV:-/var/tmp/kvstream-venv-k8s}"
want="kubernetes-validate==1.37.0 PyYAML==6.0.2"
if [ "$(cat "$venv/.kvstream-stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q --disable-pip-version-check $want
  echo "$want" > "$venv/.kvstream-stamp"
fi
dir="$root/deploy/kubernetes"
if command -v kubectl > /dev/null; then
  kubectl kustomize "$dir" > /dev/null || die "kubectl kustomize $dir failed"
  echo "kubernetes: kubectl kustomize renders the kustomization"
fi
"$venv/bin/python" - "$root" <<'PY'
import json, os, subprocess, sys
import yaml

root = sys.argv[1]
d = os.path.join(root, "deploy", "kubernetes")
kust = yaml.safe_load(open(os.path.join(d, "kustomization.yaml")))
docs = []
for f in kust["resources"] + ["examples/vllm-engine.yaml"]:
    for doc in yaml.safe_load_all(open(os.path.join(d, f))):
        docs.append((f, doc))
for gen in kust.get("configMapGenerator", []):
    for f in gen["files"]:
        assert os.path.exists(os.path.join(d, f)), f
by_kind = {}
for f, doc in docs:
    by_kind.setdefault(doc["kind"], []).append(doc)

# Kubernetes' schemas for the built-in kinds (the operator's CRDs are checked below by hand).
builtin = [(f, doc) for f, doc in docs if doc["apiVersion"].split("/")[0] in ("v1", "apps")]
for f, doc in builtin:
    path = os.path.join("/tmp", f"kvstream-k8s-{os.getpid()}-{doc['kind']}-{doc['metadata']['name']}.yaml")
    with open(path, "w") as out:
        yaml.safe_dump(doc, out)
    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "kubernetes-validate"), "--strict",
                        "-k", "1.30.0", path], capture_output=True, text=True)
    os.unlink(path)
    assert r.returncode == 0, f"{f} {doc['kind']}: {r.stdout}{r.stderr}"
print(f"kubernetes: {len(builtin)} manifests valid against Kubernetes 1.30's schemas (strict)")

ds = by_kind["DaemonSet"][0]
pod = ds["spec"]["template"]["spec"]
c = pod["containers"][0]
config_text = open(os.path.join(d, "kvstreamd.yaml")).read()
config = yaml.safe_load(config_text)
env = {e["name"]: e for e in c["env"]}
assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
assert config["node"] == "${NODE_NAME}", "the node name must come from the pod"
assert config["sessions"]["arena_budget"] == "auto" and "memory" in c["resources"]["limits"], \
    "the arena budget follows the memory limit"
sc = pod["securityContext"]
assert str(config["socket"]["group"]) == str(sc["runAsGroup"]) == "10001", "the socket group is the image's gid"
assert sc["seccompProfile"]["type"] == "Localhost"
profile = json.load(open(os.path.join(d, os.path.basename(sc["seccompProfile"]["localhostProfile"]))))
allowed = {n for s in profile["syscalls"] if s["action"] == "SCMP_ACT_ALLOW" for n in s["names"]}
assert {"io_uring_setup", "io_uring_enter", "io_uring_register"} <= allowed, "the profile must allow io_uring"
assert profile["defaultAction"] != "SCMP_ACT_ALLOW", "an allowlist, not a denylist"
mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
volumes = {v["name"]: v for v in pod["volumes"]}
sock_dir = os.path.dirname(config["socket"]["path"])
assert volumes[mounts[sock_dir]]["hostPath"]["path"] == "/run/kvstream", "the socket directory is the node's"
tier_dirs = [p for t in config["tiers"] for p in (t.get("drives") or [t["path"]])]
for p in tier_dirs:
    assert any(p == m or p.startswith(m + "/") for m in mounts), f"tier directory {p} has no volume"
    assert "hostPath" in volumes[mounts[max((m for m in mounts if p == m or p.startswith(m + "/")), key=len)]]
port = int(config["metrics"]["listen"].rsplit(":", 1)[1])
ports = {p["name"]: p["containerPort"] for p in c["ports"]}
assert ports["metrics"] == port
for probe in ("readinessProbe", "startupProbe"):
    assert c[probe]["httpGet"] == {"path": "/health", "port": "metrics"}, probe
assert "livenessProbe" in c
init = pod["initContainers"][0]
owned = set(init["command"][2:])
for p in [sock_dir] + [p for p in tier_dirs if not volumes[mounts[p]]["hostPath"].get("type") == "Directory"]:
    assert p in owned, f"{p} is not handed to the kvstream user"
labels = ds["spec"]["template"]["metadata"]["labels"]
pm = by_kind["PodMonitor"][0]
assert all(labels.get(k) == v for k, v in pm["spec"]["selector"]["matchLabels"].items()), "PodMonitor selects the pods"
assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
rules = yaml.safe_load(open(os.path.join(root, "deploy", "kvstream-alerts.yml")))
assert by_kind["PrometheusRule"][0]["spec"] == rules, "deploy/kubernetes/prometheusrule.yaml differs from deploy/kvstream-alerts.yml"
engine = by_kind["Deployment"][0]["spec"]["template"]["spec"]
assert 10001 in engine["securityContext"]["supplementalGroups"]
assert any(v.get("hostPath", {}).get("path") == "/run/kvstream" for v in engine["volumes"]), "the engine mounts the socket directory"
print("kubernetes: the DaemonSet, its config, the PodMonitor, the rules and the engine example agree")
PY
