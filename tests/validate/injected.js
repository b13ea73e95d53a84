#!/usr/bin/env node
'use strict';
/*
 * injected.js - tpumesh-injector end to end against the kube-apiserver simulator's admission
 * (tests/sim/kube-apiserver/admission.py), with the real kubectl as the client:
 *
 *   1. the chart's MutatingWebhookConfiguration and generated certificate (`helm template`
 *      with the real Helm in $BUILD/helm when it is there; else a CA and certificate made
 *      here with openssl and the same configuration) are created with `kubectl create -f`;
 *      tpumesh-injector serves that certificate, and the simulator verifies it against the
 *      caBundle for <service>.<namespace>.svc;
 *   2. `kubectl create -f` of labelled JobSet-style pods (4 workers of a v5litepod-16 slice)
 *      yields injected pods, which pass the manifest validation of this directory (Kubernetes
 *      schema, restricted Pod Security profile, tpumesh's wiring);
 *   3. tpumesh-init and tpumesh-sidecar of an injected pod run end to end (podrun.js's
 *      runPod: env, downward API, probes, the published worker list, the trainer's view);
 *   4. what the API server does around the webhook: a denial reaches kubectl with the rule,
 *      no admission warning (the injector asks the API server nothing), unlabelled pods
 *      untouched, reinvocation (IfNeeded) after a later webhook changed the pod,
 *      timeoutSeconds with failurePolicy Ignore, and failurePolicy Fail when the injector is
 *      down;
 *   5. k8s/ without Helm: the k8s/README.md openssl recipe's certificate, k8s/injector.yaml's
 *      webhook configuration, Deployment command/env and ConfigMap, and the label-only pod of
 *      k8s/injected-job-v5litepod-16.yaml injected into what k8s/job-v5litepod-16.yaml has.
 *
 *   BUILD=build node tests/validate/injected.js     (tests/integration/test_injector_sim.sh)
 */
const fs = require('fs');
const path = require('path');
const net = require('net');
const { execFileSync, spawnSync } = require('child_process');
const YAML = require('yaml');
const pr = require('./podrun');
const k8s = require('./lib/k8s');
const tpm = require('./lib/tpumesh');

const ROOT = path.resolve(__dirname, '..', '..');
const BUILD = path.resolve(ROOT, process.env.BUILD || 'build');
const PY = process.env.PY || '/usr/bin/python3';
const SIM = path.join(ROOT, 'tests', 'sim', 'kube-apiserver', 'kube_apiserver_sim.py');
const TMP = pr.TMP;
const { check } = pr;
const NS = 'tpumesh';          /* the release namespace */
const SVC = 'tpumesh-injector'; /* the chart's Service at release name "tpumesh" */

function openssl(...args) {
    execFileSync('openssl', args, { stdio: 'ignore' });
}
function b64(file) {
    return fs.readFileSync(file).toString('base64');
}

