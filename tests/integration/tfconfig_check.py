"""tfconfig_check.py - read a TF_CONFIG the way TensorFlow's TFConfigClusterResolver does.

An independent checker (TensorFlow is not installable here), written from the resolver's
documented behaviour: TF_CONFIG is a JSON object; "cluster" maps each job name to a list of
"host:port" task addresses (ClusterSpec also takes {index: address} dicts); "task" is optional
and gives "type" and "index" (task id 0 when absent); "rpc_layer" is optional. A job name must
be a TensorFlow job name, every address a host (name, IPv4 or [IPv6]) and a port 1..65535.
"""
import json
import re

_JOB = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)$")


def _address(a):
    if not isinstance(a, str) or ":" not in a:
        raise ValueError(f"task address {a!r} is not host:port")
    host, port = a.rsplit(":", 1)
    if not _HOST.match(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"task address {a!r} is not host:port")
    return a


def parse(text):
    """Returns (cluster {job: [addresses]}, task_type or None, task_id, rpc_layer or None);
    raises ValueError for anything TFConfigClusterResolver would reject or misread."""
    cfg = json.loads(text)
    if not isinstance(cfg, dict):
        raise ValueError("TF_CONFIG is not a JSON object")
    cluster = cfg.get("cluster", {})
    if not isinstance(cluster, dict) or not cluster:
        raise ValueError("TF_CONFIG has no cluster: TFConfigClusterResolver reads an empty "
                         "ClusterSpec")
    jobs = {}
    for job, tasks in cluster.items():
        if not _JOB.match(job):
            raise ValueError(f"job name {job!r} is not a TensorFlow job name")
        if isinstance(tasks, dict):
            tasks = [tasks[k] for k in sorted(tasks, key=int)]
        if not isinstance(tasks, list) or not tasks:
            raise ValueError(f"job {job!r} lists no tasks")
        jobs[job] = [_address(t) for t in tasks]
    task = cfg.get("task", {})
    if not isinstance(task, dict):
        raise ValueError("task is not an object")
    task_type = task.get("type")
    task_id = task.get("index", 0)
    if task_type is not None and (task_type not in jobs or not isinstance(task_id, int)
                                  or not 0 <= task_id < len(jobs[task_type])):
        raise ValueError(f"task {task!r} is not one of the cluster's tasks")
    return jobs, task_type, task_id, cfg.get("rpc_layer")
