#!/usr/bin/env python3
"""The Kubernetes examples in docs/kubernetes/ start a real run.

For each manifest (tfjob.yaml: a Kubeflow TFJob; job-service.yaml: Services
and Jobs with TF_CONFIG written out):
  1. parse it and find the tasks (ps, chief, workers);
  2. get each task's TF_CONFIG: rendered as the training operator renders it
     for a TFJob (cluster from the replica specs, "<job>-<type>-<index>.
     <namespace>.svc:<port>", lower-case types, "environment": "cloud"), or
     read from the Job's env (checked against the file's Services: each
     address names a headless Service that selects that task's pod);
  3. check each container's command and args against `tg-train --help` and
     that the cluster secret reaches tg-train from a Secret (a file mounted
     with mode 0400/0600, or TG_CLUSTER_SECRET from a secretKeyRef);
  4. run the tasks as tg-train processes on loopback: every address moved to
     127.0.0.1 on a free port, the Secret written to a file of mode 0600 (a
     fresh one for a Secret the manifest only references), a short run
     (--max_steps, a temporary train_dir, Fashion-MNIST if the manifest's
     data_dir is on this machine, else synthetic data), bounded in time;
  5. require every task to exit 0 and the chief's result.json and
     metrics.jsonl to report the steps.

    manifests_test.py --build DIR [--manifest PATH]... [--steps N] [--timeout S]

DIR holds tg-train (the build tree, or the folder of tg-train itself).
Exits 0 when every manifest passes, 1 naming the manifest, task and problem
otherwise, 2 on bad arguments, 77 (skip) without PyYAML.
"""
import argparse
import base64
import copy
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

try:
    import yaml
except ImportError:
    print("SKIP: PyYAML is not installed for %s (Debian: python3-yaml)" % sys.executable)
    sys.exit(77)

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEFAULT_MANIFESTS = [os.path.join(REPO, "docs", "kubernetes", n) for n in ("tfjob.yaml", "job-service.yaml")]
# Flags that name the task's role: any of them makes tg-train ignore TF_CONFIG.
ROLE_FLAGS = ("job_name", "task_id", "ps_hosts", "worker_hosts", "chief_host", "evaluator_host")
# The replica types tg-train knows, in the order the tasks are started.
ROLE_ORDER = ("ps", "chief", "worker", "evaluator")
TFJOB_DEFAULT_PORT = 2222  # the operator's port without a "tfjob-port" container port
POLL_S = 0.25


class Problem(Exception):
    """A failure, its message naming the manifest, the task or field and the value."""


def say(msg):
    print("[k8s] " + msg, flush=True)


# ---------------------------------------------------------------- manifests

