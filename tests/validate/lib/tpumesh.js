'use strict';
/*
 * tpumesh.js - checks specific to tpumesh's two containers, its volumes and its pod
 * annotations (docs/DESIGN.md §1, §4, §6).
 * Each function returns a list of error strings naming the path.
 */
const { resourceErrors } = require('./k8s');

/* Ports TPU software uses in the pod's network namespace (docs/DESIGN.md §6). */
const TPU_PORTS = [8080, 8470, 8471, 8472, 8473, 8474, 8475, 8476, 8482, 9470, 9476];
const INIT = 'tpumesh-init';
const SIDECAR = 'tpumesh-sidecar';

function tpuResources(c) {
    const r = c.resources || {};
    const out = {};
    for (const kind of ['requests', 'limits']) {
        for (const [k, v] of Object.entries(r[kind] || {})) {
            if (/(^|\/)(preemptible-)?(tpu|v[0-9]+)$/.test(k) && /tpu/.test(k)) {
                out[`${kind}.${k}`] = Number(v);
            }
        }
    }
    return out;
}

function envValue(c, name) {
    const e = (c.env || []).find((x) => x.name === name);
    return e ? e : null;
}

function probeErrors(c, probe, pathWanted, where) {
    const p = c[probe];
    if (!p) {
        return [`${where}: ${probe} is missing`];
    }
    const out = [];
    if (!p.httpGet || p.httpGet.path !== pathWanted) {
        out.push(`${where}: ${probe} must be an httpGet on ${pathWanted}`);
        return out;
    }
    const port = p.httpGet.port;
    const ports = c.ports || [];
    if (typeof port === 'string' && !ports.some((x) => x.name === port)) {
        out.push(`${where}: ${probe} port "${port}" names no container port`);
    }
    if (typeof port === 'number' && !ports.some((x) => x.containerPort === port)) {
        out.push(`${where}: ${probe} port ${port} is not a container port`);
    }
    return out;
}

