'use strict';
/*
 * gotemplate.js - an offline renderer for the subset of Go text/template + Sprig
 * that the tpumesh chart uses, so the chart can be rendered and validated where no
 * `helm` binary exists.
 *
 * Honest by construction: anything outside the subset (an unknown function, action
 * or syntax) throws an error naming it instead of rendering something approximate.
 * Supported:
 *   actions     {{ pipeline }}, {{/* comment *\/}}, trim markers {{- and -}}
 *   control     if / else if / else / end, with / else / end, range (over lists and maps,
 *               with $i, $e := ...), define, template, block is not supported
 *   variables   $ (the data the template was executed with), $x := ..., $x = ...
 *   operands    . , .a.b , $x.a.b , "string" (Go escapes), `raw`, numbers, true, false, nil,
 *               ( pipeline )
 *   functions   Go: and or not eq ne lt le gt ge len index print printf
 *               Sprig/Helm: default empty quote squote toYaml toJson nindent indent trunc
 *               trimSuffix trimPrefix trim contains hasPrefix hasSuffix replace lower upper
 *               dict list hasKey get kindIs toString int required fail include
 * Semantics follow Go's: truthiness (false, 0, "", nil, empty list/map are false), and/or
 * return an operand and short-circuit, a missing map key is nil (Helm renders it as ""),
 * a field of nil is an error, variables are scoped to their block.
 */
const YAML = require('yaml');

class TemplateError extends Error {}

/* ---- lexing: text and actions ------------------------------------------------- */
function lex(src, file) {
    const out = [];
    let i = 0;
    while (i < src.length) {
        const open = src.indexOf('{{', i);
        if (open < 0) {
            out.push({ t: 'text', v: src.slice(i) });
            break;
        }
        out.push({ t: 'text', v: src.slice(i, open) });
        let j = open + 2;
        let trimLeft = false;
        if (src.startsWith('- ', j) || src.startsWith('-\n', j) || src.startsWith('-\t', j)) {
            trimLeft = true;
            j += 1;
        }
        let body;
        let close;
        const rest = src.slice(j).trimStart();
        if (rest.startsWith('/*')) {
            const cstart = src.indexOf('/*', j);
            const cend = src.indexOf('*/', cstart + 2);
            if (cend < 0) {
                throw new TemplateError(`${file}: unclosed comment`);
            }
            close = src.indexOf('}}', cend + 2);
            body = null;
        } else {
            close = findClose(src, j, file);
            body = src.slice(j, close);
        }
        if (close < 0) {
            throw new TemplateError(`${file}: unclosed action at offset ${open}`);
        }
        let inner = body === null ? null : body;
        let trimRight = false;
        const before = src.slice(j, close);
        if (/\s-$/.test(before)) {
            trimRight = true;
            if (inner !== null) {
                inner = inner.replace(/\s-$/, '');
            }
        }
        const line = src.slice(0, open).split('\n').length;
        out.push({ t: inner === null ? 'comment' : 'action', v: inner === null ? '' : inner.trim(),
            trimLeft, trimRight, line });
        i = close + 2;
    }
    /* Apply trim markers to the neighbouring text. */
    for (let k = 0; k < out.length; k++) {
        const tok = out[k];
        if (tok.t === 'text') {
            continue;
        }
        if (tok.trimLeft && k > 0 && out[k - 1].t === 'text') {
            out[k - 1].v = out[k - 1].v.replace(/\s+$/, '');
        }
        if (tok.trimRight && k + 1 < out.length && out[k + 1].t === 'text') {
            out[k + 1].v = out[k + 1].v.replace(/^\s+/, '');
        }
    }
    return out.filter((x) => x.t !== 'comment');
}

/* The end of an action: the first "}}" outside a string literal. */
function findClose(src, from, file) {
    let q = null;
    for (let i = from; i < src.length - 1; i++) {
        const c = src[i];
        if (q) {
            if (q === '"' && c === '\\') {
                i++;
            } else if (c === q) {
                q = null;
            }
            continue;
        }
        if (c === '"' || c === '`') {
            q = c;
        } else if (c === '}' && src[i + 1] === '}') {
            return i;
        }
    }
    throw new TemplateError(`${file}: unclosed action`);
}

