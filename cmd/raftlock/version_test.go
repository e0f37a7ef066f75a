package main

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/raftlock/raftlock/server"
)

func TestVersion(t *testing.T) {
	var b bytes.Buffer
	if err := runVersion(&b); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "raftlock "+server.Version+" "+runtime.Version()+"\n"; got != want {
		t.Errorf("raftlock version printed %q, want %q", got, want)
	}
}
