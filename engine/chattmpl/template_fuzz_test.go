package chattmpl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzCompileRender feeds arbitrary sources through Compile and Render: they
// may fail, but must not panic (Render turns panics into "internal error"
// errors, which count as failures here) or run away.
func FuzzCompileRender(f *testing.F) {
	for _, s := range []string{
		"",
		"{{ messages[0].content | trim }}",
		"{%- for m in messages -%}{{ m.role ~ ': ' ~ m.content }}{% if not loop.last %}\n{% endif %}{%- endfor %}",
		"{% set ns = namespace(x=1) %}{% for i in range(3) %}{% set ns.x = ns.x * 2 %}{% endfor %}{{ ns.x }}",
		"{% macro m(a, b='x') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}",
		"{{ tools | tojson(indent=2) }}{{ {'a': [1, 2.5, none, true]} | tojson }}",
		"{{ 'a,b'.split(',') | join('|') }}{{ messages | selectattr('role', 'equalto', 'user') | list | length }}",
		"{% if x is defined %}{{ x }}{% elif y %}y{% else %}{{ raise_exception('no') }}{% endif %}",
		"{{ messages[1:] | map(attribute='content') | join }}{{ 'abc'[::-1] }}{{ 7 // 2 }}{{ 7 % -3 }}",
		"{% filter upper %}a{% endfilter %}{% set b %}x{% endset %}{{ b }}{# c #}{% raw %}{{ r }}{% endraw %}",
		"{{ '%s-%d' % ('a', 3) }}{{ '{}:{name}'.format(1, name='n') }}{{ strftime_now('%d %b %Y') }}",
		"{% call(x) m() %}{{ x }}{% endcall %}",
	} {
		f.Add(s)
	}
	if dir := refTemplates(); dir != "" {
		names, _ := filepath.Glob(filepath.Join(dir, "*.jinja"))
		for i, n := range names {
			if i%4 != 0 { // a sample keeps the seed corpus quick
				continue
			}
			if b, err := os.ReadFile(n); err == nil {
				f.Add(string(b))
			}
		}
	}
	vars, err := Conversations()[6].Vars()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Compile(src)
		if err != nil {
			if strings.Contains(err.Error(), "internal error") {
				t.Fatalf("Compile panicked: %v", err)
			}
			return
		}
		out, err := tmpl.Render(vars)
		if err != nil && strings.Contains(err.Error(), "internal error") {
			t.Fatalf("Render panicked: %v", err)
		}
		if len(out) > maxOutput {
			t.Fatalf("output of %d bytes exceeds the limit", len(out))
		}
	})
}