/* ---- tokens of one action ------------------------------------------------------- */
function tokenize(s, where) {
    const toks = [];
    let i = 0;
    while (i < s.length) {
        const c = s[i];
        if (/\s/.test(c)) {
            i++;
            continue;
        }
        if (c === '(' || c === ')' || c === '|') {
            toks.push({ k: c });
            i++;
            continue;
        }
        if (s.startsWith(':=', i)) {
            toks.push({ k: ':=' });
            i += 2;
            continue;
        }
        if (c === '=') {
            toks.push({ k: '=' });
            i++;
            continue;
        }
        if (c === ',') {
            toks.push({ k: ',' });
            i++;
            continue;
        }
        if (c === '"') {
            let j = i + 1;
            while (j < s.length && s[j] !== '"') {
                j += s[j] === '\\' ? 2 : 1;
            }
            let lit;
            try {
                lit = JSON.parse(s.slice(i, j + 1));
            } catch (e) {
                throw new TemplateError(`${where}: bad string literal ${s.slice(i, j + 1)}`);
            }
            toks.push({ k: 'lit', v: lit });
            i = j + 1;
            continue;
        }
        if (c === '`') {
            const j = s.indexOf('`', i + 1);
            toks.push({ k: 'lit', v: s.slice(i + 1, j) });
            i = j + 1;
            continue;
        }
        const m = /^(-?[0-9]+(\.[0-9]+)?)/.exec(s.slice(i));
        if (m && (c !== '-' || /[0-9]/.test(s[i + 1] || ''))) {
            toks.push({ k: 'lit', v: Number(m[1]) });
            i += m[1].length;
            continue;
        }
        if (c === '$' || c === '.') {
            /* "$x.a.b", "$", ".a.b" or "." alone */
            const f = c === '$' ? /^(\$[A-Za-z0-9_]*)((\.[A-Za-z0-9_]+)*)/.exec(s.slice(i))
                : /^()((\.[A-Za-z0-9_]+)*)/.exec(s.slice(i));
            const len = f[0].length || 1;
            toks.push({ k: 'ref', head: c === '$' ? f[1] : '.', path: f[2].split('.').filter(Boolean) });
            i += len;
            continue;
        }
        const id = /^[A-Za-z_][A-Za-z0-9_]*/.exec(s.slice(i));
        if (id) {
            const w = id[0];
            if (w === 'true' || w === 'false') {
                toks.push({ k: 'lit', v: w === 'true' });
            } else if (w === 'nil') {
                toks.push({ k: 'lit', v: null });
            } else {
                toks.push({ k: 'id', v: w });
            }
            i += w.length;
            continue;
        }
        throw new TemplateError(`${where}: unexpected '${c}' in action '${s}'`);
    }
    return toks;
}

/* pipeline := [vars (:=|=)] command { '|' command }; command := operand {operand} */
function parsePipeline(toks, where) {
    let pos = 0;
    const pipe = { decl: null, assign: false, cmds: [] };
    /* "$a :=", "$a =", "$i, $e :=" */
    const vars = [];
    let p = 0;
    while (p < toks.length && toks[p].k === 'ref' && toks[p].head !== '.' && toks[p].path.length === 0) {
        vars.push(toks[p].head);
        if (toks[p + 1] && toks[p + 1].k === ',') {
            p += 2;
            continue;
        }
        p++;
        break;
    }
    if (vars.length && toks[p] && (toks[p].k === ':=' || toks[p].k === '=')) {
        pipe.decl = vars;
        pipe.assign = toks[p].k === '=';
        pos = p + 1;
    }
    function operand() {
        const t = toks[pos];
        if (!t) {
            throw new TemplateError(`${where}: missing operand`);
        }
        if (t.k === '(') {
            pos++;
            const sub = { decl: null, cmds: [] };
            sub.cmds = commands(')');
            if (!toks[pos] || toks[pos].k !== ')') {
                throw new TemplateError(`${where}: missing ')'`);
            }
            pos++;
            return { k: 'pipe', pipe: sub };
        }
        if (t.k === 'lit' || t.k === 'ref' || t.k === 'id') {
            pos++;
            return t;
        }
        throw new TemplateError(`${where}: unexpected '${t.k}'`);
    }
    function commands(stop) {
        const cmds = [];
        let cmd = [];
        while (pos < toks.length && !(stop && toks[pos].k === stop)) {
            if (toks[pos].k === '|') {
                if (!cmd.length) {
                    throw new TemplateError(`${where}: empty command before '|'`);
                }
                cmds.push(cmd);
                cmd = [];
                pos++;
                continue;
            }
            cmd.push(operand());
        }
        if (!cmd.length) {
            throw new TemplateError(`${where}: empty pipeline`);
        }
        cmds.push(cmd);
        return cmds;
    }
    pipe.cmds = commands(null);
    return pipe;
}