def load_objects(path):
    """The Kubernetes objects of a file: its documents, v1 Lists flattened."""
    try:
        with open(path, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        raise Problem("%s: cannot be read as YAML: %s" % (path, e))
    objects = []
    for n, d in enumerate(docs):
        if not isinstance(d, dict) or "kind" not in d:
            raise Problem("%s: document %d is not a Kubernetes object (no kind)" % (path, n))
        if d["kind"] == "List":
            objects.extend(d.get("items") or [])
        else:
            objects.append(d)
    return objects


def field(obj, dotted, where, kind=None):
    """obj's value at a dotted path; a missing one (or one of the wrong type) fails naming it."""
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise Problem("%s: %s is missing" % (where, dotted))
        cur = cur[part]
    if kind is not None and not isinstance(cur, kind):
        raise Problem("%s: %s is %r, expected a %s" % (where, dotted, cur, kind.__name__))
    return cur


class Task:
    """One tg-train process of the manifest's cluster."""

    def __init__(self, type_, index, where, pod_spec, container):
        self.type, self.index, self.where = type_, index, where
        self.pod_spec, self.container = pod_spec, container
        self.tf_config = None   # what the pod's TF_CONFIG holds
        self.argv = []          # command + args, as the container runs them
        self.flags = []         # (name, value) in order
        self.secret = None      # ("file", path, secret name, key) or ("env", secret name, key)
        self.labels = {}        # the pod's labels (the Services select by them)

    @property
    def name(self):
        return "%s-%d" % (self.type, self.index)


def tfjob_tasks(obj, path):
    """The tasks of a TFJob with the TF_CONFIG the training operator gives each."""
    job = field(obj, "metadata.name", path, str)
    namespace = obj["metadata"].get("namespace") or "default"
    specs = field(obj, "spec.tfReplicaSpecs", path + ": TFJob " + job, dict)
    if obj["spec"].get("enableDynamicWorker"):
        raise Problem("%s: TFJob %s: spec.enableDynamicWorker=true makes the operator write a \"sparseCluster\" "
                      "TF_CONFIG, which tg-train refuses" % (path, job))
    cluster, tasks = {}, []
    for key, spec in specs.items():
        rtype = key.lower()  # the operator lower-cases the replica type
        where = "%s: TFJob %s: tfReplicaSpecs.%s" % (path, job, key)
        if rtype == "master":
            raise Problem("%s: tg-train has no \"master\" role (use Chief)" % where)
        if rtype not in ROLE_ORDER:
            raise Problem("%s: unknown replica type %r (PS, Chief, Worker or Evaluator)" % (where, key))
        replicas = spec.get("replicas", 1)
        if not isinstance(replicas, int) or replicas < 0:
            raise Problem("%s: replicas is %r, expected a count" % (where, replicas))
        policy = spec.get("restartPolicy", "Never")
        if policy not in ("Always", "OnFailure", "Never", "ExitCode"):
            raise Problem("%s: restartPolicy %r is not one the operator takes" % (where, policy))
        pod_spec = field(spec, "template.spec", where, dict)
        # TF_CONFIG and the port go to the container named "tensorflow" only.
        named = [c for c in pod_spec.get("containers") or [] if c.get("name") == "tensorflow"]
        if len(named) != 1:
            raise Problem("%s: needs one container named \"tensorflow\" (the one the operator gives TF_CONFIG), "
                          "found %d" % (where, len(named)))
        container = named[0]
        for e in container.get("env") or []:
            if e.get("name") == "TF_CONFIG":
                raise Problem("%s: container sets TF_CONFIG; the operator sets it itself" % where)
        port = TFJOB_DEFAULT_PORT
        for p in container.get("ports") or []:
            if p.get("name") == "tfjob-port":
                port = p.get("containerPort")
        if not isinstance(port, int) or not 0 < port < 65536:
            raise Problem("%s: tfjob-port containerPort is %r" % (where, port))
        if rtype != "evaluator":  # the operator leaves the evaluator out of the cluster
            cluster[rtype] = ["%s-%s-%d.%s.svc:%d" % (job, rtype, i, namespace, port) for i in range(replicas)]
        for i in range(replicas):
            tasks.append(Task(rtype, i, "%s: TFJob %s: %s %d" % (path, job, key, i), pod_spec, container))
    for t in tasks:
        t.tf_config = {"cluster": cluster, "task": {"type": t.type, "index": t.index}, "environment": "cloud"}
    return tasks


def plain_tasks(objects, path):
    """The tasks of Jobs / Pods with TF_CONFIG in their env, checked against the Services."""
    services = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "Service"}
    tasks = []
    for o in objects:
        if o.get("kind") not in ("Job", "Pod"):
            continue
        name = field(o, "metadata.name", path, str)
        where = "%s: %s %s" % (path, o["kind"], name)
        template = field(o, "spec.template", where, dict) if o["kind"] == "Job" else o
        pod_spec = field(template, "spec", where, dict)
        with_config = [(c, e) for c in pod_spec.get("containers") or [] for e in c.get("env") or []
                       if e.get("name") == "TF_CONFIG"]
        if len(with_config) != 1:
            raise Problem("%s: needs one container with TF_CONFIG in its env, found %d" % (where, len(with_config)))
        container, env = with_config[0]
        text = env.get("value")
        if not isinstance(text, str):
            raise Problem("%s: env TF_CONFIG has no literal value" % where)
        try:
            config = json.loads(text)
            ttype, tindex = config["task"]["type"], config["task"].get("index", 0)  # tg-train's default index: 0
            if not isinstance(config["cluster"], dict) or not isinstance(ttype, str) or type(tindex) is not int:
                raise TypeError("cluster must be an object, task.type a string and task.index an integer")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise Problem("%s: env TF_CONFIG %r is not {\"cluster\": {...}, \"task\": {\"type\", \"index\"}}: %s"
                          % (where, text, e))
        t = Task(ttype, tindex, "%s (%s %d)" % (where, ttype, tindex), pod_spec, container)
        t.tf_config, t.labels = config, (template.get("metadata") or {}).get("labels") or {}
        tasks.append(t)
    if not tasks:
        raise Problem("%s: no TFJob, Job or Pod" % path)
    first = tasks[0]
    for t in tasks:
        if t.tf_config["cluster"] != first.tf_config["cluster"]:
            raise Problem("%s: TF_CONFIG.cluster differs from that of %s:\n  %s\n  %s"
                          % (t.where, first.name, json.dumps(t.tf_config["cluster"]),
                             json.dumps(first.tf_config["cluster"])))
    by_role = {(t.type, t.index): t for t in tasks}
    if len(by_role) != len(tasks):
        raise Problem("%s: two Jobs are the same task" % path)
    for rtype, addresses in first.tf_config["cluster"].items():
        if not isinstance(addresses, list):
            raise Problem("%s: TF_CONFIG.cluster.%s is %r, expected a list" % (first.where, rtype, addresses))
        for i, address in enumerate(addresses):
            what = "%s: TF_CONFIG.cluster.%s[%d] %r" % (path, rtype, i, address)
            task = by_role.get((rtype, i))
            if task is None:
                raise Problem("%s: no Job runs this task" % what)
            host, _, port = str(address).rpartition(":")
            service = services.get(host.split(".")[0])
            if service is None:
                raise Problem("%s: no Service named %r in the file" % (what, host.split(".")[0]))
            spec = service.get("spec") or {}
            if spec.get("clusterIP") != "None":
                raise Problem("%s: Service %s is not headless (clusterIP: None)" % (what, service["metadata"]["name"]))
            if not port.isdigit() or int(port) not in [p.get("port") for p in spec.get("ports") or []]:
                raise Problem("%s: Service %s has no port %s" % (what, service["metadata"]["name"], port))
            selector = spec.get("selector") or {}
            chosen = [t.name for t in tasks if selector and all(t.labels.get(k) == v for k, v in selector.items())]
            if chosen != [task.name]:
                raise Problem("%s: Service %s selects %s, not just %s" % (what, service["metadata"]["name"],
                                                                          chosen or "no pod", task.name))
    for t in tasks:
        if t.type not in first.tf_config["cluster"] and t.type != "evaluator":
            raise Problem("%s: its type %r is not in TF_CONFIG.cluster" % (t.where, t.type))
    return tasks


