'use strict';
/*
 * Table-driven tests of lib/gotemplate.js against Go text/template + Sprig semantics
 * (expected outputs are what `helm template` prints for the same input).
 *   node --test tests/validate/test/
 */
const test = require('node:test');
const assert = require('node:assert');
const { Renderer } = require('../lib/gotemplate');

function render(src, data, defs = '') {
    const r = new Renderer();
    if (defs) {
        r.addFile('defs.tpl', defs);
    }
    const nodes = r.addFile('t.yaml', src);
    const out = [];
    r.execNodes(nodes, data, { vars: {}, parent: null, root: data }, out);
    return out.join('');
}

const V = { Values: { a: { b: 'x', n: 4, empty: '', list: [1, 2], map: { k: 'v' } }, on: true, off: false, zero: 0 },
    Release: { Name: 'rel' }, Chart: { Name: 'tpumesh' } };

const ok = [
    ['field', '{{ .Values.a.b }}', 'x'],
    ['missing key renders empty', '[{{ .Values.a.nope }}]', '[]'],
    ['trim markers', 'a  {{- .Values.a.b -}}  \n b', 'axb'],
    ['comment', 'a{{/* c */}}b{{- /* d */ -}} c', 'abc'],
    ['quote number', '{{ .Values.a.n | quote }}', '"4"'],
    ['default on empty', '{{ default "d" .Values.a.empty }}', 'd'],
    ['default keeps value', '{{ default "d" .Values.a.b }}', 'x'],
    ['default on zero', '{{ default 7 .Values.zero }}', '7'],
    ['if false/else', '{{ if .Values.off }}y{{ else }}n{{ end }}', 'n'],
    ['else if', '{{ if .Values.off }}1{{ else if .Values.on }}2{{ else }}3{{ end }}', '2'],
    ['empty list is false', '{{ if list }}y{{ else }}n{{ end }}', 'n'],
    ['and returns operand', '{{ and .Values.on .Values.a.b }}', 'x'],
    ['or short-circuits', '{{ or .Values.a.b .Values.nil.field }}', 'x'],
    ['with sets dot', '{{ with .Values.a }}{{ .b }}{{ end }}', 'x'],
    ['with else', '{{ with .Values.a.empty }}y{{ else }}n{{ end }}', 'n'],
    ['range list', '{{ range $i, $e := .Values.a.list }}{{ $i }}={{ $e }};{{ end }}', '0=1;1=2;'],
    ['range map sorted', '{{ range $k, $v := dict "b" 2 "a" 1 }}{{ $k }}{{ $v }}{{ end }}', 'a1b2'],
    ['variable scope and assign', '{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ end }}{{ $x }}', '2'],
    ['$ is the root', '{{ with .Values.a }}{{ $.Release.Name }}{{ end }}', 'rel'],
    ['printf', '{{ printf "%s-%d:%v" "a" 3 true }}', 'a-3:true'],
    ['trunc trimSuffix', '{{ "abcdef-" | trunc 7 | trimSuffix "-" }}', 'abcdef'],
    ['contains', '{{ if contains "mesh" "tpumesh" }}y{{ end }}', 'y'],
    ['replace', '{{ "a+b" | replace "+" "_" }}', 'a_b'],
    ['hasKey', '{{ hasKey .Values.a "b" }} {{ hasKey .Values.a "z" }}', 'true false'],
    ['ne and eq', '{{ ne 1 2 }} {{ eq "a" "b" "a" }}', 'true true'],
    ['toYaml nindent', 'k:{{ toYaml .Values.a.map | nindent 2 }}', 'k:\n  k: v'],
    ['toYaml list', '{{ toYaml .Values.a.list }}', '- 1\n- 2'],
    ['indent', '{{ "a\\nb" | indent 2 }}', '  a\n  b'],
    ['nested parens', '{{ printf "%s" (default "z" (index .Values.a "b")) }}', 'x'],
    ['include with dict', '{{ include "t" (dict "x" "1") }}', 'v1'],
    ['raw string', '{{ `a"b` }}', 'a"b'],
    ['string escapes', '{{ "a\\tb" }}', 'a\tb'],
    ['literal braces', '{{ "{{" }} x {{ "}}" }}', '{{ x }}'],
];
for (const [name, src, want] of ok) {
    test(`renders: ${name}`, () => {
        assert.strictEqual(render(src, V, '{{- define "t" -}}v{{ .x }}{{- end -}}'), want);
    });
}

const bad = [
    ['unknown function', '{{ lookup "v1" "Pod" "" "" }}', /outside the offline renderer's subset/],
    ['undefined template', '{{ include "nope" . }}', /no template "nope"/],
    ['field of nil', '{{ .Values.nil.field }}', /nil pointer/],
    ['undefined variable', '{{ $nope }}', /undefined variable/],
    ['unclosed action', '{{ .Values.a', /unclosed/],
    ['if without end', '{{ if true }}x', /without end/],
    ['printing a map', '{{ .Values.a.map }}', /toYaml/],
    ['assign undeclared', '{{ $y = 1 }}', /undeclared/],
    ['block is outside the subset', '{{ block "x" . }}{{ end }}', /subset/],
    ['newline in a string literal', '{{ "a\nb" }}', /bad string literal/],
];
for (const [name, src, re] of bad) {
    test(`rejects: ${name}`, () => {
        assert.throws(() => render(src, V), re);
    });
}
