#!/usr/bin/env node
'use strict';
/*
 * validate.js - validation of tpumesh's Kubernetes manifests (k8s/) and Helm chart
 * (charts/tpumesh) without a kube-apiserver, the chart rendered by the real Helm 3 and Helm 4
 * that `make deps` unpacks ($BUILD/helm/<version>/helm, scripts/helm.sh). Prints TAP lines
 * ("ok N - ..." / "not ok N - ...") and exits 1 when a check failed.
 *
 *   BUILD=build node tests/validate/validate.js    (tests/integration/test_manifests.sh runs it)
 *
 * What it checks:
 *  - every object in k8s/ against the Kubernetes OpenAPI schemas (kubernetes-models) with
 *    strict field validation; the JobSet against our JobSet CRD schema and its Job
 *    templates against the core schemas;
 *  - RBAC grants only get/list/watch on pods and get on the owner kinds; every container passes the restricted Pod
 *    Security profile; tpumesh's containers follow docs/DESIGN.md (native sidecar, probes, no
 *    TPUs in the sidecar, requests/limits, volumes, annotations);
 *  - the examples' slice facts (v5litepod-16: 4 pods x 4 chips, 4x4, Indexed Job +
 *    headless Service; JobSet with two slices; legacy TPU Node);
 *  - the chart: Chart.yaml, every value documented, values.schema.json accepts the
 *    defaults and every values case and rejects fixtures/bad-values/, every include names a
 *    defined template, NOTES.txt shows the include lines;
 *  - with each Helm: `helm lint --strict` and `helm template` over a matrix of values (the
 *    defaults, charts/tpumesh/ci/, tests/helm/values/ - together they change every value -
 *    and the READMEs' values examples), every rendered object through the checks above; the
 *    test chart tests/helm/parent (tpumesh as a dependency) linted and rendered, its pods
 *    using the parent's release and tpumesh's values, the README's include lines rendered;
 *  - k8s/ agrees with `helm template` at default values (the tpumesh containers, volumes,
 *    mounts and ServiceAccount of each example; k8s/rbac.yaml; k8s/injector.yaml and
 *    k8s/injector-cert-manager.yaml = the injector's objects rendered for namespace
 *    tpumesh-system with injector.certManager.enabled=true, without Helm's labels); the
 *    label-only example is job-v5litepod-16.yaml without tpumesh's parts; cluster-wide
 *    objects only for the injector;
 *  - the validator itself rejects every fixtures/bad-manifests/ file for the stated reason.
 */
const fs = require('fs');
const path = require('path');
const YAML = require('yaml');
const Ajv = require('ajv');

const k8s = require('./lib/k8s');
const tpm = require('./lib/tpumesh');
const helmlib = require('./lib/helm');

const ROOT = path.resolve(__dirname, '..', '..');
const CHART = path.join(ROOT, 'charts', 'tpumesh');
const K8S = path.join(ROOT, 'k8s');
const FIX = path.join(__dirname, 'fixtures');

/* ---- TAP --------------------------------------------------------------------------- */
let n = 0;
let failed = 0;
function check(name, errs) {
    n++;
    if (!errs.length) {
        console.log(`ok ${n} - ${name}`);
        return true;
    }
    failed++;
    console.log(`not ok ${n} - ${name}`);
    for (const e of errs.slice(0, 25)) {
        console.log(`#   ${e}`);
    }
    if (errs.length > 25) {
        console.log(`#   ... ${errs.length - 25} more`);
    }
    return false;
}
function guard(fn) {
    try {
        return fn();
    } catch (e) {
        return [String(e && e.message ? e.message : e)];
    }
}

function readYamlDocs(file) {
    const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
    const errs = [];
    const objs = [];
    docs.forEach((d, i) => {
        for (const e of d.errors) {
            errs.push(`${path.relative(ROOT, file)} document ${i + 1}: ${e.message}`);
        }
        const o = d.toJS();
        if (o !== null && o !== undefined) {
            objs.push(o);
        }
    });
    return { objs, errs };
}
function parseYamlText(text, where) {
    const objs = [];
    YAML.parseAllDocuments(text).forEach((d, i) => {
        if (d.errors.length) {
            throw new Error(`${where} document ${i + 1}: ${d.errors[0].message}`);
        }
        const o = d.toJS();
        if (o !== null && o !== undefined) {
            objs.push(o);
        }
    });
    return objs;
}
function deepEqual(a, b) {
    return JSON.stringify(canon(a)) === JSON.stringify(canon(b));
}
function canon(v) {
    if (Array.isArray(v)) {
        return v.map(canon);
    }
    if (v && typeof v === 'object') {
        return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])]));
    }
    return v;
}
function diffPaths(a, b, where, out) {
    if (deepEqual(a, b)) {
        return out;
    }
    if (a && b && typeof a === 'object' && typeof b === 'object' && Array.isArray(a) === Array.isArray(b)) {
        const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
        for (const k of keys) {
            diffPaths(a[k], b[k], `${where}.${k}`, out);
        }
        return out;
    }
    out.push(`${where}: ${JSON.stringify(a)} != chart ${JSON.stringify(b)}`);
    return out;
}

/* ---- object checks shared by k8s/, the rendered chart and the bad fixtures ------------- */
const ajv = new Ajv({ allErrors: true, strict: true });
const jobsetSchema = JSON.parse(fs.readFileSync(path.join(__dirname, 'schemas', 'jobset.x-k8s.io_v1alpha2.json'), 'utf8'));
const validateJobSet = ajv.compile(jobsetSchema);

function schemaCheck(o, where) {
    if (o.apiVersion === 'jobset.x-k8s.io/v1alpha2' && o.kind === 'JobSet') {
        const errs = [];
        if (!validateJobSet(o)) {
            for (const e of validateJobSet.errors) {
                errs.push(`${where} JobSet${e.instancePath} ${e.message}${e.params && e.params.additionalProperty ? ` (${e.params.additionalProperty})` : ''}`);
            }
        }
        ((o.spec || {}).replicatedJobs || []).forEach((rj, i) => {
            const tpl = rj.template || {};
            errs.push(...k8s.embeddedErrors('batch/v1', 'Job', { metadata: { ...(tpl.metadata || {}), name: rj.name }, spec: tpl.spec },
                `${where} replicatedJobs[${i}].template`));
        });
        return errs;
    }
    return k8s.schemaErrors(o, where);
}

