"""Peer (a) of the sidecar benchmark: what users write today on the official Python client.

LIST the job's pods, then WATCH from the list's resourceVersion (with bookmarks) with
python3-kubernetes, keep a dict of pods, and on every event recompute DTENSOR_JOBS (pod IPs in
completion-index order) and write it atomically (temp file + rename) when it changed.
Timing lines on stderr: "LISTED <unix time>" when the LIST response is decoded and
"PUBLISHED <unix time> <n>" after each write.
"""
import argparse
import os
import sys
import time

from kubernetes import client, watch

KEY = "batch.kubernetes.io/job-completion-index"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--namespace", default="default")
    ap.add_argument("--selector", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--port", type=int, default=10000)
    args = ap.parse_args()
    cfg = client.Configuration()
    cfg.host = args.url
    api = client.CoreV1Api(client.ApiClient(cfg))
    pods = {}
    last = [None]

    def publish():
        workers = []
        for p in pods.values():
            ann = p.metadata.annotations or {}
            if KEY not in ann or p.metadata.deletion_timestamp is not None or not p.status.pod_ip:
                continue
            workers.append((int(ann[KEY]), p.status.pod_ip))
        workers.sort()
        jobs = ",".join("%s:%d" % (ip, args.port) for _, ip in workers)
        if jobs == last[0] or not jobs:
            return
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            f.write("DTENSOR_JOBS=%s\n" % jobs)
        os.rename(tmp, args.out)
        last[0] = jobs
        print("PUBLISHED %.6f %d" % (time.time(), len(workers)), file=sys.stderr, flush=True)

    resp = api.list_namespaced_pod(args.namespace, label_selector=args.selector)
    print("LISTED %.6f" % time.time(), file=sys.stderr, flush=True)
    for p in resp.items:
        pods[p.metadata.name] = p
    rv = resp.metadata.resource_version
    publish()
    while True:
        w = watch.Watch()
        for ev in w.stream(api.list_namespaced_pod, args.namespace, label_selector=args.selector,
                           resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=300):
            obj = ev["object"]
            if ev["type"] == "BOOKMARK":
                rv = obj.metadata.resource_version if hasattr(obj, "metadata") else obj["metadata"]["resourceVersion"]
                continue
            if ev["type"] == "DELETED":
                pods.pop(obj.metadata.name, None)
            else:
                pods[obj.metadata.name] = obj
            rv = obj.metadata.resource_version
            publish()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
