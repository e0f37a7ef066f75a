package server

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// configGetOne returns the value CONFIG GET name answers for the one parameter name.
func configGetOne(t *testing.T, r *rawConn, name string) string {
	t.Helper()
	got := r.do("CONFIG", "GET", name)
	head := "*2\r\n$" + strconv.Itoa(len(name)) + "\r\n" + name + "\r\n$"
	if !strings.HasPrefix(got, head) {
		t.Fatalf("CONFIG GET %s = %q, want one parameter", name, got)
	}
	_, v, _ := strings.Cut(got[len(head):], "\r\n")
	return strings.TrimSuffix(v, "\r\n")
}

func configReply(v string) string {
	return "$" + strconv.Itoa(len(v)) + "\r\n" + v + "\r\n"
}

// Every parameter of the table reads back what it reads before a CONFIG SET of that same
// value, under each of its names; those raftlock does not own start at redis-server's default.
func TestConfigEveryParameterRoundTrips(t *testing.T) {
	addr, _ := startFake(t)
	r := dialRaw(t, addr)
	for name, p := range configIndex {
		v := configGetOne(t, r, name)
		if _, owned := configNode[p.name]; !owned && v != p.def {
			t.Errorf("CONFIG GET %s = %q before any SET, want the default %q", name, v, p.def)
		}
		if p.kind == cfgImmutable || p.kind == cfgProtected {
			continue
		}
		if got := r.do("CONFIG", "SET", name, v); got != "+OK\r\n" {
			t.Errorf("CONFIG SET %s %q = %q, want +OK", name, v, got)
			continue
		}
		if got := configGetOne(t, r, name); got != v {
			t.Errorf("CONFIG GET %s after setting %q = %q", name, v, got)
		}
	}
	if n := len(configTable); n != 176 {
		t.Errorf("the table holds %d parameters, want redis-server 7.0.15's 176 (aliases apart)", n)
	}
}