/* The webhook configuration and serving certificate: the chart's, or made here. */
function webhookAndCert() {
    const helm = ['3.17.2', '4.1.4'].map((v) => path.join(BUILD, 'helm', v, 'helm')).find((h) => fs.existsSync(h));
    const crt = path.join(TMP, 'tls.crt');
    const key = path.join(TMP, 'tls.key');
    if (helm) {
        /* Every namespace (the chart's default serves the release namespace only; the pods
         * here are created in others). */
        const out = execFileSync(helm, ['template', 'tpumesh', path.join(ROOT, 'charts', 'tpumesh'), '--namespace', NS,
            '--set', 'injector.namespaceSelector.matchExpressions[0].key=kubernetes.io/metadata.name',
            '--set', 'injector.namespaceSelector.matchExpressions[0].operator=Exists',
            '--show-only', 'templates/injector-webhook.yaml'], { encoding: 'utf8' });
        const docs = YAML.parseAllDocuments(out).map((d) => d.toJS()).filter(Boolean);
        const secret = docs.find((d) => d.kind === 'Secret');
        fs.writeFileSync(crt, Buffer.from(secret.data['tls.crt'], 'base64'));
        fs.writeFileSync(key, Buffer.from(secret.data['tls.key'], 'base64'));
        const wh = docs.find((d) => d.kind === 'MutatingWebhookConfiguration');
        return { wh, crt, key, from: `helm ${path.basename(path.dirname(helm))} template (chart-generated CA)` };
    }
    const ca = path.join(TMP, 'ca.crt');
    const cakey = path.join(TMP, 'ca.key');
    openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', cakey, '-out', ca, '-days', '1', '-subj', '/CN=tpumesh-injector-ca');
    openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', path.join(TMP, 'tls.csr'), '-subj', `/CN=${SVC}.${NS}.svc`);
    fs.writeFileSync(path.join(TMP, 'ext'), `subjectAltName=DNS:${SVC}.${NS}.svc,DNS:${SVC}.${NS}.svc.cluster.local\n`);
    openssl('x509', '-req', '-in', path.join(TMP, 'tls.csr'), '-CA', ca, '-CAkey', cakey, '-CAcreateserial', '-out', crt,
        '-days', '1', '-extfile', path.join(TMP, 'ext'));
    const wh = {
        apiVersion: 'admissionregistration.k8s.io/v1', kind: 'MutatingWebhookConfiguration',
        metadata: { name: `${SVC}-${NS}` },
        webhooks: [{ name: 'inject.tpumesh.dev', admissionReviewVersions: ['v1'], sideEffects: 'None',
            failurePolicy: 'Fail', timeoutSeconds: 5, reinvocationPolicy: 'IfNeeded', matchPolicy: 'Equivalent',
            clientConfig: { service: { name: SVC, namespace: NS, path: '/mutate', port: 443 }, caBundle: b64(ca) },
            rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'], scope: 'Namespaced' }],
            objectSelector: { matchLabels: { 'tpumesh.dev/inject': 'true' } } }],
    };
    return { wh, crt, key, from: 'openssl (no Helm in $BUILD/helm)' };
}

/* A JobSet pod as the JobSet and Job controllers create it, with only tpumesh's label added. */
function jobsetPod(i, extra = {}) {
    const js = { 'jobset.sigs.k8s.io/jobset-name': 'train', 'jobset.sigs.k8s.io/replicatedjob-name': 'slice',
        'jobset.sigs.k8s.io/job-index': '0', 'jobset.sigs.k8s.io/job-global-index': '0',
        'jobset.sigs.k8s.io/replicatedjob-replicas': '1', 'jobset.sigs.k8s.io/global-replicas': '1' };
    return {
        apiVersion: 'v1', kind: 'Pod',
        metadata: {
            name: `train-slice-0-${i}-x7k2p`,
            labels: { ...js, 'batch.kubernetes.io/job-name': 'train-slice-0', 'job-name': 'train-slice-0',
                'batch.kubernetes.io/job-completion-index': String(i), 'tpumesh.dev/inject': 'true', ...(extra.labels || {}) },
            annotations: { ...js, 'batch.kubernetes.io/job-completion-index': String(i), 'tpumesh.dev/job-name': 'worker',
                'tpumesh.dev/expected-workers': '4', ...(extra.annotations || {}) },
        },
        spec: {
            hostname: `train-slice-0-${i}`, subdomain: 'train', restartPolicy: 'Never',
            serviceAccountName: 'tpumesh',
            securityContext: { runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: 'RuntimeDefault' } },
            nodeSelector: { 'cloud.google.com/gke-tpu-accelerator': 'tpu-v5-lite-podslice',
                'cloud.google.com/gke-tpu-topology': '4x4' },
            containers: [{
                name: 'trainer', image: 'us-docker.pkg.dev/example/train:1',
                command: ['python3', 'train.py'],
                resources: { requests: { 'google.com/tpu': '4' }, limits: { 'google.com/tpu': '4' } },
                securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true,
                    capabilities: { drop: ['ALL'] } },
            }],
        },
    };
}

function kubectl(env, ...args) {
    return spawnSync('kubectl', args, { env, encoding: 'utf8', input: args.includes('-') ? env.INPUT : undefined });
}

/* A webhook of our own (https on 127.0.0.1 with a self-signed certificate) that adds an
 * annotation: it runs after the injector (name order), so the injector is reinvoked. It runs
 * in its own process: kubectl runs synchronously here and would block this one. */
