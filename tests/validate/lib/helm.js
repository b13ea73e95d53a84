'use strict';
/*
 * helm.js - runs the real Helm binaries that `make deps` unpacks (scripts/helm.sh: Helm 3 and
 * Helm 4 into $BUILD/helm/<version>/helm) for the chart tests: lint, template, and a copy of
 * the test chart tests/helm/parent with charts/tpumesh as its dependency.
 */
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');

const ROOT = path.resolve(__dirname, '..', '..', '..');

/* [{ version, bin }] of every unpacked Helm, oldest first; HELM_BINS (colon-separated paths)
 * overrides the search of $BUILD/helm. */
function helms() {
    if (process.env.HELM_BINS) {
        return process.env.HELM_BINS.split(':').filter(Boolean).map((bin) => ({ version: version(bin), bin }));
    }
    const build = path.resolve(ROOT, process.env.BUILD || 'build');
    const dir = path.join(build, 'helm');
    if (!fs.existsSync(dir)) {
        return [];
    }
    return fs.readdirSync(dir).filter((v) => /^[0-9]+\.[0-9]+\.[0-9]+$/.test(v))
        .sort((a, b) => a.localeCompare(b, undefined, { numeric: true }))
        .map((v) => ({ version: v, bin: path.join(dir, v, 'helm') }))
        .filter((h) => fs.existsSync(h.bin));
}

function version(bin) {
    const out = execFileSync(bin, ['version', '--short'], { encoding: 'utf8' });
    return out.trim().replace(/^v/, '').replace(/\+.*/, '');
}

/* Runs helm; returns stdout, or throws an Error whose message has helm's stderr. */
function run(bin, args) {
    try {
        return execFileSync(bin, args, { encoding: 'utf8', stdio: 'pipe', maxBuffer: 64 << 20,
            env: { ...process.env, HELM_CACHE_HOME: tmpHome('cache'), HELM_CONFIG_HOME: tmpHome('config'),
                HELM_DATA_HOME: tmpHome('data') } });
    } catch (e) {
        const msg = `${path.basename(path.dirname(bin))}: helm ${args.join(' ')}: ${(e.stderr || '').trim() || e.message}`;
        const err = new Error(msg);
        err.stdout = e.stdout || '';
        throw err;
    }
}

let tmpRoot = null;
function tmp() {
    if (!tmpRoot) {
        tmpRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'tpumesh-helm-'));
        process.on('exit', () => fs.rmSync(tmpRoot, { recursive: true, force: true }));
    }
    return tmpRoot;
}
/* Helm's own directories in a temporary one: the tests never read the user's repositories. */
function tmpHome(what) {
    const d = path.join(tmp(), 'home', what);
    fs.mkdirSync(d, { recursive: true });
    return d;
}

/* Writes values (an object) to a temporary file for -f. */
let nValues = 0;
function valuesFile(values) {
    const f = path.join(tmp(), `values-${++nValues}.json`);
    fs.writeFileSync(f, JSON.stringify(values));
    return f;
}

/* helm template RELEASE CHART -n NAMESPACE [-f values] [--set ...] [--kube-version V] */
function template(bin, chart, { release = 'tpumesh', namespace = 'default', values = null, sets = [], kubeVersion = null } = {}) {
    const args = ['template', release, chart, '--namespace', namespace];
    if (kubeVersion) args.push('--kube-version', kubeVersion);
    if (values) args.push('-f', valuesFile(values));
    for (const s of sets) args.push('--set', s);
    return run(bin, args);
}

/* helm lint --strict CHART [-f values] [--set ...] */
function lint(bin, chart, { values = null, sets = [] } = {}) {
    const args = ['lint', '--strict', chart];
    if (values) args.push('-f', valuesFile(values));
    for (const s of sets) args.push('--set', s);
    return run(bin, args);
}

/* A copy of tests/helm/parent with charts/tpumesh in its charts/ directory (what
 * `helm dependency build` would put there), made once per process. */
let parentDir = null;
function parentChart() {
    if (!parentDir) {
        parentDir = path.join(tmp(), 'tpumesh-parent-test');
        fs.cpSync(path.join(ROOT, 'tests', 'helm', 'parent'), parentDir, { recursive: true });
        fs.cpSync(path.join(ROOT, 'charts', 'tpumesh'), path.join(parentDir, 'charts', 'tpumesh'), { recursive: true });
    }
    return parentDir;
}

module.exports = { helms, template, lint, parentChart, ROOT };
