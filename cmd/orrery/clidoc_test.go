package main

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The flag tables in docs/cli.md come from the commands' own help: each
// sits between <!-- flags:CMD --> and <!-- /flags -->. A command with
// subcommands ("trace ls", "key set") prints no flag defaults, only usage
// lines: its table lists the flags those lines name, with the subcommands
// that take them (and the test checks that each subcommand accepts them).
// TestCLIDoc fails when a table names a flag the command lacks, lacks one
// the command has, or differs from what -update would write:
//
//	go test ./cmd/orrery -run TestCLIDoc -update
var updateCLIDoc = flag.Bool("update", false, "rewrite the flag tables in docs/cli.md from the commands' -h output")

// cliDocCommands are the commands of run's switch that take flags
// ("version" takes none).
var cliDocCommands = []string{
	"agent", "demo", "doctor", "ring-bench", "bench", "trace", "models", "tokenize", "pull", "run",
	"gen-model", "convert", "engine-bench", "logits", "perplexity", "batch-bench", "tp-bench", "speed", "key", "join", "runner",
}

const cliDocPath = "../../docs/cli.md"

// Stand-ins for the machine-dependent parts of defaults ($HOME, the temp
// dir), so that the tables read the same everywhere.
const (
	cliDocHome = "/clidoc-home"
	cliDocTmp  = "/clidoc-tmp"
)

// docFlag is one flag as a command's help shows it.
type docFlag struct {
	name  string // without dashes
	value string // the value's type or placeholder; "" for a bool
	def   string // default, "" when the help shows none
	usage string
	// synopsis is true for flags read from usage lines (commands with
	// subcommands, which print no flag defaults): they have no default or
	// usage to show, but the subcommands that take them.
	synopsis bool
	subs     []string
}

// cliHelp runs "orrery args… -h" and returns what it printed.
func cliHelp(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append(args, "-h"), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("orrery %s -h: exit %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	}
	out := stdout.String() + stderr.String()
	out = strings.ReplaceAll(out, cliDocHome, "~")
	return strings.ReplaceAll(out, cliDocTmp, "$TMPDIR")
}

var (
	defaultsFlagRE = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9_-]*)(?: (\S+))?(?:\t(.*))?$`)
	synopsisFlagRE = regexp.MustCompile(`(?:^|[\s\[|])--?([a-z][a-z0-9-]*)(?: ([A-Z][A-Z]*))?`)
)

// defaultsFlags parses flag.PrintDefaults output.
func defaultsFlags(help string) []docFlag {
	var out []docFlag
	lines := strings.Split(help, "\n")
	for i := 0; i < len(lines); i++ {
		m := defaultsFlagRE.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		f := docFlag{name: m[1], value: m[2]}
		var usage []string
		if m[3] != "" {
			usage = append(usage, m[3])
		}
		for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    \t") {
			i++
			usage = append(usage, strings.TrimPrefix(lines[i], "    \t"))
		}
		u := strings.Join(usage, " ")
		if j := strings.LastIndex(u, " (default "); j >= 0 && strings.HasSuffix(u, ")") {
			f.def = strings.Trim(u[j+len(" (default "):len(u)-1], `"`)
			u = u[:j]
		}
		f.usage = u
		out = append(out, f)
	}
	return out
}

// synopsisLines returns, for each usage line of cmd ("orrery cmd …",
// possibly after "Usage:"), the words after "orrery cmd" up to the line's
// description (two spaces).
func synopsisLines(help, cmd string) []string {
	var out []string
	for _, l := range strings.Split(help, "\n") {
		l = strings.TrimSpace(l)
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(l, "Usage:"), "usage:"))
		rest, ok := strings.CutPrefix(l, "orrery "+cmd+" ")
		if !ok {
			continue
		}
		if i := strings.Index(rest, "  "); i >= 0 {
			rest = rest[:i]
		}
		out = append(out, rest)
	}
	return out
}

// synopsisFlags parses the flags a usage line names.
func synopsisFlags(line string) []docFlag {
	var out []docFlag
	for _, m := range synopsisFlagRE.FindAllStringSubmatch(line, -1) {
		out = append(out, docFlag{name: m[1], value: m[2], synopsis: true})
	}
	return out
}

// cliDocWant returns every flag table docs/cli.md must hold, by key, from
// the commands' help.
func cliDocWant(t *testing.T) map[string][]docFlag {
	t.Helper()
	t.Setenv("HOME", cliDocHome)
	t.Setenv("TMPDIR", cliDocTmp)
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("ORRERY_LLAMA_REF", "")

	// Every command the top-level usage names is covered here.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-h"}, &stdout, &stderr); code != 0 {
		t.Fatalf("orrery -h: exit %d", code)
	}
	for _, l := range strings.Split(stdout.String(), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "orrery" && f[1] != "version" && !slices.Contains(cliDocCommands, f[1]) {
			t.Errorf("orrery -h names command %q, which TestCLIDoc does not know: add it to cliDocCommands and docs/cli.md", f[1])
		}
	}

	want := map[string][]docFlag{}
	for _, cmd := range cliDocCommands {
		help := cliHelp(t, cmd)
		if fl := defaultsFlags(help); len(fl) > 0 {
			// The usage lines may name only flags the command has.
			for _, line := range synopsisLines(help, cmd) {
				for _, sf := range synopsisFlags(line) {
					if !slices.ContainsFunc(fl, func(f docFlag) bool { return f.name == sf.name }) {
						t.Errorf("orrery %s -h: the usage line names --%s, which the command does not define", cmd, sf.name)
					}
				}
			}
			want[cmd] = fl
			continue
		}
		// No flag defaults: a command with subcommands, each named on a
		// usage line with its flags. One table per command lists every
		// flag with the subcommands that take it.
		lines := synopsisLines(help, cmd)
		if len(lines) == 0 {
			t.Errorf("orrery %s -h prints neither flags nor usage lines", cmd)
			continue
		}
		var all []docFlag
		for _, line := range lines {
			sub := strings.Fields(line)[0]
			if strings.HasPrefix(sub, "-") || strings.HasPrefix(sub, "[") {
				t.Errorf("orrery %s -h: usage line %q names no subcommand", cmd, line)
				continue
			}
			for _, f := range synopsisFlags(line) {
				// The subcommand must accept the flag: a flag it lacks
				// fails parsing before -h is reached.
				var so, se bytes.Buffer
				code := run([]string{cmd, sub, "-" + f.name + "=1", "-h"}, &so, &se)
				if strings.Contains(se.String(), "flag provided but not defined") {
					t.Errorf("orrery %s %s: the usage names --%s, which it does not define (exit %d)", cmd, sub, f.name, code)
				}
				i := slices.IndexFunc(all, func(g docFlag) bool { return g.name == f.name })
				if i < 0 {
					all = append(all, f)
					i = len(all) - 1
				}
				if all[i].value == "" {
					all[i].value = f.value
				}
				all[i].subs = append(all[i].subs, sub)
			}
		}
		slices.SortFunc(all, func(a, b docFlag) int { return strings.Compare(a.name, b.name) })
		want[cmd] = all
	}
	return want
}

