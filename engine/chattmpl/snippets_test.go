package chattmpl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// snippets exercise Jinja2 semantics the reference templates touch, and
// corners around them, for TestSnippets to compare with Python's jinja2.
var snippets = []struct{ name, src string }{
	{"ws_trim_blocks", "{% if true %}\n  a\n{% endif %}\nb\n"},
	{"ws_lstrip", "x\n    {% if true %}y{% endif %}\n  {{ 'z' }}\n"},
	{"ws_minus", "a  \n {%- if true -%}  \n b \n {%- endif %} c {#- comment -#}  d"},
	{"ws_plus", "a\n  {%+ if true %}b{% endif +%}\nc"},
	{"ws_comment_trim", "a\n{# c #}\nb\n  {# d #}\ne"},
	{"ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n"},
	{"ws_var_no_trim", "{{ 'a' }}\n{{ 'b' }}\n"},
	{"ws_raw", "{% raw %}{{ x }}{% endraw %}\n{%- raw -%}  {% y %}  {%- endraw %}"},
	{"print_types", "{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e20 }}|{{ 0.1 + 0.2 }}|{{ 2 ** 10 }}|{{ 7 / 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}"},
	{"print_containers", `{{ [1, 'a', none, true, 1.5] }}{{ {'k': "it's", 'q': 'say "hi"'} }}{{ (1,) }}{{ ('a', 'b') }}{{ [] }}{{ {} }}`},
	{"print_message", "{{ messages[0] }}|{{ messages[2].tool_calls[0].function.arguments }}"},
	{"print_undefined", "[{{ nope }}][{{ messages[0].nope }}][{{ messages[99] }}][{{ none.x }}]"},
	{"undefined_attr_error", "{{ nope.x }}"},
	{"undefined_call_error", "{{ nope() }}"},
	{"undefined_arith_error", "{{ nope + 1 }}"},
	{"undefined_tojson_error", "{{ nope | tojson }}"},
	{"none_iter_error", "{% for x in none %}{% endfor %}"},
	{"none_len_error", "{{ none | length }}"},
	{"truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0, nope] %}{{ 'T' if v else 'F' }}{% endfor %}"},
	{"and_or_values", "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ none or [] }}|{{ not none }}"},
	{"cond_no_else", "[{{ 'a' if false }}]"},
	{"compare", "{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ 'a' != 'a' }}{{ none == none }}"},
	{"compare_error", "{{ 1 < 'a' }}"},
	{"in_ops", "{{ 'a' in 'cat' }}{{ 2 in [1, 2] }}{{ 'role' in messages[0] }}{{ 'x' not in messages[0] }}{{ 'a' in nope }}"},
	{"in_none_error", "{{ 'a' in none }}"},
	{"concat", "{{ 1 ~ 'a' ~ none ~ nope ~ [1] }}"},
	{"string_plus", "{{ 'a' + 'b' }}{{ [1] + [2] }}{{ 'ab' * 3 }}"},
	{"plus_error", "{{ 'a' + 1 }}"},
	{"tests", "{{ 'a' is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ messages[0] is mapping }}{{ messages is sequence }}{{ messages is iterable }}{{ 'a' is iterable }}{{ none is none }}{{ nope is undefined }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'ab' is lower }}{{ 1 is sameas 1 }}{{ true is true }}{{ 2 is gt 1 }}{{ 'a' is in 'ab' }}{{ 1 is eq 1 }}"},
	{"test_not", "{{ nope is not defined }}{{ messages is not none }}{{ not 1 is none }}"},
	{"loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('x', 'y') }};{% endfor %}"},
	{"loop_filter_else", "{% for m in messages if m.role == 'user' %}{{ loop.index }}:{{ m.content }}|{{ loop.length }}{% else %}none{% endfor %}{% for x in [] %}{% else %}empty{% endfor %}"},
	{"loop_break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"},
	{"loop_unpack", "{% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }}{% endfor %}"},
	{"loop_dict", "{% for k in messages[2] %}{{ k }},{% endfor %}"},
	{"loop_scope", "{% set y = 0 %}{% for x in [1, 2] %}{{ y }}{% set y = x %}{{ y }}{% endfor %}{{ y }}"},
	{"if_scope", "{% if true %}{% set y = 5 %}{% endif %}{{ y }}"},
	{"namespace", "{% set ns = namespace(a=1, b=[]) %}{% for m in messages %}{% set ns.a = ns.a + 1 %}{% endfor %}{{ ns.a }}{{ ns.b }}{{ ns.missing }}"},
	{"namespace_error", "{% set x = 1 %}{% set x.a = 2 %}"},
	{"set_unpack", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = 'xy' %}{{ d }}"},
	{"set_block", "{% set x %}  a {{ 1 }}\n{% endset %}[{{ x }}]{% set y | trim | upper %}  b  {% endset %}[{{ y }}]"},
	{"macro", "{% macro m(a, b='d', c=none) %}{{ a }}-{{ b }}-{{ c }}-{{ d }}{% endmacro %}{% set d = 4 %}{{ m(1) }}|{{ m(1, 2, 3) }}|{{ m(a=5, c=6) }}|{{ m() }}"},
	{"macro_too_many_error", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"},
	{"macro_recursive", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"},
	{"macro_caller", "{% macro wrap(t) %}<{{ t }}>{{ caller() }}</{{ t }}>{% endmacro %}{% call wrap('b') %}in{% endcall %}"},
	{"filter_block", "{% filter trim | upper %}  hello {{ 'x' }}  {% endfilter %}"},
	{"tojson", "{{ messages[2] | tojson }}\n{{ tools | tojson(indent=2) }}\n{{ {'b': 1, 'a': [1.5, none, true, 'é\\n\"']} | tojson(sort_keys=true) }}\n{{ 'x' | tojson(separators=(',', ':')) }}{{ [1, {'a': 2}] | tojson(separators=(',', ':')) }}"},
	{"tojson_ascii", "{{ 'é😀' | tojson(ensure_ascii=true) }}{{ {} | tojson(indent=4) }}{{ [] | tojson(indent=4) }}{{ [[]] | tojson(indent='\\t') }}"},
	{"tojson_errors", "{{ namespace(a=1) | tojson }}"},
	{"tojson_generator", "{{ messages | map(attribute='role') | tojson }}"},
	{"str_filters", "{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'aB' | upper }}{{ 'aB' | lower }}|{{ 'hello wORLD' | capitalize }}|{{ 'hello-wORLD (x) y' | title }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 5 | string }}{{ none | string }}"},
	{"list_filters", "{{ [3, 1, 2] | sort }}{{ [3, 1, 2] | sort(reverse=true) | list }}{{ ['b', 'A'] | sort }}{{ [1, 2, 1] | unique | list }}{{ [1, 2] | first }}{{ [1, 2] | last }}{{ [1, 2, 3] | sum }}{{ [1, 3] | max }}{{ ['b', 'A'] | min }}{{ [1, 2] | reverse | list }}{{ 'abc' | reverse }}{{ [1, 2] | length }}{{ 'héllo' | length }}{{ [] | first }}"},
	{"join_map_select", "{{ messages | map(attribute='role') | join(', ') }}|{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}|{{ messages | rejectattr('tool_calls') | list | length }}|{{ messages | selectattr('tool_calls', 'defined') | list | length }}|{{ ['a', 'B'] | map('upper') | join }}|{{ [1, none, 2] | select | list }}|{{ [1, none] | reject('none') | list }}|{{ messages | join(',', attribute='role') }}"},
	{"generator_truthy", "{{ 'T' if [] | select else 'F' }}{{ 'T' if [] | list else 'F' }}"},
	{"generator_once", "{% set g = [1, 2] | map('string') %}{{ g | join }}|{{ g | join }}"},
	{"generator_length_error", "{{ [1] | select | length }}"},
	{"items_dictsort", "{{ messages[0] | items | list }}{{ {'b': 1, 'a': 2} | dictsort }}{{ {'b': 1, 'a': 2} | dictsort(by='value') }}"},
	{"default", "{{ nope | default('d') }}{{ none | default('d') }}{{ '' | default('d', true) }}{{ nope | d }}|{{ messages[0].x | default(none) }}"},
	{"int_float", "{{ '42' | int }}{{ '4.7' | int }}{{ 'x' | int }}{{ 'x' | int(7) }}{{ 3.9 | int }}{{ '2.5' | float }}{{ 2 | float }}{{ -3 | abs }}{{ 2.567 | round(2) }}{{ 2.5 | round }}"},
	{"indent", "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(width='> ', blank=true) }}"},
	{"safe_markup", "{{ 'a<b>'|safe + '<c>' }}|{{ '<x>' + 'y'|safe }}|{{ '<d>'|safe ~ '<e>' }}|{{ '<&>' | e }}|{{ '<p>' | safe | trim + '&' }}"},
	{"str_methods", "{{ ' a b '.strip() }}|{{ 'xa'.lstrip('x') }}|{{ 'ax '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'hi there'.title() }}|{{ 'aXb'.upper() }}{{ 'aXb'.lower() }}|{{ 'aa'.replace('a', 'b') }}|{{ '-'.join(['a', 'b']) }}|{{ 'abc'.find('c') }}{{ 'abc'.count('b') }}|{{ '12'.isdigit() }}|{{ 'a\\nb'.splitlines() }}"},
	{"str_format", "{{ '{}-{}'.format(1, 'a') }}|{{ '{0}{0}'.format('x') }}|{{ '{n}!'.format(n=3) }}|{{ '{{}}{}'.format(none) }}|{{ '%s=%d' % ('a', 5) }}|{{ '%s' % 'x' }}"},
	{"slices", "{{ messages[1:] | length }}{{ messages[:-1] | length }}{{ messages[::-1][0].role }}|{{ 'hello'[1:3] }}{{ 'hello'[-2:] }}{{ 'hello'[::2] }}{{ [1, 2, 3][5:] }}|{{ messages[-1].role }}"},
	{"dict_methods", "{{ messages[0].get('role') }}{{ messages[0].get('x', 'dflt') }}{{ messages[0].get('x') }}|{{ messages[0].keys() | list }}{{ messages[0].values() | list }}|{{ messages[0]['content'] }}"},
	{"dict_literal_order", "{% set d = {'z': 1, 'a': 2} %}{% for k in d %}{{ k }}{% endfor %}{{ d | tojson }}{{ dict(b=1, a=2) }}"},
	{"mutation_error", "{% set l = [1] %}{{ l.append(2) }}"},
	{"range", "{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(3, 0, -1) | list }}{% for i in range(2) %}{{ i }}{% endfor %}"},
	{"raise", "{% if messages[0].role == 'system' %}{{ raise_exception('no system') }}{% endif %}"},
	{"strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S %d %b %B %a %A %y %j %p %I') }}"},
	{"unknown_filter", "{{ 'a' | nosuchfilter }}"},
	{"unknown_filter_in_if", "{% if false %}{{ 'a' | nosuchfilter }}{% endif %}ok"},
	{"unknown_test", "{{ 'a' is nosuchtest }}"},
	{"unknown_tag", "{% frobnicate %}"},
	{"syntax_error", "{{ 'a' + }}"},
	{"unclosed", "{% if true %}a"},
	{"generation_tag", "{% for m in messages %}{% generation %}{{ m.role }}{% endgeneration %}\n{% endfor %}"},
	{"string_escapes", `{{ 'a\tb\\c\'d' }}{{ "\x41\u00e9\n" }}{{ 'a' 'b' }}`},
	{"numbers", "{{ 1_000 }}{{ 1.5e3 }}{{ 10 // 3 }}{{ 10 % 3 }}{{ 2 ** -1 }}{{ -(3) }}{{ +4 }}"},
	{"zero_div", "{{ 1 / 0 }}"},
	{"nested_access", "{{ messages[2]['tool_calls'][0]['function']['arguments']['city'] }}|{{ tools[0].function.parameters.properties | list }}|{{ tools[0].function.parameters.required[0] }}"},
	{"tool_loop", "{% for t in tools %}{{ t.function.name }}({% for p, s in t.function.parameters.properties.items() %}{{ p }}: {{ s.type }}{% if s.enum is defined %} [{{ s.enum | join('|') }}]{% endif %}{{ ', ' if not loop.last }}{% endfor %}){% endfor %}"},
	{"previtem_undefined", "{% for m in messages %}{% if loop.previtem is defined %}{{ loop.previtem.role }}>{% endif %}{{ m.role }} {% endfor %}"},
	{"content_string_test", "{% for m in messages %}{% if m.content is string %}S{% elif m.content is none %}N{% else %}O{% endif %}{% endfor %}"},
	{"tool_calls_guard", "{% for m in messages %}{% if m.tool_calls is defined and m.tool_calls %}{{ m.tool_calls | length }}{% endif %}{% endfor %}"},
	{"wordcount_center", "{{ 'a b, c' | wordcount }}[{{ 'ab' | center(7) }}]"},
	{"batch", "{{ [1, 2, 3] | batch(2) | list }}{{ [1, 2, 3] | batch(2, 0) | list }}"},
	{"attr_filter", "{{ messages[0] | attr('role') }}|{{ messages[0] | attr('items') is callable }}"},
	{"int_key_attr", "{{ messages.0.role }}{{ [[1, 2]].0.1 }}"},
	{"precedence", "{{ -2 ** 2 }}{{ -1 | abs }}{{ 2 + 3 * 4 }}{{ not 'a' in 'b' }}{{ 1 ~ 2 * 3 }}{{ (1 ~ 2) | int + 1 }}"},
	{"precedence_error", "{{ 'a' ~ 1 + 2 }}"},
	{"ws_mixed", "\t{%- if true %}\n\ta\n\t{%- endif %}\n  {{- 'b' -}}  \n  c  {% if true -%}\n  d\n{%- endif %}  e\n"},
	{"ws_text_before_tag", "a {% if true %}b{% endif %} c\n  x {%- if true %} y{% endif %}"},
	{"ws_nbsp", "a\n\u00a0 {% if true %}b{% endif %}\n\u00a0{%- if true %}c{% endif %}"},
	{"ws_trailing_newlines", "a\n\n"},
	{"ws_comment_dash", "a {#- x -#} b\n{# y #}  \nc"},
	{"ws_loop_lines", "{% for m in messages %}\n    {{ m.role }}\n{% endfor %}\n"},
	{"ws_set_lines", "{% set a = 1 %}\n  {% set b = 2 %}\n{{ a + b }}\n"},
	{"ws_block_end_plus", "{% if true +%}\nx{% endif %}"},
	{"cond_in_for", "{% for m in (messages if true else []) %}{{ loop.index }}{% endfor %}{% set z = 1 if none else 2 %}{{ z }}"},
	{"nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }}{% endfor %}"},
	{"macro_outer_loop", "{% macro r(m) %}[{{ m.role }}{% if m.content %}:{{ m.content[:5] }}{% endif %}]{% endmacro %}{% for m in messages %}{{ r(m) }}{% endfor %}"},
	{"list_of_dicts_literal", "{% set ts = [{'name': 'a', 'n': 2}, {'name': 'b', 'n': 1}] %}{{ ts | sort(attribute='n') | map(attribute='name') | join }}{{ ts | selectattr('n', 'gt', 1) | list }}"},
	{"keyword_get", "{{ messages[0].items() | list | length }}{{ messages[0]['items'] is callable }}"},
}

// TestSnippets compares each snippet's output (or failure) with Python's
// jinja2, rendered with a plain and a tool-use conversation.
func TestSnippets(t *testing.T) {
	type snippet struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	src := map[string]string{}
	var list []snippet
	for _, s := range snippets {
		if _, dup := src[s.name]; dup {
			t.Fatalf("duplicate snippet %s", s.name)
		}
		src[s.name] = s.src
		list = append(list, snippet{s.name, s.src})
	}
	js, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "snippets.json")
	if err := os.WriteFile(file, js, 0o644); err != nil {
		t.Fatal(err)
	}
	all := Conversations()
	convs := map[string]Conversation{"user": all[0], "tool_call": all[6]}
	ref := pythonRender(t, []Conversation{all[0], all[6]}, "--snippets", file)
	agree := 0
	for _, r := range ref {
		tmpl, err := Compile(src[r.Template])
		var got string
		if err == nil {
			vars, verr := convs[r.Conversation].Vars()
			if verr != nil {
				t.Fatal(verr)
			}
			got, err = tmpl.Render(vars)
		}
		switch {
		case r.Error != nil && err != nil:
			agree++
		case r.Error != nil:
			t.Errorf("%s/%s: jinja2 raised %q; Go rendered %q", r.Template, r.Conversation, *r.Error, got)
		case err != nil:
			t.Errorf("%s/%s: Go error %v; jinja2 rendered %q", r.Template, r.Conversation, err, *r.Output)
		case got != *r.Output:
			t.Errorf("%s/%s: output differs %s", r.Template, r.Conversation, strings.ReplaceAll(firstDiff(*r.Output, got), "\t\t", "\t"))
		default:
			agree++
		}
	}
	t.Logf("snippets: %d/%d agree with jinja2", agree, len(ref))
}
