package chaos

import (
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// proxy sits in front of one node's raft port. It tells the source node of a connection by its
// source IP (every node dials from its own loopback IP), and cuts or slows directed links.
type proxy struct {
	net    *network
	dst    int // index of the node behind the proxy
	ln     net.Listener
	target string
}

// network holds the state of every directed link between nodes: blocked or delayed.
type network struct {
	mu                   sync.Mutex
	ipIndex              map[string]int               // source IP -> node index
	blocked              map[[2]int]bool              // (src, dst) -> cut
	delay                map[[2]int]time.Duration     // (src, dst) -> extra latency per chunk
	conns                map[[2]int]map[net.Conn]bool // live proxied connections per link (both halves)
	proxies              []*proxy
	knownSrc, unknownSrc int // accepted connections whose source node was / was not identified
	wg                   sync.WaitGroup
}

func newNetwork() *network {
	return &network{ipIndex: map[string]int{}, blocked: map[[2]int]bool{},
		delay: map[[2]int]time.Duration{}, conns: map[[2]int]map[net.Conn]bool{}}
}

func (nw *network) addProxy(dst int, listen, target string) (*proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &proxy{net: nw, dst: dst, ln: ln, target: target}
	nw.mu.Lock()
	nw.proxies = append(nw.proxies, p)
	nw.mu.Unlock()
	nw.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *proxy) serve() {
	defer p.net.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(in)
	}
}

func (p *proxy) handle(in net.Conn) {
	nw := p.net
	host, _, _ := net.SplitHostPort(in.RemoteAddr().String())
	nw.mu.Lock()
	src, ok := nw.ipIndex[host]
	link := [2]int{src, p.dst}
	if !ok {
		src = -1
		link = [2]int{-1, p.dst}
		nw.unknownSrc++
	} else {
		nw.knownSrc++
	}
	if nw.blocked[link] {
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
	if nw.blocked[link] { // cut while dialing
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
	pipe := func(dst, src net.Conn, forward bool) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				// a slow link delays both directions of the connections src opened
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
		_ = forward
		done <- struct{}{}
	}
	go pipe(out, in, true)
	go pipe(in, out, false)
	<-done
	in.Close()
	out.Close()
	<-done
	nw.mu.Lock()
	delete(nw.conns[link], in)
	delete(nw.conns[link], out)
	nw.mu.Unlock()
}

// cut blocks the directed link src->dst: it closes its proxied connections and refuses new ones.
func (nw *network) cut(src, dst int) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	link := [2]int{src, dst}
	nw.blocked[link] = true
	for c := range nw.conns[link] {
		c.Close()
	}
}

// isolate cuts every link between the two groups, both directions.
func (nw *network) isolate(a, b []int) {
	for _, i := range a {
		for _, j := range b {
			nw.cut(i, j)
			nw.cut(j, i)
		}
	}
}

func (nw *network) setDelay(src, dst int, d time.Duration) {
	nw.mu.Lock()
	nw.delay[[2]int{src, dst}] = d
	nw.mu.Unlock()
}

// heal removes every cut and delay.
func (nw *network) heal() {
	nw.mu.Lock()
	nw.blocked = map[[2]int]bool{}
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
