#!/usr/bin/env node
'use strict';
/*
 * podrun.js - run tpumesh's containers exactly as the manifests declare them, against the
 * kube-apiserver simulator (tests/sim/kube-apiserver) and, for the legacy TPU Node example,
 * the TensorFlow server simulator (tests/sim/tf-master), and check what a kubelet would see:
 * tpumesh-init exits 0 and publishes, the sidecar's startup/readiness probe paths answer
 * 200 once the topology is complete (and readiness drops when a peer goes away), the
 * liveness path answers 200, the trainer's files hold the expected workers, and SIGTERM
 * ends the sidecar with exit 0.
 *
 *   BUILD=build node tests/validate/podrun.js      (tests/integration/test_chart_run.sh)
 *
 * The programs get each container's `args` and `env` from the manifest: downward-API
 * fieldRefs are resolved for the pod, the volume mount paths are moved into a temporary
 * directory and the annotations file is written in the kubelet's format. What a real node
 * adds is added explicitly and only that: the API server URL and token (in-cluster
 * config), GKE's TPU_WORKER_ID/TPU_WORKER_HOSTNAMES and the device plugin's
 * TPU_ACCELERATOR_TYPE/TPU_TOPOLOGY, TPUMESH_SKIP_INIT (there is no TPU here), and
 * loopback addresses with free ports for the sidecar's servers (this machine is shared).
 * Prints TAP lines; every process it starts is stopped before it exits.
 */
const fs = require('fs');
const os = require('os');
const path = require('path');
const http = require('http');
const { spawn } = require('child_process');
const YAML = require('yaml');
const helmlib = require('./lib/helm');

const ROOT = path.resolve(__dirname, '..', '..');
const BUILD = path.resolve(ROOT, process.env.BUILD || 'build');
/* `helm template tpumesh CHART` (default values) with the first Helm `make deps` unpacked. */
function helmTemplate(chart) {
    const h = helmlib.helms()[0];
    if (!h) {
        throw new Error(`no Helm under ${BUILD}/helm: run make deps (scripts/helm.sh)`);
    }
    return YAML.parseAllDocuments(helmlib.template(h.bin, chart)).map((d) => d.toJS()).filter((o) => o);
}
const PY = process.env.PY || '/usr/bin/python3';
const SIM = path.join(ROOT, 'tests', 'sim', 'kube-apiserver', 'kube_apiserver_sim.py');
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'tpumesh-podrun-'));
const children = new Set();

let n = 0;
let failed = 0;
function check(name, errs) {
    n++;
    if (!errs.length) {
        console.log(`ok ${n} - ${name}`);
    } else {
        failed++;
        console.log(`not ok ${n} - ${name}`);
        errs.slice(0, 20).forEach((e) => console.log(`#   ${String(e).split('\n').join('\n#   ')}`));
    }
    return !errs.length;
}
/* A check that did not run: "ok N - name # SKIP needs TOOL: why" (tests/run.sh counts it as
 * skipped, and as failed under CI, where `make deps` installs TOOL). */