func (f docFlag) row() string {
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	code := func(s string) string {
		if s == "" {
			return ""
		}
		return "`" + cell(s) + "`"
	}
	dashes := "--"
	if len(f.name) == 1 {
		dashes = "-" // -o, as the help writes it
	}
	if f.synopsis {
		return fmt.Sprintf("| `%s%s` | %s | %s |", dashes, f.name, cell(f.value), strings.Join(f.subs, ", "))
	}
	return fmt.Sprintf("| `%s%s` | %s | %s | %s |", dashes, f.name, cell(f.value), code(f.def), cell(f.usage))
}

// cliDocTable renders one flag table, as it sits between the markers.
func cliDocTable(flags []docFlag) string {
	if len(flags) == 0 {
		return "(no flags)\n"
	}
	var b strings.Builder
	if flags[0].synopsis {
		b.WriteString("| flag | value | subcommands |\n|---|---|---|\n")
	} else {
		b.WriteString("| flag | value | default | meaning |\n|---|---|---|---|\n")
	}
	for _, f := range flags {
		b.WriteString(f.row() + "\n")
	}
	return b.String()
}

var (
	cliDocBlockRE = regexp.MustCompile(`(?s)<!-- flags:([a-z0-9 -]+) -->\n(.*?)<!-- /flags -->`)
	cliDocNameRE  = regexp.MustCompile("^\\| `--?([A-Za-z0-9][A-Za-z0-9_-]*)`")
)

func TestCLIDoc(t *testing.T) {
	want := cliDocWant(t)
	doc, err := os.ReadFile(cliDocPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)

	if *updateCLIDoc {
		seen := map[string]bool{}
		text = cliDocBlockRE.ReplaceAllStringFunc(text, func(block string) string {
			key := cliDocBlockRE.FindStringSubmatch(block)[1]
			fl, ok := want[key]
			if !ok {
				return block // reported below
			}
			seen[key] = true
			return "<!-- flags:" + key + " -->\n" + cliDocTable(fl) + "<!-- /flags -->"
		})
		for _, key := range slices.Sorted(maps.Keys(want)) {
			if !seen[key] {
				text += fmt.Sprintf("\n## orrery %s\n\n<!-- flags:%s -->\n%s<!-- /flags -->\n", key, key, cliDocTable(want[key]))
			}
		}
		if err := os.WriteFile(cliDocPath, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the flag tables in %s", filepath.Clean(cliDocPath))
	}

	got := map[string]string{}
	for _, m := range cliDocBlockRE.FindAllStringSubmatch(text, -1) {
		if _, dup := got[m[1]]; dup {
			t.Errorf("docs/cli.md has two flag tables for %q", m[1])
		}
		got[m[1]] = m[2]
	}
	for _, key := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[key]; !ok {
			t.Errorf("docs/cli.md has a flag table for %q, which is no command of orrery -h", key)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(want)) {
		table, ok := got[key]
		if !ok {
			t.Errorf("docs/cli.md has no flag table for orrery %s (<!-- flags:%s --> … <!-- /flags -->); run: go test ./cmd/orrery -run TestCLIDoc -update", key, key)
			continue
		}
		var docNames []string
		for _, l := range strings.Split(table, "\n") {
			if m := cliDocNameRE.FindStringSubmatch(l); m != nil {
				docNames = append(docNames, m[1])
			}
		}
		var codeNames []string
		for _, f := range want[key] {
			codeNames = append(codeNames, f.name)
			if !slices.Contains(docNames, f.name) {
				t.Errorf("orrery %s has --%s, which docs/cli.md does not list", key, f.name)
			}
		}
		for _, n := range docNames {
			if !slices.Contains(codeNames, n) {
				t.Errorf("docs/cli.md lists --%s for orrery %s, which the command does not have", n, key)
			}
		}
		if w := cliDocTable(want[key]); table != w {
			t.Errorf("docs/cli.md's flag table for orrery %s differs from the command's help; run: go test ./cmd/orrery -run TestCLIDoc -update\n%s",
				key, lineDiff(table, w))
		}
	}
}

// lineDiff lists the lines only in got ("- ") and only in want ("+ ").
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b strings.Builder
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("  - " + l + "\n")
		}
	}
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("  + " + l + "\n")
		}
	}
	return b.String()
}
