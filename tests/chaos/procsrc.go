package chaos

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procSource finds which of the processes in pids (node index -> PID) owns the socket at the
// other end of the accepted connection in: it looks the socket up in /proc/net/tcp{,6} by its
// address pair, then looks for its inode among each process's open files. The forwarding proxy
// needs it because the server dials the leader from the default source address, the same for
// every node (Linux only, like the rest of the harness).
func procSource(in net.Conn, pids map[int]int) (int, bool) {
	ra, ok1 := in.RemoteAddr().(*net.TCPAddr)
	la, ok2 := in.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, false
	}
	inode, ok := socketInode(ra, la)
	if !ok {
		return 0, false
	}
	want := fmt.Sprintf("socket:[%d]", inode)
	for idx, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == want {
				return idx, true
			}
		}
	}
	return 0, false
}

// procAddr renders an IPv4 address as /proc/net/tcp does on a little-endian machine: the
// address as a host-order 32-bit word, then the port; tcp6 shows IPv4 as ::ffff:a.b.c.d.
func procAddr(a *net.TCPAddr, v6 bool) string {
	ip := a.IP.To4()
	if ip == nil {
		return ""
	}
	s := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], a.Port)
	if v6 {
		s = "0000000000000000FFFF0000" + s
	}
	return s
}

// socketInode returns the inode of the TCP socket whose local address is local and whose peer
// is remote.
func socketInode(local, remote *net.TCPAddr) (uint64, bool) {
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		v6 := strings.HasSuffix(table, "6")
		l, r := procAddr(local, v6), procAddr(remote, v6)
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) > 9 && fs[1] == l && fs[2] == r {
				f.Close()
				n, err := strconv.ParseUint(fs[9], 10, 64)
				return n, err == nil
			}
		}
		f.Close()
	}
	return 0, false
}
