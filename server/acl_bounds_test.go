package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ACL users are bounded: at most maxACLUsers in force (a new one past it is refused with a
// clear error until one is deleted), each user's rules at most maxACLUserBytes in canonical
// form and its name at most maxACLUserName bytes; an --aclfile past them does not load.
func TestACLUsersBounded(t *testing.T) {
	for _, cfg := range nodeConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			addr, s := serveNode(t, newFakeNode(), secure(cfg.secured))
			admin := adminConn(t, addr, cfg.secured)
			for i := len(s.users()); i < maxACLUsers; i++ {
				if got := admin.do("ACL", "SETUSER", fmt.Sprintf("u%d", i), "on", ">pw", "~k*"); got != "+OK\r\n" {
					t.Fatalf("user %d: %q", i, got)
				}
			}
			if n := len(s.users()); n != maxACLUsers {
				t.Fatalf("%d users in force, want %d", n, maxACLUsers)
			}
			full := "-ERR too many ACL users (at most 1024): delete one with ACL DELUSER first\r\n"
			if got := admin.do("ACL", "SETUSER", "one-more", "on"); got != full {
				t.Errorf("a new user past the bound: got %q, want %q", got, full)
			}
			if got := admin.do("ACL", "SETUSER", "u5", "+get"); got != "+OK\r\n" {
				t.Errorf("changing a user at the bound: %q", got)
			}
			if got := admin.do("ACL", "DELUSER", "u5"); got != ":1\r\n" {
				t.Fatalf("DELUSER: %q", got)
			}
			if got := admin.do("ACL", "SETUSER", "one-more", "on"); got != "+OK\r\n" {
				t.Errorf("a new user once one was deleted: %q", got)
			}
			big := "~" + strings.Repeat("p", maxACLUserBytes)
			if got := admin.do("ACL", "SETUSER", "u6", big); !strings.HasPrefix(got, "-ERR ACL user 'u6' is too large: its rules take 16") || !strings.HasSuffix(got, "bytes in canonical form (at most 16384)\r\n") {
				t.Errorf("a user's rules past the bound: %q", got)
			}
			if got := admin.do("ACL", "GETUSER", "u6"); strings.Contains(got, "ppppp") {
				t.Error("the refused rules were applied")
			}
			var many []string
			for i := 0; i < 1000; i++ {
				many = append(many, fmt.Sprintf(">password-%d", i))
			}
			if got := admin.do(append([]string{"ACL", "SETUSER", "u7"}, many...)...); !strings.Contains(got, "is too large") {
				t.Errorf("1000 passwords: %q", got)
			}
			if got := admin.do("ACL", "SETUSER", strings.Repeat("n", maxACLUserName+1), "on"); got != "-ERR ACL user names are at most 256 bytes (got 257)\r\n" {
				t.Errorf("a long name: %q", got)
			}
		})
	}
	dir := t.TempDir()
	for _, tc := range []struct{ name, file, want string }{
		{"too many users", strings.Repeat("user x on\n", 1) + func() string {
			var b strings.Builder
			for i := 0; i < maxACLUsers; i++ {
				fmt.Fprintf(&b, "user u%d on\n", i)
			}
			return b.String()
		}(), ":1024: too many ACL users (at most 1024, the default user included)"},
		{"a user too large", "user big on ~" + strings.Repeat("p", maxACLUserBytes) + "\n", ":1: ACL user 'big' is too large"},
	} {
		file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
		os.WriteFile(file, []byte(tc.file), 0o600)
		if _, err := New(Config{ACLFile: file, Logger: quiet}, Deps{Replica: newFakeNode()}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
