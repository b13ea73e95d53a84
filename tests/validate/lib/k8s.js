'use strict';
/*
 * k8s.js - offline checks of Kubernetes objects.
 *
 * schemaErrors(obj)  validates against the Kubernetes OpenAPI schemas compiled into the
 *                    npm package kubernetes-models (types, required fields, enums, formats)
 *                    and, like `kubectl apply` (strict field validation, the default since
 *                    kubectl 1.27), rejects unknown fields; the field lists come from the
 *                    package's type declarations, generated from the same OpenAPI spec.
 * podSpecs(obj)      every pod spec inside an object (Pod, Job, JobSet templates).
 * restrictedErrors   the restricted Pod Security profile plus
 *                    readOnlyRootFilesystem, for a pod spec.
 * rbacErrors         what tpumesh may be granted: pods get/list/watch and get on jobs.batch,
 *                    jobsets.jobset.x-k8s.io, statefulsets.apps, in a namespace.
 * Every function returns a list of error strings ("" list = fine) naming the path.
 */
const fs = require('fs');
const path = require('path');

const MODELS = path.dirname(require.resolve('kubernetes-models/package.json'));
const APIMACHINERY = path.dirname(require.resolve('@kubernetes-models/apimachinery/package.json'));

/* ---- field lists from the type declarations -------------------------------------- */
const ifaceCache = new Map();

function dtsPath(fromFile, spec) {
    if (spec.startsWith('./') || spec.startsWith('../')) {
        return path.resolve(path.dirname(fromFile), spec + '.d.ts');
    }
    const m = /^@kubernetes-models\/apimachinery\/(.*)$/.exec(spec);
    if (m) {
        return path.join(APIMACHINERY, m[1] + '.d.ts');
    }
    return null;
}

/* Parse the first `export interface` of a .d.ts: { fields: {name: {kind, type}} } or null
 * when the file declares only a type alias (Quantity, Time, IntOrString: no sub-fields). */
function loadInterface(file) {
    if (ifaceCache.has(file)) {
        return ifaceCache.get(file);
    }
    const src = fs.readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\//g, '');
    const imports = {};
    for (const m of src.matchAll(/import \{([^}]+)\} from "([^"]+)"/g)) {
        for (const part of m[1].split(',')) {
            const p = part.trim().split(/\s+as\s+/);
            const local = (p[1] || p[0]).trim();
            if (local) {
                imports[local] = dtsPath(file, m[2]);
            }
        }
    }
    const head = /export interface (\w+)(?: extends [^{]+)? \{\n/.exec(src);
    if (!head) {
        ifaceCache.set(file, null);
        return null;
    }
    const fields = {};
    const lines = src.slice(head.index + head[0].length).split('\n');
    let depth = 1;
    let pendingMap = null;
    for (const line of lines) {
        if (depth === 1) {
            const f = /^\s*"([^"]+)"\??: (.+?);?\s*$/.exec(line);
            if (f) {
                const t = f[2];
                if (t === '{') {
                    pendingMap = f[1];
                } else {
                    const arr = /^Array<(\w+)>$/.exec(t);
                    fields[f[1]] = arr ? { kind: 'array', type: arr[1] } : { kind: 'one', type: t };
                }
            }
        } else if (depth === 2 && pendingMap) {
            const v = /^\s*\[key: string\]: (.+?);\s*$/.exec(line);
            if (v) {
                const arr = /^Array<(\w+)>$/.exec(v[1]);
                fields[pendingMap] = { kind: 'map', type: arr ? null : v[1] };
            }
        }
        for (const c of line) {
            if (c === '{') {
                depth++;
            } else if (c === '}') {
                depth--;
            }
        }
        if (depth === 1) {
            pendingMap = null;
        }
        if (depth === 0) {
            break;
        }
    }
    const res = { fields, imports, file };
    ifaceCache.set(file, res);
    return res;
}

function typeIface(iface, type) {
    if (!type || !iface.imports[type]) {
        return null;
    }
    const f = iface.imports[type];
    return f && fs.existsSync(f) ? loadInterface(f) : null;
}