const ANNOTATOR = `
const fs = require('fs');
const srv = require('https').createServer({ key: fs.readFileSync(process.argv[1]), cert: fs.readFileSync(process.argv[2]) },
    (req, res) => {
        let b = '';
        req.on('data', (d) => { b += d; });
        req.on('end', () => {
            const r = JSON.parse(b).request;
            const ops = [{ op: 'add', path: '/metadata/annotations/example.com~1seen', value: 'yes' }];
            res.setHeader('Content-Type', 'application/json');
            res.end(JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview',
                response: { uid: r.uid, allowed: true, patchType: 'JSONPatch',
                    patch: Buffer.from(JSON.stringify(ops)).toString('base64') } }));
        });
    });
srv.listen(0, '127.0.0.1', () => console.log('port ' + srv.address().port));
`;
async function annotator() {
    const key = path.join(TMP, 'ann.key');
    const crt = path.join(TMP, 'ann.crt');
    openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', crt, '-days', '1', '-subj', '/CN=127.0.0.1',
        '-addext', 'subjectAltName=IP:127.0.0.1');
    const p = pr.start(process.execPath, ['-e', ANNOTATOR, key, crt], { PATH: '/usr/bin:/bin' });
    const port = await pr.waitFor(() => {
        const l = p.lines.find((x) => /^port \d+/.test(x));
        return l ? Number(l.slice(5)) : null;
    }, 10000);
    return { p, port, crt };
}

