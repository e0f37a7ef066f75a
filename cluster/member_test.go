package cluster

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	ok := testConfig("n1")
	tests := []struct {
		name  string
		mod   func(*Config)
		field string // "" = valid
	}{
		{"valid", func(*Config) {}, ""},
		{"bootstrap alone", func(c *Config) { c.Bootstrap = true }, ""},
		{"bootstrap with peers only", func(c *Config) {
			c.Bootstrap, c.RaftAddr = true, ""
			c.Peers = []Peer{{ID: "n1", RaftAddr: "a"}}
		}, ""},
		{"bootstrap without address", func(c *Config) { c.Bootstrap, c.RaftAddr = true, "" }, "RaftAddr"},
		{"peer without address", func(c *Config) { c.Peers = []Peer{{ID: "n1"}} }, "Peers[0]"},
		{"peer without id", func(c *Config) { c.Peers = []Peer{{ID: "n1", RaftAddr: "a"}, {RaftAddr: "b"}} }, "Peers[1]"},
		{"negative member table", func(c *Config) { c.MaxMembers = -1 }, "MaxMembers"},
	}
	for _, tt := range tests {
		cfg := ok
		tt.mod(&cfg)
		err := cfg.Validate()
		if (err == nil) != (tt.field == "") || err != nil && !strings.Contains(err.Error(), "Config."+tt.field) {
			t.Errorf("%s: Validate() = %v, want an error naming Config.%s (none if empty)", tt.name, err, tt.field)
		}
	}
}
