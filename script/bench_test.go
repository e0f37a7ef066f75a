package script

import (
	"context"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// lockCaller answers the release script's commands as a held lock would, without state.
type lockCaller struct{ owner []byte }

func (c lockCaller) Call(args [][]byte) (Value, error) {
	if len(args[0]) == 3 && (args[0][0] == 'g' || args[0][0] == 'G') {
		return Value{Kind: KindBulk, Str: c.owner}, nil
	}
	return Value{Kind: KindInt, Int: 1}, nil
}

// BenchmarkRelease runs the typical lock release with a trivial Caller.
func BenchmarkRelease(b *testing.B) {
	e := testEngine(b, Config{})
	src, keys, argv := []byte(releaseScript), bytesOf("lock:orders"), bytesOf("owner-5f1c")
	call := lockCaller{owner: []byte("owner-5f1c")}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		v, err := e.Run(ctx, src, keys, argv, call)
		if err != nil || v.Int != 1 {
			b.Fatal(v, err)
		}
	}
}

func BenchmarkReleaseParallel(b *testing.B) {
	e := testEngine(b, Config{})
	src, keys, argv := []byte(releaseScript), bytesOf("lock:orders"), bytesOf("owner-5f1c")
	call := lockCaller{owner: []byte("owner-5f1c")}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if v, err := e.Run(context.Background(), src, keys, argv, call); err != nil || v.Int != 1 {
				b.Error(v, err)
				return
			}
		}
	})
}

func BenchmarkReturn(b *testing.B) {
	e := testEngine(b, Config{})
	src := []byte("return 1")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Run(context.Background(), src, nil, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRuntimeError(b *testing.B) {
	e := testEngine(b, Config{})
	src := []byte(`return redis.call("get")`)
	call := callerFunc(func([][]byte) (Value, error) { return errWrongArgs, nil })
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Run(context.Background(), src, nil, nil, call); err == nil {
			b.Fatal("no error")
		}
	}
}

// BenchmarkLoop measures the VM's speed with the time limit checked on every instruction
// (runCtx), per loop iteration (4 instructions); BenchmarkLoopNoLimit is gopher-lua alone.
func BenchmarkLoop(b *testing.B) {
	e := testEngine(b, Config{})
	src := []byte("local n = 0 for i = 1, 100000 do n = n + i end return n")
	for b.Loop() {
		if _, err := e.Run(context.Background(), src, nil, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100000, "ns/iteration")
}

func BenchmarkLoopNoLimit(b *testing.B) {
	L := lua.NewState()
	defer L.Close()
	fn, err := L.LoadString("local n = 0 for i = 1, 100000 do n = n + i end return n")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		L.Push(fn)
		L.Call(0, 1)
		L.Pop(1)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100000, "ns/iteration")
}

// BenchmarkNewVM is what a run costs when the pool is empty.
func BenchmarkNewVM(b *testing.B) {
	e := testEngine(b, Config{})
	b.ReportAllocs()
	for b.Loop() {
		m := newVM(e)
		m.L.Close()
	}
}

func BenchmarkCompile(b *testing.B) {
	src := []byte(releaseScript)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := compile(src); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSHA1Hex(b *testing.B) {
	src := []byte(releaseScript)
	for b.Loop() {
		SHA1Hex(src)
	}
}

// BenchmarkCompileLarge compiles a 256 KiB script (the server's limit), flat: with nesting
// limited (maxSyntaxLevels), compile time grows with the size only.
func BenchmarkCompileLarge(b *testing.B) {
	line := "do local x = redis.call('get', KEYS[1]) if x then x = x .. 'a' end end\n"
	src := []byte(strings.Repeat(line, 256<<10/len(line)))
	for b.Loop() {
		if _, err := compile(src); err != nil {
			b.Fatal(err)
		}
	}
}
