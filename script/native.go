package script

import (
	"bytes"
	"regexp"
)

// One script runs without the VM: the compare-and-delete release of the SET NX PX lock recipe,
//
//	if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end
//
// which the lock libraries send, each with its own quotes, case, spacing and semicolons, for
// half the requests of every lock they take. On the VM most of its cost is the VM (a state from
// the pool, the KEYS and ARGV tables, a conversion each way per call), so when it compiles, Run
// makes the same two calls from Go instead, in the same order and to the same effect: the same
// Caller runs them, so what they check, change and replicate is the same.
//
// A call that fails raises a Lua error whose text (with the script's position) only the VM
// writes. So the Go form runs only when the Caller vouches, without side effects, that neither
// call will be refused (Prechecker: ACL, a read-only run, ...), and gives the script back to
// the VM if GET fails anyway (a key of another type): GET changed nothing, and the VM calls it
// again.

// compareAndDeleteSrc matches the script's source: Lua's tokens in this order, with the
// whitespace Lua requires between words and any it allows elsewhere. Anything else (a comment,
// a local, another command) runs on the VM.
var compareAndDeleteSrc = regexp.MustCompile(`^\s*if\s+redis\.call\(\s*(?:"(?i:get)"|'(?i:get)')\s*,\s*KEYS\[1\]\s*\)\s*==\s*ARGV\[1\]\s*` +
	`then\s+return\s+redis\.call\(\s*(?:"(?i:del)"|'(?i:del)')\s*,\s*KEYS\[1\]\s*\)\s*;?\s*` +
	`else\s+return\s+0(?:\s*;\s*|\s+)end\s*;?\s*$`)

// Prechecker is a Caller that can tell whether it would refuse a call (permissions, a write in a
// read-only run, and the like) without making it and without any side effect (an ACL log
// entry). A Caller that is not one always runs scripts on the VM.
type Prechecker interface {
	Caller
	Permitted(args [][]byte) bool
}

// nativeForm is a script's Go form: ok false means it must run on the VM (it changed nothing).
type nativeForm func(call Caller, keys, argv [][]byte) (v Value, ok bool, err error)

// nativeFormOf returns src's Go form, or nil when it has none.
func nativeFormOf(src []byte) nativeForm {
	if compareAndDeleteSrc.Match(src) {
		return compareAndDelete
	}
	return nil
}

// compareAndDelete is the Go form of the compare-and-delete release.
func compareAndDelete(call Caller, keys, argv [][]byte) (Value, bool, error) {
	pc, ok := call.(Prechecker)
	if !ok || len(keys) != 1 || len(argv) != 1 {
		return Value{}, false, nil
	}
	get := [][]byte{[]byte("get"), keys[0]}
	del := [][]byte{[]byte("del"), keys[0]}
	if !pc.Permitted(get) || !pc.Permitted(del) {
		return Value{}, false, nil
	}
	got, err := call.Call(get)
	if err != nil {
		return Value{}, true, callAborted(err)
	}
	switch {
	case got.Kind == KindNil, got.Kind == KindBulk && !bytes.Equal(got.Str, argv[0]):
		return Value{Kind: KindInt, Int: 0}, true, nil
	case got.Kind != KindBulk:
		return Value{}, false, nil // an error reply: the VM raises it
	}
	// DEL of a string key that Permitted allows does not fail: its reply is the script's.
	v, err := call.Call(del)
	if err != nil {
		return Value{}, true, callAborted(err)
	}
	return v, true, nil
}

// callAborted is the run's error when the Caller aborts a call, as the VM reports it.
func callAborted(err error) error { return &Error{Msg: mapCRLF(err.Error()), Err: err} }
