package ops

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/node"
)

// Readiness bounds: a follower is ready while it heard from a leader within readyContact and has
// applied all but readyLag of the entries it knows committed. Two election timeouts and a
// snapshot's worth of catching up would be stricter; these keep a healthy but busy follower in
// its load balancer's pool.
const (
	readyContact = 5 * time.Second
	readyLag     = 1024
)

// Probe is what /readyz asks beyond the figures: whether the store takes a durable write
// (cluster.Member.ProbeStore).
type Probe func() error

// health is /readyz's body: whether the node can serve, and why not.
type health struct {
	Ready         bool     `json:"ready"`
	Reasons       []string `json:"reasons,omitempty"`
	State         string   `json:"state"`
	Leader        string   `json:"leader,omitempty"`
	Term          uint64   `json:"term"`
	CommitIndex   uint64   `json:"commit_index"`
	AppliedIndex  uint64   `json:"applied_index"`
	LastContactMs int64    `json:"last_contact_ms"` // -1: never
	// Groups is each raft group's own judgement, on a node of several (group 0's is above).
	Groups []health `json:"groups,omitempty"`
}

// readiness judges s (and the store, through probe, when not nil).
func readiness(s node.Stats, probe Probe) health {
	h := health{State: s.State, Leader: s.LeaderID, Term: s.Term, CommitIndex: s.CommitIndex,
		AppliedIndex: s.AppliedIndex, LastContactMs: s.LastContact.Milliseconds()}
	if s.LastContact < 0 {
		h.LastContactMs = -1
	}
	switch {
	case s.State == "Leader" && !s.Ready:
		h.Reasons = append(h.Reasons, "leader still catching up after its election")
	case s.State == "Leader":
	case s.LeaderID == "":
		h.Reasons = append(h.Reasons, "no leader known")
	case s.LastContact < 0 || s.LastContact > readyContact:
		h.Reasons = append(h.Reasons, "no contact from the leader for more than "+readyContact.String())
	}
	if s.CommitIndex > s.AppliedIndex+readyLag {
		h.Reasons = append(h.Reasons, "applied index more than "+strconv.Itoa(readyLag)+" entries behind the commit index")
	}
	if probe != nil {
		if err := probe(); err != nil {
			h.Reasons = append(h.Reasons, "store not writable: "+err.Error())
		}
	}
	h.Ready = len(h.Reasons) == 0
	return h
}

// readinessOf judges every group of a node (group 0 first): ready when each is, with each
// other group's reasons named after it.
func readinessOf(groups []Group) health {
	h := readiness(groups[0].Stats.Stats(), groups[0].Probe)
	if len(groups) < 2 {
		return h
	}
	for g, gr := range groups {
		gh := readiness(gr.Stats.Stats(), gr.Probe)
		h.Groups = append(h.Groups, gh)
		if g == 0 {
			continue
		}
		for _, why := range gh.Reasons {
			h.Reasons = append(h.Reasons, "raft group "+strconv.Itoa(g)+": "+why)
		}
	}
	h.Ready = len(h.Reasons) == 0
	return h
}

// serveHealth answers /livez (the process serves HTTP: always 200) and /readyz (200 when
// readiness finds nothing wrong in any group, else 503), each with a JSON body.
func serveHealth(mux *http.ServeMux, groups []Group) {
	writeJSON := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"live": true})
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		h := readinessOf(groups)
		code := http.StatusOK
		if !h.Ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, h)
	})
}

// Ready reports whether a node with figures s can serve, as /readyz judges it (with the store
// probed through probe when not nil), and if not, why not. The service manager's readiness
// notice (cmd/raftlock) asks it too, so both say the same.
func Ready(s node.Stats, probe Probe) (ready bool, reasons []string) {
	h := readiness(s, probe)
	return h.Ready, h.Reasons
}

// ReadyGroups is Ready for a node of several raft groups (group 0 first): ready when every
// group is.
func ReadyGroups(groups []Group) (ready bool, reasons []string) {
	h := readinessOf(groups)
	return h.Ready, h.Reasons
}
