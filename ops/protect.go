package ops

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
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

// loopbackListen reports whether the listen address addr (host:port, as configured) binds only
// the loopback interface: a loopback IP, "localhost", or a host name whose every address is
// loopback. An empty host, 0.0.0.0 and :: bind every interface: not loopback.
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	switch {
	case err != nil || host == "":
		return false
	case strings.EqualFold(host, "localhost"):
		return true
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().IsLoopback()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.Unmap().IsLoopback() {
			return false
		}
	}
	return true
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

// checkExposure refuses to listen on a non-loopback address (loopbackListen) while no
// credentials are set, unless insecure. Start asks it before it listens, so that a refused
// address is never bound, and again of the address it bound.
func checkExposure(addr string, users Users, insecure bool) error {
	if insecure || credentialsSet(users) || loopbackListen(addr) {
		return nil
	}
	return fmt.Errorf("HTTP address %s is not loopback and no credentials are set: set --requirepass or --aclfile "+
		"(the status page and the profiles then need an @admin user's basic auth), listen on 127.0.0.1, or "+
		"pass --insecure-http yes to serve it to anyone who can reach it", addr)
}
