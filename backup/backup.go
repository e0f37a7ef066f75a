// Package backup owns the backup file format: a consistent copy of a raftlock cluster's whole
// replicated state (the lock table, token counter, scripts, ACL users, member table), with a
// header that says where and when it was taken and checksums that let a restore refuse a
// corrupt or truncated file before it changes anything.
//
// A file is, in order:
//
//	magic      8 bytes  "RLBACKUP"
//	version    1 byte   the format version: 1 for a cluster of one raft group, 2 for several
//	header     4 bytes  big-endian length H (at most MaxHeader), then H bytes of JSON (Header)
//	body       8 bytes  big-endian length B, then B bytes: the table in the fsm snapshot
//	                    encoding (fsm.Snapshot.WriteTo), each lock's lease being the time it
//	                    had left when the backup was taken. Version 2 has one body per group,
//	                    in group order; every body together is at most MaxBody bytes.
//	checksum  32 bytes  SHA-256 of every byte before it
//
// The header also carries each body's own SHA-256, its length, and the figures a restore
// checks against the decoded table (applied index, keys, token counter): at the JSON's top
// level in version 1, one object per group in its "groups" list in version 2.
package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// Magic opens every backup file.
const Magic = "RLBACKUP"

// The format versions: Encode writes VersionOneGroup for one raft group's table and Version
// for several; Decode reads both. Never reuse one.
const (
	VersionOneGroup = 1
	Version         = 2
)

const (
	// MaxHeader bounds the JSON header.
	MaxHeader = 64 << 10
	// MaxBody bounds the table's encoding (512 MiB, Redis's largest bulk string): a node
	// refuses to take a larger backup, and a restore to read one, rather than hold more in
	// memory. Small locks take about 37 bytes each (tests/backup_test.go's 251 keys: 9,391
	// bytes), so a million take about 40 MB.
	MaxBody = 512 << 20
	// MaxGroups is the most raft groups a file holds (cmd/raftlock's --groups bound).
	MaxGroups = 256
	// MaxFile is the largest file Decode accepts.
	MaxFile = len(Magic) + 1 + 4 + MaxHeader + 8*MaxGroups + MaxBody + sha256.Size
)

var (
	// ErrCorrupt means the bytes are not a whole, intact backup file: wrong magic, cut short,
	// a checksum that does not match, or a table that does not decode.
	ErrCorrupt = errors.New("backup: corrupt or truncated backup file")
	// ErrTooLarge means the table's encoding would pass MaxBody.
	ErrTooLarge = errors.New("backup: the table is larger than a backup holds")
)

// Header describes a backup. Encode fills each Part but its Term from the snapshots; the
// caller sets the rest.
type Header struct {
	// ClusterID is the cluster the backup was taken from.
	ClusterID string `json:"cluster_id"`
	// SourceNode is the ID of the node that took it.
	SourceNode string `json:"source_node"`
	// Created is the source node's clock when the backup was taken (information only: no
	// lease depends on it).
	Created time.Time `json:"created"`
	// Part describes the table of a cluster of one raft group (a version-1 file).
	Part
	// Groups describes each raft group's table, in group order, for a cluster of several (a
	// version-2 file); Part is then zero.
	Groups []Part `json:"groups,omitempty"`
}

// Part describes one raft group's table in a backup.
type Part struct {
	// AppliedIndex is the log index the table had applied: every write acknowledged before
	// the backup began is at or below it.
	AppliedIndex uint64 `json:"applied_index"`
	// Term is the source node's raft term of the group when the backup was taken.
	Term uint64 `json:"term"`
	// Keys is the number of keys in the table.
	Keys int `json:"keys"`
	// LastToken is the token counter: every fencing token in the table is at most this.
	LastToken uint64 `json:"last_token"`
	// BodyBytes and BodySHA256 are the length and SHA-256 (hex) of the table's body.
	BodyBytes  int64  `json:"body_bytes"`
	BodySHA256 string `json:"body_sha256"`
}

// Parts returns each raft group's Part, in group order.
func (h Header) Parts() []Part {
	if len(h.Groups) > 0 {
		return h.Groups
	}
	return []Part{h.Part}
}

// headerV2 is a version-2 file's JSON header: no Part at the top level.
type headerV2 struct {
	ClusterID  string    `json:"cluster_id"`
	SourceNode string    `json:"source_node"`
	Created    time.Time `json:"created"`
	Groups     []Part    `json:"groups"`
}