function objectChecks(o, where) {
    const res = {};
    res.schema = guard(() => schemaCheck(o, where));
    res.rbac = guard(() => k8s.rbacErrors(o, where));
    res.restricted = [];
    res.tpumesh = [];
    for (const p of k8s.podSpecs(o)) {
        res.restricted.push(...guard(() => k8s.restrictedErrors(p.spec, `${where} ${p.where}`)));
        res.tpumesh.push(...guard(() => tpm.podErrors(p.spec, p.meta, `${where} ${p.where}`)));
    }
    return res;
}

function label(o) {
    return `${o.kind} ${(o.metadata || {}).name}`;
}

function checkObjects(objs, prefix) {
    for (const o of objs) {
        const where = `${prefix} ${label(o)}`;
        const r = objectChecks(o, prefix);
        check(`${where}: valid against the Kubernetes schema (strict fields)`, r.schema);
        if (['Role', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding'].includes(o.kind)) {
            check(`${where}: RBAC grants only get/list/watch on pods, get on jobs/jobsets/statefulsets`, r.rbac);
        }
        if (k8s.podSpecs(o).length) {
            check(`${where}: every container passes the restricted Pod Security profile`, r.restricted);
            check(`${where}: tpumesh containers, volumes and annotations follow docs/DESIGN.md`, r.tpumesh);
        }
    }
}

/* ---- 1. k8s/ ------------------------------------------------------------------------- */
const manifests = {};
for (const f of fs.readdirSync(K8S).filter((x) => /\.ya?ml$/.test(x)).sort()) {
    const { objs, errs } = readYamlDocs(path.join(K8S, f));
    check(`k8s/${f}: well-formed YAML (${objs.length} objects)`, errs.concat(objs.length ? [] : ['no objects']));
    manifests[f] = objs;
    checkObjects(objs, `k8s/${f}`);
}
const allK8s = Object.values(manifests).flat();
/* Cluster-wide: only tpumesh-injector's webhook configuration and its namespace (the
 * injector has no permissions: no ClusterRole anywhere). */
check('k8s/: cluster-wide objects only in k8s/injector.yaml (the injector\'s namespace, webhook)',
    Object.entries(manifests).flatMap(([f, objs]) => objs
        .filter((o) => /^Cluster|^MutatingWebhook|^ValidatingWebhook|^Namespace$/.test(o.kind))
        .filter((o) => f !== 'injector.yaml' || !['MutatingWebhookConfiguration', 'Namespace'].includes(o.kind)
            || !(o.metadata.name === 'tpumesh-injector' || o.metadata.name === 'tpumesh-system' || o.metadata.name === 'tpumesh-injector-tpumesh-system'))
        .map((o) => `k8s/${f}: ${label(o)} is cluster-wide`)));
check('k8s/injector.yaml: the namespace enforces the restricted Pod Security profile; every other object is in it',
    guard(() => {
        const objs = (manifests['injector.yaml'] || []).concat(manifests['injector-cert-manager.yaml'] || []);
        const e = [];
        const ns = objs.find((o) => o.kind === 'Namespace');
        if (!ns) return ['no Namespace'];
        if ((ns.metadata.labels || {})['pod-security.kubernetes.io/enforce'] !== 'restricted') e.push('Namespace: pod-security.kubernetes.io/enforce is not restricted');
        for (const o of objs) {
            if (['Namespace', 'ClusterRole', 'ClusterRoleBinding', 'MutatingWebhookConfiguration'].includes(o.kind)) continue;
            if (o.metadata.namespace !== ns.metadata.name) e.push(`${label(o)}: metadata.namespace ${o.metadata.namespace}, want ${ns.metadata.name} (kubectl apply would put it in the current namespace)`);
        }
        return e;
    }));
function exampleInjected() {
    /* The label-only example is job-v5litepod-16.yaml without tpumesh's parts. */
    const errs = [];
    const [job] = find(manifests['injected-job-v5litepod-16.yaml'] || [], 'Job');
    const [full] = find(manifests['job-v5litepod-16.yaml'] || [], 'Job');
    if (!job || !full) return ['needs a Job in both files'];
    const tpl = job.spec.template;
    const pod = tpl.spec;
    if ((tpl.metadata.labels || {})['tpumesh.dev/inject'] !== 'true') errs.push('the pod template has no label tpumesh.dev/inject: "true"');
    const added = (pod.initContainers || []).map((c) => c.name).concat((pod.volumes || []).map((v) => v.name),
        pod.containers.flatMap((c) => (c.volumeMounts || []).map((m) => m.name))).filter((x) => x.startsWith('tpumesh'));
    if (added.length) errs.push(`the pod template spells out what the injector adds: ${[...new Set(added)].join(', ')}`);
    const want = JSON.parse(JSON.stringify(full.spec.template.spec));
    delete want.initContainers;
    want.volumes = want.volumes.filter((v) => !v.name.startsWith('tpumesh'));
    want.containers.forEach((c) => { c.volumeMounts = (c.volumeMounts || []).filter((m) => !m.name.startsWith('tpumesh')); });
    want.subdomain = pod.subdomain;
    diffPaths(pod, want, 'pod template (vs job-v5litepod-16.yaml without tpumesh)', errs);
    if (pod.subdomain !== job.metadata.name) errs.push('the subdomain is not the Job\'s headless Service');
    if (pod.serviceAccountName !== 'tpumesh') errs.push('serviceAccountName must be tpumesh (k8s/rbac.yaml)');
    return errs;
}

/* Slice facts of the examples. */
function find(objs, kind) {
    return objs.filter((o) => o.kind === kind);
}
function trainer(spec) {
    return (spec.containers || [])[0] || {};
}
function chips(topology) {
    return topology.split('x').reduce((a, b) => a * Number(b), 1);
}
function exampleJob() {
    const errs = [];
    const objs = manifests['job-v5litepod-16.yaml'] || [];
    const [svc] = find(objs, 'Service');
    const [job] = find(objs, 'Job');
    if (!svc || !job) {
        return ['needs a Service and a Job'];
    }
    const js = job.spec;
    const pod = js.template.spec;
    const ann = js.template.metadata.annotations || {};
    const ns = pod.nodeSelector || {};
    const perPod = Number(((trainer(pod).resources || {}).limits || {})['google.com/tpu']);
    const hosts = chips(ns['cloud.google.com/gke-tpu-topology'] || '0') / perPod;
    if (svc.spec.clusterIP !== 'None') errs.push('Service must be headless (clusterIP: None)');
    if (svc.spec.publishNotReadyAddresses !== true) errs.push('Service must publish not-ready addresses');
    if (svc.spec.selector['batch.kubernetes.io/job-name'] !== job.metadata.name) errs.push('Service must select the Job\'s pods');
    if (pod.subdomain !== svc.metadata.name) errs.push('pod subdomain must be the headless Service');
    if (js.completionMode !== 'Indexed') errs.push('Job must be Indexed');
    if (ns['cloud.google.com/gke-tpu-accelerator'] !== 'tpu-v5-lite-podslice') errs.push('accelerator selector must be tpu-v5-lite-podslice');
    if (chips(ns['cloud.google.com/gke-tpu-topology'] || '0') !== 16) errs.push('v5litepod-16 has 16 chips (topology 4x4)');
    if (perPod !== 4) errs.push(`each pod requests google.com/tpu: 4 (got ${perPod})`);
    if (js.completions !== hosts || js.parallelism !== hosts || hosts !== 4) errs.push(`completions and parallelism must be the host count ${hosts}`);
    if (ann['tpumesh.dev/expected-workers'] !== String(hosts)) errs.push('tpumesh.dev/expected-workers must be the host count');
    const script = (trainer(pod).command || []).concat(trainer(pod).args || []).join('\n');
    if (!/\/readyz/.test(script)) errs.push('the trainer waits for the sidecar (/readyz)');
    if (!/\.\s+"?\$d\/dtensor\.env|\.\s+\/var\/run\/tpumesh\/dtensor\.env/.test(script)) errs.push('the trainer sources dtensor.env');
    return errs;
}
function exampleJobSet() {
    const errs = [];
    const [js] = find(manifests['jobset-multislice.yaml'] || [], 'JobSet');
    if (!js) {
        return ['needs a JobSet'];
    }
    const rjs = js.spec.replicatedJobs;
    if (rjs.length !== 1 || rjs[0].replicas !== 2) errs.push('one replicated Job with replicas: 2 (two slices)');
    const job = rjs[0].template.spec;
    const pod = job.template.spec;
    const perPod = Number(((trainer(pod).resources || {}).limits || {})['google.com/tpu']);
    const hosts = chips(pod.nodeSelector['cloud.google.com/gke-tpu-topology']) / perPod;
    if (job.parallelism !== hosts || job.completions !== hosts) errs.push('parallelism = completions = hosts per slice');
    /* tpumesh.dev/expected-workers is the job's total for both programs (slices x hosts); left
     * out, the sidecar reads the count from the JobSet. */
    const total = String(hosts * rjs[0].replicas);
    const ew = job.template.metadata.annotations['tpumesh.dev/expected-workers'];
    if (ew !== undefined && ew !== total) errs.push('tpumesh.dev/expected-workers, when set, must be the total ' + total + ' (slices x hosts)');
    if (!js.spec.network || js.spec.network.enableDNSHostnames !== true) errs.push('network.enableDNSHostnames: true');
    if ((js.metadata.annotations || {})['alpha.jobset.sigs.k8s.io/exclusive-topology'] !== 'cloud.google.com/gke-nodepool') errs.push('one slice per node pool (exclusive-topology)');
    return errs;
}
function exampleLegacy() {
    const errs = [];
    const [job] = find(manifests['legacy-tpu-node.yaml'] || [], 'Job');
    if (!job) {
        return ['needs a Job'];
    }
    const pod = job.spec.template.spec;
    if (!(job.spec.template.metadata.annotations || {})['tf-version.cloud-tpus.google.com']) errs.push('needs the tf-version.cloud-tpus.google.com annotation');
    const lim = (trainer(pod).resources || {}).limits || {};
    if (!lim['cloud-tpus.google.com/v3']) errs.push('the trainer requests cloud-tpus.google.com/v3');
    if (JSON.stringify(pod).includes('google.com/tpu"')) errs.push('a legacy TPU Node pod does not request google.com/tpu');
    return errs;
}
check('k8s/job-v5litepod-16.yaml: v5litepod-16 slice, 4 pods x 4 chips, Indexed Job + headless Service', guard(exampleJob));
check('k8s/jobset-multislice.yaml: two slices, DNS hostnames, one node pool per slice', guard(exampleJobSet));
check('k8s/legacy-tpu-node.yaml: tf-version annotation and cloud-tpus.google.com/v3', guard(exampleLegacy));
check('k8s/injected-job-v5litepod-16.yaml: job-v5litepod-16.yaml with only the label tpumesh.dev/inject: "true" in place of tpumesh\'s parts', guard(exampleInjected));

/* ---- 2. the chart ---------------------------------------------------------------------- */
const chartMeta = YAML.parse(fs.readFileSync(path.join(CHART, 'Chart.yaml'), 'utf8'));
const defaults = YAML.parse(fs.readFileSync(path.join(CHART, 'values.yaml'), 'utf8'));
const version = fs.readFileSync(path.join(ROOT, 'VERSION'), 'utf8').trim();
check('chart: Chart.yaml is apiVersion v2, SemVer, appVersion = VERSION = image.tag', (() => {
    const e = [];
    if (chartMeta.apiVersion !== 'v2') e.push('apiVersion must be v2');
    if (chartMeta.name !== path.basename(CHART)) e.push('name must equal the directory name');
    if (!/^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$/.test(chartMeta.version || '')) e.push('version must be SemVer');
    if (String(chartMeta.appVersion) !== version) e.push(`appVersion ${chartMeta.appVersion} != VERSION ${version}`);
    if (defaults.image.tag !== version) e.push(`values image.tag ${defaults.image.tag} != VERSION ${version}`);
    return e;
})());

/* Every leaf value is documented: a comment right above it or above one of its parents. */
function undocumentedValues(text) {
    const lines = text.split('\n');
    const stack = [];
    const out = [];
    for (let i = 0; i < lines.length; i++) {
        const m = /^(\s*)([A-Za-z0-9_]+):(.*)$/.exec(lines[i]);
        if (!m) {
            continue;
        }
        const indent = m[1].length;
        while (stack.length && stack[stack.length - 1].indent >= indent) {
            stack.pop();
        }
        const documented = i > 0 && /^\s*#/.test(lines[i - 1]);
        const keyPath = stack.map((s) => s.key).concat(m[2]).join('.');
        const leaf = m[3].trim() !== '';
        if (leaf && !documented && !stack.some((s) => s.documented)) {
            out.push(`values.yaml:${i + 1}: ${keyPath} has no comment`);
        }
        stack.push({ indent, key: m[2], documented });
    }
    return out;
}
check('chart: every value in values.yaml is documented',
    undocumentedValues(fs.readFileSync(path.join(CHART, 'values.yaml'), 'utf8')));

check('chart: README.md lists every value with its default', (() => {
    const readme = fs.readFileSync(path.join(CHART, 'README.md'), 'utf8');
    const e = [];
    const leaves = (v, prefix) => Object.entries(v).flatMap(([k, x]) => {
        const p = prefix ? `${prefix}.${k}` : k;
        return x && typeof x === 'object' && !Array.isArray(x) && Object.keys(x).length ? leaves(x, p) : [[p, x]];
    });
    for (const [k, v] of leaves(defaults, '')) {
        const row = readme.split('\n').find((l) => l.startsWith(`| \`${k}\` |`));
        if (!row) {
            e.push(`${k} is not in charts/tpumesh/README.md`);
        } else if (!row.includes(`\`${typeof v === 'string' && (v === '' || /^[0-9.]+$/.test(v)) ? JSON.stringify(v) : (Array.isArray(v) ? '[]' : typeof v === 'object' ? '{}' : v)}\``)) {
            e.push(`${k}: README default differs from values.yaml (${JSON.stringify(v)})`);
        }
    }
    return e;
})());

const schema = JSON.parse(fs.readFileSync(path.join(CHART, 'values.schema.json'), 'utf8'));
let validateValues = null;
check('chart: values.schema.json compiles (JSON Schema draft-07, strict)', guard(() => {
    validateValues = new Ajv({ allErrors: true, strict: true }).compile(schema);
    return [];
}));
function schemaKeys(s, prefix, out) {
    for (const [k, v] of Object.entries(s.properties || {})) {
        const p = prefix ? `${prefix}.${k}` : k;
        if (v.type === 'object' && v.properties) {
            schemaKeys(v, p, out);
        } else {
            out.push(p);
        }
    }
    return out;
}
function valueKeys(v, prefix, out) {
    for (const [k, x] of Object.entries(v)) {
        const p = prefix ? `${prefix}.${k}` : k;
        if (x && typeof x === 'object' && !Array.isArray(x) && Object.keys(x).length && !['commonLabels', 'serviceAccount.annotations'].includes(p)) {
            valueKeys(x, p, out);
        } else {
            out.push(p);
        }
    }
    return out;
}
check('chart: the schema declares exactly the keys values.yaml documents', (() => {
    const s = new Set(schemaKeys(schema, '', []).filter((k) => k !== 'global'));
    const v = new Set(valueKeys(defaults, '', []));
    return [...s].filter((k) => !v.has(k)).map((k) => `schema key ${k} is not in values.yaml`)
        .concat([...v].filter((k) => !s.has(k)).map((k) => `values.yaml key ${k} is not in the schema`));
})());

/* Helm's merge of user values over the defaults: maps merge, anything else replaces,
 * null deletes the key. */
function helmMerge(base, over) {
    const out = JSON.parse(JSON.stringify(base));
    for (const [k, v] of Object.entries(over || {})) {
        if (v === null) {
            delete out[k];
        } else if (v && typeof v === 'object' && !Array.isArray(v) && out[k] && typeof out[k] === 'object' && !Array.isArray(out[k])) {
            out[k] = helmMerge(out[k], v);
        } else {
            out[k] = v;
        }
    }
    return out;
}
function valuesErrors(values) {
    if (!validateValues) {
        return ['schema did not compile'];
    }
    if (validateValues(values)) {
        const e = [];
        if (values.sidecar && values.sidecar.httpPort === values.sidecar.grpcPort) {
            e.push('sidecar.httpPort and sidecar.grpcPort must differ');
        }
        return e;
    }
    return validateValues.errors.map((e) => `${e.instancePath || '/'} ${e.message}${e.params && e.params.additionalProperty ? ` (${e.params.additionalProperty})` : ''}`);
}
check('chart: values.yaml passes values.schema.json', valuesErrors(defaults));

const ciDir = path.join(CHART, 'ci');
const ciValues = { 'defaults': {} };
for (const f of fs.readdirSync(ciDir).filter((x) => /\.ya?ml$/.test(x)).sort()) {
    ciValues[f] = YAML.parse(fs.readFileSync(path.join(ciDir, f), 'utf8')) || {};
    check(`chart: ci/${f} passes values.schema.json`, valuesErrors(helmMerge(defaults, ciValues[f])));
}
const badDir = path.join(FIX, 'bad-values');
for (const f of fs.readdirSync(badDir).filter((x) => /\.ya?ml$/.test(x)).sort()) {
    const text = fs.readFileSync(path.join(badDir, f), 'utf8');
    const expect = (/^# expect: (.+)$/m.exec(text) || [])[1];
    const errs = valuesErrors(helmMerge(defaults, YAML.parse(text) || {}));
    check(`chart: values.schema.json rejects fixtures/bad-values/${f} (${expect})`,
        !expect ? ['the fixture has no "# expect: <text>" line']
            : !errs.length ? ['accepted']
                : errs.some((e) => e.includes(expect)) ? [] : [`rejected, but not for "${expect}":`, ...errs]);
}

/* Static template checks: every include/template names a defined template; braces balance. */
const tplDir = path.join(CHART, 'templates');
const tplFiles = [];
(function walk(d) {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
        const p = path.join(d, e.name);
        if (e.isDirectory()) walk(p); else tplFiles.push(p);
    }
})(tplDir);
const tplText = Object.fromEntries(tplFiles.map((f) => [path.relative(CHART, f), fs.readFileSync(f, 'utf8')]));
const defined = new Set();
for (const t of Object.values(tplText)) {
    for (const m of t.matchAll(/\{\{-?\s*define\s+"([^"]+)"/g)) defined.add(m[1]);
}
check('chart: every include/template names a defined template', (() => {
    const e = [];
    for (const [f, t] of Object.entries(tplText)) {
        /* NOTES.txt prints include lines for the user inside {{ "{{" }} ... {{ "}}" }}. */
        const code = t.replace(/\{\{ "\{\{" \}\}[\s\S]*?\{\{ "\}\}" \}\}/g, '');
        for (const m of code.matchAll(/\b(include|template)\s+"([^"]+)"/g)) {
            if (!defined.has(m[2])) e.push(`${f}: ${m[1]} "${m[2]}" is not defined`);
        }
        const opens = (code.match(/\{\{/g) || []).length;
        const closes = (code.match(/\}\}/g) || []).length;
        if (opens !== closes) e.push(`${f}: ${opens} "{{" but ${closes} "}}"`);
    }
    return e;
})());
check('chart: the public named templates exist', ['tpumesh.initContainer', 'tpumesh.sidecar', 'tpumesh.volumes',
    'tpumesh.volumeMounts', 'tpumesh.serviceAccountName'].filter((x) => !defined.has(x)).map((x) => `${x} is not defined`));

/* ---- the chart rendered by the real Helm (3 and 4), over a matrix of values -------------- */
/* The matrix: the defaults, charts/tpumesh/ci/*.yaml, tests/helm/values/*.yaml (between them
 * every value values.yaml documents is changed at least once), and the values examples of the
 * READMEs (`--set` on a `helm install|upgrade|template ... charts/tpumesh` line, and yaml blocks
 * made only of the chart's top-level keys). */
const CASES = [{ name: 'defaults', values: {}, sets: [] }];
for (const f of Object.keys(ciValues).filter((x) => x !== 'defaults')) {
    CASES.push({ name: `ci/${f}`, values: ciValues[f], sets: [] });
}
const overDir = path.join(ROOT, 'tests', 'helm', 'values');
for (const f of fs.readdirSync(overDir).filter((x) => /\.ya?ml$/.test(x)).sort()) {
    CASES.push({ name: `tests/helm/values/${f}`, values: YAML.parse(fs.readFileSync(path.join(overDir, f), 'utf8')) || {}, sets: [] });
}
/* --set a.b=c (strings, numbers, booleans; ${VAR}/$VAR become "example") into an object. */
function setValue(obj, expr) {
    const eq = expr.indexOf('=');
    const keys = expr.slice(0, eq).split('.');
    let v = expr.slice(eq + 1).replace(/\$\{?[A-Za-z_][A-Za-z0-9_]*\}?/g, 'example');
    if (/^(true|false)$/.test(v)) v = v === 'true';
    else if (/^-?[0-9]+$/.test(v)) v = Number(v);
    let o = obj;
    for (const k of keys.slice(0, -1)) o = (o[k] = o[k] || {});
    o[keys[keys.length - 1]] = v;
    return obj;
}
for (const doc of ['README.md', path.join('charts', 'tpumesh', 'README.md')]) {
    const text = fs.readFileSync(path.join(ROOT, doc), 'utf8');
    const blocks = [...text.matchAll(/```(\w*)\n([\s\S]*?)```/g)];
    blocks.forEach((m, i) => {
        const body = m[2];
        const joined = body.replace(/\\\n\s*/g, ' ');
        for (const line of joined.split('\n')) {
            if (!/\bhelm\s+(install|upgrade|template)\b.*charts\/tpumesh\b/.test(line)) continue;
            const sets = [...line.matchAll(/--set(?:-string)?[ =](\S+)/g)].map((x) => x[1]);
            const vals = {};
            for (const x of sets) setValue(vals, x);
            CASES.push({ name: `${doc} block ${i + 1}: ${line.trim().slice(0, 60)}`, values: vals, sets: [] });
        }
        if (m[1] === 'yaml' && !body.includes('{{')) {
            let y = null;
            try {
                y = YAML.parse(body);
            } catch (e) {
                y = null;
            }
            if (y && typeof y === 'object' && !Array.isArray(y) && Object.keys(y).length &&
                Object.keys(y).every((k) => k in defaults)) {
                CASES.push({ name: `${doc} yaml block ${i + 1}`, values: y, sets: [] });
            }
        }
    });
}
for (const c of CASES.filter((x) => x.name.startsWith('tests/helm') || x.name.includes('README'))) {
    check(`chart: ${c.name} passes values.schema.json`, valuesErrors(helmMerge(defaults, c.values)));
}
check('chart: the values matrix changes every value values.yaml documents', (() => {
    const get = (o, k) => k.split('.').reduce((x, p) => (x && typeof x === 'object' ? x[p] : undefined), o);
    return valueKeys(defaults, '', []).filter((k) => !CASES.some((c) => {
        const v = get(helmMerge(defaults, c.values), k);
        return v !== undefined && JSON.stringify(v) !== JSON.stringify(get(defaults, k));
    })).map((k) => `${k}: no case in tests/helm/values/ or charts/tpumesh/ci/ sets it to another value`);
})());

/* tpumesh-injector's objects and the helm test's (app.kubernetes.io/component injector or
 * helm-test); k8s/ has none of them. */
function isInjector(o) {
    return ['injector', 'helm-test'].includes(((o.metadata || {}).labels || {})['app.kubernetes.io/component']);
}

/* ci/networkpolicy-values.yaml: what the optional NetworkPolicy must say. */
function networkPolicyErrors(objs) {
    /* The TPU pods' policy (with injector.enabled the injector's own comes first). */
    const np = objs.find((o) => o.kind === 'NetworkPolicy' && !/-injector$/.test(o.metadata.name));
    if (!np) return ['no NetworkPolicy rendered'];
    const e = [];
    const sel = { 'jobset.sigs.k8s.io/jobset-name': 'train' };
    const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
    const ing = np.spec.ingress || [];
    if (!same(np.spec.podSelector.matchLabels, sel)) e.push('podSelector is not the job label');
    if (!same(np.spec.policyTypes, ['Ingress'])) e.push('policyTypes is not [Ingress]');
    const own = ing[0] || {};
    const managed = { ...sel, 'tpumesh.dev/inject': 'true' };
    const peer = ((own.from || [])[0] || {}).podSelector || {};
    if (!same(own.from, [{ podSelector: { matchLabels: peer.matchLabels } }]) || !same(Object.entries(peer.matchLabels || {}).sort(), Object.entries(managed).sort())
        || own.ports) e.push('rule 1 does not admit the job\'s own tpumesh-managed pods (job labels + tpumesh.dev/inject) on every port');
    const mon = ing[1] || {};
    if (!same(mon.from, [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } }])
        || !same(mon.ports, [{ protocol: 'TCP', port: 9431 }])) e.push('rule 2 is not: namespace monitoring -> TCP 9431');
    if (ing.length !== 3) e.push(`${ing.length} ingress rules, want 3 (own pods, metrics, one extraIngress)`);
    return e;
}

/* Every rendered object through the same checks as k8s/, one TAP line per case. */
function checkRendered(objs, prefix) {
    const e = [];
    for (const o of objs) {
        const r = objectChecks(o, `${prefix} ${label(o)}`);
        e.push(...r.schema, ...r.rbac, ...r.restricted, ...r.tpumesh);
    }
    check(`${prefix}: ${objs.length} objects valid (Kubernetes schema, strict fields; RBAC; restricted Pod Security; tpumesh's containers)`, e);
}

const HELMS = helmlib.helms();
check('real Helm binaries are unpacked (Helm 3 and Helm 4)',
    HELMS.length >= 2 && HELMS.some((h) => h.version.startsWith('3.')) && HELMS.some((h) => h.version.startsWith('4.'))
        ? [] : [`found: ${HELMS.map((h) => h.version).join(', ') || 'none'}; run: make deps (scripts/helm.sh)`]);
/* The default rendering of the chart and of the parent test chart, per Helm. */
const rendered = {};
for (const h of HELMS) {
    const tag = `helm ${h.version}`;
    for (const c of CASES) {
        check(`${tag} lint --strict charts/tpumesh [${c.name}]`, guard(() => {
            helmlib.lint(h.bin, CHART, { values: c.values, sets: c.sets });
            return [];
        }));
        let objs = null;
        const errs = guard(() => {
            objs = parseYamlText(helmlib.template(h.bin, CHART, { values: c.values, sets: c.sets }), 'helm template');
            return [];
        });
        if (errs.length || !objs) {
            check(`${tag} template charts/tpumesh [${c.name}]`, errs);
            continue;
        }
        checkRendered(objs, `${tag} template charts/tpumesh [${c.name}]`);
        if (c.name === 'tests/helm/values/no-injector.yaml') {
            const np = objs.find((o) => o.kind === 'NetworkPolicy');
            const peer = np ? (((np.spec.ingress || [])[0] || {}).from || [])[0] : null;
            const want = { 'batch.kubernetes.io/job-name': 'trainer', 'example.com/tpumesh': 'on' };
            check(`${tag} [${c.name}]: the NetworkPolicy's peers carry networkPolicy.managedLabels instead of the injection label`,
                peer && JSON.stringify(Object.entries(peer.podSelector.matchLabels).sort()) === JSON.stringify(Object.entries(want).sort())
                    ? [] : [`peer: ${JSON.stringify(peer)}`]);
        }
        if (c.name === 'ci/networkpolicy-values.yaml') {
            check(`${tag} [${c.name}]: the NetworkPolicy admits the job's tpumesh-managed pods (any port, the relay's gRPC port among them), the metrics namespace on the HTTP port only, then extraIngress`, networkPolicyErrors(objs));
        }
        if (c.name === 'defaults') {
            rendered[h.version] = { chart: objs };
        }
    }
    /* What k8s/injector*.yaml must equal (section 3). */
    if (rendered[h.version]) {
        check(`${tag} template charts/tpumesh --namespace tpumesh-system --set injector.certManager.enabled=true --set injector.namespaceSelector.matchLabels.tpumesh\\.dev/injection=enabled (k8s/injector.yaml's source)`, guard(() => {
            rendered[h.version].injector = parseYamlText(helmlib.template(h.bin, CHART,
                { namespace: 'tpumesh-system', sets: ['injector.certManager.enabled=true', 'injector.namespaceSelector.matchLabels.tpumesh\\.dev/injection=enabled'] }), 'helm template');
            return [];
        }));
    }
    const d = rendered[h.version];
    if (d) {
        const kinds = d.chart.map((o) => o.kind).sort().join(',');
        check(`${tag} [defaults]: renders ServiceAccount, Role, RoleBinding, the helm test Pod and tpumesh-injector (Deployment, Service, PDB, webhook, Secret, ConfigMap, RBAC)`,
            kinds === 'ConfigMap,Deployment,MutatingWebhookConfiguration,Pod,Pod,PodDisruptionBudget,Role,Role,RoleBinding,RoleBinding,Secret,Service,ServiceAccount,ServiceAccount,ServiceAccount'
                ? [] : [`got ${kinds}`]);
        const testPods = d.chart.filter((o) => o.kind === 'Pod');
        check(`${tag} [defaults]: the test Pods (topology, injection) are helm test hooks`,
            testPods.length === 2 && testPods.every((p) => (p.metadata.annotations || {})['helm.sh/hook'] === 'test')
                ? [] : ['missing helm.sh/hook: test']);
        /* Nothing of helm test outlives a passing test: no Role that may create pods stays. */
        const hooks = d.chart.filter((o) => ((o.metadata || {}).annotations || {})['helm.sh/hook'] === 'test');
        check(`${tag} [defaults]: every helm test object (${hooks.length}) is deleted when the test succeeds (hook-succeeded)`,
            hooks.length === 5 ? hooks.filter((o) => !/(^|,)hook-succeeded(,|$)/.test(o.metadata.annotations['helm.sh/hook-delete-policy'] || ''))
                .map((o) => `${o.kind} ${o.metadata.name}: no hook-succeeded`) : [`${hooks.length} helm test objects, want 5`]);
    }
    /* The test chart with tpumesh as a dependency: lint, render, validate; with the release
     * named "tpumesh" and default values its Pods must be what k8s/ has (section 3). */
    const parent = helmlib.parentChart();
    check(`${tag} lint --strict tests/helm/parent (tpumesh as a dependency)`, guard(() => {
        helmlib.lint(h.bin, parent);
        return [];
    }));
    for (const [release, values] of [['tpumesh', {}], ['train', { tpumesh: { image: { repository: 'reg.example/t' } } }]]) {
        let objs = null;
        const errs = guard(() => {
            objs = parseYamlText(helmlib.template(h.bin, parent, { release, values }), 'helm template');
            return [];
        });
        const name = `${tag} template tests/helm/parent (release ${release})`;
        if (errs.length || !objs) {
            check(name, errs);
            continue;
        }
        checkRendered(objs, name);
        if (release === 'tpumesh' && d) {
            d.parent = objs;
        }
        if (release === 'train') {
            check(`${name}: the named templates use the parent's context and tpumesh's values`, (() => {
                const e = [];
                const sa = objs.find((o) => o.kind === 'ServiceAccount' && !isInjector(o));
                const pods = objs.filter((o) => o.kind === 'Pod' && !(o.metadata.annotations || {})['helm.sh/hook']);
                if (!sa || sa.metadata.name !== 'train-tpumesh') e.push(`the subchart's ServiceAccount is ${sa && sa.metadata.name}, want train-tpumesh`);
                for (const p of pods) {
                    if (p.spec.serviceAccountName !== 'train-tpumesh') e.push(`Pod ${p.metadata.name}: serviceAccountName ${p.spec.serviceAccountName}`);
                    for (const c of p.spec.initContainers || []) {
                        if (!String(c.image).startsWith('reg.example/t:')) e.push(`Pod ${p.metadata.name} ${c.name}: image ${c.image} ignores tpumesh.image.repository`);
                    }
                }
                if (!pods.length) e.push('no example Pods rendered');
                return e;
            })());
        }
    }
    /* The README's include lines, verbatim, in a pod of the test chart. */
    check(`${tag}: the README's pod template lines render in a chart that has tpumesh as a dependency`, guard(() => {
        const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
        const m = /```yaml\n(spec:\n[\s\S]*?include "tpumesh\.initContainer"[\s\S]*?)```/.exec(readme);
        if (!m) return ['README.md has no ```yaml block with spec: and the include lines'];
        const dir = path.join(path.dirname(parent), 'readme-chart');
        fs.rmSync(dir, { recursive: true, force: true });
        fs.cpSync(parent, dir, { recursive: true });
        fs.rmSync(path.join(dir, 'templates', 'examples.yaml'));
        fs.writeFileSync(path.join(dir, 'templates', 'readme.yaml'), `apiVersion: v1\nkind: Pod\nmetadata:\n  name: readme\n${m[1]}`);
        const objs = parseYamlText(helmlib.template(h.bin, dir, {}), 'helm template');
        const pod = objs.find((o) => o.kind === 'Pod' && o.metadata.name === 'readme');
        const e = [];
        if (!pod) return ['no Pod rendered'];
        const names = (pod.spec.initContainers || []).map((c) => c.name).join(',');
        if (names !== 'tpumesh-init,tpumesh-sidecar') e.push(`initContainers ${names}`);
        if (pod.spec.serviceAccountName !== 'tpumesh') e.push(`serviceAccountName ${pod.spec.serviceAccountName}`);
        e.push(...schemaCheck(pod, 'README pod'));
        return e;
    }));
    /* Refusals that say why: each must fail, with a message that names the rule. */
    const aliasChart = path.join(path.dirname(parent), 'alias-chart');
    fs.rmSync(aliasChart, { recursive: true, force: true });
    fs.cpSync(parent, aliasChart, { recursive: true });
    const cy = path.join(aliasChart, 'Chart.yaml');
    fs.writeFileSync(cy, fs.readFileSync(cy, 'utf8').replace(/(repository: file:.*\n)/, '$1    alias: mesh\n'));
    const refusals = [
        ['a reserved sidecar.httpPort: values.schema.json says why',
            () => helmlib.template(h.bin, CHART, { sets: ['sidecar.httpPort=8476'] }),
            /a port other than 8470-8476, 8482, 8080, 9470 and 9476 for sidecar\.httpPort \(TPU software uses those ports in the pod network namespace\)/],
        ['a reserved sidecar.grpcPort: values.schema.json says why',
            () => helmlib.template(h.bin, CHART, { sets: ['sidecar.grpcPort=8080'] }),
            /a port other than 8470-8476, 8482, 8080, 9470 and 9476 for sidecar\.grpcPort/],
        ['equal probe and gRPC ports: refused, they must be distinct',
            () => helmlib.template(h.bin, CHART, { sets: ['sidecar.httpPort=9500', 'sidecar.grpcPort=9500'] }),
            /sidecar\.httpPort and sidecar\.grpcPort are both 9500: the probe and gRPC ports must be distinct/],
        ['image.repository with an unset $PROJECT (an empty path segment): refused, naming the likely cause',
            () => helmlib.template(h.bin, CHART, { sets: ['image.repository=us-docker.pkg.dev//tpumesh/tpumesh'] }),
            /image\.repository "us-docker\.pkg\.dev\/\/tpumesh\/tpumesh" has an empty path segment: is a shell variable in it unset \(e\.g\. \$PROJECT/],
        ['image.repository with a tag or capitals: refused, saying what a repository is',
            () => helmlib.template(h.bin, CHART, { sets: ['image.repository=Reg.example/TPUmesh'] }),
            /image\.repository "Reg\.example\/TPUmesh" is not an image repository: lowercase registry host/],
        ['an image digest that is not sha256:<64 hex>: values.schema.json refuses it',
            () => helmlib.template(h.bin, CHART, { sets: ['image.digest=sha256:abc'] }),
            /image\.digest|digest/],
        ['a dependency with alias: refused, aliases are not supported',
            () => helmlib.template(h.bin, aliasChart, {}),
            /dependency with alias: "mesh"; aliases are not supported/],
        ['as a dependency on Kubernetes 1.28: the kubeVersion floor holds',
            () => helmlib.template(h.bin, parent, { kubeVersion: '1.28.3' }),
            /tpumesh needs Kubernetes 1\.29 or later \(native sidecars[^)]*\); the target cluster is v1\.28\.3/],
        ['installed itself on Kubernetes 1.28: Chart.yaml kubeVersion refuses it',
            () => helmlib.template(h.bin, CHART, { kubeVersion: '1.28.3' }),
            /requires kubeVersion: >=1\.29\.0-0/],
    ];
    for (const [what, fn, want] of refusals) {
        check(`${tag}: ${what}`, (() => {
            try {
                fn();
            } catch (e) {
                return want.test(e.message) ? [] : [`message does not match ${want}: ${e.message}`];
            }
            return ['rendered without an error'];
        })());
    }
    check(`${tag}: image.digest: every tpumesh container, the injector's and the ones it injects (its ConfigMap), is pulled as repository@sha256:<64 hex>, no tag`, guard(() => {
        const want = `us-docker.pkg.dev/p/tpumesh/tpumesh@sha256:${'ab'.repeat(32)}`;
        const objs = parseYamlText(helmlib.template(h.bin, CHART, { sets: ['image.repository=us-docker.pkg.dev/p/tpumesh/tpumesh',
            `image.digest=sha256:${'ab'.repeat(32)}`] }), 'helm template');
        const e = [];
        const specs = objs.flatMap((o) => (o.kind === 'Pod' ? [o.spec] : o.kind === 'Deployment' ? [o.spec.template.spec] : []));
        const images = specs.flatMap((sp) => [...(sp.initContainers || []), ...sp.containers].map((c) => c.image))
            .filter((i) => /tpumesh/.test(i));
        if (images.length < 4) e.push(`only ${images.length} tpumesh containers rendered`);
        for (const i of images) if (i !== want) e.push(`container image ${i}`);
        const cm = objs.find((o) => o.kind === 'ConfigMap' && /-injector$/.test(o.metadata.name));
        const injected = cm ? [...cm.data['config.yaml'].matchAll(/image: "?([^"\s]+)"?/g)].map((m) => m[1]) : [];
        if (injected.length !== 2 || injected.some((i) => i !== want)) e.push(`injected images ${JSON.stringify(injected)}`);
        return e;
    }));
    check(`${tag}: serviceAccount.create=false without a name binds <release>-tpumesh (values.yaml), not "default"`, guard(() => {
        const objs = parseYamlText(helmlib.template(h.bin, CHART, { release: 'train', sets: ['serviceAccount.create=false'] }), 'helm template');
        const e = [];
        if (objs.some((o) => o.kind === 'ServiceAccount' && o.metadata.name === 'train-tpumesh')) e.push('the ServiceAccount train-tpumesh was rendered');
        const rb = objs.find((o) => o.kind === 'RoleBinding' && o.roleRef && o.roleRef.name === 'train-tpumesh');
        const sub = rb && rb.subjects && rb.subjects[0];
        if (!sub || sub.name !== 'train-tpumesh') e.push(`RoleBinding subject ${sub && sub.name}, want train-tpumesh`);
        return e;
    }));
}
check('chart: NOTES.txt shows the include line of every public named template', (() => {
    const notes = fs.readFileSync(path.join(CHART, 'templates', 'NOTES.txt'), 'utf8');
    return ['tpumesh.initContainer', 'tpumesh.sidecar', 'tpumesh.volumes', 'tpumesh.volumeMounts', 'tpumesh.serviceAccountName']
        .filter((t) => !notes.includes(`include "${t}"`)).map((t) => `no include "${t}"`);
})());

/* ---- 3. k8s/ agrees with `helm template` at default values ------------------------------ */
/* The test chart's Pods (release "tpumesh", default values) carry what the named templates
 * give for each example's options (tests/helm/parent/values.yaml). */
for (const [ver, d] of Object.entries(rendered)) {
    if (!d.parent) continue;
    const podOf = (name) => d.parent.find((o) => o.kind === 'Pod' && o.metadata.name === name);
    for (const f of ['job-v5litepod-16.yaml', 'jobset-multislice.yaml', 'legacy-tpu-node.yaml']) {
        const errs = guard(() => {
            const e = [];
            const want = podOf(f.replace(/\.yaml$/, ''));
            if (!want) return [`tests/helm/parent renders no Pod ${f.replace(/\.yaml$/, '')}`];
            const specs = (manifests[f] || []).flatMap((o) => k8s.podSpecs(o));
            if (!specs.length) e.push(`${f}: no pod template`);
            for (const { spec, where } of specs) {
                const mine = (spec.initContainers || []).filter((c) => c.name === 'tpumesh-init' || c.name === 'tpumesh-sidecar');
                diffPaths(mine, want.spec.initContainers, `${where}.initContainers`, e);
                for (const v of want.spec.volumes) {
                    diffPaths((spec.volumes || []).find((x) => x.name === v.name), v, `${where}.volumes ${v.name}`, e);
                }
                for (const m of trainer(want.spec).volumeMounts) {
                    diffPaths((trainer(spec).volumeMounts || []).find((x) => x.name === m.name), m, `${where}.trainer.volumeMounts ${m.name}`, e);
                }
                if (spec.serviceAccountName !== want.spec.serviceAccountName) {
                    e.push(`${where}.serviceAccountName ${spec.serviceAccountName} != chart ${want.spec.serviceAccountName}`);
                }
            }
            return e;
        });
        check(`k8s/${f} has exactly the tpumesh parts of helm ${ver} template at default values`, errs);
    }
    if (d.injector) {
        check(`k8s/injector.yaml and k8s/injector-cert-manager.yaml equal helm ${ver} template's injector objects (namespace tpumesh-system, injector.certManager.enabled=true, namespaces labelled tpumesh.dev/injection=enabled; without Helm labels and the config checksum)`, guard(() => {
            const e = [];
            const mine = (manifests['injector.yaml'] || []).concat(manifests['injector-cert-manager.yaml'] || [])
                .filter((o) => o.kind !== 'Namespace');
            const strip = (o, ns) => {
                const c = JSON.parse(JSON.stringify(o));
                delete c.metadata.labels['helm.sh/chart'];
                delete c.metadata.labels['app.kubernetes.io/managed-by'];
                if (ns && !['ClusterRole', 'ClusterRoleBinding', 'MutatingWebhookConfiguration'].includes(c.kind)) c.metadata.namespace = ns;
                if (c.kind === 'Deployment') {
                    delete c.spec.template.metadata.annotations['checksum/config'];
                    if (!Object.keys(c.spec.template.metadata.annotations).length) delete c.spec.template.metadata.annotations;
                }
                return c;
            };
            const theirs = d.injector.filter((o) => ((o.metadata || {}).labels || {})['app.kubernetes.io/component'] === 'injector');
            for (const o of theirs) {
                const m = mine.find((x) => x.kind === o.kind && x.metadata.name === o.metadata.name);
                if (!m) e.push(`k8s/ has no ${label(o)}`);
                else diffPaths(m, strip(o, 'tpumesh-system'), `k8s/ ${label(o)}`, e);
            }
            for (const m of mine) {
                if (!theirs.some((o) => o.kind === m.kind && o.metadata.name === m.metadata.name)) e.push(`${label(m)} is in k8s/ but not in the chart`);
            }
            return e;
        }));
    }
    check(`k8s/rbac.yaml equals helm ${ver} template's ServiceAccount, Role and RoleBinding (without Helm labels)`, guard(() => {
        const e = [];
        const strip = (o) => {
            const c = JSON.parse(JSON.stringify(o));
            delete c.metadata.labels['helm.sh/chart'];
            delete c.metadata.labels['app.kubernetes.io/managed-by'];
            return c;
        };
        for (const o of d.chart.filter((x) => ['ServiceAccount', 'Role', 'RoleBinding'].includes(x.kind) && !isInjector(x))) {
            const mine = (manifests['rbac.yaml'] || []).find((x) => x.kind === o.kind);
            if (!mine) e.push(`k8s/rbac.yaml has no ${o.kind}`);
            else diffPaths(mine, strip(o), `k8s/rbac.yaml ${o.kind}`, e);
        }
        return e;
    }));
}

/* ---- 4. the validator rejects known-bad manifests -------------------------------------- */
const badM = path.join(FIX, 'bad-manifests');
for (const f of fs.readdirSync(badM).filter((x) => /\.ya?ml$/.test(x)).sort()) {
    const text = fs.readFileSync(path.join(badM, f), 'utf8');
    const expect = (/^# expect: (.+)$/m.exec(text) || [])[1];
    const errs = [];
    for (const o of parseYamlText(text, f)) {
        const r = objectChecks(o, f);
        errs.push(...r.schema, ...r.rbac, ...r.restricted, ...r.tpumesh);
    }
    check(`validator rejects fixtures/bad-manifests/${f} (${expect})`,
        !expect ? ['the fixture has no "# expect: <text>" line']
            : !errs.length ? ['accepted']
                : errs.some((x) => x.includes(expect)) ? [] : [`rejected, but not for "${expect}":`, ...errs]);
}

console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
