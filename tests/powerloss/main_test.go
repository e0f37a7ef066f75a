package powerloss

import (
	"testing"

	"go.uber.org/goleak"
)

// Every incarnation a round starts is stopped by its cut or by the round's end, raft, core,
// transport and stores, so nothing may be left running when the tests end. raftnode's own tests
// ignore the same two goroutines (raftnode/helpers_test.go says why).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/raftlock/raftlock/raftnode.awaitFuture.func1"),
		goleak.IgnoreAnyFunction("github.com/raftlock/raftlock/raftnode.(*Replica).runFinisher"))
}