// For each kind of parameter, a valid value and the form CONFIG GET gives it, and invalid ones
// with Redis's error text (tests/respdiff/config.txt checks the same against redis-server).
func TestConfigSetValidation(t *testing.T) {
	addr, _ := startFake(t)
	r := dialRaw(t, addr)
	failed := func(name, why string) string {
		return "-ERR CONFIG SET failed (possibly related to argument '" + name + "') - " + why + "\r\n"
	}
	for _, c := range []struct {
		name, value string
		want        string // the error, or "" when CONFIG GET must then answer get
		get         string
	}{
		{"lazyfree-lazy-eviction", "YES", "", "yes"},
		{"lazyfree-lazy-eviction", "1", failed("lazyfree-lazy-eviction", "argument must be 'yes' or 'no'"), ""},
		{"maxmemory-policy", "Allkeys-LRU", "", "allkeys-lru"},
		{"maxmemory-policy", "lru", failed("maxmemory-policy", "argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction"), ""},
		{"oom-score-adj", "relative", "", "yes"},
		{"set-max-intset-entries", "1000", "", "1000"},
		{"set-max-intset-entries", "-1", failed("set-max-intset-entries", "argument must be between 0 and 9223372036854775807 inclusive"), ""},
		{"hz", "01", failed("hz", "argument couldn't be parsed into an integer"), ""},
		{"hz", "99999999999999999999", failed("hz", "argument couldn't be parsed into an integer"), ""},
		{"hz", "1000", "", "500"},
		{"hz", "0", "", "1"},
		{"list-max-ziplist-size", "-2147483649", failed("list-max-ziplist-size", "argument must be between -2147483648 and 2147483647 inclusive"), ""},
		{"hash-max-ziplist-value", "1kb", "", "1024"},
		{"hash-max-ziplist-value", "2MB", "", "2097152"},
		{"hash-max-ziplist-value", "3g", "", "3000000000"},
		{"hash-max-ziplist-value", "1.5gb", failed("hash-max-ziplist-value", "argument must be a memory value"), ""},
		{"hash-max-ziplist-value", "-1", failed("hash-max-ziplist-value", "argument must be a memory value"), ""},
		{"hash-max-ziplist-value", "9223372036854775808", failed("hash-max-ziplist-value", "argument must be between 0 and 9223372036854775807 inclusive"), ""},
		{"client-query-buffer-limit", "1048575", failed("client-query-buffer-limit", "argument must be between 1048576 and 9223372036854775807 inclusive"), ""},
		{"repl-backlog-size", "1", "", "16384"},
		{"cluster-link-sendbuf-limit", "18446744073709551615", "", "18446744073709551615"},
		{"cluster-link-sendbuf-limit", "99999999999999999999gb", "", "18446744072635809792"},
		{"maxmemory-clients", "10%", "", "10%"},
		{"maxmemory-clients", "0%", "", "0"},
		{"maxmemory-clients", "101%", failed("maxmemory-clients", "percentage argument must be less or equal to 100"), ""},
		{"maxmemory-clients", "x%", failed("maxmemory-clients", "argument must be a memory or percent value"), ""},
		{"maxmemory-clients", "18446744073709551615", "", "1%"},
		{"masteruser", "x", failed("masteruser", "the user a follower forwards as is set by --masteruser at start"), ""},
		{"tls-ciphers", "DEFAULT:!MEDIUM", "", "DEFAULT:!MEDIUM"},
		{"save", "900 1 300 10", "", "900 1 300 10"},
		{"save", "+900 1", "", "900 1"},
		{"save", "99999999999999999999 2147483648", "", "9223372036854775807 -2147483648"},
		{"save", "0 1", failed("save", "Invalid save parameters"), ""},
		{"save", "900 1 ", failed("save", "Invalid save parameters"), ""},
		{"save", "", "", ""},
		{"client-output-buffer-limit", "pubsub 1mb 2mb 60", "", "normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 2097152 60"},
		{"client-output-buffer-limit", "replica 1 2 3", "", "normal 0 0 0 slave 1 2 3 pubsub 1048576 2097152 60"},
		{"client-output-buffer-limit", "master 1 2 3", failed("client-output-buffer-limit", "Invalid client class specified in buffer limit configuration."), ""},
		{"client-output-buffer-limit", "normal 1 2", failed("client-output-buffer-limit", "Wrong number of arguments in buffer limit configuration."), ""},
		{"client-output-buffer-limit", "normal 0 0 2147483648", failed("client-output-buffer-limit", "Error in hard, soft or soft_seconds setting in buffer limit configuration."), ""},
		{"oom-score-adj-values", "01 +2 -2000", "", "1 2 -2000"},
		{"oom-score-adj-values", "1 2", failed("oom-score-adj-values", "wrong number of arguments"), ""},
		{"oom-score-adj-values", "0 0 2001", failed("oom-score-adj-values", "Invalid oom-score-adj-values, elements must be between -2000 and 2000."), ""},
		{"latency-tracking-info-percentiles", "50.5 99.123456789 0x10", "", "50.5 99.123457 16"},
		{"latency-tracking-info-percentiles", "101", failed("latency-tracking-info-percentiles", "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"), ""},
		{"latency-tracking-info-percentiles", "nan", failed("latency-tracking-info-percentiles", "Invalid latency-tracking-info-percentiles parameters"), ""},
		{"cluster-announce-hostname", "a.b-c1", "", "a.b-c1"},
		{"cluster-announce-hostname", "a_b", failed("cluster-announce-hostname", "Hostnames may only contain alphanumeric characters, hyphens or dots"), ""},
		{"proc-title-template", "{{x}} {port}", "", "{{x}} {port}"},
		{"proc-title-template", "{title}", failed("proc-title-template", "template format is invalid or contains unknown variables"), ""},
		{"notify-keyspace-events", "EKA", "", "AKE"},
		{"notify-keyspace-events", "y", failed("notify-keyspace-events", "Invalid event class character. Use 'Ag$lshzxeKEtmdn'."), ""},
		{"daemonize", "no", failed("daemonize", "can't set immutable config"), ""},
		{"databases", "16", failed("databases", "can't set immutable config"), ""},
		{"slaveof", "no one", failed("slaveof", "can't set immutable config"), ""},
		{"dir", "/tmp", failed("dir", "can't set protected config"), ""},
		{"appendonly", "no", failed("appendonly", "raftlock always persists: every write goes through its raft log"), ""},
		{"appendonly", "yes", "", "yes"},
		{"appendfsync", "everysec", failed("appendfsync", "raftlock answers a write only once a majority of its nodes synced it to their raft logs"), ""},
		{"slave-read-only", "no", failed("slave-read-only", "raftlock's followers forward writes to the leader and take none of their own"), ""},
		{"requirepass", "pw", failed("requirepass", "raftlock's users are replicated: change the default user's password with ACL SETUSER default"), ""},
		{"nosuch", "1", "-ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'\r\n", ""},
	} {
		want := c.want
		if want == "" {
			want = "+OK\r\n"
		}
		if got := r.do("CONFIG", "SET", c.name, c.value); got != want {
			t.Errorf("CONFIG SET %s %q = %q, want %q", c.name, c.value, got, want)
			continue
		}
		if c.want == "" {
			if got := configGetOne(t, r, c.name); got != c.get {
				t.Errorf("CONFIG GET %s after setting %q = %q, want %q", c.name, c.value, got, c.get)
			}
		}
	}
}

