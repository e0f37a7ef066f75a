package fsm

import "testing"

// A key whose first byte names no database (none is written today) is still counted, apart.
func TestCountsPastTheDatabases(t *testing.T) {
	m := New()
	m.set("\x00a", Lock{Owner: []byte("o")})
	m.set("\x20a", Lock{Owner: []byte("o"), LeaseMs: 1000})
	m.set("\xffa", Lock{Owner: []byte("o")})
	if got := [4]int{m.LenDB(0), m.LenDB(0x20), m.LenDB(0xff), m.LeasesDB(0x20)}; got != [4]int{1, 1, 1, 1} {
		t.Errorf("LenDB 0, 0x20, 0xff and LeasesDB 0x20 = %v; want 1 each", got)
	}
	if m.Leases() != 1 || m.LenDB(1) != 0 || m.LenDB(300) != 0 {
		t.Errorf("Leases %d, LenDB(1) %d, LenDB(300) %d; want 1, 0, 0", m.Leases(), m.LenDB(1), m.LenDB(300))
	}
	m.del("\x20a")
	if m.LenDB(0x20) != 0 || m.LeasesDB(0x20) != 0 || m.Leases() != 0 {
		t.Errorf("after del: LenDB %d, LeasesDB %d, Leases %d; want 0", m.LenDB(0x20), m.LeasesDB(0x20), m.Leases())
	}
}
