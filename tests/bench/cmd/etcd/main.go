// Command etcd is the etcd server, built from the Go module proxy at the
// version this module pins: `go install` of etcd's own main does not work
// (its module has replace directives), so the benchmark builds this instead.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