// An alias is the same value under another name; CONFIG GET answers an exact name as it was
// asked, and every name once, in name order.
func TestConfigNamesAndPatterns(t *testing.T) {
	addr, _ := startFake(t)
	r := dialRaw(t, addr)
	if got := r.do("CONFIG", "SET", "hash-max-ziplist-value", "100"); got != "+OK\r\n" {
		t.Fatalf("CONFIG SET hash-max-ziplist-value = %q", got)
	}
	for _, c := range []struct {
		args []string
		want []string // names and values
	}{
		{[]string{"hash-max-listpack-value"}, []string{"hash-max-listpack-value", "100"}},
		{[]string{"HASH-MAX-ZIPLIST-VALUE"}, []string{"HASH-MAX-ZIPLIST-VALUE", "100"}},
		{[]string{"hash-max-*-value"}, []string{"hash-max-listpack-value", "100", "hash-max-ziplist-value", "100"}},
		{[]string{"HZ", "*z", "hz"}, []string{"dynamic-hz", "yes", "HZ", "10"}},
		{[]string{"h[z]", "H?"}, []string{"hz", "10"}},
		{[]string{"rdb-key-save-delay"}, []string{"rdb-key-save-delay", "0"}},
		{[]string{"rdb-key-save-*"}, nil},
		{[]string{"nosuch"}, nil},
	} {
		var want strings.Builder
		want.WriteString("*" + strconv.Itoa(len(c.want)) + "\r\n")
		for _, w := range c.want {
			want.WriteString(configReply(w))
		}
		if got := r.do(append([]string{"CONFIG", "GET"}, c.args...)...); got != want.String() {
			t.Errorf("CONFIG GET %q = %q, want %q", c.args, got, want.String())
		}
	}
	all := r.do("CONFIG", "GET", "*")
	if n := strings.Count(all, "\r\n$") / 2; n != len(configNames) || len(configNames) != 192 {
		t.Errorf("CONFIG GET * answered %d names of %d, want redis-server 7.0.15's 192", n, len(configNames))
	}
}

// CONFIG SET looks at every name before any value (the first bad name wins), refuses a name
// given twice, and sets all its values or none.
func TestConfigSetAllOrNothing(t *testing.T) {
	addr, _ := startFake(t)
	r := dialRaw(t, addr)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"hz", "abc", "nosuch", "1"}, "-ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'\r\n"},
		{[]string{"hz", "abc", "daemonize", "yes"}, "-ERR CONFIG SET failed (possibly related to argument 'daemonize') - can't set immutable config\r\n"},
		{[]string{"daemonize", "yes", "hz", "1", "hz", "2"}, "-ERR CONFIG SET failed (possibly related to argument 'daemonize') - can't set immutable config\r\n"},
		{[]string{"hz", "1", "HZ", "2"}, "-ERR CONFIG SET failed (possibly related to argument 'HZ') - duplicate parameter\r\n"},
		{[]string{"hz", "20", "lfu-log-factor", "5", "maxmemory-policy", "bogus"}, "-ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction\r\n"},
		{[]string{"hz", "20", "notify-keyspace-events", "KEA", "appendonly", "no"}, "-ERR CONFIG SET failed (possibly related to argument 'appendonly') - raftlock always persists: every write goes through its raft log\r\n"},
		{[]string{"hz", "20", "save", strings.Repeat("1 ", maxConfigValue/2+1) + "1"}, "-ERR CONFIG SET failed (possibly related to argument 'save') - raftlock keeps values of at most 65536 bytes\r\n"},
		{[]string{"hz", "20", "tls-ciphers", strings.Repeat("x", maxConfigValue+1)}, "-ERR CONFIG SET failed (possibly related to argument 'tls-ciphers') - raftlock keeps values of at most 65536 bytes\r\n"},
		{[]string{"hz", strings.Repeat("1", maxConfigValue+1)}, "-ERR CONFIG SET failed (possibly related to argument 'hz') - argument couldn't be parsed into an integer\r\n"},
		{[]string{"hz"}, "-ERR wrong number of arguments for 'config|set' command\r\n"},
		{[]string{"hz", "1", "x"}, "-ERR syntax error\r\n"},
	} {
		if got := r.do(append([]string{"CONFIG", "SET"}, c.args...)...); got != c.want {
			t.Errorf("CONFIG SET %.60q = %q, want %q", c.args, got, c.want)
		}
	}
	for name, want := range map[string]string{"hz": "10", "lfu-log-factor": "10", "notify-keyspace-events": "", "save": "", "tls-ciphers": ""} {
		if got := configGetOne(t, r, name); got != want {
			t.Errorf("CONFIG GET %s after failed SETs = %q, want %q", name, got, want)
		}
	}
	// An alias and its parameter are two names, as in Redis: the last one given wins.
	if got := r.do("CONFIG", "SET", "hash-max-ziplist-value", "1", "hash-max-listpack-value", "2"); got != "+OK\r\n" {
		t.Fatalf("CONFIG SET of an alias and its parameter = %q", got)
	}
	if got := configGetOne(t, r, "hash-max-ziplist-value"); got != "2" {
		t.Errorf("hash-max-ziplist-value = %q, want 2", got)
	}
}