/* ---- parse the token stream into a tree ------------------------------------------- */
function parse(src, file, defines) {
    const items = lex(src, file);
    let i = 0;
    function block(stopWords) {
        const nodes = [];
        while (i < items.length) {
            const it = items[i];
            if (it.t === 'text') {
                nodes.push({ n: 'text', v: it.v });
                i++;
                continue;
            }
            const where = `${file}:${it.line}`;
            const word = (/^[a-z]+/.exec(it.v) || [''])[0];
            if (stopWords.includes(word) && (word === 'end' || word === 'else')) {
                return { nodes, stop: it };
            }
            i++;
            if (word === 'if' || word === 'with' || word === 'range') {
                const pipe = parsePipeline(tokenize(it.v.slice(word.length), where), where);
                const body = block(['end', 'else']);
                const node = { n: word, pipe, body: body.nodes, else: null, where };
                const stop = body.stop;
                if (!stop) {
                    throw new TemplateError(`${where}: '${word}' without end`);
                }
                i++;
                if (stop.v === 'else') {
                    /* "else if" was rewritten to "else" + "if" by rewriteElseIf */
                    const eb = block(['end']);
                    if (!eb.stop) {
                        throw new TemplateError(`${where}: 'else' without end`);
                    }
                    i++;
                    node.else = eb.nodes;
                }
                nodes.push(node);
                continue;
            }
            if (word === 'define') {
                const name = tokenize(it.v.slice(6), where)[0];
                if (!name || name.k !== 'lit') {
                    throw new TemplateError(`${where}: define needs a name`);
                }
                const body = block(['end']);
                if (!body.stop) {
                    throw new TemplateError(`${where}: define without end`);
                }
                i++;
                defines[name.v] = { nodes: body.nodes, file };
                continue;
            }
            if (word === 'template') {
                const toks = tokenize(it.v.slice(8), where);
                const name = toks.shift();
                const pipe = toks.length ? parsePipeline(toks, where) : null;
                nodes.push({ n: 'template', name: name.v, pipe, where });
                continue;
            }
            if (word === 'block' || word === 'break' || word === 'continue') {
                throw new TemplateError(`${where}: '${word}' is outside the renderer's subset`);
            }
            nodes.push({ n: 'action', pipe: parsePipeline(tokenize(it.v, where), where), where });
        }
        return { nodes, stop: null };
    }
    /* else-if is rewritten before parsing: "{{ else if X }}" -> "{{ else }}{{ if X }}" and
     * one extra "{{ end }}" at the matching end, which keeps the parser simple. */
    rewriteElseIf(items, file);
    const top = block([]);
    return top.nodes;
}

function rewriteElseIf(items, file) {
    for (let k = 0; k < items.length; k++) {
        const it = items[k];
        if (it.t !== 'action' || !/^else\s+if\s/.test(it.v)) {
            continue;
        }
        const cond = it.v.replace(/^else\s+/, '');
        items.splice(k, 1, { t: 'action', v: 'else', line: it.line }, { t: 'action', v: cond, line: it.line });
        /* find the end that closes the enclosing if and double it */
        let depth = 0;
        for (let m = k + 2; m < items.length; m++) {
            const w = items[m].t === 'action' ? (/^[a-z]+/.exec(items[m].v) || [''])[0] : '';
            if (w === 'if' || w === 'with' || w === 'range' || w === 'define') {
                depth++;
            } else if (w === 'end') {
                if (depth === 0) {
                    items.splice(m, 0, { t: 'action', v: 'end', line: items[m].line });
                    break;
                }
                depth--;
            }
            if (m === items.length - 1) {
                throw new TemplateError(`${file}:${it.line}: else if without end`);
            }
        }
    }
}

/* ---- evaluation ------------------------------------------------------------------- */
function isTrue(v) {
    if (v === null || v === undefined || v === false || v === 0 || v === '') {
        return false;
    }
    if (Array.isArray(v)) {
        return v.length > 0;
    }
    if (typeof v === 'object') {
        return Object.keys(v).length > 0;
    }
    return true;
}

function goString(v) {
    if (v === null || v === undefined) {
        return '';
    }
    if (typeof v === 'number') {
        return Number.isInteger(v) ? String(v) : String(v);
    }
    if (typeof v === 'boolean') {
        return v ? 'true' : 'false';
    }
    if (typeof v === 'string') {
        return v;
    }
    throw new TemplateError(`printing a ${Array.isArray(v) ? 'list' : 'map'} directly (use toYaml)`);
}

