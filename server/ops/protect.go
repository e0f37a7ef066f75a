package ops

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
)

// Protected mode on the HTTP surface (DESIGN.md §10), as on the client port: while the node's
// clients need no credentials (Users.AuthRequired is false, or there are no Users), only loopback
// addresses are served; other addresses get 403 and a body that says what to do, unless the
// surface was opened with Config.Insecure (--insecure-http). Once credentials are set every
// address is served: the status page and the profiles then ask for an @admin user's (adminOnly),
// while /livez, /readyz and /metrics stay open (figures, no key names, owners or addresses).
//
// The same judgement refuses to start a surface whose listen address is not loopback while no
// credentials are set, unless Insecure says so (Start).

// protectedDenied is the body of a 403 from protected mode.
const protectedDenied = "403 forbidden: raftlock is running in protected mode because no password is set for the default user " +
	"and no ACL users exist. In this mode the HTTP port answers only the loopback interface. To serve other addresses, " +
	"either set credentials (--requirepass or --aclfile: the status page and the profiles then ask for an @admin user's " +
	"basic auth) or, on a network you trust, start the node with --insecure-http yes.\n"

// credentialsSet reports whether the node's clients must authenticate.
func credentialsSet(users Users) bool { return users != nil && users.AuthRequired() }

// loopbackHostPort reports whether hostport (a request's RemoteAddr, a listener's address) is
// on the loopback interface. Anything it cannot read is not.
func loopbackHostPort(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// protect serves h to loopback clients, to every client once credentials are set, and to every
// client if insecure; others get protectedDenied.
func protect(users Users, insecure bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !insecure && !credentialsSet(users) && !loopbackHostPort(r.RemoteAddr) {
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, protectedDenied, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// checkExposure refuses a listener on a non-loopback address while no credentials are set,
// unless insecure.
func checkExposure(addr net.Addr, users Users, insecure bool) error {
	if insecure || credentialsSet(users) || loopbackHostPort(addr.String()) {
		return nil
	}
	return fmt.Errorf("HTTP address %s is not loopback and no credentials are set: set --requirepass or --aclfile "+
		"(the status page and the profiles then need an @admin user's basic auth), listen on 127.0.0.1, or "+
		"pass --insecure-http yes to serve it to anyone who can reach it", addr)
}