function unknownFields(obj, iface, where, out) {
    if (!iface || obj === null || typeof obj !== 'object' || Array.isArray(obj)) {
        return;
    }
    for (const [k, v] of Object.entries(obj)) {
        const f = iface.fields[k];
        if (!f) {
            out.push(`${where}: unknown field "${k}" (not in ${path.basename(iface.file, '.d.ts')})`);
            continue;
        }
        const sub = typeIface(iface, f.type);
        if (!sub) {
            continue;
        }
        if (f.kind === 'array' && Array.isArray(v)) {
            v.forEach((e, i) => unknownFields(e, sub, `${where}.${k}[${i}]`, out));
        } else if (f.kind === 'map' && v && typeof v === 'object') {
            for (const [mk, mv] of Object.entries(v)) {
                unknownFields(mv, sub, `${where}.${k}.${mk}`, out);
            }
        } else if (f.kind === 'one') {
            unknownFields(v, sub, `${where}.${k}`, out);
        }
    }
}

/* apiVersion + kind -> the package's module directory and class name. */
function modelFor(apiVersion, kind) {
    const dir = apiVersion.includes('/') ? apiVersion : apiVersion;
    const base = path.join(MODELS, dir, kind);
    if (!fs.existsSync(base + '.js') || !fs.existsSync(base + '.d.ts')) {
        return null;
    }
    return { cls: require(base + '.js')[kind], dts: base + '.d.ts' };
}

/* Schema errors of a built-in object; JobSet and other custom resources are not built in. */
/* cert-manager's CRDs are not in kubernetes-models: the fields the chart uses, from
 * cert-manager.io/v1 (Certificate: secretName, dnsNames, issuerRef {name, kind, group};
 * Issuer: exactly one issuer type, here selfSigned). Unknown top-level spec keys are errors. */
function certManagerErrors(obj, where) {
    const out = [];
    const spec = obj.spec || {};
    const md = obj.metadata || {};
    if (!md.name) out.push(`${where}: metadata.name is required`);
    if (obj.kind === 'Certificate') {
        const known = ['secretName', 'dnsNames', 'issuerRef', 'duration', 'renewBefore', 'commonName', 'ipAddresses', 'usages', 'privateKey'];
        for (const k of Object.keys(spec)) if (!known.includes(k)) out.push(`${where}: Certificate spec.${k} is not a cert-manager.io/v1 field`);
        if (!spec.secretName) out.push(`${where}: Certificate spec.secretName is required`);
        if (!Array.isArray(spec.dnsNames) || !spec.dnsNames.length) out.push(`${where}: Certificate spec.dnsNames is empty`);
        const ir = spec.issuerRef || {};
        if (!ir.name || !['Issuer', 'ClusterIssuer'].includes(ir.kind) || (ir.group && ir.group !== 'cert-manager.io')) {
            out.push(`${where}: Certificate spec.issuerRef must name an Issuer or ClusterIssuer of cert-manager.io, got ${JSON.stringify(ir)}`);
        }
    } else if (obj.kind === 'Issuer' || obj.kind === 'ClusterIssuer') {
        const types = ['selfSigned', 'ca', 'acme', 'vault', 'venafi'].filter((k) => k in spec);
        if (types.length !== 1) out.push(`${where}: ${obj.kind} needs exactly one issuer type, got ${JSON.stringify(Object.keys(spec))}`);
    } else {
        out.push(`${where}: cert-manager.io/v1 ${obj.kind} is not checked by this validator`);
    }
    return out;
}

function schemaErrors(obj, where) {
    const out = [];
    if (!obj || typeof obj.apiVersion !== 'string' || typeof obj.kind !== 'string') {
        return [`${where}: not a Kubernetes object (apiVersion and kind are required)`];
    }
    if (obj.apiVersion === 'cert-manager.io/v1') {
        return certManagerErrors(obj, where);
    }
    const m = modelFor(obj.apiVersion, obj.kind);
    if (!m) {
        return [`${where}: ${obj.apiVersion} ${obj.kind} is not a built-in kind known to kubernetes-models`];
    }
    try {
        new m.cls(obj).validate();
    } catch (e) {
        for (const line of String(e.message).split(/, (?=data)/)) {
            out.push(`${where}: ${line.replace(/^data/, obj.kind)}`);
        }
    }
    unknownFields(obj, loadInterface(m.dts), `${where} ${obj.kind}`, out);
    return out;
}