# ---------------------------------------------------------------- tg-train's view

def help_flags(tg_train):
    r = subprocess.run([tg_train, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    text = r.stdout.decode(errors="replace")
    names = set(re.findall(r"^\s+--([A-Za-z0-9_]+)", text, re.M))
    if r.returncode != 0 or len(names) < 10:
        raise Problem("%s --help exited %d with %d flags: %s" % (tg_train, r.returncode, len(names), text[-300:]))
    return names


def check_command(task, known):
    """The container's argv as tg-train parses it: every word a --flag it has."""
    c = task.container
    command, args = c.get("command") or [], c.get("args") or []
    if not isinstance(command, list) or not isinstance(args, list):
        raise Problem("%s: command and args must be lists" % task.where)
    argv = [str(w) for w in command + args]
    # The image's entrypoint is not in the manifest: the command must name tg-train.
    if not argv or os.path.basename(argv[0]) != "tg-train":
        raise Problem("%s: container %s: command %r does not run tg-train" % (task.where, c.get("name"), command))
    words, i = argv[1:], 0
    while i < len(words):
        w = words[i]
        if not w.startswith("--"):
            raise Problem("%s: argument %r is not a --flag (tg-train takes --name=value)" % (task.where, w))
        name, eq, value = w[2:].partition("=")
        if not eq:  # tg-train takes "--name value" too
            if i + 1 >= len(words):
                raise Problem("%s: --%s has no value" % (task.where, name))
            i += 1
            value = words[i]
        if name not in known:
            raise Problem("%s: --%s is not a tg-train flag (not in tg-train --help)" % (task.where, name))
        if name in ROLE_FLAGS:
            raise Problem("%s: --%s=%s: a role flag makes tg-train ignore TF_CONFIG" % (task.where, name, value))
        task.flags.append((name, value))
        i += 1
    task.argv = argv


def flag(task, name):
    values = [v for n, v in task.flags if n == name]
    return values[-1] if values else None  # the last one wins, as in tg-train


def find_secret(task):
    """Where tg-train finds the cluster secret: a mounted Secret file or a secretKeyRef."""
    path = flag(task, "secret_file")
    if path is not None:
        volumes = {v.get("name"): v for v in task.pod_spec.get("volumes") or []}
        for m in task.container.get("volumeMounts") or []:
            mount = str(m.get("mountPath", "")).rstrip("/")
            if not path.startswith(mount + "/"):
                continue
            volume = volumes.get(m.get("name"))
            if volume is None or "secret" not in volume:
                raise Problem("%s: --secret_file=%s lies in volume %r, which is not a Secret"
                              % (task.where, path, m.get("name")))
            sv, rel = volume["secret"], path[len(mount) + 1:]
            mode, key = sv.get("defaultMode", 0o644), rel  # Kubernetes' default mode is 0644
            if sv.get("items"):
                hits = [it for it in sv["items"] if it.get("path") == rel]
                if not hits:
                    raise Problem("%s: --secret_file=%s: Secret volume %r has no item with path %r"
                                  % (task.where, path, m.get("name"), rel))
                key, mode = hits[0].get("key"), hits[0].get("mode", mode)
            if not isinstance(mode, int) or mode & 0o077:
                shown = "%04o" % mode if isinstance(mode, int) else repr(mode)
                raise Problem("%s: --secret_file=%s is mounted with mode %s; tg-train wants 0400 or 0600 "
                              "(it warns when others can read it)" % (task.where, path, shown))
            task.secret = ("file", path, field(sv, "secretName", task.where, str), key)
            return
        raise Problem("%s: --secret_file=%s is not in any volume mounted in the container" % (task.where, path))
    for e in task.container.get("env") or []:
        if e.get("name") == "TG_CLUSTER_SECRET":
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if not ref:
                raise Problem("%s: TG_CLUSTER_SECRET is written in the manifest, not taken from a Secret" % task.where)
            task.secret = ("env", ref.get("name"), ref.get("key"))
            return
    raise Problem("%s: no cluster secret reaches tg-train (--secret_file in a Secret volume, or TG_CLUSTER_SECRET "
                  "from a secretKeyRef)" % task.where)


def secret_values(objects, tasks, path):
    """The text of each Secret the tasks use: the file's Secret, else a fresh one."""
    in_file = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "Secret"}
    out = {}
    for t in tasks:
        name, key = (t.secret[2], t.secret[3]) if t.secret[0] == "file" else (t.secret[1], t.secret[2])
        if (name, key) in out:
            continue
        s = in_file.get(name)
        if s is None:  # referenced only (kubectl create secret ...): make one as a user would
            out[(name, key)] = "terngrad-secret v1 cluster " + secrets.token_hex(32)
            say("%s: Secret %s is referenced, not in the file: a fresh one stands in" % (path, name))
            continue
        if key in (s.get("stringData") or {}):
            text = str(s["stringData"][key])
        elif key in (s.get("data") or {}):
            text = base64.b64decode(s["data"][key]).decode()
        else:
            raise Problem("%s: Secret %s has no key %r (used by %s)" % (path, name, key, t.where))
        # What tg-train parses (security.md); the value itself stays out of the message.
        words = text.split()
        if not ((len(words) == 1 or (len(words) == 4 and words[:3] == ["terngrad-secret", "v1", "cluster"]))
                and re.fullmatch(r"[0-9a-fA-F]{64}", words[-1])):
            raise Problem("%s: Secret %s key %s: its %d-word value is not a cluster secret (64 hex digits, or "
                          "\"terngrad-secret v1 cluster <64 hex digits>\")" % (path, name, key, len(words)))
        out[(name, key)] = text
    return out


# ---------------------------------------------------------------- the local run

def free_ports(n):
    """n distinct free loopback ports: all bound at once, then released."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def die_with_parent():
    """In the child: SIGKILL when this test dies (a ctest timeout kills it outright)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def sweep_stale_dirs():
    """Removes the temp dirs of earlier runs killed outright (SIGKILL skips the finally blocks)."""
    base = tempfile.gettempdir()
    for n in sorted(os.listdir(base))[:2000]:
        m = re.match(r"tg_k8s_(\d+)_", n)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:  # its test is gone (a reused pid only keeps the dir longer)
            shutil.rmtree(os.path.join(base, n), ignore_errors=True)
        except PermissionError:
            pass


def log_tail(path, lines=25):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return "(no log: %s)" % e


def stop(procs):
    """SIGTERM the process groups still running, SIGKILL what is left after 5 s."""
    running = [p for p in procs.values() if p.poll() is None]
    for p in running:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    for p in running:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                print("[k8s] warning: pid %d did not stop" % p.pid, flush=True)


def run_on_loopback(label, tasks, secrets_text, tg_train, steps, budget):
    tmp = tempfile.mkdtemp(prefix="tg_k8s_%d_%s_" % (os.getpid(), re.sub(r"\W", "_", label)))
    procs, logs = {}, {}
    try:
        # Every address of the cluster (the evaluator's too) to its own port.
        cluster = tasks[0].tf_config["cluster"]
        addresses = [a for r in ROLE_ORDER for a in cluster.get(r, [])]
        local = dict(zip(addresses, ("127.0.0.1:%d" % p for p in free_ports(len(addresses)))))
        for a in addresses:
            say("%s: %s -> %s" % (label, a, local[a]))
        secret_files = {}
        for (name, key), text in secrets_text.items():
            p = os.path.join(tmp, "secret-%s-%s" % (name, key))
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text.strip() + "\n")
            secret_files[(name, key)] = p
        train_dir = os.path.join(tmp, "train")  # shared by every task, as the claim is
        os.makedirs(os.path.join(tmp, "logs"))
        base_env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "TG_CLUSTER_SECRET")}
        order = sorted(tasks, key=lambda t: (ROLE_ORDER.index(t.type), t.index))
        for t in order:
            # The manifest's flags first, then the overrides (tg-train keeps the last value of a flag).
            over = ["--max_steps=%d" % steps, "--save_interval_steps=%d" % max(1, steps // 2),
                    "--eval_interval_steps=0", "--max_eval_examples=500", "--threads=1",
                    "--startup_timeout_secs=60", "--peer_timeout_secs=15", "--train_dir=" + train_dir]
            data_dir = flag(t, "data_dir")
            if data_dir is not None and not os.path.isdir(data_dir):
                over += ["--dataset_name=synthetic", "--synthetic_examples=512"]
            env = dict(base_env)
            for e in t.container.get("env") or []:
                if "value" in e:
                    env[e["name"]] = str(e["value"])
                elif e.get("name") != "TG_CLUSTER_SECRET":
                    raise Problem("%s: env %s: only literal values and the secret's secretKeyRef run here"
                                  % (t.where, e.get("name")))
            if t.secret[0] == "file":
                over.append("--secret_file=" + secret_files[(t.secret[2], t.secret[3])])
            else:
                env["TG_CLUSTER_SECRET"] = secrets_text[(t.secret[1], t.secret[2])]
            config = copy.deepcopy(t.tf_config)
            config["cluster"] = {r: [local[a] for a in l] for r, l in config["cluster"].items()}
            env["TF_CONFIG"] = json.dumps(config)
            logs[t.name] = os.path.join(tmp, "logs", t.name + ".log")
            with open(logs[t.name], "wb") as out:
                procs[t.name] = subprocess.Popen([tg_train] + t.argv[1:] + over, env=env, stdout=out,
                                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 start_new_session=True, preexec_fn=die_with_parent)
            say("%s: started %s (pid %d) with TF_CONFIG %s" % (label, t.name, procs[t.name].pid, env["TF_CONFIG"]))
            say("%s:   %s" % (label, " ".join(t.argv[1:] + over)))

        chief = "chief-0" if "chief-0" in procs else "worker-0"  # without a chief, worker 0 is the chief
        start, polls = time.monotonic(), int(budget / POLL_S) + 1
        for _ in range(polls):
            codes = {n: p.poll() for n, p in procs.items()}
            failed = [n for n, c in codes.items() if c not in (None, 0)]
            if failed:
                n = failed[0]
                others = "".join("\n--- %s\n%s" % (o, log_tail(logs[o], 5)) for o in procs if o != n)
                raise Problem("%s: task %s exited %d after %.1f s:\n%s%s" % (
                    label, n, codes[n], time.monotonic() - start, log_tail(logs[n]), others))
            if all(c == 0 for c in codes.values()):
                break
            if time.monotonic() - start > budget:
                break
            time.sleep(POLL_S)
        wall = time.monotonic() - start
        left = [n for n, p in procs.items() if p.poll() is None]
        if left:
            raise Problem("%s: still running after %.0f s: %s (chief %s)\n%s" % (
                label, budget, ", ".join(left), "done" if procs[chief].poll() == 0 else "not done",
                "\n".join("--- %s\n%s" % (n, log_tail(logs[n], 10)) for n in procs)))
        say("%s: every task exited 0 in %.1f s" % (label, wall))

        # What the chief reported: result.json, metrics.jsonl and its summary line.
        try:
            with open(os.path.join(train_dir, "result.json")) as f:
                result = json.load(f)
        except (OSError, ValueError) as e:
            raise Problem("%s: the chief (%s) wrote no readable result.json: %s\n%s"
                          % (label, chief, e, log_tail(logs[chief])))
        replicas = sum(1 for t in tasks if t.type in ("chief", "worker"))
        if result.get("steps") != steps or result.get("num_nodes") != replicas:
            raise Problem("%s: result.json reports steps=%r num_nodes=%r, expected %d and %d"
                          % (label, result.get("steps"), result.get("num_nodes"), steps, replicas))
        try:
            with open(os.path.join(train_dir, "metrics.jsonl")) as f:
                metric_lines = [json.loads(l) for l in f if l.strip()]
        except (OSError, ValueError) as e:
            raise Problem("%s: metrics.jsonl of the chief: %s" % (label, e))
        if not metric_lines:
            raise Problem("%s: the chief's metrics.jsonl is empty" % label)
        summary = log_tail(logs[chief], 5)
        if "%d steps" % steps not in summary:
            raise Problem("%s: the chief's output does not report %d steps:\n%s" % (label, steps, summary))
        say("%s: chief: %d steps, %d replicas, test top-1 %.2f%% on %s examples, %.0f bytes sent per worker-step "
            "(fp32 %.0f); %d metrics lines" % (label, result["steps"], result["num_nodes"], 100 * result["top1"],
                                             result.get("eval_examples"), result["bytes_sent_per_worker_step"],
                                             result["fp32_bytes_per_worker_step"], len(metric_lines)))
        return wall
    finally:
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


def check_manifest(path, tg_train, known, steps, budget):
    label = os.path.relpath(path, REPO) if os.path.abspath(path).startswith(REPO + os.sep) else path
    say("%s: parsing" % label)
    objects = load_objects(path)
    tfjobs = [o for o in objects if o.get("kind") == "TFJob"]
    if tfjobs:
        if len(tfjobs) > 1:
            raise Problem("%s: %d TFJobs; this test runs one" % (label, len(tfjobs)))
        if tfjobs[0].get("apiVersion") != "kubeflow.org/v1":
            raise Problem("%s: TFJob apiVersion %r, expected kubeflow.org/v1" % (label, tfjobs[0].get("apiVersion")))
        tasks = tfjob_tasks(tfjobs[0], label)
        say("%s: TF_CONFIG rendered as the TFJob operator would, for %d task(s)" % (label, len(tasks)))
    else:
        tasks = plain_tasks(objects, label)
        say("%s: TF_CONFIG read from %d Job(s), matching their Services" % (label, len(tasks)))
    if not any(t.type == "ps" for t in tasks) or not any(t.type in ("chief", "worker") for t in tasks):
        raise Problem("%s: the cluster needs a ps and a chief or worker; it has %s"
                      % (label, ", ".join(t.name for t in tasks)))
    for t in tasks:
        check_command(t, known)
        find_secret(t)
        say("%s: %s: %d flags known to tg-train, secret from %s" % (label, t.name, len(t.flags),
                                                                   " ".join(map(str, t.secret))))
    return run_on_loopback(label, tasks, secret_values(objects, tasks, label), tg_train, steps, budget)


def interrupted(signum, frame):
    raise KeyboardInterrupt()


def find_tg_train(build):
    for p in (os.path.join(build, "tg-train"), os.path.join(build, "experiments", "tg-train")):
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="build tree, or the folder holding tg-train")
    ap.add_argument("--manifest", action="append", help="a manifest (repeatable); default: both examples")
    ap.add_argument("--steps", type=int, default=20, help="--max_steps of the loopback run")
    ap.add_argument("--timeout", type=float, default=120, help="seconds each manifest's run may take")
    a = ap.parse_args()
    if a.steps < 2 or not 10 <= a.timeout <= 600:
        ap.error("--steps must be >= 2 and --timeout in [10, 600]")
    tg_train = find_tg_train(a.build)
    if tg_train is None:
        print("FAIL: no tg-train in %s or %s/experiments" % (a.build, a.build))
        return 1
    # SIGTERM (a supervisor stopping us) as Ctrl-C: the finally blocks stop the tasks.
    signal.signal(signal.SIGTERM, interrupted)
    failures, t0 = [], time.monotonic()
    sweep_stale_dirs()
    try:
        known = help_flags(tg_train)
        say("%s --help names %d flags" % (tg_train, len(known)))
        for path in a.manifest or DEFAULT_MANIFESTS:
            try:
                check_manifest(path, tg_train, known, a.steps, a.timeout)
                say("PASS %s" % path)
            except Problem as e:
                failures.append(str(e))
                print("FAIL " + str(e), flush=True)
    except KeyboardInterrupt:
        print("FAIL: interrupted; every task stopped", flush=True)
        return 1
    except Problem as e:
        print("FAIL " + str(e), flush=True)
        return 1
    n = len(a.manifest or DEFAULT_MANIFESTS)
    say("%d of %d manifest(s) passed in %.1f s" % (n - len(failures), n, time.monotonic() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
