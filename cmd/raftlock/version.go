package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/raftlock/raftlock/server"
)

// runVersion prints `raftlock version`: the release version (server.Version, which
// docs/upgrades.md maps to the log and snapshot formats it reads) and the Go version.
func runVersion(stdout io.Writer) error {
	_, err := fmt.Fprintln(stdout, "raftlock", server.Version, runtime.Version())
	return err
}
