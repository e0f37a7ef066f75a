package script

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLibs pins values of bit, cjson, struct and cmsgpack that TestLibsRedis cannot check
// without a redis-server, and raftlock's own choices where it differs from Redis by design.
func TestLibs(t *testing.T) {
	e := testEngine(t, Config{})
	for _, tc := range []struct{ name, src, want string }{
		// bit: LuaBitOp's documented examples.
		{"tobit", `return {bit.tobit(0xffffffff), bit.tobit(0xffffffff + 1), bit.tobit(2^40 + 1234)}`, "*3\r\n:-1\r\n:0\r\n:1234\r\n"},
		{"tohex", `return bit.tohex(1) .. bit.tohex(-1) .. bit.tohex(0xffffffff, -8) .. bit.tohex(0x87654321, 4)`,
			"$28\r\n00000001ffffffffFFFFFFFF4321\r\n"},
		{"shifts", `return {bit.lshift(1, 0), bit.lshift(1, 8), bit.lshift(1, 40), bit.rshift(256, 8), bit.rshift(-256, 8), bit.arshift(-256, 8)}`,
			"*6\r\n:1\r\n:256\r\n:256\r\n:1\r\n:16777215\r\n:-1\r\n"},
		{"rotations", `return {bit.rol(0x12345678, 12), bit.ror(0x12345678, 12), bit.bswap(0x12345678)}`,
			"*3\r\n:1164411171\r\n:1736516421\r\n:2018915346\r\n"},
		{"bit error", `return bit.band(1, "x")`,
			"-ERR user_script:1: bad argument #2 to 'band' (number expected, got string) script: <sha>, on @user_script:1.\r\n"},

		// cjson.
		{"encode", `return cjson.encode({1, "a/b", true, {}, cjson.null, 0.5})`, `$27` + "\r\n" + `[1,"a\/b",true,{},null,0.5]` + "\r\n"},
		// Keys in the order they were first set (Redis: Lua 5.1's hash order).
		{"object order", `return cjson.encode({c = 1, a = 2, b = 3})`, "$19\r\n{\"c\":1,\"a\":2,\"b\":3}\r\n"},
		{"decode order", `return cjson.encode(cjson.decode('{"z":1,"y":2,"x":3}'))`, "$19\r\n{\"z\":1,\"y\":2,\"x\":3}\r\n"},
		{"decode", `local t = cjson.decode('{"a":[1,2.5,"x",null,false]}') return {#t.a, t.a[2] * 2, t.a[3], tostring(t.a[4] == cjson.null), tostring(t.a[5])}`,
			"*5\r\n:5\r\n:5\r\n$1\r\nx\r\n$4\r\ntrue\r\n$5\r\nfalse\r\n"},
		{"decode error", `return cjson.decode("[1,]")`,
			"-ERR user_script:1: Expected value but found T_ARR_END at character 4 script: <sha>, on @user_script:1.\r\n"},
		{"null reply", `return cjson.null`, "$-1\r\n"},

		// struct.
		{"pack", `return struct.pack(">I2 <i4 b c2 s", 258, -2, -1, "xyz", "ab")`, "$12\r\n\x01\x02\xfe\xff\xff\xff\xffxyab\x00\r\n"},
		{"unpack", `return {struct.unpack(">I2 <i4 b c2 s", "\1\2\254\255\255\255\255xyab\0")}`,
			"*6\r\n:258\r\n:-2\r\n:-1\r\n$2\r\nxy\r\n$2\r\nab\r\n:13\r\n"},
		{"size", `return struct.size("!4 b i d")`, ":16\r\n"},
		{"struct error", `return struct.pack("q")`,
			"-ERR user_script:1: bad argument #1 to 'pack' (invalid format option 'q') script: <sha>, on @user_script:1.\r\n"},

		// cmsgpack.
		{"pack", `return cmsgpack.pack({1, -1, 300, "ab", true, 0.5, {k = "v"}})`,
			"$20\r\n\x97\x01\xff\xcd\x01\x2c\xa2ab\xc3\xca\x3f\x00\x00\x00\x81\xa1k\xa1v\r\n"},
		{"unpack", `local t = cmsgpack.unpack("\147\1\161x\129\161k\195") return {t[1], t[2], tostring(t[3].k)}`,
			"*3\r\n:1\r\n$1\r\nx\r\n$4\r\ntrue\r\n"},
		{"map order", `return cmsgpack.pack({c = 1, a = 2, b = 3})`, "$10\r\n\x83\xa1c\x01\xa1a\x02\xa1b\x03\r\n"},
		{"nesting", `local t = {} t[1] = t return #cmsgpack.pack(t)`, ":17\r\n"},
		{"dense integer keys", `local n = 0 for k in pairs(cmsgpack.unpack(cmsgpack.pack({[1] = 1, [3] = 3, [100000] = 5}))) do n = n + 1 end return n`, ":3\r\n"},
		// 7 bytes that would make gopher-lua allocate a 64Mi-slot array.
		{"sparse integer key", `return cmsgpack.unpack("\129\206\3\255\255\255\1")`,
			"-ERR user_script:1: Integer keys in input too sparse to decode. script: <sha>, on @user_script:1.\r\n"},
		{"cmsgpack error", `return cmsgpack.unpack("\193")`,
			"-ERR user_script:1: Bad data format in input. script: <sha>, on @user_script:1.\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := run(t, e, tc.src, nil, nil)
			if want := strings.ReplaceAll(tc.want, "<sha>", SHA1Hex([]byte(tc.src))); got != want {
				t.Errorf("%s\ngot  %q\nwant %q", tc.src, short(got), short(want))
			}
		})
	}
}

