package script

import (
	"context"
	"slices"
	"testing"
)

// The compare-and-delete release as the libraries spell it has a Go form; anything that differs
// in what it does, or that Lua would not compile, has none.
func TestNativeFormOf(t *testing.T) {
	native := []string{
		`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`,
		`if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end`,
		"\n\tif redis.call(\"GET\", KEYS[1]) == ARGV[1] then\n\t\treturn redis.call(\"DEL\", KEYS[1])\n\telse\n\t\treturn 0\n\tend\n",
		`if redis.call("get",KEYS[1])==ARGV[1] then return redis.call("del",KEYS[1]); else return 0; end;`,
		`if redis.call('Get', KEYS[1]) == ARGV[1]then return redis.call('Del', KEYS[1])else return 0 end`,
	}
	vm := []string{
		`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("unlink", KEYS[1]) else return 0 end`,
		`if redis.call("get", KEYS[1]) == ARGV[2] then return redis.call("del", KEYS[1]) else return 0 end`,
		`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[2]) else return 0 end`,
		`if redis.call("get", KEYS[1]) ~= ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`,
		`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 1 end`,
		`if redis.pcall("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`,
		`if redis.call("get', KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`,
		`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0end`,
		`ifredis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`,
		`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end -- done`,
		`local v = redis.call("get", KEYS[1]) if v == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`,
		`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end return 1`,
	}
	for _, src := range native {
		if nativeFormOf([]byte(src)) == nil {
			t.Errorf("no Go form for %q", src)
		}
		if _, err := compile([]byte(src)); err != nil {
			t.Errorf("%q does not compile: %v", src, err)
		}
	}
	for _, src := range vm {
		if nativeFormOf([]byte(src)) != nil {
			t.Errorf("a Go form for %q", src)
		}
	}
}

// precheckedKeyspace is a keyspace that vouches for the calls it lists as refused or not.
type precheckedKeyspace struct {
	*keyspace
	refuse map[string]bool // by command name
	asked  []string
}

func (p *precheckedKeyspace) Permitted(args [][]byte) bool {
	p.asked = append(p.asked, string(args[0]))
	return !p.refuse[string(args[0])]
}

// The Go form gives what the VM gives, with the same calls; where it cannot (a call refused or
// failing), the VM runs the script, with the calls it makes.
func TestCompareAndDeleteNative(t *testing.T) {
	const src = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
	e := testEngine(t, Config{})
	tests := []struct {
		name   string
		data   map[string]string
		refuse map[string]bool
		keys   []string
		argv   []string
		native bool // the Go form answered (no VM run: the VM's calls are not doubled)
	}{
		{name: "holder", data: map[string]string{"k": "v"}, keys: []string{"k"}, argv: []string{"v"}, native: true},
		{name: "other holder", data: map[string]string{"k": "w"}, keys: []string{"k"}, argv: []string{"v"}, native: true},
		{name: "free", keys: []string{"k"}, argv: []string{"v"}, native: true},
		{name: "empty value", data: map[string]string{"k": ""}, keys: []string{"k"}, argv: []string{""}, native: true},
		{name: "get refused", data: map[string]string{"k": "v"}, refuse: map[string]bool{"get": true}, keys: []string{"k"}, argv: []string{"v"}},
		{name: "del refused", data: map[string]string{"k": "v"}, refuse: map[string]bool{"del": true}, keys: []string{"k"}, argv: []string{"v"}},
		{name: "no argv", data: map[string]string{"k": "v"}, keys: []string{"k"}},
		{name: "two keys", data: map[string]string{"k": "v"}, keys: []string{"k", "j"}, argv: []string{"v"}},
		{name: "no keys", argv: []string{"v"}},
		{name: "wrong type", data: map[string]string{"k": "v"}, keys: []string{"k"}, argv: []string{"v"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := func(prechecked bool) (Value, error, *keyspace, []string) {
				k := newKeyspace()
				for key, v := range tt.data {
					k.data[key] = []byte(v)
				}
				var call Caller = k
				if tt.name == "wrong type" {
					// GET fails as on a hash: a Lua error the VM raises.
					call = callerFunc(func(args [][]byte) (Value, error) {
						if string(args[0]) == "get" || string(args[0]) == "GET" {
							return Value{Kind: KindError, Str: []byte("WRONGTYPE Operation against a key holding the wrong kind of value")}, nil
						}
						return k.Call(args)
					})
					if prechecked {
						call = &precheckedFunc{call}
					}
				} else if prechecked {
					p := &precheckedKeyspace{keyspace: k, refuse: tt.refuse}
					call = p
				}
				v, err := e.Run(context.Background(), []byte(src), bytesOf(tt.keys...), bytesOf(tt.argv...), call)
				var asked []string
				if p, ok := call.(*precheckedKeyspace); ok {
					asked = p.asked
				}
				return v, err, k, asked
			}
			wantV, wantErr, vmKeys, _ := run(false)
			before := e.Stats().Native
			gotV, gotErr, gotKeys, _ := run(true)
			if answered := e.Stats().Native - before; answered != b2u(tt.native) {
				t.Errorf("%d runs answered by the Go form, want %d", answered, b2u(tt.native))
			}
			if got, want := reply(gotV, gotErr), reply(wantV, wantErr); got != want {
				t.Errorf("Go form: %q; VM: %q", got, want)
			}
			if !mapsEqual(gotKeys.data, vmKeys.data) {
				t.Errorf("keys after the Go form %q, after the VM %q", gotKeys.data, vmKeys.data)
			}
			// The Go form makes the VM's calls, once: none doubled by a VM run after it.
			if tt.native && !slices.EqualFunc(gotKeys.calls, vmKeys.calls, slices.Equal) {
				t.Errorf("calls: Go form %q, VM %q", gotKeys.calls, vmKeys.calls)
			}
			if !tt.native && len(gotKeys.calls) > len(vmKeys.calls)+1 {
				t.Errorf("calls: Go form then VM %q, VM alone %q", gotKeys.calls, vmKeys.calls)
			}
		})
	}
}

// precheckedFunc vouches for every call.
type precheckedFunc struct{ Caller }

func (precheckedFunc) Permitted([][]byte) bool { return true }

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func mapsEqual(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || string(w) != string(v) {
			return false
		}
	}
	return true
}