async function main() {
    for (const p of ['tpumesh-init', 'tpumesh-sidecar', 'tpumesh-injector']) {
        if (!fs.existsSync(path.join(BUILD, 'bin', p))) {
            check(`${p} is built`, [`missing ${path.join(BUILD, 'bin', p)}`]);
            return;
        }
    }
    /* The pods' service-account token (podrun.js runs the sidecar with it). */
    fs.writeFileSync(path.join(TMP, 'token'), 'podrun-token\n');
    /* No authentication: kubectl sends no bearer token to an http:// server. */
    const simp = pr.start(PY, [SIM, '--bookmark-interval', '2'], process.env);
    const readyLine = await pr.waitFor(() => simp.lines.find((l) => l.startsWith('READY ')), 15000);
    if (!check('kube-apiserver simulator starts', readyLine ? [] : simp.lines.slice(-5))) {
        return;
    }
    const url = /url=(\S+)/.exec(readyLine)[1];
    const sim = {
        url,
        async ctl(verb, args) {
            const r = await pr.request('POST', `${url}/_sim/${verb}`, args);
            if (r.status !== 200) throw new Error(`sim ${verb}: ${r.status} ${r.body}`);
            return JSON.parse(r.body);
        },
    };

    const { wh, crt, key, from } = webhookAndCert();
    if (!from.startsWith('helm')) {
        pr.skipNeeds('the chart\'s webhook configuration and certificate are the ones served', 'helm',
            `no Helm unpacked in ${BUILD}/helm (run: make deps); an openssl-made CA stands in`);
    }
    /* No --apiserver: serving asks the API server nothing (only --check-namespace does). */
    const inj = pr.start(path.join(BUILD, 'bin', 'tpumesh-injector'), ['--listen', '127.0.0.1:0', '--http-addr', '127.0.0.1:0',
        '--tls-cert-file', crt, '--tls-key-file', key], { PATH: '/usr/bin:/bin' });
    const port = await pr.waitFor(() => {
        const l = inj.lines.find((x) => /https port (\d+)/.test(x));
        return l ? Number(/https port (\d+)/.exec(l)[1]) : null;
    }, 10000);
    if (!check(`tpumesh-injector serves the webhook's certificate (${from})`, port ? [] : inj.lines.slice(-5))) {
        return;
    }
    await sim.ctl('webhook-service', { service: `${NS}/${SVC}`, address: `127.0.0.1:${port}` });

    const home = path.join(TMP, 'home');
    fs.mkdirSync(home, { recursive: true });
    const kc = path.join(TMP, 'kubeconfig');
    fs.writeFileSync(kc, `apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: ${url}\n`
        + 'users:\n- name: t\n  user:\n    token: podrun-token\ncontexts:\n- name: sim\n  context: {cluster: sim, user: t, namespace: ml}\n'
        + 'current-context: sim\n');
    const env = { PATH: process.env.PATH, HOME: home, KUBECONFIG: kc };
    const create = (obj, ns = 'ml') => {
        const f = path.join(TMP, `obj-${Math.random().toString(36).slice(2)}.yaml`);
        fs.writeFileSync(f, YAML.stringify(obj));
        /* The simulator serves no OpenAPI document: kubectl's client-side schema check is off;
         * the schema is checked below with this directory's validator. */
        return kubectl(env, 'create', '--validate=false', '-n', ns, '-f', f);
    };
    const getPod = (name, ns = 'ml') => {
        const r = kubectl(env, 'get', 'pod', '-n', ns, name, '-o', 'json');
        return r.status === 0 ? JSON.parse(r.stdout) : null;
    };

    let r = create(wh, NS);
    check('kubectl create -f the MutatingWebhookConfiguration', r.status === 0 ? [] : [r.stderr]);
    r = kubectl(env, 'get', 'mutatingwebhookconfigurations', '-o', 'json');
    check('kubectl get mutatingwebhookconfigurations lists it with the API server defaults',
        r.status === 0 && JSON.parse(r.stdout).items.some((c) => c.metadata.name === wh.metadata.name) ? [] : [r.stderr || r.stdout]);

    /* 2. four labelled JobSet pods */
    const pods = [];
    for (let i = 0; i < 4; i++) {
        r = create(jobsetPod(i));
        const p = r.status === 0 ? getPod(`train-slice-0-${i}-x7k2p`) : null;
        pods.push(p);
        if (i === 0) {
            check('kubectl create -f a labelled JobSet pod: created', r.status === 0 ? [] : [r.stderr]);
            check('no admission warning', /Warning/.test(r.stderr) ? [r.stderr] : []);
        }
    }
    const p0 = pods[0];
    if (!check('the stored pod is injected (tpumesh-init, then the native sidecar)',
        p0 && p0.spec.initContainers && p0.spec.initContainers.map((c) => c.name).join(',') === 'tpumesh-init,tpumesh-sidecar'
            ? [] : [JSON.stringify(p0 && p0.spec.initContainers)])) {
        return;
    }
    const where = 'injected pod';
    check('injected pod: Kubernetes schema (strict fields)', k8s.schemaErrors(p0, where));
    check('injected pod: restricted Pod Security profile', k8s.restrictedErrors(p0.spec, where));
    check('injected pod: tpumesh wiring (containers, probes, volumes, mounts, TPU requests, annotations)',
        tpm.podErrors(p0.spec, p0.metadata, where));

    /* 3. run it: every pod gets its IP (the kubelet's part), then worker 2's init and sidecar */
    for (let i = 0; i < 4; i++) {
        await sim.ctl('ip', { namespace: 'ml', name: pods[i].metadata.name, ip: `10.6.0.${20 + i}` });
        await sim.ctl('phase', { namespace: 'ml', name: pods[i].metadata.name, phase: 'Running' });
    }
    const hosts = [0, 1, 2, 3].map((i) => `train-slice-0-${i}.train`);
    await pr.runPod(sim, getPod(pods[2].metadata.name), {
        label: 'injected JobSet pod worker 2',
        gkeEnv: { TPU_WORKER_ID: '2', TPU_WORKER_HOSTNAMES: hosts.join(','), TPU_ACCELERATOR_TYPE: 'v5litepod-16',
            TPU_TOPOLOGY: '4x4' },
        wantJobs: hosts.map((h) => `${h}:10000`).join(','),
    });

    /* 4. around the webhook */
    const bad = jobsetPod(7, { annotations: { 'tpumesh.dev/address-mode': 'fastest' } });
    r = create(bad);
    check('an invalid tpumesh.dev annotation: kubectl create fails with the webhook\'s rule',
        r.status !== 0 && /admission webhook "inject\.tpumesh\.dev" denied the request: tpumesh: annotation tpumesh\.dev\/address-mode="fastest" is not one of the accepted values auto, dns, ip/.test(r.stderr)
            ? [] : [r.stderr]);
    const plain = jobsetPod(8);
    delete plain.metadata.labels['tpumesh.dev/inject'];
    r = create(plain);
    const pp = getPod(plain.metadata.name);
    check('an unlabelled pod is stored unchanged', r.status === 0 && pp && !pp.spec.initContainers ? [] : [r.stderr]);

    /* A pod whose service account may not watch pods is admitted without a word from the
     * injector: the sidecar names the missing permission when it starts. */
    await sim.ctl('forbid', { namespace: 'team-b', verbs: 'watch' });
    const other = jobsetPod(9);
    other.spec.serviceAccountName = 'trainer';
    r = create(other, 'team-b');
    check('a service account that may not watch pods: the pod is created and injected, no warning',
        r.status === 0 && !/Warning/.test(r.stderr) && (getPod(other.metadata.name, 'team-b').spec.initContainers || []).length === 2
            ? [] : [r.stderr]);
    await sim.ctl('forbid', { clear: true });

    const { p: annp, port: annPort, crt: annCrt } = await annotator();
    const late = { apiVersion: 'admissionregistration.k8s.io/v1', kind: 'MutatingWebhookConfiguration',
        metadata: { name: 'zz-annotator' },
        webhooks: [{ name: 'annotate.example.com', admissionReviewVersions: ['v1'], sideEffects: 'None',
            clientConfig: { url: `https://127.0.0.1:${annPort}/`, caBundle: b64(annCrt) },
            rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }] }] };
    r = create(late, NS);
    await sim.ctl('reset-stats', {}).catch(() => {});
    const before = (await sim.ctl('admission-calls', {})).calls.length;
    r = create(jobsetPod(10));
    const calls = (await sim.ctl('admission-calls', {})).calls.slice(before);
    const p10 = getPod(jobsetPod(10).metadata.name);
    check('reinvocationPolicy IfNeeded: a later webhook changed the pod, the injector is called again and adds nothing twice',
        r.status === 0 && JSON.stringify(calls) === JSON.stringify([['inject.tpumesh.dev', 'patched'],
            ['annotate.example.com', 'patched'], ['inject.tpumesh.dev', 'allowed']])
            && p10.spec.initContainers.length === 2 && p10.metadata.annotations['example.com/seen'] === 'yes'
            ? [] : [r.stderr, JSON.stringify(calls)]);
    kubectl(env, 'delete', 'mutatingwebhookconfiguration', 'zz-annotator');
    annp.kill('SIGTERM');

    /* timeoutSeconds: a webhook that accepts and never answers, failurePolicy Ignore */
    const hang = net.createServer(() => {});
    await new Promise((res) => hang.listen(0, '127.0.0.1', res));
    const slow = { apiVersion: 'admissionregistration.k8s.io/v1', kind: 'MutatingWebhookConfiguration',
        metadata: { name: 'slow' },
        webhooks: [{ name: 'slow.example.com', admissionReviewVersions: ['v1'], sideEffects: 'None', failurePolicy: 'Ignore',
            timeoutSeconds: 1, clientConfig: { url: `https://127.0.0.1:${hang.address().port}/`, caBundle: b64(annCrt) },
            rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }] }] };
    r = create(slow, NS);
    check('a second webhook configuration with failurePolicy Ignore and timeoutSeconds 1', r.status === 0 ? [] : [r.stderr]);
    const t0 = Date.now();
    r = create(jobsetPod(11));
    const took = Date.now() - t0;
    const last = (await sim.ctl('admission-calls', {})).calls.slice(-2);
    check('timeoutSeconds 1 with failurePolicy Ignore: the silent webhook is given up on, the pod is created and injected',
        r.status === 0 && last.some((c) => c[0] === 'slow.example.com' && c[1] === 'ignored')
            && took < 1000 + pr.scaled(3500) /* the 1 s timeout, and the injector's own call */
            && getPod(jobsetPod(11).metadata.name).spec.initContainers.length === 2 ? [] : [r.stderr, JSON.stringify(last), `${took} ms`]);
    kubectl(env, 'delete', 'mutatingwebhookconfiguration', 'slow');
    hang.close();

    /* The chart's helm test (templates/tests/test-injection.yaml) as it is rendered: its
     * command and env, the injector config it mounts, the API server in place of in-cluster. */
    const helmTest = (() => {
        const helm = ['3.17.2', '4.1.4'].map((v) => path.join(BUILD, 'helm', v, 'helm')).find((h) => fs.existsSync(h));
        if (!helm) return null;
        const out = execFileSync(helm, ['template', 'tpumesh', path.join(ROOT, 'charts', 'tpumesh'), '--namespace', 'ml'],
            { encoding: 'utf8' });
        const docs = YAML.parseAllDocuments(out).map((d) => d.toJS()).filter(Boolean);
        const pod = docs.find((d) => d.kind === 'Pod' && d.metadata.name === 'tpumesh-injection-test');
        const cm = docs.find((d) => d.kind === 'ConfigMap' && d.metadata.name === 'tpumesh-injector');
        const c = pod.spec.containers[0];
        const mount = c.volumeMounts.find((m) => m.name === 'config').mountPath;
        const dir = path.join(TMP, 'helm-test-config');
        fs.mkdirSync(dir, { recursive: true });
        fs.writeFileSync(path.join(dir, 'config.yaml'), cm.data['config.yaml']);
        const env = { PATH: '/usr/bin:/bin', TPUMESH_APISERVER: url };
        for (const e of c.env) env[e.name] = String(e.value).split(mount).join(dir);
        return () => spawnSync(path.join(BUILD, 'bin', c.args[0]), c.args.slice(1), { env, encoding: 'utf8' });
    })();
    if (helmTest) {
        r = helmTest();
        check('the chart\'s helm test (a labelled pod created as a dry run) passes: exit 0',
            r.status === 0 && /injection works in namespace ml/.test(r.stderr) ? [] : [`exit ${r.status}`, r.stderr]);
    } else {
        pr.skipNeeds('the chart\'s helm test (a labelled pod created as a dry run) passes: exit 0', 'helm',
            `no Helm unpacked in ${BUILD}/helm (run: make deps)`);
    }

    /* failurePolicy Fail: the injector is down, labelled pods are refused */
    inj.kill('SIGTERM');
    const ex = await Promise.race([inj.exited, pr.sleep(pr.scaled(10000)).then(() => ({ code: 'timeout' }))]);
    check('tpumesh-injector exits 0 on SIGTERM', ex.code === 0 ? [] : [`exit ${ex.code}`]);
    r = create(jobsetPod(12));
    check('failurePolicy Fail: with the injector down a labelled pod is refused (not created without tpumesh)',
        r.status !== 0 && /failed calling webhook "inject\.tpumesh\.dev"/.test(r.stderr) && !getPod(jobsetPod(12).metadata.name)
            ? [] : [r.stderr]);
    r = create({ ...plain, metadata: { ...plain.metadata, name: 'plain-2' } });
    check('... while unlabelled pods are still created', r.status === 0 ? [] : [r.stderr]);
    if (helmTest) {
        r = helmTest();
        check('... and the chart\'s helm test fails, saying why', r.status === 1 && /failed calling webhook/.test(r.stderr)
            ? [] : [`exit ${r.status}`, r.stderr]);
    }

    await plainManifests(sim, create, getPod, env, wh.metadata.name);

    simp.kill('SIGTERM');
    await Promise.race([simp.exited, pr.sleep(pr.scaled(5000))]);
}

