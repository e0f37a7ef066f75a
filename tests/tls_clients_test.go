package tests

import (
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// TestTLSClientLibraries: the TLS options of redis-py, ioredis and phpredis reach a node whose
// client port speaks TLS and requires client certificates: each takes a lock (SET NX PX) and
// reads its fencing token (LOCKINFO), verifying the node's certificate against the CA.
func TestTLSClientLibraries(t *testing.T) {
	ca := testutil.NewCA(t, "cluster")
	cli := ca.Issue(t, "client")
	n := startNodeWith(t, ca.ClientTLS(&cli), clientTLSFlags(ca, ca.Issue(t, "node"), "yes")...)
	host, port, _ := net.SplitHostPort(n.addr)
	nodeModules, _ := filepath.Abs("nodejs/node_modules")
	for _, tc := range []struct {
		lib, bin string
		args     []string
	}{
		{"redis-py", "/usr/bin/python3", []string{"-c", `
import redis, sys
r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]), ssl=True, ssl_ca_certs=sys.argv[3],
                ssl_certfile=sys.argv[4], ssl_keyfile=sys.argv[5], socket_timeout=10)
assert r.set("tls:py", "me", nx=True, px=10000)
print(r.execute_command("LOCKINFO", "tls:py")[3])
`, host, port, ca.File, cli.CertFile, cli.KeyFile}},
		{"ioredis", "node", []string{"-e", `
const Redis = require(process.argv[1] + "/ioredis"); const fs = require("fs");
const [host, port, ca, cert, key] = process.argv.slice(2);
const r = new Redis({host, port: +port, maxRetriesPerRequest: 1,
  tls: {ca: fs.readFileSync(ca), cert: fs.readFileSync(cert), key: fs.readFileSync(key)}});
(async () => {
  if (await r.set("tls:io", "me", "PX", 10000, "NX") !== "OK") throw new Error("not granted");
  console.log((await r.call("LOCKINFO", "tls:io"))[3]); r.disconnect();
})().catch(e => { console.error(e); process.exit(1); });
`, nodeModules, host, port, ca.File, cli.CertFile, cli.KeyFile}},
		{"phpredis", "php", []string{"-r", `
[$_, $host, $port, $ca, $cert, $key] = $argv;
$r = new Redis();
$r->connect("tls://$host", (int)$port, 10, null, 0, 0,
  ["stream" => ["cafile" => $ca, "local_cert" => $cert, "local_pk" => $key, "verify_peer" => true]]);
if (!$r->set("tls:php", "me", ["nx", "px" => 10000])) { exit(1); }
echo $r->rawCommand("LOCKINFO", "tls:php")[3], "\n";
`, host, port, ca.File, cli.CertFile, cli.KeyFile}},
	} {
		t.Run(tc.lib, func(t *testing.T) {
			if _, err := exec.LookPath(tc.bin); err != nil {
				t.Fatalf("%s is not installed (.ci/run installs it): %v", tc.bin, err)
			}
			cmd := exec.CommandContext(testContext(t, 20*time.Second), tc.bin, tc.args...)
			out, err := cmd.CombinedOutput()
			tok := strings.TrimSpace(string(out))
			if err != nil || tok == "" || strings.Trim(tok, "0123456789") != "" || tok == "0" {
				t.Fatalf("%s over TLS: %v\n%s; want a fencing token", tc.lib, err, out)
			}
		})
	}
}
