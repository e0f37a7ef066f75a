package main

import (
	"strings"
	"testing"
)

// --tls-auth-clients-user: CN or off (any case), and CN only where client certificates are
// verified.
func TestTLSAuthClientsUserOption(t *testing.T) {
	getenv := func(string) string { return "" }
	tlsArgs := []string{"--tls-cert-file", "c", "--tls-key-file", "k", "--tls-ca-cert-file", "ca"}
	for _, tc := range []struct {
		args []string
		want string // the value, or the start of the error
	}{
		{nil, "off"},
		{append(tlsArgs, "--tls-auth-clients-user", "CN"), "CN"},
		{append(tlsArgs, "--tls-auth-clients-user", "cn", "--tls-auth-clients", "optional"), "CN"},
		{append(tlsArgs, "--tls-auth-clients-user", "OFF"), "off"},
		{append(tlsArgs, "--tls-auth-clients-user", "SAN"), "--tls-auth-clients-user: want CN or off"},
		{[]string{"--tls-auth-clients-user", "CN"}, "--tls-auth-clients-user CN maps verified client certificates"},
		{append(tlsArgs, "--tls-auth-clients-user", "CN", "--tls-auth-clients", "no"), "--tls-auth-clients-user CN maps verified client certificates"},
	} {
		o, err := parseOptions(tc.args, getenv)
		got := o.tlsAuthClientsUser
		if err != nil {
			got = err.Error()
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.args, got, tc.want)
		}
	}
}