/* Validate an embedded object (e.g. a JobSet's Job template) as a given built-in kind. */
function embeddedErrors(apiVersion, kind, body, where) {
    return schemaErrors({ apiVersion, kind, ...body }, where);
}

/* ---- pod specs ------------------------------------------------------------------- */
function podSpecs(obj) {
    const res = [];
    if (!obj || !obj.kind) {
        return res;
    }
    const t = obj.spec || {};
    switch (obj.kind) {
    case 'Pod':
        res.push({ where: 'spec', spec: t, meta: obj.metadata || {} });
        break;
    case 'Job':
    case 'Deployment':
    case 'StatefulSet':
    case 'DaemonSet':
        if (t.template) {
            res.push({ where: 'spec.template.spec', spec: t.template.spec || {}, meta: t.template.metadata || {} });
        }
        break;
    case 'JobSet':
        (t.replicatedJobs || []).forEach((rj, i) => {
            const tpl = ((rj.template || {}).spec || {}).template || {};
            res.push({ where: `spec.replicatedJobs[${i}].template.spec.template.spec`, spec: tpl.spec || {},
                meta: tpl.metadata || {} });
        });
        break;
    default:
        break;
    }
    return res;
}

function allContainers(spec) {
    return [
        ...(spec.initContainers || []).map((c, i) => ({ c, where: `initContainers[${i}] ${c.name}` })),
        ...(spec.containers || []).map((c, i) => ({ c, where: `containers[${i}] ${c.name}` })),
    ];
}

/* restricted Pod Security Standard (kubernetes.io "Pod Security Standards")
 * + readOnlyRootFilesystem, which tpumesh requires of itself. */
const RESTRICTED_VOLUMES = ['configMap', 'csi', 'downwardAPI', 'emptyDir', 'ephemeral',
    'persistentVolumeClaim', 'projected', 'secret'];

function restrictedErrors(spec, where) {
    const out = [];
    const psc = spec.securityContext || {};
    for (const k of ['hostNetwork', 'hostPID', 'hostIPC']) {
        if (spec[k]) {
            out.push(`${where}: ${k} is not allowed`);
        }
    }
    (spec.volumes || []).forEach((v, i) => {
        const types = Object.keys(v).filter((k) => k !== 'name');
        for (const t of types) {
            if (!RESTRICTED_VOLUMES.includes(t)) {
                out.push(`${where}.volumes[${i}] ${v.name}: volume type ${t} is not allowed`);
            }
        }
    });
    if (psc.runAsUser === 0) {
        out.push(`${where}.securityContext.runAsUser: 0 is not allowed`);
    }
    for (const { c, where: cw } of allContainers(spec)) {
        const sc = c.securityContext || {};
        const w = `${where}.${cw}`;
        const nonRoot = sc.runAsNonRoot !== undefined ? sc.runAsNonRoot : psc.runAsNonRoot;
        if (nonRoot !== true) {
            out.push(`${w}: runAsNonRoot must be true (container or pod securityContext)`);
        }
        if (sc.runAsUser === 0) {
            out.push(`${w}: runAsUser 0 is not allowed`);
        }
        if (sc.privileged) {
            out.push(`${w}: privileged is not allowed`);
        }
        if (sc.allowPrivilegeEscalation !== false) {
            out.push(`${w}: allowPrivilegeEscalation must be false`);
        }
        if (sc.readOnlyRootFilesystem !== true) {
            out.push(`${w}: readOnlyRootFilesystem must be true`);
        }
        const caps = sc.capabilities || {};
        if (!(caps.drop || []).includes('ALL')) {
            out.push(`${w}: capabilities.drop must include ALL`);
        }
        for (const a of caps.add || []) {
            if (a !== 'NET_BIND_SERVICE') {
                out.push(`${w}: capability ${a} may not be added`);
            }
        }
        const sp = (sc.seccompProfile || psc.seccompProfile || {}).type;
        if (sp !== 'RuntimeDefault' && sp !== 'Localhost') {
            out.push(`${w}: seccompProfile.type must be RuntimeDefault or Localhost`);
        }
        for (const p of c.ports || []) {
            if (p.hostPort) {
                out.push(`${w}: hostPort is not allowed`);
            }
        }
    }
    return out;
}