/* 5. k8s/ without Helm: the README's openssl recipe makes the certificate (its kubectl lines
 * recorded, not run: the patch is applied here), k8s/injector.yaml's webhook configuration
 * and the injector run with its Deployment's command and env and its ConfigMap, and the pod
 * template of k8s/injected-job-v5litepod-16.yaml comes back with what
 * k8s/job-v5litepod-16.yaml spells out. */
async function plainManifests(sim, create, getPod, env, chartWebhook) {
    const readYaml = (f) => YAML.parseAllDocuments(fs.readFileSync(path.join(ROOT, 'k8s', f), 'utf8')).map((d) => d.toJS()).filter(Boolean);
    const objs = readYaml('injector.yaml');
    const ns = objs.find((o) => o.kind === 'Namespace').metadata.name;
    const dep = objs.find((o) => o.kind === 'Deployment');
    const svc = objs.find((o) => o.kind === 'Service');
    const cm = objs.find((o) => o.kind === 'ConfigMap');
    const wh = objs.find((o) => o.kind === 'MutatingWebhookConfiguration');
    const readme = fs.readFileSync(path.join(ROOT, 'k8s', 'README.md'), 'utf8');
    const m = /### Certificates without cert-manager[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme);
    if (!check('k8s/README.md has the openssl recipe (### Certificates without cert-manager, a sh block)', m ? [] : ['not found'])) {
        return;
    }
    const dir = path.join(TMP, 'k8s-recipe');
    fs.mkdirSync(dir, { recursive: true });
    const rec = 'n=0; kubectl() { n=$((n+1)); for a in "$@"; do printf \'%s\\0\' "$a"; done > "kubectl.$n"; }\n';
    let r = spawnSync('sh', ['-eu', '-c', rec + m[1]], { cwd: dir, encoding: 'utf8', env: { PATH: '/usr/bin:/bin' } });
    const calls = fs.readdirSync(dir).filter((f) => /^kubectl\.\d+$/.test(f)).sort()
        .map((f) => fs.readFileSync(path.join(dir, f), 'utf8').split('\0').slice(0, -1));
    const secretVol = dep.spec.template.spec.volumes.find((v) => v.secret).secret.secretName;
    const patchCall = calls.find((c) => c[0] === 'patch');
    check('the openssl recipe runs: a serving certificate for the Service that verifies against its CA, the Secret the Deployment mounts, a caBundle patch of k8s/injector.yaml\'s webhook',
        (() => {
            const e = [];
            if (r.status !== 0) return [`exit ${r.status}: ${r.stderr}`];
            const v = spawnSync('openssl', ['verify', '-CAfile', 'ca.crt', 'tls.crt'], { cwd: dir, encoding: 'utf8' });
            if (v.status !== 0) e.push(`openssl verify: ${v.stdout}${v.stderr}`);
            const text = execFileSync('openssl', ['x509', '-in', 'tls.crt', '-noout', '-text'], { cwd: dir, encoding: 'utf8' });
            if (!text.includes(`DNS:${svc.metadata.name}.${ns}.svc`)) e.push(`tls.crt has no DNS:${svc.metadata.name}.${ns}.svc`);
            const sec = calls.find((c) => c.includes('secret'));
            if (!sec || JSON.stringify(sec) !== JSON.stringify(['-n', ns, 'create', 'secret', 'tls', secretVol, '--cert=tls.crt', '--key=tls.key'])) {
                e.push(`secret: ${JSON.stringify(sec)}, want the Deployment's Secret ${secretVol} in ${ns}`);
            }
            if (!patchCall || patchCall[1] !== 'mutatingwebhookconfiguration' || patchCall[2] !== wh.metadata.name) {
                e.push(`patch: ${JSON.stringify(patchCall)}, want mutatingwebhookconfiguration ${wh.metadata.name}`);
            }
            return e;
        })());
    if (!patchCall) return;
    /* The JSON patch, applied as the API server would (add: the member is created). */
    const ops = JSON.parse(patchCall[patchCall.indexOf('-p') + 1]);
    for (const op of ops) {
        const keys = op.path.split('/').slice(1);
        let o = wh;
        for (const k of keys.slice(0, -1)) o = o[k];
        o[keys[keys.length - 1]] = op.value;
    }
    r = spawnSync('kubectl', ['delete', 'mutatingwebhookconfiguration', chartWebhook], { env, encoding: 'utf8' });
    r = create(wh, ns);
    check('kubectl create -f k8s/injector.yaml\'s MutatingWebhookConfiguration with the recipe\'s caBundle', r.status === 0 ? [] : [r.stderr]);

    const c = dep.spec.template.spec.containers[0];
    const cfgDir = path.join(TMP, 'k8s-config');
    fs.mkdirSync(cfgDir, { recursive: true });
    fs.writeFileSync(path.join(cfgDir, 'config.yaml'), cm.data['config.yaml']);
    const mounts = Object.fromEntries(c.volumeMounts.map((x) => [x.name, x.mountPath]));
    const injEnv = { PATH: '/usr/bin:/bin' };
    for (const e of c.env) {
        injEnv[e.name] = String(e.value).split(mounts.tls).join(dir).split(mounts.config).join(cfgDir);
    }
    /* The Deployment's ports become free loopback ports (flags win over TPUMESH_ variables). */
    const inj = pr.start(path.join(BUILD, 'bin', c.args[0]), ['--listen', '127.0.0.1:0', '--http-addr', '127.0.0.1:0'], injEnv);
    const port = await pr.waitFor(() => {
        const l = inj.lines.find((x) => /https port (\d+)/.test(x));
        return l ? Number(/https port (\d+)/.exec(l)[1]) : null;
    }, 10000);
    if (!check('tpumesh-injector runs with k8s/injector.yaml\'s command, env and ConfigMap and the recipe\'s certificate', port ? [] : inj.lines.slice(-5))) {
        return;
    }
    await sim.ctl('webhook-service', { service: `${ns}/${svc.metadata.name}`, address: `127.0.0.1:${port}` });
    /* k8s/injector.yaml serves the namespaces labelled tpumesh.dev/injection=enabled (k8s/README.md). */
    await sim.ctl('namespace-labels', { namespace: 'ml', set: 'tpumesh.dev/injection=enabled' });


    const [job] = readYaml('injected-job-v5litepod-16.yaml').filter((o) => o.kind === 'Job');
    const tpl = job.spec.template;
    const name = `${job.metadata.name}-0-q8z4m`;
    const pod = { apiVersion: 'v1', kind: 'Pod',
        metadata: { name, labels: { ...tpl.metadata.labels, 'batch.kubernetes.io/job-name': job.metadata.name,
            'batch.kubernetes.io/job-completion-index': '0' },
        annotations: { ...tpl.metadata.annotations, 'batch.kubernetes.io/job-completion-index': '0' } },
        spec: { ...tpl.spec, hostname: `${job.metadata.name}-0` } };
    r = create(pod);
    const got = r.status === 0 ? getPod(name) : null;
    if (!check('kubectl create -f the pod of k8s/injected-job-v5litepod-16.yaml: injected through k8s/injector.yaml\'s webhook',
        got && (got.spec.initContainers || []).map((x) => x.name).join(',') === 'tpumesh-init,tpumesh-sidecar' ? [] : [r.stderr])) {
        inj.kill('SIGTERM');
        return;
    }
    check('the injected pod: Kubernetes schema, restricted profile, tpumesh wiring',
        [...k8s.schemaErrors(got, 'pod'), ...k8s.restrictedErrors(got.spec, 'pod'), ...tpm.podErrors(got.spec, got.metadata, 'pod')]);
    check('... with exactly the containers, volumes and trainer mount k8s/job-v5litepod-16.yaml spells out (its sidecar\'s TPUMESH_SELECTOR aside)', (() => {
        const [full] = readYaml('job-v5litepod-16.yaml').filter((o) => o.kind === 'Job');
        const want = JSON.parse(JSON.stringify(full.spec.template.spec));
        const side = want.initContainers.find((x) => x.name === 'tpumesh-sidecar');
        side.env = side.env.filter((x) => x.name !== 'TPUMESH_SELECTOR');
        const e = [];
        /* Quantities as the API server returns them (strings); mounts in any order. */
        const norm = (v) => JSON.stringify(canon(v)).replace(/"google\.com\/tpu":(\d+)/g, '"google.com/tpu":"$1"');
        const same = (a, b, what) => {
            if (norm(a) !== norm(b)) e.push(`${what}: ${norm(a)} != ${norm(b)}`);
        };
        const byName = (l) => [...(l || [])].sort((x, y) => x.name.localeCompare(y.name));
        same(got.spec.initContainers, want.initContainers, 'initContainers');
        for (const v of want.volumes.filter((x) => x.name.startsWith('tpumesh'))) {
            same(got.spec.volumes.find((x) => x.name === v.name), v, `volume ${v.name}`);
        }
        same(byName(got.spec.containers[0].volumeMounts), byName(want.containers[0].volumeMounts), 'trainer volumeMounts');
        return e;
    })());
    inj.kill('SIGTERM');
    await Promise.race([inj.exited, pr.sleep(pr.scaled(10000))]);
}

function canon(v) {
    if (Array.isArray(v)) return v.map(canon);
    if (v && typeof v === 'object') return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])]));
    return v;
}

main().catch((e) => check('injected.js completes', [e.stack || String(e)])).finally(pr.done);
