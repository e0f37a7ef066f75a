package ops

import (
	"fmt"
	"io"
	"strconv"
	"sync/atomic"

	"github.com/raftlock/raftlock/metrics"
	"github.com/raftlock/raftlock/node"
)

// ServerStats is the client face's figures (server.Server): latency per command family,
// refusals, authentication failures, waiters and the most contended keys.
type ServerStats interface{ ServerStats() node.ServerStats }

// httpStats are the HTTP surface's own figures.
type httpStats struct {
	authFailures atomic.Uint64 // requests to a guarded path with missing or wrong credentials
}

// promWriter writes the Prometheus text format, one family's HELP and TYPE before its series.
type promWriter struct{ w io.Writer }

func (p promWriter) head(name, kind, help string) {
	fmt.Fprintf(p.w, "# HELP raftlock_%s %s\n# TYPE raftlock_%s %s\n", name, help, name, kind)
}

// series writes one sample; labels are name, value pairs.
func (p promWriter) series(name string, v float64, labels ...string) {
	fmt.Fprintf(p.w, "raftlock_%s%s %s\n", name, labelSet(labels...), strconv.FormatFloat(v, 'g', -1, 64))
}

func (p promWriter) metric(name, kind, help string, v float64) {
	p.head(name, kind, help)
	p.series(name, v)
}

// histogram writes one histogram's series (cumulative buckets, sum, count); its head is the
// caller's, so that several label sets share one.
func (p promWriter) histogram(name string, s metrics.Snapshot, labels ...string) {
	var cum uint64
	for i := 0; i < s.Scale.Buckets; i++ {
		cum += s.Counts[i]
		p.series(name+"_bucket", float64(cum), append(labels[:len(labels):len(labels)], "le", strconv.FormatFloat(s.UpperBound(i), 'g', -1, 64))...)
	}
	count := s.Count()
	p.series(name+"_bucket", float64(count), append(labels[:len(labels):len(labels)], "le", "+Inf")...)
	p.series(name+"_sum", s.SumValue(), labels...)
	p.series(name+"_count", float64(count), labels...)
}

// labelSet renders {a="x",b="y"} ("" for none), escaping values as the text format wants.
func labelSet(labels ...string) string {
	if len(labels) == 0 {
		return ""
	}
	b := []byte{'{'}
	for i := 0; i+1 < len(labels); i += 2 {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, labels[i]...)
		b = append(b, '=')
		b = strconv.AppendQuote(b, labels[i+1])
	}
	return string(append(b, '}'))
}

// writeNodeHistograms writes the raft and store figures that go beyond WriteMetrics's gauges
// and counters: commit and fsync latency, batch sizes, apply lag and leader changes.
func writeNodeHistograms(w io.Writer, s node.Stats) {
	p := promWriter{w}
	p.head("commit_duration_seconds", "histogram", "On the leader, from a write's log entry handed to raft to its result applied here (replication, fsyncs, apply).")
	p.histogram("commit_duration_seconds", s.CommitLatency)
	p.head("apply_batch_entries", "histogram", "Raft log entries in each batch this node applied.")
	p.histogram("apply_batch_entries", s.BatchSize)
	p.head("group_commit_requests", "histogram", "On the leader, the requests carried by each raft log entry it proposed (group commit).")
	p.histogram("group_commit_requests", s.GroupSize)
	p.head("log_sync_duration_seconds", "histogram", "Each synced write of raft log entries to the store (pebble commit with fsync).")
	p.histogram("log_sync_duration_seconds", s.Store.SyncLatency)
	p.metric("apply_lag_entries", "gauge", "Raft commit index minus applied index on this node.", float64(s.CommitIndex-min(s.AppliedIndex, s.CommitIndex)))
	p.metric("leader_changes_total", "counter", "New leaders (or new terms of the same leader) this node observed since it started.", float64(s.LeaderChanges))
	p.head("keys", "gauge", "Keys in the table, by database (databases that hold keys or leases, and db 0).")
	for db, n := range s.DBKeys {
		if db == 0 || n > 0 || s.DBLeases[db] > 0 {
			p.series("keys", float64(n), "db", strconv.Itoa(db))
		}
	}
	p.head("leases", "gauge", "Keys with a lease armed on this node, by database.")
	for db, n := range s.DBLeases {
		if db == 0 || n > 0 || s.DBKeys[db] > 0 {
			p.series("leases", float64(n), "db", strconv.Itoa(db))
		}
	}
}

// WriteServerMetrics writes the client face's figures in the Prometheus text format. Key names
// are left out: /metrics may be open to anyone who reaches the address.
func WriteServerMetrics(w io.Writer, s node.ServerStats) {
	p := promWriter{w}
	p.head("request_duration_seconds", "histogram", "Commands from arrival to reply, by command family (a forwarded one includes the hop to the leader; LOCK ... WAIT and BLPOP include the wait).")
	for _, f := range s.Families {
		p.histogram("request_duration_seconds", f.Latency, "family", f.Name)
	}
	p.metric("commands_total", "counter", "Commands processed (INFO total_commands_processed).", float64(s.Commands))
	p.metric("error_replies_total", "counter", "Error replies (INFO total_error_replies).", float64(s.Errors))
	p.head("refused_commands_total", "counter", "Commands refused before they ran, by reason.")
	for _, r := range s.Refused {
		p.series("refused_commands_total", float64(r.Count), "reason", r.Reason)
	}
	p.metric("slot_reroutes_total", "counter", "Requests run again because their hash slot moved to another raft group while they ran.", float64(s.SlotReroutes))
	p.metric("lock_grants_total", "counter", "LOCK and SET NX grants.", float64(s.Grants))
	p.metric("lock_refusals_total", "counter", "LOCK and SET NX that found the key held.", float64(s.Refusals))
	p.metric("lock_releases_total", "counter", "Locks released by UNLOCK.", float64(s.Releases))
	p.metric("connected_clients", "gauge", "Open client connections.", float64(s.Clients))
	p.metric("blocked_clients", "gauge", "Blocking pops (BLPOP, BRPOP) waiting now.", float64(s.Blocked))
	p.metric("connections_total", "counter", "Client connections accepted.", float64(s.Connections))
	p.metric("rejected_connections_total", "counter", "Client connections turned away (maxclients, protected mode).", float64(s.Rejected))
	p.head("waiters", "gauge", "Requests waiting on keys (LOCK ... WAIT, BLPOP), by database (those with waiters, and db 0).")
	for db, n := range s.DBWaiters {
		if db == 0 || n > 0 {
			p.series("waiters", float64(n), "db", strconv.Itoa(db))
		}
	}
}

// writeAuthFailures writes the authentication failures of the RESP port and of this surface.
func writeAuthFailures(w io.Writer, resp uint64, http uint64) {
	p := promWriter{w}
	p.head("auth_failures_total", "counter", "Failed authentications: AUTH or HELLO AUTH on the client port (resp), basic auth on the guarded HTTP paths (http).")
	p.series("auth_failures_total", float64(resp), "surface", "resp")
	p.series("auth_failures_total", float64(http), "surface", "http")
}