// TestCJSONSettingsPerRun checks that cjson's settings do not outlive the script that made
// them (Redis keeps them), on a one-VM engine so both runs share the VM.
func TestCJSONSettingsPerRun(t *testing.T) {
	e := testEngine(t, Config{Pool: 1})
	set := `cjson.encode_max_depth(2) cjson.encode_invalid_numbers("null") cjson.decode_max_depth(3) ` +
		`cjson.encode_sparse_array(true, 0, 0) cjson.encode_number_precision(3) return cjson.encode(1/0)`
	if got := run(t, e, set, nil, nil); got != "$4\r\nnull\r\n" {
		t.Fatalf("set: got %q", got)
	}
	got := run(t, e, `local a, b, c = cjson.encode_sparse_array() return {cjson.encode_max_depth(), cjson.decode_max_depth(), `+
		`cjson.encode_number_precision(), tostring(cjson.encode_invalid_numbers()), tostring(a), b, c}`, nil, nil)
	if want := "*7\r\n:1000\r\n:1000\r\n:14\r\n$5\r\nfalse\r\n$5\r\nfalse\r\n:2\r\n:10\r\n"; got != want {
		t.Errorf("next run: got %q, want the defaults %q", got, want)
	}
}

// TestLibBounds checks the bounds on what one library call may build: the result size of the
// encoders, and the time limit in the decoders.
func TestLibBounds(t *testing.T) {
	e := testEngine(t, Config{})
	// 65 references to one 1 MiB string: 65 MiB of output.
	refs := `local s = string.rep("x", 2^20) local t = {} for i = 1, 65 do t[i] = s end `
	for _, tc := range []struct{ name, src, want string }{
		{"cjson.encode", refs + `return cjson.encode(t)`, "Cannot serialise, result larger than 67108864 bytes"},
		{"cmsgpack.pack", refs + `return cmsgpack.pack(t)`, "resulting string too large"},
		{"struct.pack", refs + `return struct.pack(string.rep("c0", 65), unpack(t))`, "resulting string too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(t, e, tc.src, nil, nil); !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want an error with %q", short(got), tc.want)
			}
		})
	}

	short := testEngine(t, Config{Timeout: 50 * time.Millisecond})
	for _, tc := range []struct{ name, src string }{
		{"cjson.decode", `return cjson.decode("[" .. string.rep("[],", 4e6) .. "[]]")`},
		{"cmsgpack.unpack", `return cmsgpack.unpack("\221\0\61\9\0" .. string.rep("\144", 4e6))`},
		{"cjson.encode", `local t = {} for i = 1, 20 do t = {t, t} end return #cjson.encode(t)`},
	} {
		t.Run(tc.name+" time limit", func(t *testing.T) {
			start := time.Now()
			got := run(t, short, tc.src, nil, nil)
			if !strings.HasPrefix(got, "-ERR Script killed: it ran longer than the script time limit (50ms)") {
				t.Errorf("got %q, want the time limit's error", got)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("stopped after %v", d)
			}
		})
	}
}