function skipNeeds(name, tool, why) {
    n++;
    console.log(`ok ${n} - ${name} # SKIP needs ${tool}: ${why}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/* TPUMESH_TEST_SLOWDOWN (tests/run.sh: about 10 under valgrind, 3 under ASan): every bound on
 * waiting for a program is the plain build's, multiplied by it (scaled), so that a program
 * slowed down by the checks is waited for and only one that hangs fails. */
const SLOWDOWN = Math.max(1, Number(process.env.TPUMESH_TEST_SLOWDOWN) || 1);
const scaled = (ms) => ms * SLOWDOWN;

function cleanup() {
    for (const c of children) {
        try {
            c.kill('SIGKILL');
        } catch (e) {
            /* already gone */
        }
    }
    fs.rmSync(TMP, { recursive: true, force: true });
}
process.on('exit', cleanup);
for (const sig of ['SIGINT', 'SIGTERM']) {
    process.on(sig, () => process.exit(130));
}

function start(cmd, args, env) {
    const p = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    p.lines = [];
    p.exited = new Promise((res) => p.on('exit', (code, sig) => {
        children.delete(p);
        res({ code, sig });
    }));
    children.add(p);
    let buf = '';
    const take = (d) => {
        buf += d;
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
            p.lines.push(buf.slice(0, i));
            buf = buf.slice(i + 1);
        }
    };
    p.stdout.on('data', take);
    p.stderr.on('data', take);
    return p;
}
/* Polls fn until it returns a true value, for up to scaled(ms). */
async function waitFor(fn, ms, step = 100) {
    const end = Date.now() + scaled(ms);
    for (;;) {
        const v = await fn();
        if (v || Date.now() >= end) {
            return v;
        }
        await sleep(step);
    }
}
function request(method, url, body, headers = {}) {
    return new Promise((res) => {
        const data = body === undefined ? null : Buffer.from(JSON.stringify(body));
        const req = http.request(url, { method, timeout: scaled(5000),
            headers: { ...headers, ...(data ? { 'Content-Type': 'application/json', 'Content-Length': data.length } : {}) } }, (r) => {
            let b = '';
            r.on('data', (d) => { b += d; });
            r.on('end', () => res({ status: r.statusCode, body: b }));
        });
        req.on('error', (e) => res({ status: 0, body: String(e) }));
        req.on('timeout', () => req.destroy(new Error('timeout')));
        if (data) req.write(data);
        req.end();
    });
}

/* ---- the pod's view: env, paths, annotations file ------------------------------------ */
/* The downward-API annotations file: sorted keys, key="value" (Go %q), joined by \n. */
function annotationsFile(ann) {
    return Object.keys(ann).sort().map((k) => `${k}=${JSON.stringify(ann[k])}`).join('\n');
}
function fieldRef(pod, fp) {
    const m = /^metadata\.(name|namespace|uid)$/.exec(fp);
    if (m) return pod.metadata[m[1]];
    if (fp === 'status.podIP') return pod.status.podIP;
    if (fp === 'spec.nodeName') return pod.spec.nodeName;
    const a = /^metadata\.(annotations|labels)\['([^']+)'\]$/.exec(fp);
    if (a) return (pod.metadata[a[1]] || {})[a[2]] || '';
    throw new Error(`fieldRef ${fp} is not resolved by podrun.js`);
}
/* env of container c of pod, with mount paths moved under dir/<volume name>. */
function containerEnv(pod, c, dir, extra) {
    const remap = {};
    for (const m of c.volumeMounts || []) {
        remap[m.mountPath] = path.join(dir, m.name);
    }
    const fix = (v) => {
        for (const [from, to] of Object.entries(remap)) {
            if (v === from || v.startsWith(from + '/')) return to + v.slice(from.length);
        }
        return v;
    };
    const env = { PATH: '/usr/bin:/bin' };
    for (const e of c.env || []) {
        if (e.valueFrom && e.valueFrom.fieldRef) {
            env[e.name] = fieldRef(pod, e.valueFrom.fieldRef.fieldPath);
        } else if (e.valueFrom) {
            throw new Error(`${c.name}: env ${e.name} uses a valueFrom podrun.js does not resolve`);
        } else {
            env[e.name] = fix(String(e.value));
        }
    }
    return { ...env, ...extra };
}
/* Prepare the pod's volumes in dir: emptyDirs empty, the downward-API files written. */
function podVolumes(pod, dir) {
    for (const v of pod.spec.volumes || []) {
        const d = path.join(dir, v.name);
        fs.mkdirSync(d, { recursive: true });
        if (v.downwardAPI) {
            for (const it of v.downwardAPI.items || []) {
                const fp = it.fieldRef.fieldPath;
                const map = fp === 'metadata.annotations' ? pod.metadata.annotations
                    : fp === 'metadata.labels' ? pod.metadata.labels : null;
                fs.writeFileSync(path.join(d, it.path), map ? annotationsFile(map || {}) : fieldRef(pod, fp));
            }
        }
    }
}
function program(c) {
    const args = c.args || [];
    if (c.command || !args.length) {
        throw new Error(`${c.name}: expected args: [program, ...] (tini stays the entrypoint)`);
    }
    return { bin: path.join(BUILD, 'bin', args[0]), argv: args.slice(1) };
}

/* A pod as the Job controller, scheduler and kubelet leave it: the template plus identity,
 * hostname, node, IP and Running/Ready status. */
function jobPod(tpl, { name, job, index, labels = {}, annotations = {}, hostname, ip }) {
    const spec = JSON.parse(JSON.stringify(tpl.spec));
    if (hostname) {
        spec.hostname = hostname;
    }
    spec.nodeName = `gke-tpu-node-${index}`;
    return {
        metadata: {
            name,
            namespace: 'default',
            labels: { ...(tpl.metadata.labels || {}), ...labels,
                ...(job ? { 'batch.kubernetes.io/job-name': job, 'job-name': job,
                    'batch.kubernetes.io/job-completion-index': String(index) } : {}) },
            annotations: { ...(tpl.metadata.annotations || {}), ...annotations,
                ...(job ? { 'batch.kubernetes.io/job-completion-index': String(index) } : {}) },
        },
        spec,
        status: {
            phase: 'Running',
            podIP: ip,
            podIPs: [{ ip }],
            hostIP: `10.128.0.${10 + index}`,
            conditions: [{ type: 'Ready', status: 'True' }, { type: 'ContainersReady', status: 'True' },
                { type: 'Initialized', status: 'True' }, { type: 'PodScheduled', status: 'True' }],
        },
    };
}

/* ---- one pod's run --------------------------------------------------------------------- */
async function runPod(sim, pod, { label, gkeEnv, wantJobs, peerToDrop, skipInit = true, afterInit, smoke = false }) {
    const spec = pod.spec;
    const dir = path.join(TMP, pod.metadata.name);
    podVolumes(pod, dir);
    const init = spec.initContainers.find((c) => c.name === 'tpumesh-init');
    const side = spec.initContainers.find((c) => c.name === 'tpumesh-sidecar');
    const tokenFile = path.join(TMP, 'token');

    /* tpumesh-init */
    const ip = program(init);
    const ienv = containerEnv(pod, init, dir, { ...gkeEnv, ...(skipInit ? { TPUMESH_SKIP_INIT: 'true' } : {}) });
    const ip1 = start(ip.bin, ip.argv, ienv);
    const r = await Promise.race([ip1.exited, sleep(scaled(30000)).then(() => ({ code: 'timeout' }))]);
    const sharedMount = init.volumeMounts.find((m) => spec.volumes.find((v) => v.name === m.name && v.emptyDir));
    const out = path.join(dir, sharedMount.name);
    check(`${label}: tpumesh-init with the manifest's env exits 0 and publishes`,
        r.code === 0 && fs.existsSync(path.join(out, 'topology.json')) ? []
            : [`exit ${r.code}`, ...ip1.lines.slice(-5)]);
    if (r.code === 0 && afterInit) {
        check(`${label}: tpumesh-init's published files`, afterInit(out));
    }
    if (r.code !== 0 || !side) {
        return;
    }

    /* tpumesh-sidecar */
    const sp = program(side);
    const senv = containerEnv(pod, side, dir, {
        TPUMESH_APISERVER: sim.url,
        TPUMESH_TOKEN_FILE: tokenFile,
        TPUMESH_HTTP_ADDR: '127.0.0.1:0',
        TPUMESH_GRPC_ADDR: '127.0.0.1:0',
    });
    const sc = start(sp.bin, sp.argv, senv);
    const port = await waitFor(() => {
        const l = sc.lines.find((x) => /serving \/healthz.*\(port (\d+)\)/.test(x));
        return l ? Number(/\(port (\d+)\)/.exec(l)[1]) : null;
    }, 10000);
    if (!check(`${label}: tpumesh-sidecar with the manifest's env serves HTTP`, port ? [] : ['no "serving /healthz" line', ...sc.lines.slice(-5)])) {
        sc.kill('SIGKILL');
        return;
    }
    const probe = (p) => request('GET', `http://127.0.0.1:${port}${p.httpGet.path}`, undefined,
        { 'User-Agent': 'kube-probe/1.29', Accept: '*/*' });
    /* The kubelet's startup budget, bounded for a test. */
    const budget = Math.min(side.startupProbe.periodSeconds * side.startupProbe.failureThreshold, 30) * 1000;
    const started = await waitFor(async () => (await probe(side.startupProbe)).status === 200, budget, 200);
    check(`${label}: startupProbe ${side.startupProbe.httpGet.path} passes (the trainer may start)`,
        started ? [] : ['never 200', ...sc.lines.slice(-5)]);
    const live = await probe(side.livenessProbe);
    check(`${label}: livenessProbe ${side.livenessProbe.httpGet.path} answers 200`, live.status === 200 ? [] : [`got ${live.status}`]);
    const ready = await probe(side.readinessProbe);
    check(`${label}: readinessProbe ${side.readinessProbe.httpGet.path} answers 200`, ready.status === 200 ? [] : [`got ${ready.status}`]);
    const env = fs.readFileSync(path.join(out, 'dtensor.env'), 'utf8');
    const jobs = (/^DTENSOR_JOBS='?([^'\n]*)'?$/m.exec(env) || [])[1];
    check(`${label}: dtensor.env lists the ${wantJobs.split(',').length} workers in index order`,
        jobs === wantJobs ? [] : [`DTENSOR_JOBS=${jobs}`, `expected     ${wantJobs}`]);

    /* The trainer's own command, as written in the manifest, with its mount path and the
     * sidecar's port moved as above and the final `exec python3 <train.py>` replaced by
     * printing the environment it built. */
    const trainer = spec.containers[0];
    const cmd = (trainer.command || []).concat(trainer.args || []);
    if (cmd[0] === '/bin/sh' && cmd[1] === '-c') {
        const mount = (trainer.volumeMounts || []).find((m) => m.name === sharedMount.name);
        let script = cmd[2].split(mount.mountPath).join(out)
            .split(`127.0.0.1:${side.ports[0].containerPort}`).join(`127.0.0.1:${port}`);
        script = script.replace(/exec python3 \S+/, 'env');
        const tr = start('/bin/sh', ['-c', script], { PATH: '/usr/bin:/bin' });
        const res = await Promise.race([tr.exited, sleep(scaled(20000)).then(() => ({ code: 'timeout' }))]);
        if (smoke) {
            /* k8s/first-job*.yaml: the smoke trainer prints what it read and exits 0. */
            const idx = (pod.metadata.annotations || {})['batch.kubernetes.io/job-completion-index'];
            const n = wantJobs.split(',').length;
            const want = [`tpumesh smoke: rank ${idx} of ${n} (TPU_WORKER_ID ${idx})`, `tpumesh smoke: DTENSOR_JOBS=${wantJobs}`];
            const got = tr.lines.filter((l) => l.startsWith('tpumesh smoke:'));
            const e = res.code === 0 ? [] : [`exit ${res.code}`, ...tr.lines.slice(-5)];
            if (JSON.stringify(got.slice(0, 2)) !== JSON.stringify(want)) e.push(`printed ${JSON.stringify(got)}`, `wanted ${JSON.stringify(want)}`);
            if (!/^tpumesh smoke: workersDigest=[0-9a-f]{16}$/.test(got[2] || '')) e.push(`no workersDigest line: ${got[2]}`);
            check(`${label}: the smoke trainer's own command prints its rank, DTENSOR_JOBS and workersDigest and exits 0`, e);
        }
        const envOut = smoke ? null : Object.fromEntries(tr.lines.filter((l) => /^[A-Z_]+=/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
        if (!smoke) {
            const e = [];
            if (res.code !== 0) e.push(`exit ${res.code}`, ...tr.lines.slice(-5));
            if (envOut.DTENSOR_JOBS !== wantJobs) e.push(`DTENSOR_JOBS=${envOut.DTENSOR_JOBS}`);
            try {
                JSON.parse(envOut.TF_CONFIG);
            } catch (err) {
                e.push(`TF_CONFIG is not JSON: ${envOut.TF_CONFIG}`);
            }
            if (!envOut.TPU_WORKER_ID) e.push('TPU_WORKER_ID not set from tpu.env');
            check(`${label}: the trainer's own command runs and sources the published files`, e);
        }
    }

    if (peerToDrop) {
        await sim.ctl('delete', { name: peerToDrop.metadata.name, grace: 0 });
        const dropped = await waitFor(async () => (await probe(side.readinessProbe)).status !== 200, 10000, 200);
        check(`${label}: readinessProbe fails while a peer is gone (pod not Ready)`, dropped ? [] : ['still 200']);
        await sim.ctl('create', { pod: peerToDrop });
        const back = await waitFor(async () => (await probe(side.readinessProbe)).status === 200, 10000, 200);
        check(`${label}: readinessProbe passes again when the peer is back`, back ? [] : ['not 200']);
    }
    sc.kill('SIGTERM');
    const t = await Promise.race([sc.exited, sleep(scaled(10000)).then(() => ({ code: 'timeout' }))]);
    check(`${label}: SIGTERM ends tpumesh-sidecar with exit 0`, t.code === 0 ? [] : [`exit ${t.code} ${t.sig || ''}`]);
}

/* ---- scenarios ----------------------------------------------------------------------- */
async function main() {
    for (const p of ['tpumesh-init', 'tpumesh-sidecar']) {
        if (!fs.existsSync(path.join(BUILD, 'bin', p))) {
            check(`${p} is built`, [`missing ${path.join(BUILD, 'bin', p)}: make BUILD=... all`]);
            return;
        }
    }
    fs.writeFileSync(path.join(TMP, 'token'), 'podrun-token\n');
    const simp = start(PY, [SIM, '--token', 'podrun-token', '--bookmark-interval', '2'], process.env);
    const readyLine = await waitFor(() => simp.lines.find((l) => l.startsWith('READY ')), 15000);
    if (!check('kube-apiserver simulator starts', readyLine ? [] : simp.lines.slice(-5))) {
        return;
    }
    const url = /url=(\S+)/.exec(readyLine)[1];
    const sim = {
        url,
        async ctl(verb, args) {
            const r = await request('POST', `${url}/_sim/${verb}`, args);
            if (r.status !== 200) throw new Error(`sim ${verb}: ${r.status} ${r.body}`);
            return JSON.parse(r.body);
        },
    };

    /* 1. k8s/job-v5litepod-16.yaml: 4 pods of the Indexed Job. */
    {
        const docs = YAML.parseAllDocuments(fs.readFileSync(path.join(ROOT, 'k8s', 'job-v5litepod-16.yaml'), 'utf8')).map((d) => d.toJS());
        const job = docs.find((d) => d.kind === 'Job');
        const tpl = job.spec.template;
        const jname = job.metadata.name;
        const sub = tpl.spec.subdomain;
        const hosts = Array.from({ length: job.spec.completions }, (_, i) => `${jname}-${i}.${sub}`);
        const port = tpl.metadata.annotations['tpumesh.dev/port'] || '10000';
        const pods = hosts.map((h, i) => jobPod(tpl, { name: `${jname}-${i}-q7x2k`, job: jname, index: i,
            hostname: `${jname}-${i}`, ip: `10.4.0.${20 + i}` }));
        for (const p of pods) await sim.ctl('create', { pod: p });
        await runPod(sim, pods[0], {
            label: 'k8s/job-v5litepod-16.yaml worker 0',
            gkeEnv: { TPU_WORKER_ID: '0', TPU_WORKER_HOSTNAMES: hosts.join(','),
                TPU_ACCELERATOR_TYPE: 'v5litepod-16', TPU_TOPOLOGY: tpl.spec.nodeSelector['cloud.google.com/gke-tpu-topology'] },
            wantJobs: hosts.map((h) => `${h}:${port}`).join(','),
            peerToDrop: pods[3],
        });
        await sim.ctl('clear', {});
    }

    /* 1b. The same Job with a non-default DTensor port, set as README's "Install on GKE"
     * says: only the tpumesh.dev/port annotation. tpumesh-init reads it through the
     * downward-API file, the sidecar from its own pod; both must publish :12000. */
    {
        const docs = YAML.parseAllDocuments(fs.readFileSync(path.join(ROOT, 'k8s', 'job-v5litepod-16.yaml'), 'utf8')).map((d) => d.toJS());
        const job = docs.find((d) => d.kind === 'Job');
        const tpl = JSON.parse(JSON.stringify(job.spec.template));
        /* The containers as `helm template` gives them to a chart that has tpumesh as a
         * dependency (tests/helm/parent, Pod "defaults": tpuChips 4, no selector). */
        const objs = helmTemplate(helmlib.parentChart());
        const pod = objs.find((o) => o.kind === 'Pod' && o.metadata.name === 'defaults');
        tpl.spec.initContainers = pod.spec.initContainers;
        tpl.metadata.annotations['tpumesh.dev/port'] = '12000';
        const jname = job.metadata.name;
        const sub = tpl.spec.subdomain;
        const hosts = Array.from({ length: job.spec.completions }, (_, i) => `${jname}-${i}.${sub}`);
        const pods = hosts.map((h, i) => jobPod(tpl, { name: `${jname}-${i}-p0rt5`, job: jname, index: i,
            hostname: `${jname}-${i}`, ip: `10.4.1.${20 + i}` }));
        for (const p of pods) await sim.ctl('create', { pod: p });
        await runPod(sim, pods[1], {
            label: 'job-v5litepod-16 with tpumesh.dev/port 12000 (annotation only) worker 1',
            gkeEnv: { TPU_WORKER_ID: '1', TPU_WORKER_HOSTNAMES: hosts.join(','),
                TPU_ACCELERATOR_TYPE: 'v5litepod-16', TPU_TOPOLOGY: tpl.spec.nodeSelector['cloud.google.com/gke-tpu-topology'] },
            wantJobs: hosts.map((h) => `${h}:12000`).join(','),
        });
        await sim.ctl('clear', {});
    }

    /* 1c. k8s/first-job-cpu.yaml: the first job without TPUs. No GKE TPU variables (no TPU
     * node): tpumesh-init gets the slice from the manifest's env and skips initialization,
     * the sidecar finds the 4 workers from the pods; the smoke trainer runs. */
    {
        const docs = YAML.parseAllDocuments(fs.readFileSync(path.join(ROOT, 'k8s', 'first-job-cpu.yaml'), 'utf8')).map((d) => d.toJS());
        const job = docs.find((d) => d.kind === 'Job');
        const tpl = job.spec.template;
        const jname = job.metadata.name;
        const sub = tpl.spec.subdomain;
        const hosts = Array.from({ length: job.spec.completions }, (_, i) => `${jname}-${i}.${sub}`);
        const pods = hosts.map((h, i) => jobPod(tpl, { name: `${jname}-${i}-c9pu0`, job: jname, index: i,
            hostname: `${jname}-${i}`, ip: `10.4.2.${20 + i}` }));
        for (const p of pods) await sim.ctl('create', { pod: p });
        await runPod(sim, pods[2], {
            label: 'k8s/first-job-cpu.yaml worker 2',
            gkeEnv: {},
            skipInit: false,
            wantJobs: hosts.map((h) => `${h}:10000`).join(','),
            peerToDrop: pods[0],
            smoke: true,
        });
        await sim.ctl('clear', {});
    }

    /* 2. k8s/jobset-multislice.yaml: 2 slices x 4 pods. */
    {
        const js = YAML.parse(fs.readFileSync(path.join(ROOT, 'k8s', 'jobset-multislice.yaml'), 'utf8'));
        const rj = js.spec.replicatedJobs[0];
        const tpl = rj.template.spec.template;
        const per = rj.template.spec.completions;
        const sub = js.metadata.name;
        const pods = [];
        const hosts = [];
        for (let s = 0; s < rj.replicas; s++) {
            for (let i = 0; i < per; i++) {
                const job = `${js.metadata.name}-${rj.name}-${s}`;
                /* what the JobSet controller puts on each pod */
                const jsKeys = { 'jobset.sigs.k8s.io/jobset-name': js.metadata.name,
                    'jobset.sigs.k8s.io/replicatedjob-name': rj.name,
                    'jobset.sigs.k8s.io/replicatedjob-replicas': String(rj.replicas),
                    'jobset.sigs.k8s.io/global-replicas': String(rj.replicas),
                    'jobset.sigs.k8s.io/job-index': String(s), 'jobset.sigs.k8s.io/job-global-index': String(s) };
                hosts.push(`${job}-${i}.${sub}`);
                pods.push(jobPod(tpl, { name: `${job}-${i}-w9m3p`, job, index: i, hostname: `${job}-${i}`,
                    ip: `10.5.${s}.${20 + i}`,
                    labels: jsKeys, annotations: jsKeys }));
            }
        }
        pods.forEach((p) => { p.spec.subdomain = sub; });
        for (const p of pods) await sim.ctl('create', { pod: p });
        const port = tpl.metadata.annotations['tpumesh.dev/port'] || '10000';
        await runPod(sim, pods[0], {
            label: 'k8s/jobset-multislice.yaml slice 0 worker 0',
            gkeEnv: { TPU_WORKER_ID: '0', TPU_WORKER_HOSTNAMES: hosts.slice(0, per).join(','),
                TPU_ACCELERATOR_TYPE: 'v5litepod-16', TPU_TOPOLOGY: tpl.spec.nodeSelector['cloud.google.com/gke-tpu-topology'] },
            wantJobs: hosts.map((h) => `${h}:${port}`).join(','),
        });
        await sim.ctl('clear', {});
    }

    /* 3. the chart's helm test pod at default values. */
    {
        const pod = helmTemplate(path.join(ROOT, 'charts', 'tpumesh'))
            .find((o) => o.kind === 'Pod' && ((o.metadata.annotations || {})['helm.sh/hook'] === 'test')
                && (o.spec.initContainers || []).length);
        const full = jobPod({ metadata: pod.metadata, spec: pod.spec }, { name: pod.metadata.name, index: 0, ip: '10.6.0.9' });
        await sim.ctl('create', { pod: full });
        const port = '10000';
        await runPod(sim, full, {
            label: 'chart helm test pod',
            gkeEnv: {},
            wantJobs: `10.6.0.9:${port}`,
        });
        await sim.ctl('clear', {});
    }

    /* 4. k8s/legacy-tpu-node.yaml: tpumesh-init against a simulated TPU Node's TensorFlow
     * server (tests/sim/tf-master), as GKE points the pod at it with
     * KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS; system initialization really runs. */
    {
        const genPy = path.join(BUILD, 'gen', 'py', '.stamp');
        if (!fs.existsSync(genPy)) {
            check('k8s/legacy-tpu-node.yaml: the tf-master simulator can run', [`missing ${genPy}: make BUILD=... gen-py`]);
        } else {
            const tfm = start(PY, [path.join(ROOT, 'tests', 'sim', 'tf-master', 'tf_master_sim.py'), '--accelerator-type', 'v3-8',
                '--max-seconds', '120'], { ...process.env, BUILD });
            const line = await waitFor(() => tfm.lines.find((l) => l.startsWith('READY ')), 15000);
            if (check('tf-master simulator starts', line ? [] : tfm.lines.slice(-5))) {
                const port = /port=(\d+)/.exec(line)[1];
                const job = YAML.parse(fs.readFileSync(path.join(ROOT, 'k8s', 'legacy-tpu-node.yaml'), 'utf8'));
                const tpl = job.spec.template;
                const pod = jobPod(tpl, { name: `${job.metadata.name}-x8k2m`, index: 0, ip: '10.7.0.4' });
                const endpoint = `127.0.0.1:${port}`;
                await runPod(sim, pod, {
                    label: 'k8s/legacy-tpu-node.yaml',
                    gkeEnv: { KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS: `grpc://${endpoint}` },
                    skipInit: false,
                    afterInit: (out) => {
                        const e = [];
                        /* A TF_CONFIG whose cluster is TensorFlow's cluster_spec() for the
                         * TPU's workers, no task: the pod is the client (docs/DESIGN.md §6). */
                        const tf = JSON.parse(fs.readFileSync(path.join(out, 'tf_config.json'), 'utf8'));
                        if (JSON.stringify(tf) !== JSON.stringify({ cluster: { worker: [endpoint] } })) {
                            e.push(`tf_config.json is ${JSON.stringify(tf)}, want {"cluster":{"worker":["${endpoint}"]}}`);
                        }
                        if (!(fs.statSync(path.join(out, 'topology.pb')).size > 0)) {
                            e.push('topology.pb is empty');
                        }
                        return e;
                    },
                });
            }
            tfm.kill('SIGTERM');
            await Promise.race([tfm.exited, sleep(scaled(5000))]);
        }
    }
    simp.kill('SIGTERM');
    await Promise.race([simp.exited, sleep(scaled(5000))]);
}

/* Used as a module (tests/validate/injected.js runs a webhook-injected pod the same way). */
module.exports = { runPod, start, request, waitFor, sleep, scaled, SLOWDOWN, check, skipNeeds, TMP, done: () => {
    console.log(`1..${n}`);
    process.exitCode = failed ? 1 : 0;
} };

if (require.main === module) {
    main().catch((e) => check('podrun completes', [e.stack || String(e)])).finally(module.exports.done);
}