function toYaml(v) {
    if (v === null || v === undefined) {
        return 'null';
    }
    return YAML.stringify(v, { lineWidth: 0 }).replace(/\n$/, '');
}

function indentStr(n, s) {
    const pad = ' '.repeat(n);
    return pad + String(s).split('\n').join('\n' + pad);
}

function goPrintf(fmt, args, where) {
    let k = 0;
    return fmt.replace(/%([-+ 0#]*)([0-9]*)([svdqt%])/g, (all, flags, width, verb) => {
        if (verb === '%') {
            return '%';
        }
        if (k >= args.length) {
            throw new TemplateError(`${where}: printf: missing argument for ${all}`);
        }
        const a = args[k++];
        switch (verb) {
        case 's':
        case 'v':
        case 't':
            return goString(a);
        case 'd':
            if (typeof a !== 'number') {
                throw new TemplateError(`${where}: printf %d of a non-number`);
            }
            return String(Math.trunc(a));
        case 'q':
            return JSON.stringify(goString(a));
        default:
            throw new TemplateError(`${where}: printf verb ${all} unsupported`);
        }
    });
}

function kindOf(v) {
    if (v === null || v === undefined) {
        return 'invalid';
    }
    if (Array.isArray(v)) {
        return 'slice';
    }
    switch (typeof v) {
    case 'string':
        return 'string';
    case 'boolean':
        return 'bool';
    case 'number':
        return Number.isInteger(v) ? 'int' : 'float64';
    default:
        return 'map';
    }
}

class Renderer {
    constructor() {
        this.defines = {};
    }

    addFile(name, src) {
        return parse(src, name, this.defines);
    }

    execNodes(nodes, dot, scope, out) {
        for (const node of nodes) {
            switch (node.n) {
            case 'text':
                out.push(node.v);
                break;
            case 'action': {
                const v = this.evalPipe(node.pipe, dot, scope, node.where);
                if (!node.pipe.decl) {
                    out.push(goString(v));
                }
                break;
            }
            case 'if': {
                const inner = this.child(scope);
                const v = this.evalPipe(node.pipe, dot, inner, node.where);
                if (isTrue(v)) {
                    this.execNodes(node.body, dot, inner, out);
                } else if (node.else) {
                    this.execNodes(node.else, dot, this.child(scope), out);
                }
                break;
            }
            case 'with': {
                const inner = this.child(scope);
                const v = this.evalPipe(node.pipe, dot, inner, node.where);
                if (isTrue(v)) {
                    this.execNodes(node.body, v, inner, out);
                } else if (node.else) {
                    this.execNodes(node.else, dot, this.child(scope), out);
                }
                break;
            }
            case 'range': {
                const inner = this.child(scope);
                const decl = node.pipe.decl;
                const pipe = { ...node.pipe, decl: null };
                const v = this.evalPipe(pipe, dot, inner, node.where);
                const entries = Array.isArray(v) ? v.map((e, idx) => [idx, e])
                    : (v && typeof v === 'object' ? Object.keys(v).sort().map((key) => [key, v[key]]) : []);
                if (!entries.length && node.else) {
                    this.execNodes(node.else, dot, this.child(scope), out);
                }
                for (const [key, e] of entries) {
                    const it = this.child(inner);
                    if (decl && decl.length === 1) {
                        it.vars[decl[0]] = e;
                    } else if (decl && decl.length === 2) {
                        it.vars[decl[0]] = key;
                        it.vars[decl[1]] = e;
                    }
                    this.execNodes(node.body, e, it, out);
                }
                break;
            }
            case 'template': {
                const arg = node.pipe ? this.evalPipe(node.pipe, dot, scope, node.where) : null;
                out.push(this.include(node.name, arg, node.where));
                break;
            }
            default:
                throw new TemplateError(`internal: node ${node.n}`);
            }
        }
    }

    child(scope) {
        return { vars: {}, parent: scope, root: scope.root };
    }

    lookupVar(scope, name, where) {
        if (name === '$') {
            return scope.root;
        }
        for (let s = scope; s; s = s.parent) {
            if (Object.prototype.hasOwnProperty.call(s.vars, name)) {
                return s.vars[name];
            }
        }
        throw new TemplateError(`${where}: undefined variable ${name}`);
    }

    assignVar(scope, name, value, where) {
        for (let s = scope; s; s = s.parent) {
            if (Object.prototype.hasOwnProperty.call(s.vars, name)) {
                s.vars[name] = value;
                return;
            }
        }
        throw new TemplateError(`${where}: assignment to undeclared variable ${name}`);
    }

    field(v, path, where, what) {
        let cur = v;
        for (const p of path) {
            if (cur === null || cur === undefined) {
                throw new TemplateError(`${where}: nil pointer evaluating ${what}.${p}`);
            }
            if (typeof cur !== 'object' || Array.isArray(cur)) {
                throw new TemplateError(`${where}: can't evaluate field ${p} in ${kindOf(cur)}`);
            }
            cur = Object.prototype.hasOwnProperty.call(cur, p) ? cur[p] : null;
        }
        return cur;
    }

    evalPipe(pipe, dot, scope, where) {
        let val;
        let first = true;
        for (const cmd of pipe.cmds) {
            val = this.evalCmd(cmd, dot, scope, where, first ? undefined : [val]);
            first = false;
        }
        if (pipe.decl) {
            if (pipe.assign) {
                this.assignVar(scope, pipe.decl[0], val, where);
            } else {
                scope.vars[pipe.decl[0]] = val;
            }
        }
        return val;
    }

    evalOperand(op, dot, scope, where) {
        switch (op.k) {
        case 'lit':
            return op.v;
        case 'ref': {
            const base = op.head === '.' ? dot : this.lookupVar(scope, op.head, where);
            return this.field(base, op.path, where, op.head);
        }
        case 'pipe':
            return this.evalPipe(op.pipe, dot, this.child(scope), where);
        case 'id':
            return this.call(op.v, [], dot, scope, where);
        default:
            throw new TemplateError(`${where}: bad operand`);
        }
    }

    evalCmd(cmd, dot, scope, where, piped) {
        const head = cmd[0];
        if (head.k === 'id') {
            /* and/or short-circuit: evaluate lazily */
            if (head.v === 'and' || head.v === 'or') {
                const ops = cmd.slice(1);
                const vals = ops.map((o) => () => this.evalOperand(o, dot, scope, where));
                if (piped) {
                    vals.push(() => piped[0]);
                }
                let last;
                for (const f of vals) {
                    last = f();
                    if (head.v === 'and' ? !isTrue(last) : isTrue(last)) {
                        return last;
                    }
                }
                return last;
            }
            const args = cmd.slice(1).map((o) => this.evalOperand(o, dot, scope, where));
            if (piped) {
                args.push(piped[0]);
            }
            return this.call(head.v, args, dot, scope, where);
        }
        if (cmd.length > 1 || piped) {
            throw new TemplateError(`${where}: can't give arguments to a non-function`);
        }
        return this.evalOperand(head, dot, scope, where);
    }

    include(name, arg, where) {
        const d = this.defines[name];
        if (!d) {
            throw new TemplateError(`${where}: no template "${name}"`);
        }
        const out = [];
        this.execNodes(d.nodes, arg, { vars: {}, parent: null, root: arg }, out);
        return out.join('');
    }

    call(fn, a, dot, scope, where) {
        const need = (n) => {
            if (a.length !== n) {
                throw new TemplateError(`${where}: ${fn} wants ${n} arguments, got ${a.length}`);
            }
        };
        switch (fn) {
        case 'not': need(1); return !isTrue(a[0]);
        case 'eq': return a.slice(1).some((x) => x === a[0]);
        case 'ne': need(2); return a[0] !== a[1];
        case 'lt': need(2); return a[0] < a[1];
        case 'le': need(2); return a[0] <= a[1];
        case 'gt': need(2); return a[0] > a[1];
        case 'ge': need(2); return a[0] >= a[1];
        case 'len': need(1);
            return Array.isArray(a[0]) || typeof a[0] === 'string' ? a[0].length : Object.keys(a[0] || {}).length;
        case 'index': {
            let cur = a[0];
            for (const k of a.slice(1)) {
                cur = cur === null || cur === undefined ? null : (cur[k] === undefined ? null : cur[k]);
            }
            return cur;
        }
        case 'print': return a.map(goString).join('');
        case 'printf': return goPrintf(a[0], a.slice(1), where);
        case 'default': need(2); return isTrue(a[1]) ? a[1] : a[0];
        case 'empty': need(1); return !isTrue(a[0]);
        case 'required':
            need(2);
            if (a[1] === null || a[1] === undefined || a[1] === '') {
                throw new TemplateError(`${where}: required: ${a[0]}`);
            }
            return a[1];
        case 'fail': throw new TemplateError(`${where}: fail: ${a[0]}`);
        case 'quote': return a.map((x) => JSON.stringify(goString(x))).join(' ');
        case 'squote': return a.map((x) => `'${goString(x)}'`).join(' ');
        case 'toYaml': need(1); return toYaml(a[0]);
        case 'toJson': need(1); return JSON.stringify(a[0] === undefined ? null : a[0]);
        case 'toString': need(1); return goString(a[0]);
        case 'int': need(1); return Math.trunc(Number(a[0]));
        case 'nindent': need(2); return '\n' + indentStr(a[0], a[1]);
        case 'indent': need(2); return indentStr(a[0], a[1]);
        case 'trunc': need(2); return a[0] >= 0 ? goString(a[1]).slice(0, a[0]) : goString(a[1]).slice(a[0]);
        case 'trimSuffix': need(2); return goString(a[1]).endsWith(a[0]) ? goString(a[1]).slice(0, -a[0].length || undefined) : goString(a[1]);
        case 'trimPrefix': need(2); return goString(a[1]).startsWith(a[0]) ? goString(a[1]).slice(a[0].length) : goString(a[1]);
        case 'trim': need(1); return goString(a[0]).trim();
        case 'contains': need(2); return goString(a[1]).includes(a[0]);
        case 'hasPrefix': need(2); return goString(a[1]).startsWith(a[0]);
        case 'hasSuffix': need(2); return goString(a[1]).endsWith(a[0]);
        case 'replace': need(3); return goString(a[2]).split(a[0]).join(a[1]);
        case 'lower': need(1); return goString(a[0]).toLowerCase();
        case 'upper': need(1); return goString(a[0]).toUpperCase();
        case 'list': return a.slice();
        case 'dict': {
            if (a.length % 2) {
                throw new TemplateError(`${where}: dict wants key/value pairs`);
            }
            const d = {};
            for (let k = 0; k < a.length; k += 2) {
                d[goString(a[k])] = a[k + 1];
            }
            return d;
        }
        case 'hasKey':
            need(2);
            if (!a[0] || typeof a[0] !== 'object' || Array.isArray(a[0])) {
                throw new TemplateError(`${where}: hasKey of a ${kindOf(a[0])}`);
            }
            return Object.prototype.hasOwnProperty.call(a[0], a[1]);
        case 'get': need(2); return a[0] && Object.prototype.hasOwnProperty.call(a[0], a[1]) ? a[0][a[1]] : '';
        case 'kindIs': need(2); return kindOf(a[1]) === a[0];
        case 'include': need(2); return this.include(a[0], a[1], where);
        default:
            throw new TemplateError(`${where}: function "${fn}" is outside the offline renderer's subset`);
        }
    }
}

/* Render a chart directory like `helm template`: every templates/ file whose name does not
 * start with "_" (NOTES.txt separately), with .Values, .Release, .Chart and .Template. */
function renderChart(fs, path, chartDir, values, release) {
    const chart = YAML.parse(fs.readFileSync(path.join(chartDir, 'Chart.yaml'), 'utf8'));
    const r = new Renderer();
    const files = [];
    const walk = (dir) => {
        for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((x, y) => (x.name < y.name ? -1 : 1))) {
            const full = path.join(dir, e.name);
            if (e.isDirectory()) {
                walk(full);
            } else {
                files.push(full);
            }
        }
    };
    walk(path.join(chartDir, 'templates'));
    const parsed = {};
    for (const f of files) {
        const rel = path.relative(path.dirname(chartDir), f);
        parsed[rel] = r.addFile(rel, fs.readFileSync(f, 'utf8'));
    }
    const top = {
        Values: values,
        Release: { Name: release.name, Namespace: release.namespace, Service: 'Helm', IsInstall: true,
            IsUpgrade: false, Revision: 1 },
        Chart: { Name: chart.name, Version: chart.version, AppVersion: chart.appVersion },
        Capabilities: { KubeVersion: { Version: 'v1.29.0' } },
    };
    const out = {};
    for (const [rel, nodes] of Object.entries(parsed)) {
        if (path.basename(rel).startsWith('_')) {
            continue;
        }
        const buf = [];
        r.execNodes(nodes, { ...top, Template: { Name: rel } }, { vars: {}, parent: null, root: top }, buf);
        out[rel] = buf.join('');
    }
    return { renderer: r, top, files: out, chart };
}

module.exports = { Renderer, renderChart, TemplateError, lex, tokenize, parsePipeline };