/* The annotations tpumesh-init accepts (docs/DESIGN.md §6; common/core/annotations.h). */
const ANNOTATION_CHECKS = {
    'tpumesh.dev/tpu': (v) => /^(local|grpc:\/\/\S+|[a-z0-9]([-a-z0-9]*[a-z0-9])?(,[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$/.test(v),
    'tpumesh.dev/zone': (v) => /^[a-z]+-[a-z]+[0-9]+-[a-z]$/.test(v),
    'tpumesh.dev/project': (v) => /^[a-z][-a-z0-9]{4,28}[a-z0-9]$/.test(v),
    /* a TensorFlow job name (DTENSOR_JOB_NAME) */
    'tpumesh.dev/job-name': (v) => /^[A-Za-z][A-Za-z0-9_]*$/.test(v) && v.length <= 63,
    'tpumesh.dev/port': (v) => /^[0-9]+$/.test(v) && +v >= 1 && +v <= 65535,
    'tpumesh.dev/address-mode': (v) => ['auto', 'dns', 'ip'].includes(v),
    'tpumesh.dev/expected-workers': (v) => /^[0-9]+$/.test(v) && +v >= 1 && +v <= 65536,
    'tpumesh.dev/timeout': (v) => /^[0-9]+$/.test(v) && +v >= 1 && +v <= 86400,
    'tpumesh.dev/inject': (v) => v === 'true' || v === 'false',
};

function annotationErrors(meta, where) {
    const out = [];
    for (const [k, v] of Object.entries((meta && meta.annotations) || {})) {
        if (!k.startsWith('tpumesh.dev/')) {
            continue;
        }
        const chk = ANNOTATION_CHECKS[k];
        if (!chk) {
            out.push(`${where}: unknown annotation ${k} (tpumesh-init exits 2); known: ${Object.keys(ANNOTATION_CHECKS).join(', ')}`);
        } else if (typeof v !== 'string' || !chk(v)) {
            out.push(`${where}: annotation ${k}: bad value ${JSON.stringify(v)}`);
        }
    }
    const port = (meta.annotations || {})['tpumesh.dev/port'];
    if (port && TPU_PORTS.includes(+port)) {
        out.push(`${where}: tpumesh.dev/port ${port} collides with a TPU port`);
    }
    return out;
}

/* Everything about tpumesh's containers in one pod spec. */
function podErrors(spec, meta, where) {
    const out = [];
    const inits = spec.initContainers || [];
    const apps = spec.containers || [];
    const init = inits.find((c) => c.name === INIT);
    const side = inits.find((c) => c.name === SIDECAR);
    if (apps.some((c) => c.name === INIT || c.name === SIDECAR)) {
        out.push(`${where}: tpumesh containers belong in initContainers, not containers`);
    }
    out.push(...annotationErrors(meta, `${where} annotations`));
    const vols = Object.fromEntries((spec.volumes || []).map((v) => [v.name, v]));
    const appTpu = apps.map(tpuResources).filter((x) => Object.keys(x).length);

    if (init) {
        const w = `${where}.${INIT}`;
        out.push(...resourceErrors(init, w));
        const tpu = tpuResources(init);
        if (Object.keys(tpu).length) {
            const req = Object.entries(tpu).filter(([k]) => k.startsWith('requests.'));
            const lim = Object.entries(tpu).filter(([k]) => k.startsWith('limits.'));
            if (JSON.stringify(req.map(([k, v]) => [k.slice(9), v])) !== JSON.stringify(lim.map(([k, v]) => [k.slice(7), v]))) {
                out.push(`${w}: TPU requests and limits must be equal`);
            }
            if (!appTpu.some((a) => JSON.stringify(a) === JSON.stringify(tpu))) {
                out.push(`${w}: requests TPUs ${JSON.stringify(tpu)} that no training container requests the same way`);
            }
        }
        const out1 = envValue(init, 'TPUMESH_OUT_DIR');
        const ann = envValue(init, 'TPUMESH_ANNOTATIONS_FILE');
        const mounts = Object.fromEntries((init.volumeMounts || []).map((m) => [m.name, m]));
        const shared = Object.values(mounts).find((m) => vols[m.name] && vols[m.name].emptyDir);
        const podinfo = Object.values(mounts).find((m) => vols[m.name] && vols[m.name].downwardAPI);
        if (!shared || !out1 || out1.value !== shared.mountPath) {
            out.push(`${w}: TPUMESH_OUT_DIR must be the mount path of the shared emptyDir volume`);
        }
        if (!podinfo || !ann || ann.value !== `${podinfo.mountPath}/annotations`) {
            out.push(`${w}: TPUMESH_ANNOTATIONS_FILE must be <downward-API mount>/annotations`);
        } else {
            const items = vols[podinfo.name].downwardAPI.items || [];
            if (!items.some((i) => i.path === 'annotations' && i.fieldRef && i.fieldRef.fieldPath === 'metadata.annotations')) {
                out.push(`${w}: the downward-API volume must project metadata.annotations as "annotations"`);
            }
            if (podinfo.subPath) {
                out.push(`${w}: the downward-API volume must not be a subPath mount (no updates)`);
            }
        }
    }
    if (side) {
        const w = `${where}.${SIDECAR}`;
        if (side.restartPolicy !== 'Always') {
            out.push(`${w}: must be a native sidecar (restartPolicy: Always)`);
        }
        if (init && inits.indexOf(init) > inits.indexOf(side)) {
            out.push(`${w}: must come after ${INIT} (it starts from the published topology)`);
        }
        if (Object.keys(tpuResources(side)).length) {
            out.push(`${w}: must never request TPUs (it runs for the pod's whole life and would hold them)`);
        }
        out.push(...resourceErrors(side, w));
        out.push(...probeErrors(side, 'startupProbe', '/readyz', w));
        out.push(...probeErrors(side, 'readinessProbe', '/readyz', w));
        out.push(...probeErrors(side, 'livenessProbe', '/healthz', w));
        for (const p of side.ports || []) {
            if (TPU_PORTS.includes(p.containerPort)) {
                out.push(`${w}: port ${p.containerPort} collides with a TPU port`);
            }
            for (const a of apps) {
                if ((a.ports || []).some((q) => q.containerPort === p.containerPort)) {
                    out.push(`${w}: port ${p.containerPort} is also used by ${a.name}`);
                }
            }
        }
        const pn = envValue(side, 'POD_NAME');
        if (!pn || !pn.valueFrom || !pn.valueFrom.fieldRef || pn.valueFrom.fieldRef.fieldPath !== 'metadata.name') {
            out.push(`${w}: POD_NAME must come from the downward API (metadata.name)`);
        }
        if (spec.automountServiceAccountToken === false) {
            out.push(`${w}: needs the service account token (automountServiceAccountToken is false)`);
        }
    }
    if (init || side) {
        for (const [name, v] of Object.entries(vols)) {
            if (v.emptyDir && (init || side).volumeMounts.some((m) => m.name === name) && v.emptyDir.medium !== 'Memory') {
                out.push(`${where}.volumes ${name}: the shared volume must be an emptyDir with medium: Memory`);
            }
        }
        for (const a of apps) {
            for (const m of a.volumeMounts || []) {
                const tm = (init || side).volumeMounts.find((x) => x.name === m.name);
                if (tm && vols[m.name] && vols[m.name].emptyDir && m.readOnly !== true) {
                    out.push(`${where}.${a.name}: mounts the tpumesh volume ${m.name} read-write (use readOnly)`);
                }
            }
        }
    }
    return out;
}

module.exports = { podErrors, annotationErrors, tpuResources, TPU_PORTS, INIT, SIDECAR };
