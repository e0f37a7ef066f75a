package chaos

import (
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Node-to-node traffic goes through proxies so that faults can cut or slow each directed link
// while clients still reach every node directly:
//
//   - raft: every node advertises a proxy in front of its raft port; nodes dial raft from their
//     own loopback IP, so the source node of a connection is its source IP.
//   - forwarding: a follower forwards client requests to the leader's advertised client address,
//     which is a proxy in front of the leader's client port. The server dials it from the
//     default source (127.0.0.1), so the proxy finds the dialing node through /proc (procsrc.go).
//
// A partition cuts both kinds: a node cut off from the leader can neither replicate nor forward
// to it, as on a real network. (Before forwarding was proxied, a follower in a minority could
// still forward its clients' requests to the majority's leader. That is no safety hole, since a
// forwarded request is an ordinary request on the leader, but it hid the minority's real
// behaviour: TRYAGAIN or UNCERTAIN replies, broken upstream connections mid-request.)

// proxy sits in front of one node's raft or client port.
type proxy struct {
	net      *network
	kind     string // "raft" or "forward"
	dst      int    // index of the node behind the proxy
	ln       net.Listener
	target   string
	identify func(in net.Conn) (int, bool) // the source node of an accepted connection
}

// network holds the state of every directed link between nodes: cut and delayed.
type network struct {
	mu      sync.Mutex
	ipIndex map[string]int               // source IP -> node index
	blocked map[[2]int]int               // (src, dst) -> number of faults cutting it
	delay   map[[2]int]time.Duration     // (src, dst) -> extra latency per chunk
	conns   map[[2]int]map[net.Conn]bool // live proxied connections per link (both halves)
	proxies []*proxy
	// accepted connections whose source node was / was not identified, per kind
	known, unknown map[string]int
	wg             sync.WaitGroup
}

func newNetwork() *network {
	return &network{ipIndex: map[string]int{}, blocked: map[[2]int]int{},
		delay: map[[2]int]time.Duration{}, conns: map[[2]int]map[net.Conn]bool{},
		known: map[string]int{}, unknown: map[string]int{}}
}

// byIP identifies the source node of a connection by its source IP.
func (nw *network) byIP(in net.Conn) (int, bool) {
	host, _, _ := net.SplitHostPort(in.RemoteAddr().String())
	nw.mu.Lock()
	defer nw.mu.Unlock()
	i, ok := nw.ipIndex[host]
	return i, ok
}

func (nw *network) addProxy(kind string, dst int, listen, target string, identify func(net.Conn) (int, bool)) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	p := &proxy{net: nw, kind: kind, dst: dst, ln: ln, target: target, identify: identify}
	nw.mu.Lock()
	nw.proxies = append(nw.proxies, p)
	nw.mu.Unlock()
	nw.wg.Add(1)
	go p.serve()
	return nil
}

func (p *proxy) serve() {
	defer p.net.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		nw := p.net
		nw.wg.Add(1)
		go func() {
			defer nw.wg.Done()
			p.handle(in)
		}()
	}
}

func (p *proxy) handle(in net.Conn) {
	nw := p.net
	src, ok := p.identify(in)
	nw.mu.Lock()
	link := [2]int{src, p.dst}
	if ok {
		nw.known[p.kind]++
	} else {
		link = [2]int{-1, p.dst}
		nw.unknown[p.kind]++
	}
	if nw.blocked[link] > 0 {
		nw.mu.Unlock()
		in.Close()
		return
	}
	nw.mu.Unlock()
	out, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		in.Close()
		return
	}
	nw.mu.Lock()
	if nw.blocked[link] > 0 { // cut while dialing
		nw.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	if nw.conns[link] == nil {
		nw.conns[link] = map[net.Conn]bool{}
	}
	nw.conns[link][in], nw.conns[link][out] = true, true
	nw.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				// a slow link delays both directions of the connections its source opened
				nw.mu.Lock()
				d := nw.delay[link]
				nw.mu.Unlock()
				if d > 0 {
					time.Sleep(d/2 + rand.N(d))
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	in.Close()
	out.Close()
	<-done
	nw.mu.Lock()
	delete(nw.conns[link], in)
	delete(nw.conns[link], out)
	nw.mu.Unlock()
}

// cut blocks the given directed links until the returned heal is called: it closes their
// proxied connections and refuses new ones. Cuts nest: a link is open again once every fault
// that cut it healed.
func (nw *network) cut(links [][2]int) (heal func()) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for _, l := range links {
		nw.blocked[l]++
		for c := range nw.conns[l] {
			c.Close()
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			nw.mu.Lock()
			defer nw.mu.Unlock()
			for _, l := range links {
				if nw.blocked[l]--; nw.blocked[l] <= 0 {
					delete(nw.blocked, l)
				}
			}
		})
	}
}

// between lists the directed links between two groups of nodes, both directions.
func between(a, b []int) [][2]int {
	var out [][2]int
	for _, i := range a {
		for _, j := range b {
			out = append(out, [2]int{i, j}, [2]int{j, i})
		}
	}
	return out
}

// slow delays the given links until the returned heal is called.
func (nw *network) slow(links [][2]int, d time.Duration) (heal func()) {
	nw.mu.Lock()
	for _, l := range links {
		nw.delay[l] = d
	}
	nw.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			nw.mu.Lock()
			for _, l := range links {
				delete(nw.delay, l)
			}
			nw.mu.Unlock()
		})
	}
}

// heal removes every cut and delay.
func (nw *network) heal() {
	nw.mu.Lock()
	nw.blocked = map[[2]int]int{}
	nw.delay = map[[2]int]time.Duration{}
	nw.mu.Unlock()
}

func (nw *network) close() {
	nw.mu.Lock()
	for _, p := range nw.proxies {
		p.ln.Close()
	}
	for _, m := range nw.conns {
		for c := range m {
			c.Close()
		}
	}
	nw.mu.Unlock()
	nw.wg.Wait()
}