// maxclients takes effect: past it a new connection is told so; notify-keyspace-events and
// maxclients show in INFO and CONFIG GET alike.
func TestConfigSetMaxclients(t *testing.T) {
	addr, _ := startFake(t)
	r := dialRaw(t, addr)
	if got := r.do("CONFIG", "SET", "maxclients", "1"); got != "+OK\r\n" {
		t.Fatalf("CONFIG SET maxclients 1 = %q", got)
	}
	if got := r.do("INFO", "clients"); !strings.Contains(got, "maxclients:1\r\n") {
		t.Errorf("INFO clients after CONFIG SET maxclients 1 = %q", got)
	}
	other := dialRaw(t, addr)
	if got, err := readReply(other.br); err != nil || got != "-ERR max number of clients reached\r\n" {
		t.Errorf("a second client past maxclients 1 read %q, %v", got, err)
	}
	if got := r.do("CONFIG", "SET", "maxclients", "10"); got != "+OK\r\n" {
		t.Fatalf("CONFIG SET maxclients 10 = %q", got)
	}
	if got := dialRaw(t, addr).do("PING"); got != "+PONG\r\n" {
		t.Errorf("PING under maxclients 10 = %q", got)
	}
}

// CONFIG RESETSTAT starts INFO's counters again; REWRITE answers as a Redis without a file.
func TestConfigResetstatAndRewrite(t *testing.T) {
	addr, _ := startFake(t)
	r := dialRaw(t, addr)
	for range 5 {
		r.do("PING")
	}
	if got := r.do("CONFIG", "RESETSTAT"); got != "+OK\r\n" {
		t.Fatalf("CONFIG RESETSTAT = %q", got)
	}
	if got := r.do("INFO", "stats"); !strings.Contains(got, "total_commands_processed:1\r\n") || !strings.Contains(got, "total_connections_received:0\r\n") {
		t.Errorf("INFO stats after CONFIG RESETSTAT = %q", got)
	}
	if got := r.do("CONFIG", "REWRITE"); got != "-ERR The server is running without a config file\r\n" {
		t.Errorf("CONFIG REWRITE = %q", got)
	}
}

// Many connections set and read parameters at once (run with -race): each multi-parameter SET
// is seen whole.
func TestConfigConcurrent(t *testing.T) {
	addr, _ := startFake(t)
	var wg sync.WaitGroup
	for i := range 8 {
		r := dialRaw(t, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := strconv.Itoa(i + 1)
			for range 50 {
				if got := r.do("CONFIG", "SET", "hz", v, "lfu-log-factor", v, "notify-keyspace-events", "KE", "maxclients", "100"+v); got != "+OK\r\n" {
					t.Errorf("CONFIG SET = %q", got)
					return
				}
				got := r.do("CONFIG", "GET", "hz", "lfu-log-factor")
				var vals []string
				for _, l := range strings.Split(got, "\r\n") {
					if l != "" && l[0] != '*' && l[0] != '$' {
						vals = append(vals, l)
					}
				}
				if len(vals) != 4 || vals[1] != vals[3] {
					t.Errorf("CONFIG GET hz lfu-log-factor = %q: one SET seen in part", got)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestParseMemory(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"", 0, true}, {"kb", 0, true}, {"7b", 7, true}, {"1k", 1000, true},
		{"1KB", 1024, true}, {"1m", 1000000, true}, {"1mb", 1 << 20, true}, {"1g", 1e9, true},
		{"1Gb", 1 << 30, true}, {"007", 7, true}, {"18446744073709551616", math.MaxUint64, true},
		{"1.5gb", 0, false}, {"1tb", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {" 1", 0, false},
		{strings.Repeat("0", 127) + "5", 0, false}, {strings.Repeat("0", 126) + "5", 5, true},
	} {
		if got, ok := parseMemory([]byte(c.in)); got != c.want || ok != c.ok {
			t.Errorf("parseMemory(%q) = %d, %v, want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestStrtoll(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"", 0, true}, {"0", 0, true}, {"+5", 5, true}, {"-5", -5, true}, {"\t7", 7, true}, {"09", 9, true},
		{"99999999999999999999", math.MaxInt64, true}, {"-9223372036854775808", math.MinInt64, true},
		{"-99999999999999999999", math.MinInt64, true}, {"9223372036854775807", math.MaxInt64, true},
		{"+", 0, false}, {" ", 0, false}, {"1 ", 0, false}, {"1e3", 0, false}, {"x", 0, false},
	} {
		if got, ok := strtoll(c.in); got != c.want || ok != c.ok {
			t.Errorf("strtoll(%q) = %d, %v, want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
