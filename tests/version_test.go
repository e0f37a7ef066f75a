package tests

import (
	"os"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/server"
)

// TestVersionInUpgrades checks that docs/upgrades.md's table of versions has a row for the
// version this tree reports (server.Version), so a release cannot be cut without saying which
// formats it reads. (The git tags cannot be checked: a CI checkout may have none.)
func TestVersionInUpgrades(t *testing.T) {
	doc, err := os.ReadFile("../docs/upgrades.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Versions\n")
	if !ok {
		t.Fatal("docs/upgrades.md has no \"## Versions\" section")
	}
	var versions []string
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "## ") {
			break
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "v") {
			continue
		}
		versions = append(versions, strings.TrimSpace(cells[1]))
	}
	want := "v" + server.Version
	for _, v := range versions {
		if v == want {
			return
		}
	}
	t.Errorf("docs/upgrades.md's table of versions names %q, not %s (server.Version): add its row", versions, want)
}
