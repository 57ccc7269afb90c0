#!/usr/bin/python3
"""test_deploy.py - the deployment files of deploy/ are valid and agree with
the daemon and with each other, without a running systemd or cluster.

--part systemd (deploy/systemd/):
- `systemd-analyze verify` of stratad.service, with ExecStart pointed at the
  build's stratad, prints nothing (a misspelt key or a bad value is a
  warning there, so any output fails); `systemd-analyze security --offline`
  scores it at most 2.5; the directives the deployment relies on are set;
- strata.sysusers passes `systemd-sysusers --dry-run` into a scratch root;
- the sample stratad.conf starts a real stratad (its files made in a scratch
  directory, its addresses moved to loopback).

--part kubernetes (deploy/kustomization.yaml and what it includes):
- yamllint (the repository's .yamllint, strict) over every YAML file of
  deploy/;
- `kubectl kustomize deploy/` renders, and `kubectl label --local
  --dry-run=client` parses every object (offline: `create --dry-run=client`
  asks the API server for its kinds even in client mode);
- the objects agree: ports with stratad.conf, probes with named ports, the
  generated ConfigMaps with their files byte for byte (the dashboard), the
  PrometheusRule with deploy/prometheus's rule files, the etcd members with
  their Service, huge pages with memory_limit, the Secrets' keys with
  docs/operations.md;
- the ConfigMap's stratad.conf with the DaemonSet's arguments starts a real
  stratad.

The keys of membership and drain (etcd, etcd_prefix, etcd_ttl, advertise,
drain_on_term, drain_timeout, rebalance_rate) come with other branches: while stratad does not know them,
the config checks say so and run without them.

--part backup (docs/operations.md "Backing up and restoring the SSD tier"):
- `mdb_copy -c` of a running stratad's data_dir, taken while a writer keeps
  committing, restored into a new data_dir as the doc says (data.mdb only),
  brings back in a new stratad the durable KDA object (byte for byte) and the
  session (its length and head) written before the copy.

--write-prometheusrule regenerates deploy/kubernetes/prometheusrule.yaml.
Exit 77 (skip) when a tool is missing (Debian: systemd, kubernetes-client,
yamllint, lmdb-utils).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from obs_harness import free_port, skip, stop_process  # noqa: E402

LATER_KEYS = ("etcd", "etcd_prefix", "etcd_ttl", "advertise", "drain_on_term", "drain_timeout",
              "rebalance_rate")
RULE_FILES = ("strata-rules.yml", "strata-alerts.yml")
PROBLEMS = []


def problem(msg):
    print("FAIL: " + msg, flush=True)
    PROBLEMS.append(msg)


def need(tool, package):
    path = shutil.which(tool)
    if path is None:
        skip("%s not found (apt-get install %s)" % (tool, package))
    return path


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def size_bytes(text):
    """A size of stratad's config (64G, 256M, 1T) or Kubernetes (60Gi)."""
    m = re.fullmatch(r"(\d+)([KMGT]?)i?", text.strip())
    if m is None:
        raise ValueError("not a size: %r" % text)
    return int(m.group(1)) << (10 * " KMGT".index(m.group(2) or " "))


