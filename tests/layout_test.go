package tests

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/raftlock/raftlock"

// goList runs go list with args and returns its output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}

// TestLayout enforces DESIGN.md §1's arrows: which of our packages each package may depend on,
// directly or not. A package not listed here may depend on anything of ours, except that no
// command may depend on a package under tests/.
func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		pkg  string
		want []string
	}{
		{"fsm", nil},
		{"metrics", nil},
		{"store", []string{"metrics"}},
		{"resp", nil},
		{"certs", nil},
		{"script", nil},
		{"node", []string{"fsm", "metrics"}},
		{"locks", []string{"fsm", "node", "metrics"}},
		{"server", []string{"fsm", "node", "locks", "resp", "script", "metrics"}},
		{"ops", []string{"fsm", "node", "metrics"}},
		{"raftnode", []string{"fsm", "node", "metrics"}},
		{"cluster", []string{"raftnode", "fsm", "node", "store", "resp", "certs", "backup", "metrics"}},
		{"backup", []string{"fsm"}},
		{"client", nil}, // a library for applications: it speaks to raftlock only over RESP
	} {
		pkg, want := tc.pkg, tc.want
		t.Run(pkg, func(t *testing.T) {
			path := module + "/" + pkg
			for _, dep := range goList(t, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", path) {
				ours, ok := strings.CutPrefix(dep, module+"/")
				if !ok || dep == path {
					continue
				}
				if !slices.Contains(want, ours) {
					t.Errorf("%s depends on %s; it may depend only on %v of ours", pkg, ours, want)
				}
			}
		})
	}
	// No command depends on a package under tests/: test support and harnesses are never
	// linked into what we ship. A command's own _test files may import tests/testutil
	// (cmd/raftlock-bench's tests start redis-server with it); go list -deps without -test
	// leaves them out, as the binary does.
	t.Run("cmd", func(t *testing.T) {
		cmds := goList(t, module+"/cmd/...")
		if len(cmds) < 2 {
			t.Fatalf("go list found only %d commands: %q", len(cmds), cmds)
		}
		for _, cmd := range cmds {
			for _, dep := range goList(t, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", cmd) {
				if dep == module+"/tests" || strings.HasPrefix(dep, module+"/tests/") {
					t.Errorf("%s depends on %s: nothing under cmd/ may depend on tests/", cmd, dep)
				}
			}
		}
	})
}

// TestNoTestingInProduction checks that no non-test file of ours imports "testing" (STYLE.md).
// Packages under tests/ are exempt: they are test support (tests/testutil's WaitFor and Launch
// take a testing.TB), never production, and TestLayout checks that no command depends on them.
func TestNoTestingInProduction(t *testing.T) {
	lines := goList(t, "-f", "{{.ImportPath}}|{{join .Imports \",\"}}", module+"/...")
	if len(lines) < 5 {
		t.Fatalf("go list found only %d packages: %q", len(lines), lines)
	}
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, "|")
		if pkg == module+"/tests" || strings.HasPrefix(pkg, module+"/tests/") {
			continue
		}
		for imp := range strings.SplitSeq(imports, ",") {
			if imp == "testing" || strings.HasPrefix(imp, "testing/") {
				t.Errorf("%s imports %q outside its tests", pkg, imp)
			}
		}
	}
}
