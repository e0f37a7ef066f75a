package tests

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRedisCompatFiles runs every command file in tests/respdiff (the format of
// shared/tools/resp-diff: one command a line as typed to redis-cli, # comments) against
// redis-server and raftlock, in RESP2 and RESP3, and requires byte-identical replies. The files
// are the ones the replies were checked with by hand; here they stay checked.
func TestRedisCompatFiles(t *testing.T) {
	files, err := filepath.Glob("respdiff/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no command files in tests/respdiff: %v", err)
	}
	rs := startRedis(t)
	n := startNode(t, t.TempDir())
	for _, file := range files {
		cmds, err := readCommandFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, proto := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/RESP%d", filepath.Base(file), proto), func(t *testing.T) {
				compareReplies(t, rs.addr, n.addr, proto, cmds)
			})
		}
	}
}

// readCommandFile reads a resp-diff command file: blank lines and lines starting with # are
// skipped, words are split on spaces, and "..." or '...' quote a word (with \" and \\ inside
// double quotes), as redis-cli reads them.
func readCommandFile(path string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var cmds [][]string
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		words, err := splitWords(text)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		cmds = append(cmds, words)
	}
	return cmds, sc.Err()
}

func splitWords(s string) ([]string, error) {
	var words []string
	for i := 0; i < len(s); {
		if s[i] == ' ' {
			i++
			continue
		}
		var w strings.Builder
		if strings.HasPrefix(s[i:], "$'") {
			// Bash's ANSI-C quoting, which resp-diff's shell reads: the one way to write a
			// line feed inside an argument (a library's shebang line ends with one).
			j, err := ansiQuoted(s, i+2, &w)
			if err != nil {
				return nil, err
			}
			i = j
			words = append(words, w.String())
			continue
		}
		switch q := s[i]; q {
		case '"', '\'':
			i++
			for ; i < len(s) && s[i] != q; i++ {
				if q == '"' && s[i] == '\\' && i+1 < len(s) {
					i++
				}
				w.WriteByte(s[i])
			}
			if i == len(s) {
				return nil, fmt.Errorf("unclosed quote in %q", s)
			}
			i++
		default:
			for ; i < len(s) && s[i] != ' '; i++ {
				w.WriteByte(s[i])
			}
		}
		words = append(words, w.String())
	}
	return words, nil
}

// ansiQuoted reads a $'...' word from s[i:] (after the $'), into w, with the escapes \n, \r,
// \t, \\ and \', and returns where the word ends.
func ansiQuoted(s string, i int, w *strings.Builder) (int, error) {
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'':
			return i + 1, nil
		case c == '\\' && i+1 < len(s):
			i++
			switch s[i] {
			case 'n':
				w.WriteByte('\n')
			case 'r':
				w.WriteByte('\r')
			case 't':
				w.WriteByte('\t')
			default:
				w.WriteByte(s[i])
			}
		default:
			w.WriteByte(c)
		}
	}
	return i, fmt.Errorf("unclosed $' quote in %q", s)
}
