package cluster

import "syscall"

// errAddrNotAvail is what dialing from a source address that cannot reach the peer returns.
var errAddrNotAvail = syscall.EADDRNOTAVAIL