// Encode returns the backup file of one group's snapshot with header h (a version-1 file).
func Encode(h Header, snap *fsm.Snapshot) ([]byte, error) {
	h.Groups = nil
	return EncodeGroups(h, []*fsm.Snapshot{snap})
}

// EncodeGroups returns the backup file of each raft group's snapshot (index = group) with
// header h: version 1 for one group, version 2 for several. The terms are h.Groups[g].Term (for
// several groups) or h.Term; Encode fills every other figure of each Part.
func EncodeGroups(h Header, snaps []*fsm.Snapshot) ([]byte, error) {
	if len(snaps) == 0 || len(snaps) > MaxGroups {
		return nil, fmt.Errorf("backup of %d raft groups (1 to %d)", len(snaps), MaxGroups)
	}
	if len(snaps) > 1 && len(h.Groups) != len(snaps) {
		return nil, fmt.Errorf("backup of %d raft groups with a header of %d", len(snaps), len(h.Groups))
	}
	parts := make([]Part, len(snaps))
	var body bytes.Buffer
	limit := &limitWriter{w: &body, left: MaxBody}
	var bodies []int // where each group's body ends in body
	for g, snap := range snaps {
		start := body.Len()
		if _, err := snap.WriteTo(limit); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(body.Bytes()[start:])
		term := h.Term
		if len(snaps) > 1 {
			term = h.Groups[g].Term
		}
		parts[g] = Part{AppliedIndex: snap.Applied(), Term: term, Keys: snap.Len(), LastToken: uint64(snap.LastToken()),
			BodyBytes: int64(body.Len() - start), BodySHA256: hex.EncodeToString(sum[:])}
		bodies = append(bodies, body.Len())
	}
	version := byte(VersionOneGroup)
	var head []byte
	var err error
	if len(snaps) == 1 {
		h.Part, h.Groups = parts[0], nil
		head, err = json.Marshal(h)
	} else {
		version = Version
		head, err = json.Marshal(headerV2{ClusterID: h.ClusterID, SourceNode: h.SourceNode, Created: h.Created, Groups: parts})
	}
	if err != nil {
		return nil, fmt.Errorf("backup header: %w", err)
	}
	if len(head) > MaxHeader {
		return nil, fmt.Errorf("backup header of %d bytes (at most %d)", len(head), MaxHeader)
	}
	out := make([]byte, 0, len(Magic)+1+4+len(head)+8*len(snaps)+body.Len()+sha256.Size)
	out = append(out, Magic...)
	out = append(out, version)
	out = binary.BigEndian.AppendUint32(out, uint32(len(head)))
	out = append(out, head...)
	start := 0
	for _, end := range bodies {
		out = binary.BigEndian.AppendUint64(out, uint64(end-start))
		out = append(out, body.Bytes()[start:end]...)
		start = end
	}
	whole := sha256.Sum256(out)
	return append(out, whole[:]...), nil
}

// ErrGroups means a file holds several raft groups' tables where one was expected.
var ErrGroups = errors.New("backup: the file holds several raft groups' tables")

// Decode checks a whole backup file of one raft group's table (DecodeGroups) and returns its
// header and its table. A file of several groups is refused with ErrGroups.
func Decode(data []byte) (Header, *fsm.Machine, error) {
	h, ms, err := DecodeGroups(data)
	if err != nil {
		return h, nil, err
	}
	if len(ms) != 1 {
		return h, nil, fmt.Errorf("%w (%d)", ErrGroups, len(ms))
	}
	return h, ms[0], nil
}