// runDecoder runs src with ARGV on e and fails t if the library panicked (gopher-lua turns a
// Go panic into a Lua error whose text names it) or the run took too long.
func runDecoder(t *testing.T, e *Engine, src string, argv ...string) string {
	t.Helper()
	start := time.Now()
	got := run(t, e, src, nil, argv)
	if strings.Contains(got, "runtime error") || strings.Contains(got, "panic") || strings.HasPrefix(got, "not an *Error") {
		t.Fatalf("%q: %q", argv, short(got))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("%q: took %v", argv, d)
	}
	return got
}

// FuzzCJSONDecode: cjson.decode never panics or hangs, and what it decodes re-encodes to a
// fixed point (decode(encode(v)) encodes as v does).
func FuzzCJSONDecode(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,-3e10,"x\u00e9\ud83d\ude00",null,true,false,{}]}`, `[[[[]]]]`, `"\/\b\f\n\r\t"`,
		`0x1p4`, `-Infinity`, `nan`, `[1,]`, `{"a" 1}`, "\"ab\x00c\"", `1e999`, `[` + strings.Repeat(`{"k":[`, 200)} {
		f.Add(s)
	}
	e := testEngine(f, Config{Timeout: time.Second})
	const src = `local ok, v = pcall(cjson.decode, ARGV[1]) if not ok then return "error" end ` +
		`local ok, s = pcall(cjson.encode, v) if not ok then return "not encodable" end ` +
		`local s2 = cjson.encode(cjson.decode(s)) if s2 ~= s then return {err = "not a fixed point: " .. s .. " " .. s2} end return "ok"`
	f.Fuzz(func(t *testing.T, in string) {
		if got := runDecoder(t, e, src, in); strings.HasPrefix(got, "-") {
			t.Fatalf("%q: %q", in, short(got))
		}
	})
}

// FuzzCMsgpackUnpack: cmsgpack.unpack never panics or hangs, and unpacking and packing again
// reaches a fixed point by the second time (the first may drop what is nested past 16 levels,
// leaving empty tables that the second packs as such).
func FuzzCMsgpackUnpack(f *testing.F) {
	for _, s := range []string{"\x97\x01\xff\xcd\x01\x2c\xa2ab\xc3\xca\x3f\x00\x00\x00\x81\xa1k\xa1v", "\x01\x02\x03",
		"\xdd\xff\xff\xff\xff\x01", "\xdf\x00\x00\x00\x01\xa1a\x01", "\x81\xc0\x01", "\xcf\xff\xff\xff\xff\xff\xff\xff\xff",
		"\xdb\x00\x00\x00\x09abc", strings.Repeat("\x91", 100) + "\x01", "\x81\xce\x03\xff\xff\xff\x01", "\xcb\x7f\xf8\x00\x00\x00\x00\x00\x01"} {
		f.Add(s)
	}
	e := testEngine(f, Config{Timeout: time.Second})
	const src = `local function pack(...) local n = select("#", ...) if n == 0 or n > 4000 then return nil end return cmsgpack.pack(...) end ` +
		`local ok, s = pcall(function() return pack(cmsgpack.unpack(ARGV[1])) end) if not ok or not s then return "error" end ` +
		`local s2 = pack(cmsgpack.unpack(s)) if pack(cmsgpack.unpack(s2)) ~= s2 then return {err = "not a fixed point"} end return "ok"`
	f.Fuzz(func(t *testing.T, in string) {
		if got := runDecoder(t, e, src, in); strings.HasPrefix(got, "-") {
			t.Fatalf("%q: %q", in, short(got))
		}
	})
}

// FuzzStructUnpack: struct.unpack never panics or hangs, whatever the format and the data.
func FuzzStructUnpack(f *testing.F) {
	f.Add(">I2 <i4 b c2 s", "\x01\x02\xfe\xff\xff\xff\xffxyab\x00", 1)
	f.Add("!4 b i3 d f c0", "\x01\x00\x00\x00\x02\x00\x00\x03", 1)
	f.Add("i16 I9 l L T h H", strings.Repeat("\xff", 64), 2)
	f.Add("c1 c0 s x", "3abcd\x00", -1)
	f.Add("!99999999999 i33", "", 0)
	e := testEngine(f, Config{Timeout: time.Second})
	const src = `return {pcall(struct.unpack, ARGV[1], ARGV[2], tonumber(ARGV[3]))}`
	f.Fuzz(func(t *testing.T, format, data string, pos int) {
		runDecoder(t, e, src, format, data, strconv.Itoa(pos))
	})
}