/* Resources: requests and limits of cpu and memory on tpumesh's own containers. */
function resourceErrors(c, where) {
    const out = [];
    const r = c.resources || {};
    for (const kind of ['requests', 'limits']) {
        for (const res of ['cpu', 'memory']) {
            if (!r[kind] || r[kind][res] === undefined) {
                out.push(`${where}: resources.${kind}.${res} must be set`);
            }
        }
    }
    return out;
}

/* RBAC: only a namespaced Role with pods get/list/watch, bound to a ServiceAccount. */
const ALLOWED_VERBS = ['get', 'list', 'watch'];

function rbacErrors(obj, where) {
    const out = [];
    /* Nothing cluster-wide: tpumesh-injector asks the API server nothing, the sidecar's
     * grants are namespaced. */
    if (obj.kind === 'ClusterRole' || obj.kind === 'ClusterRoleBinding') {
        out.push(`${where}: tpumesh grants nothing cluster-wide (no ${obj.kind}); the sidecar's Role is namespaced`);
        return out;
    }
    /* The injection test (helm test hook) may create pods, as a dry run; nothing else. */
    const hook = ((obj.metadata || {}).annotations || {})['helm.sh/hook'] === 'test';
    if (obj.kind === 'Role' && hook) {
        const want = JSON.stringify([{ apiGroups: [''], resources: ['pods'], verbs: ['create'] }]);
        if (JSON.stringify(obj.rules) !== want) {
            out.push(`${where}: a helm test Role may only grant create on pods, got ${JSON.stringify(obj.rules)}`);
        }
        return out;
    }
    if (obj.kind === 'Role') {
        const rules = obj.rules || [];
        if (!rules.length) {
            out.push(`${where}: Role has no rules`);
        }
        /* Exactly these rules: pods get/list/watch (the watch), get on the three owner
         * kinds (the expected worker count). */
        const want = {'/pods': ALLOWED_VERBS, 'batch/jobs': ['get'], 'jobset.x-k8s.io/jobsets': ['get'],
            'apps/statefulsets': ['get']};
        const seen = new Set();
        rules.forEach((r, i) => {
            const w = `${where}.rules[${i}]`;
            const groups = r.apiGroups || [], resources = r.resources || [];
            if (groups.length !== 1 || resources.length !== 1) {
                out.push(`${w}: one apiGroup and one resource per rule, got ${JSON.stringify(groups)} ${JSON.stringify(resources)}`);
                return;
            }
            const key = `${groups[0]}/${resources[0]}`;
            if (!(key in want)) {
                out.push(`${w}: ${resources[0]} in API group "${groups[0]}" is not expected (only pods, jobs.batch, jobsets.jobset.x-k8s.io, statefulsets.apps)`);
                return;
            }
            seen.add(key);
            const verbs = (r.verbs || []).slice().sort();
            if (JSON.stringify(verbs) !== JSON.stringify(want[key])) {
                out.push(`${w}: verbs on ${key} must be exactly ${want[key].join(', ')}, got ${JSON.stringify(r.verbs)}`);
            }
            for (const k of ['resourceNames', 'nonResourceURLs']) {
                if (r[k]) {
                    out.push(`${w}: ${k} is not expected`);
                }
            }
        });
        for (const key of Object.keys(want)) {
            if (!seen.has(key)) out.push(`${where}: no rule for ${key}`);
        }
    }
    if (obj.kind === 'RoleBinding') {
        if (!obj.roleRef || obj.roleRef.kind !== 'Role') {
            out.push(`${where}: roleRef must name a Role`);
        }
        for (const s of obj.subjects || []) {
            if (s.kind !== 'ServiceAccount') {
                out.push(`${where}: subject ${s.kind} ${s.name} is not a ServiceAccount`);
            }
        }
    }
    return out;
}

module.exports = { schemaErrors, embeddedErrors, podSpecs, allContainers, restrictedErrors,
    resourceErrors, rbacErrors, loadInterface };