// DecodeGroups checks a whole backup file, every checksum and length of it, and returns its
// header and each raft group's table, in group order (one for a version-1 file). Any damage is
// an error wrapping ErrCorrupt that says what is wrong.
func DecodeGroups(data []byte) (Header, []*fsm.Machine, error) {
	var h Header
	fixed := len(Magic) + 1 + 4
	if len(data) < fixed || string(data[:len(Magic)]) != Magic {
		return h, nil, fmt.Errorf("%w: not a raftlock backup (it does not begin with %q)", ErrCorrupt, Magic)
	}
	version := data[len(Magic)]
	if version != VersionOneGroup && version != Version {
		return h, nil, fmt.Errorf("%w: format version %d, this binary reads versions %d and %d", ErrCorrupt, version, VersionOneGroup, Version)
	}
	if len(data) > MaxFile {
		return h, nil, fmt.Errorf("%w: %d bytes, more than a backup holds (%d)", ErrCorrupt, len(data), MaxFile)
	}
	if len(data) < fixed+8+sha256.Size {
		return h, nil, fmt.Errorf("%w: truncated: %d bytes", ErrCorrupt, len(data))
	}
	// The whole-file checksum first: it catches truncation and any flipped byte, header and
	// lengths included, before anything is parsed.
	end := len(data) - sha256.Size
	if got := sha256.Sum256(data[:end]); !bytes.Equal(got[:], data[end:]) {
		return h, nil, fmt.Errorf("%w: the SHA-256 checksum does not match its contents (truncated or damaged)", ErrCorrupt)
	}
	hlen32 := binary.BigEndian.Uint32(data[len(Magic)+1:])
	if hlen32 > MaxHeader || fixed+int(hlen32)+8 > end { // bounded before int: no wrap on 32 bits
		return h, nil, fmt.Errorf("%w: header length %d", ErrCorrupt, hlen32)
	}
	hlen := int(hlen32)
	head := data[fixed : fixed+hlen]
	if version == VersionOneGroup {
		if err := json.Unmarshal(head, &h); err != nil {
			return h, nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
		}
		h.Groups = nil
	} else {
		var v2 headerV2
		if err := json.Unmarshal(head, &v2); err != nil {
			return h, nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
		}
		if len(v2.Groups) < 2 || len(v2.Groups) > MaxGroups {
			return h, nil, fmt.Errorf("%w: a version-%d header of %d raft groups (2 to %d)", ErrCorrupt, Version, len(v2.Groups), MaxGroups)
		}
		h = Header{ClusterID: v2.ClusterID, SourceNode: v2.SourceNode, Created: v2.Created, Groups: v2.Groups}
	}
	pos := fixed + hlen
	var total uint64
	var machines []*fsm.Machine
	for g, p := range h.Parts() {
		if end-pos < 8 {
			return h, nil, fmt.Errorf("%w: group %d's body length is cut off", ErrCorrupt, g)
		}
		blen := binary.BigEndian.Uint64(data[pos:])
		pos += 8
		total += blen
		if blen > MaxBody || total > MaxBody || uint64(end-pos) < blen || int64(blen) != p.BodyBytes {
			return h, nil, fmt.Errorf("%w: group %d's body of %d bytes where %d remain and the header says %d", ErrCorrupt, g, blen, end-pos, p.BodyBytes)
		}
		body := data[pos : pos+int(blen)]
		pos += int(blen)
		if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != p.BodySHA256 {
			return h, nil, fmt.Errorf("%w: group %d's body's SHA-256 does not match the header's", ErrCorrupt, g)
		}
		m, err := fsm.Restore(bytes.NewReader(body))
		if err != nil {
			return h, nil, fmt.Errorf("%w: group %d's table: %v", ErrCorrupt, g, err)
		}
		if m.Applied() != p.AppliedIndex || m.Len() != p.Keys || uint64(m.LastToken()) < p.LastToken {
			return h, nil, fmt.Errorf("%w: group %d's table (applied %d, %d keys, token counter %d) differs from the header (applied %d, %d keys, token counter %d)",
				ErrCorrupt, g, m.Applied(), m.Len(), m.LastToken(), p.AppliedIndex, p.Keys, p.LastToken)
		}
		machines = append(machines, m)
	}
	if pos != end {
		return h, nil, fmt.Errorf("%w: %d bytes after the last body", ErrCorrupt, end-pos)
	}
	return h, machines, nil
}

// ReadFile reads and decodes the backup file at path (DecodeGroups), reading at most MaxFile
// bytes.
func ReadFile(path string) (Header, []*fsm.Machine, error) {
	f, err := os.Open(path)
	if err != nil {
		return Header{}, nil, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(MaxFile)+1))
	if err != nil {
		return Header{}, nil, fmt.Errorf("backup: read %s: %w", path, err)
	}
	h, ms, err := DecodeGroups(data)
	if err != nil {
		return h, nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, ms, nil
}

// limitWriter fails with ErrTooLarge once more than left bytes were written.
type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		return 0, fmt.Errorf("%w (at most %d bytes)", ErrTooLarge, MaxBody)
	}
	l.left -= int64(len(p))
	return l.w.Write(p)
}