def conf_items(text):
    """The key = value lines of a stratad config file, in order."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            k, _, v = line.partition("=")
            out.append((k.strip(), v.strip()))
    return out


# ------------------------------------------------------------ stratad --


def known_keys(stratad):
    help_text = run([stratad, "--help"]).stdout
    return {k for k in LATER_KEYS if "--" + k.replace("_", "-") + " " in help_text}


def stratad_starts(stratad, root, conf_text, extra_args, what):
    """Starts stratad with conf_text and extra_args, its files made in a
    scratch directory; fails unless it prints its ready line."""
    known = known_keys(stratad)
    missing = [k for k in LATER_KEYS if k not in known]
    if missing:
        print("SKIP (one check, %s): stratad does not know %s yet (branches members, rebal); "
              "checking the rest without them" % (what, ", ".join(missing)), flush=True)
    with tempfile.TemporaryDirectory(prefix="strata-deploy-") as work:
        certs = os.path.join(work, "certs")
        r = run(["bash", os.path.join(root, "tests/tools/make_test_certs.sh"), certs])
        if r.returncode != 0:
            problem("make_test_certs.sh failed: %s" % r.stderr[-400:])
            return
        made = {
            "cluster_secret_file": ("secret", "deploy-test-cluster-secret-0123456789\n"),
            "tenants_file": ("tenants", "acme sha256:%s\n" % ("ab" * 32)),
            "metrics_token_file": ("metrics-token", "deploy-test-metrics-token\n"),
            "auth_token_file": ("auth-token", "deploy-test-auth-token\n"),
        }
        files = {"tls_cert": "server.pem", "tls_key": "server.key", "tls_ca": "ca.pem",
                 "metrics_tls_cert": "server.pem", "metrics_tls_key": "server.key"}
        lines = []
        for k, v in conf_items(conf_text):
            if k in missing:
                continue
            if k in made:
                path = os.path.join(work, made[k][0])
                with open(path, "w") as f:
                    f.write(made[k][1])
                v = path
            elif k in files:
                v = os.path.join(certs, files[k])
            elif k == "data_dir":
                v = os.path.join(work, "data")
                os.makedirs(v)
            elif k == "etcd":
                v = ""  # the key is checked; no etcd is reached
            elif v.startswith("/") and k != "etcd_prefix":  # a key prefix, not a file
                problem("%s: %s = %s is a file this test cannot make" % (what, k, v))
                return
            lines.append("%s = %s" % (k, v))
        conf = os.path.join(work, "stratad.conf")
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        args = []
        i = 0
        while i < len(extra_args):
            a = extra_args[i]
            if a.startswith("--") and a[2:].replace("-", "_") in missing:
                i += 2
                continue
            if a in ("--config", "-c"):
                i += 2  # this test's own copy instead
                continue
            args.append(a)
            i += 1
        args = [stratad, "--config", conf] + args + [
            "--listen", "127.0.0.1:%d" % free_port(),
            "--metrics-listen", "127.0.0.1:%d" % free_port(),
            "--transport", "none", "--memory-limit", "256M", "--ssd-map-size", "64M",
            "--ssd-sync", "none"]
        log_path = os.path.join(work, "stratad.log")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True)
            line = proc.stdout.readline()
            ready = line.startswith("stratad ready")
            code = stop_process(proc, 60)
            line += proc.stdout.read()
        with open(log_path) as f:
            log_text = f.read()
        if not ready:
            problem("%s: stratad did not start (exit %s):\n%s%s" % (what, code, line[-500:],
                                                                   log_text[-1500:]))
        elif code != 0:
            problem("%s: stratad exited %s after SIGTERM" % (what, code))
        else:
            print("ok: %s starts a real stratad" % what)


# ------------------------------------------------------------ systemd --


def unit_items(text):
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            k, _, v = line.partition("=")
            out.setdefault(k.strip(), []).append(v.strip())
    return out


def seconds(text):
    """A duration of systemd (15min, 30s) or stratad (10m, 1h, 90s)."""
    m = re.fullmatch(r"(\d+)(min|m|s|h|d)?", text.strip())
    return int(m.group(1)) * {"min": 60, "m": 60, "h": 3600, "d": 86400}.get(m.group(2), 1)


def part_systemd(args):
    analyze = need("systemd-analyze", "systemd")
    sysusers = need("systemd-sysusers", "systemd")
    sdir = os.path.join(args.root, "deploy/systemd")
    with open(os.path.join(sdir, "stratad.service")) as f:
        unit = f.read()
    with tempfile.TemporaryDirectory(prefix="strata-unit-") as work:
        copy = os.path.join(work, "stratad.service")
        with open(copy, "w") as f:
            f.write(unit.replace("/usr/bin/stratad", os.path.abspath(args.stratad)))
        r = run([analyze, "verify", copy])
        out = (r.stdout + r.stderr).strip()
        if r.returncode != 0 or out:
            problem("systemd-analyze verify stratad.service (exit %d):\n%s" % (r.returncode, out))
        else:
            print("ok: systemd-analyze verify stratad.service")
        r = run([analyze, "security", "--offline=yes", "--threshold=25", "--no-pager", copy])
        score = re.search(r"exposure level for \S+: ([0-9.]+)", r.stdout + r.stderr)
        if r.returncode != 0:
            problem("systemd-analyze security: exposure %s is above 2.5:\n%s"
                    % (score.group(1) if score else "?", r.stdout[-2000:]))
        else:
            print("ok: systemd-analyze security exposure %s" % (score.group(1) if score else "?"))
        root = os.path.join(work, "root")
        os.makedirs(os.path.join(root, "etc"))
        r = run([sysusers, "--root=" + root, "--dry-run",
                 os.path.join(os.path.abspath(sdir), "strata.sysusers")])
        if r.returncode != 0 or "Creating user 'strata'" not in r.stdout + r.stderr:
            problem("systemd-sysusers --dry-run strata.sysusers (exit %d): %s"
                    % (r.returncode, (r.stdout + r.stderr).strip()))
        else:
            print("ok: strata.sysusers creates the user strata")

    items = unit_items(unit)
    want = {"Type": "notify", "User": "strata", "Group": "strata", "NoNewPrivileges": "yes",
            "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
            "LimitMEMLOCK": "infinity", "Restart": "on-failure", "StateDirectory": "strata",
            "CapabilityBoundingSet": "", "KillSignal": "SIGTERM"}
    for k, v in want.items():
        if items.get(k) != [v]:
            problem("stratad.service: %s=%s wanted, found %s" % (k, v, items.get(k)))
    if int(items.get("LimitNOFILE", ["0"])[0]) < 65536:
        problem("stratad.service: LimitNOFILE below 65536")
    with open(os.path.join(sdir, "stratad.conf")) as f:
        conf = f.read()
    drain = seconds(dict(conf_items(conf)).get("drain_timeout", "10m"))
    if seconds(items.get("TimeoutStopSec", ["0"])[0]) < drain + 60:
        problem("stratad.service: TimeoutStopSec=%s does not outlast drain_timeout (%d s) "
                "and the stop's grace" % (items.get("TimeoutStopSec"), drain))
    exec_start = items.get("ExecStart", [""])[0].split()
    if exec_start[:3] != ["/usr/bin/stratad", "--config", "/etc/strata/stratad.conf"]:
        problem("stratad.service: ExecStart=%s does not read /etc/strata/stratad.conf"
                % " ".join(exec_start))
    data_dir = dict(conf_items(conf)).get("data_dir")
    if data_dir != "/var/lib/" + items.get("StateDirectory", [""])[0]:
        problem("stratad.conf: data_dir=%s is not the unit's StateDirectory" % data_dir)
    stratad_starts(args.stratad, args.root, conf, [], "deploy/systemd/stratad.conf")


# --------------------------------------------------------- kubernetes --


def prometheusrule_text(root):
    """deploy/kubernetes/prometheusrule.yaml: the groups of deploy/prometheus's
    rule files, in order, under one PrometheusRule."""
    out = ["# Generated from deploy/prometheus/%s by" % " and ".join(RULE_FILES),
           "# tests/integration/test_deploy.py --write-prometheusrule; test_deploy_kubernetes",
           "# fails when it differs from them. Edit those files, not this one.",
           "apiVersion: monitoring.coreos.com/v1",
           "kind: PrometheusRule",
           "metadata:",
           "  name: strata",
           "  labels:",
           "    app.kubernetes.io/name: stratad",
           "    app.kubernetes.io/part-of: strata",
           "spec:",
           "  groups:"]
    for name in RULE_FILES:
        with open(os.path.join(root, "deploy/prometheus", name)) as f:
            lines = f.read().splitlines()
        start = lines.index("groups:") + 1
        out += [("  " + ln) if ln else "" for ln in lines[start:]]
    return "\n".join(out) + "\n"


def objects_by_kind(docs):
    out = {}
    for d in docs:
        if d:
            out.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    return out


def port_of(hostport):
    return int(hostport.rsplit(":", 1)[1])


def check_daemonset(objs, conf, root):
    ds = objs["DaemonSet"]["stratad"]
    spec = ds["spec"]["template"]["spec"]
    c = spec["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    items = dict(conf_items(conf))
    if ports.get("grpc") != port_of(items["listen"]):
        problem("DaemonSet grpc port %s is not listen=%s" % (ports.get("grpc"), items["listen"]))
    if ports.get("metrics") != port_of(items["metrics_listen"]):
        problem("DaemonSet metrics port %s is not metrics_listen=%s"
                % (ports.get("metrics"), items["metrics_listen"]))
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        p = c.get(probe)
        if p is None:
            problem("DaemonSet: no %s" % probe)
            continue
        port = (p.get("tcpSocket") or p.get("httpGet") or {}).get("port")
        if port not in ports:
            problem("DaemonSet %s names port %r, not one of %s" % (probe, port, sorted(ports)))
    if c["readinessProbe"].get("tcpSocket", {}).get("port") != "grpc":
        problem("DaemonSet readinessProbe is not the gRPC port (bound once the index is rebuilt)")
    if c["livenessProbe"].get("httpGet", {}).get("path") != "/healthz":
        problem("DaemonSet livenessProbe is not /healthz")
    if spec.get("priorityClassName") not in objs.get("PriorityClass", {}):
        problem("DaemonSet: priorityClassName %r is no PriorityClass of the kustomization"
                % spec.get("priorityClassName"))
    if spec.get("hostNetwork") is not True:
        problem("DaemonSet: hostNetwork is not true (the data plane needs the node's address)")
    if not spec.get("nodeSelector") and not spec.get("affinity", {}).get("nodeAffinity"):
        problem("DaemonSet: neither nodeSelector nor nodeAffinity keeps it on GPU nodes")
    drain = seconds(items.get("drain_timeout", "10m"))
    if int(spec.get("terminationGracePeriodSeconds", 30)) < drain + 60:
        problem("DaemonSet: terminationGracePeriodSeconds %s does not outlast drain_timeout "
                "(%d s) and the stop's grace" % (spec.get("terminationGracePeriodSeconds"), drain))
    res = c["resources"]
    huge = res.get("limits", {}).get("hugepages-2Mi")
    if huge is None or res.get("requests", {}).get("hugepages-2Mi") != huge:
        problem("DaemonSet: hugepages-2Mi requests and limits are not set and equal")
    elif items.get("huge_pages") == "hugetlb" and \
            size_bytes(huge) < size_bytes(items["memory_limit"]):
        problem("DaemonSet: hugepages-2Mi %s is below memory_limit %s (hugetlb reserves it)"
                % (huge, items["memory_limit"]))
    caps = c.get("securityContext", {}).get("capabilities", {})
    if caps.get("drop") != ["ALL"] or caps.get("add") != ["IPC_LOCK"]:
        problem("DaemonSet: capabilities are not drop ALL, add IPC_LOCK: %s" % caps)
    vols = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    cm_name = vols["config"]["configMap"]["name"]
    if cm_name not in objs["ConfigMap"]:
        problem("DaemonSet mounts ConfigMap %s, which kustomize did not make" % cm_name)
    conf_path = c["args"][c["args"].index("--config") + 1]
    if os.path.dirname(conf_path) != mounts.get("config"):
        problem("DaemonSet --config %s is not in the config mount %s"
                % (conf_path, mounts.get("config")))
    if items.get("data_dir") != mounts.get("data"):
        problem("stratad.conf data_dir=%s is not the data mount %s"
                % (items.get("data_dir"), mounts.get("data")))
    for k, v in items.items():
        if v.startswith("/etc/strata/") and not any(
                v.startswith(m + "/") for m in mounts.values()):
            problem("stratad.conf %s=%s is in no mounted volume" % (k, v))
    keys = {i["key"] for i in vols["secrets"]["secret"]["items"]}
    pm = objs["PodMonitor"]["stratad"]["spec"]["podMetricsEndpoints"][0]
    keys.add(pm["authorization"]["credentials"]["key"])
    with open(os.path.join(root, "docs/operations.md")) as f:
        ops = f.read()
    for k in sorted(keys):
        if "--from-file=%s=" % k not in ops:
            problem("docs/operations.md does not create the Secret key %s (--from-file=%s=)"
                    % (k, k))
    if pm["port"] not in ports:
        problem("PodMonitor scrapes port %r, not one of the DaemonSet's" % pm["port"])
    return cm_name


def check_etcd(objs, conf):
    sts = objs["StatefulSet"]["strata-etcd"]
    svc = objs["Service"].get(sts["spec"]["serviceName"])
    if svc is None or svc["spec"].get("clusterIP") != "None":
        problem("etcd StatefulSet's serviceName is not a headless Service")
    elif svc["spec"].get("publishNotReadyAddresses") is not True:
        problem("etcd's headless Service must publish members before they are ready")
    n = sts["spec"]["replicas"]
    cmd = " ".join(sts["spec"]["template"]["spec"]["containers"][0]["command"])
    m = re.search(r"--initial-cluster=(\S+)", cmd)
    members = m.group(1).split(",") if m else []
    want = ["%s-%d=http://%s-%d.%s.%s.svc:2380" % (
        sts["metadata"]["name"], i, sts["metadata"]["name"], i, svc["metadata"]["name"],
        sts["metadata"]["namespace"]) for i in range(n)]
    if n != 3 or members != want:
        problem("etcd: %d replicas, --initial-cluster %s (want %s)" % (n, members, want))
    endpoint = dict(conf_items(conf)).get("etcd", "")
    host = re.sub(r"^https?://", "", endpoint).split(":")[0]
    if host.split(".")[0] not in objs["Service"]:
        problem("stratad.conf etcd=%s names no Service of the kustomization" % endpoint)


def check_kubernetes(args, kubectl, rendered):
    import yaml  # python3-yaml, which yamllint depends on

    docs = list(yaml.safe_load_all(rendered))
    objs = objects_by_kind(docs)
    for d in docs:
        if d["kind"] not in ("Namespace", "PriorityClass") and \
                d["metadata"].get("namespace") != "strata":
            problem("%s/%s is not in the namespace strata" % (d["kind"], d["metadata"]["name"]))
    with open(os.path.join(args.root, "deploy/kubernetes/stratad.conf")) as f:
        conf = f.read()
    with open(os.path.join(args.root, "deploy/grafana/strata-dashboard.json")) as f:
        dash = f.read()
    cms = objs.get("ConfigMap", {})
    dash_cm = [c for n, c in cms.items() if n.startswith("strata-dashboard")]
    if len(dash_cm) != 1 or dash_cm[0]["data"].get("strata-dashboard.json") != dash:
        problem("no ConfigMap strata-dashboard holding deploy/grafana/strata-dashboard.json as is")
    elif dash_cm[0]["metadata"].get("labels", {}).get("grafana_dashboard") != "1":
        problem("the dashboard ConfigMap lacks the label grafana_dashboard=1")
    else:
        json.loads(dash_cm[0]["data"]["strata-dashboard.json"])
    cm_name = check_daemonset(objs, conf, args.root)
    if cms.get(cm_name, {}).get("data", {}).get("stratad.conf") != conf:
        problem("ConfigMap %s does not hold deploy/kubernetes/stratad.conf as is" % cm_name)
    check_etcd(objs, conf)

    with open(os.path.join(args.root, "deploy/kubernetes/prometheusrule.yaml")) as f:
        committed = f.read()
    if committed != prometheusrule_text(args.root):
        problem("deploy/kubernetes/prometheusrule.yaml differs from deploy/prometheus's rule "
                "files: regenerate with tests/integration/test_deploy.py --write-prometheusrule")
    groups = []
    for name in RULE_FILES:
        with open(os.path.join(args.root, "deploy/prometheus", name)) as f:
            groups += yaml.safe_load(f)["groups"]
    if objs["PrometheusRule"]["strata"]["spec"]["groups"] != groups:
        problem("the PrometheusRule's groups are not those of deploy/prometheus")

    ds = objs["DaemonSet"]["stratad"]["spec"]["template"]["spec"]["containers"][0]
    subst = {"NODE_NAME": "gpu-node-1", "HOST_IP": "127.0.0.1"}
    ds_args = [re.sub(r"\$\((\w+)\)", lambda m: subst[m.group(1)], a) for a in ds["args"]]
    stratad_starts(args.stratad, args.root, conf, ds_args,
                   "deploy/kubernetes/stratad.conf with the DaemonSet's arguments")


def part_kubernetes(args):
    kubectl = need("kubectl", "kubernetes-client")
    yamllint = need("yamllint", "yamllint")
    deploy = os.path.join(args.root, "deploy")
    r = run([yamllint, "-s", "-c", os.path.join(args.root, ".yamllint"), deploy])
    if r.returncode != 0:
        problem("yamllint deploy/:\n%s" % (r.stdout + r.stderr).strip())
    else:
        print("ok: yamllint -s deploy/")
    env = dict(os.environ, KUBECONFIG=os.devnull)
    rendered = None
    for target in ("deploy", "deploy/kubernetes", "deploy/kubernetes/etcd"):
        r = run([kubectl, "kustomize", os.path.join(args.root, target)], env=env)
        if r.returncode != 0:
            problem("kubectl kustomize %s:\n%s" % (target, r.stderr.strip()))
            continue
        print("ok: kubectl kustomize %s" % target)
        if target == "deploy":
            rendered = r.stdout
    if rendered is None:
        return
    r = run([kubectl, "label", "--local", "--dry-run=client", "-o", "name", "-f", "-",
             "strata.check=1"], input=rendered, env=env)
    names = sorted(r.stdout.split())
    want = ["configmap/strata-dashboard", "configmap/stratad-config", "daemonset.apps/stratad",
            "namespace/strata", "persistentvolumeclaim", "poddisruptionbudget.policy/strata-etcd",
            "podmonitor.monitoring.coreos.com/stratad",
            "priorityclass.scheduling.k8s.io/strata-node",
            "prometheusrule.monitoring.coreos.com/strata", "service/strata-etcd",
            "service/strata-etcd-client", "service/stratad", "statefulset.apps/strata-etcd"]
    got = sorted(re.sub(r"-[a-z0-9]{10}$", "", n) for n in names)
    want = [w for w in want if not w.startswith("persistentvolumeclaim")]
    if r.returncode != 0 or got != want:
        problem("kubectl label --local --dry-run=client (exit %d) parsed %s, want %s; %s"
                % (r.returncode, got, want, r.stderr.strip()))
    else:
        print("ok: kubectl parses %d objects: %s" % (len(names), " ".join(names)))
    check_kubernetes(args, kubectl, rendered)


# ------------------------------------------------------------- backup --


class Node:
    """A stratad with an SSD tier in data_dir, alone in its cluster."""

    def __init__(self, stratad, work, name, data_dir):
        self.port = free_port()
        self.log_path = os.path.join(work, name + ".log")
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [stratad, "--listen", "127.0.0.1:%d" % self.port, "--transport", "none",
                 "--memory-limit", "256M", "--ssd-map-size", "64M", "--replicas", "1",
                 "--data-dir", data_dir], stdout=subprocess.PIPE, stderr=log, text=True)
        self.ready = self.proc.stdout.readline().startswith("stratad ready")

    def strata(self, cli, *args):
        return run([cli, args[0], "--nodes", "127.0.0.1:%d" % self.port, "--transport",
                    "inline", "--replicas", "1"] + list(args[1:]))

    def stop(self):
        return stop_process(self.proc, 60)


def part_backup(args):
    mdb_copy = need("mdb_copy", "lmdb-utils")
    if args.strata is None:
        skip("--strata (the CLI) not given")
    tokens = ",".join(str(i) for i in range(1, 129))
    with tempfile.TemporaryDirectory(prefix="strata-backup-") as work:
        payload = os.urandom(5000)
        with open(os.path.join(work, "payload"), "wb") as f:
            f.write(payload)
        d1 = os.path.join(work, "d1")
        os.makedirs(d1)
        a = Node(args.stratad, work, "a", d1)
        if not a.ready:
            a.stop()
            problem("the first stratad did not start")
            return
        steps = [("put", "--kind", "kda", "--block", "1", "--tokens", tokens, "--file",
                  os.path.join(work, "payload"), "--durable"),
                 ("session", "--durable", "open", "sess-1"),
                 ("session", "--tokens", tokens, "--durable", "append", "sess-1")]
        for st in steps:
            r = a.strata(args.strata, *st)
            if r.returncode != 0:
                problem("strata %s: %s" % (" ".join(st[:1]), (r.stdout + r.stderr).strip()))
        before = a.strata(args.strata, "session", "get", "sess-1").stdout.split()
        # A writer keeps committing while the copy runs.
        writer = subprocess.Popen(
            ["bash", "-c", "for i in $(seq 2 40); do %s put --nodes 127.0.0.1:%d --transport "
             "inline --replicas 1 --kind kda --block $i --tokens %s --fill 65536 --durable "
             ">/dev/null 2>&1; done" % (args.strata, a.port, ",".join(
                 str(i) for i in range(1, 64 * 41 + 1)))])
        copy = os.path.join(work, "copy")
        os.makedirs(copy)
        r = run([mdb_copy, "-c", d1, copy])
        writer.wait()
        code = a.stop()
        if r.returncode != 0:
            problem("mdb_copy -c of a running stratad's data_dir: %s" % r.stderr.strip())
            return
        if code != 0:
            problem("the first stratad exited %s" % code)
        d2 = os.path.join(work, "d2")
        os.makedirs(d2)
        shutil.copy(os.path.join(copy, "data.mdb"), d2)
        b = Node(args.stratad, work, "b", d2)
        try:
            if not b.ready:
                with open(b.log_path) as f:
                    problem("stratad on the restored data_dir did not start:\n" + f.read()[-1500:])
                return
            out = os.path.join(work, "out")
            r = b.strata(args.strata, "get", "--kind", "kda", "--block", "1", "--tokens",
                         tokens, "--out", out)
            got = open(out, "rb").read() if os.path.exists(out) else b""
            if r.returncode != 0 or got != payload:
                problem("restored: the KDA object is %s (%s)" % (
                    "different bytes" if r.returncode == 0 else "missing",
                    (r.stdout + r.stderr).strip()[-300:]))
            after = b.strata(args.strata, "session", "get", "sess-1").stdout.split()
            keep = [w for w in before if w.startswith(("length=", "head="))]
            if len(keep) != 2 or keep != [w for w in after
                                          if w.startswith(("length=", "head="))]:
                problem("restored: session sess-1 is %s, was %s" % (after, before))
            if not PROBLEMS:
                print("ok: mdb_copy -c of a running node restores its KDA object and session "
                      "(%s)" % " ".join(keep))
        finally:
            b.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="the source tree")
    ap.add_argument("--stratad", help="the build's stratad")
    ap.add_argument("--strata", help="the build's strata CLI (--part backup)")
    ap.add_argument("--part", choices=("systemd", "kubernetes", "backup"))
    ap.add_argument("--write-prometheusrule", action="store_true")
    args = ap.parse_args()
    if args.write_prometheusrule:
        with open(os.path.join(args.root, "deploy/kubernetes/prometheusrule.yaml"), "w") as f:
            f.write(prometheusrule_text(args.root))
        return
    if args.part is None or args.stratad is None:
        ap.error("--part and --stratad are required")
    {"systemd": part_systemd, "kubernetes": part_kubernetes, "backup": part_backup}[
        args.part](args)
    if PROBLEMS:
        print("test_deploy %s: %d problem(s)" % (args.part, len(PROBLEMS)))
        sys.exit(1)
    print("test_deploy %s: all passed" % args.part)


if __name__ == "__main__":
    main()
