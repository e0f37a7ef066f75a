package main

import (
	"slices"
	"testing"
)

func TestParseWaiters(t *testing.T) {
	tests := []struct {
		list    string
		want    []int
		wantErr bool
	}{
		{"16", []int{16}, false},
		{"16,2000", []int{16, 2000}, false},
		{" 16 , 2000 ,", []int{16, 2000}, false},
		{"", nil, false},
		{"0", nil, true},
		{"5001", nil, true},
		{"x", nil, true},
		{"16,16", nil, true},
	}
	for _, tt := range tests {
		got, err := parseWaiters(tt.list)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("parseWaiters(%q) = %v, %v; want %v, error %v", tt.list, got, err, tt.want, tt.wantErr)
		}
	}
}

// Every hand-off setting is driven by raftlock's LOCK ... WAIT and etcd's
// Mutex, and by nothing else; each etcd row is compared with raftlock's.
func TestHandoffCells(t *testing.T) {
	cfg := config{waiters: []int{16, 2000}}
	got := map[string][]string{}
	for _, sys := range allSystems() {
		for _, c := range sys.cells(cfg) {
			if c.setting.handoff {
				got[c.setting.name] = append(got[c.setting.name], rowLabel(sys, c.client))
				want := map[string]string{"etcd1": "raftlock 1 node, " + waitLabel, "etcd3": "raftlock 3 nodes, " + waitLabel}[sys.key]
				if ref := sys.ref(c.setting); ref != want {
					t.Errorf("%s at %s: compared with %q, want %q", sys.name, c.setting.name, ref, want)
				}
			}
		}
	}
	want := []string{"raftlock 1 node, " + waitLabel, "raftlock 3 nodes, " + waitLabel, "etcd 1 member, concurrency.Mutex", "etcd 3 members, concurrency.Mutex"}
	for _, n := range cfg.waiters {
		name := handoffSetting(n).name
		if !slices.Equal(got[name], want) {
			t.Errorf("rows at %s: got %q, want %q", name, got[name], want)
		}
	}
}
