package server

import (
	"reflect"
	"testing"
)

// Replica stays what requests need: administration is Admin's, the LOCK ... WAIT queue
// LockQueue's, and the hooks one Watch. (The ninth, LogEnd, is what a SUBSCRIBE reads.)
func TestReplicaInterfaceIsSmall(t *testing.T) {
	const most = 9
	node := reflect.TypeFor[Replica]()
	if n := node.NumMethod(); n > most {
		var names []string
		for i := range n {
			names = append(names, node.Method(i).Name)
		}
		t.Errorf("server.Replica has %d methods %v; want at most %d", n, names, most)
	}
}
