// Package backup owns the backup file format: a consistent copy of a raftlock cluster's whole
// replicated state (the lock table, token counter, scripts, ACL users, member table), with a
// header that says where and when it was taken and checksums that let a restore refuse a
// corrupt or truncated file before it changes anything.
//
// A file is, in order:
//
//	magic      8 bytes  "RLBACKUP"
//	version    1 byte   the format version (1)
//	header     4 bytes  big-endian length H (at most MaxHeader), then H bytes of JSON (Header)
//	body       8 bytes  big-endian length B (at most MaxBody), then B bytes: the table in the
//	                    fsm snapshot encoding (fsm.Snapshot.WriteTo), each lock's lease being
//	                    the time it had left when the backup was taken
//	checksum  32 bytes  SHA-256 of every byte before it
//
// The header also carries the body's own SHA-256, its length, and the figures a restore checks
// against the decoded table (applied index, keys, token counter).
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

// Version is the format version Encode writes and the newest Decode reads. Never reuse one.
const Version = 1

const (
	// MaxHeader bounds the JSON header.
	MaxHeader = 64 << 10
	// MaxBody bounds the table's encoding (512 MiB, Redis's largest bulk string): a node
	// refuses to take a larger backup, and a restore to read one, rather than hold more in
	// memory. Small locks take about 37 bytes each (tests/backup_test.go's 251 keys: 9,391
	// bytes), so a million take about 40 MB.
	MaxBody = 512 << 20
	// MaxFile is the largest file Decode accepts.
	MaxFile = len(Magic) + 1 + 4 + MaxHeader + 8 + MaxBody + sha256.Size
)

var (
	// ErrCorrupt means the bytes are not a whole, intact backup file: wrong magic, cut short,
	// a checksum that does not match, or a table that does not decode.
	ErrCorrupt = errors.New("backup: corrupt or truncated backup file")
	// ErrTooLarge means the table's encoding would pass MaxBody.
	ErrTooLarge = errors.New("backup: the table is larger than a backup holds")
)

// Header describes a backup. Encode fills Keys, LastToken, AppliedIndex, BodyBytes and
// BodySHA256 from the snapshot; the caller sets the rest.
type Header struct {
	// ClusterID is the cluster the backup was taken from.
	ClusterID string `json:"cluster_id"`
	// SourceNode is the ID of the node that took it.
	SourceNode string `json:"source_node"`
	// AppliedIndex is the log index the table had applied: every write acknowledged before
	// the backup began is at or below it.
	AppliedIndex uint64 `json:"applied_index"`
	// Term is the source node's raft term when the backup was taken.
	Term uint64 `json:"term"`
	// Created is the source node's clock when the backup was taken (information only: no
	// lease depends on it).
	Created time.Time `json:"created"`
	// Keys is the number of keys in the table.
	Keys int `json:"keys"`
	// LastToken is the token counter: every fencing token in the backup is at most this.
	LastToken uint64 `json:"last_token"`
	// BodyBytes and BodySHA256 are the length and SHA-256 (hex) of the body.
	BodyBytes  int64  `json:"body_bytes"`
	BodySHA256 string `json:"body_sha256"`
}

// Encode returns the backup file of snap with header h.
func Encode(h Header, snap *fsm.Snapshot) ([]byte, error) {
	var body bytes.Buffer
	if _, err := snap.WriteTo(&limitWriter{w: &body, left: MaxBody}); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body.Bytes())
	h.AppliedIndex, h.Keys, h.LastToken = snap.Applied(), snap.Len(), uint64(snap.LastToken())
	h.BodyBytes, h.BodySHA256 = int64(body.Len()), hex.EncodeToString(sum[:])
	head, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("backup header: %w", err)
	}
	if len(head) > MaxHeader {
		return nil, fmt.Errorf("backup header of %d bytes (at most %d)", len(head), MaxHeader)
	}
	out := make([]byte, 0, len(Magic)+1+4+len(head)+8+body.Len()+sha256.Size)
	out = append(out, Magic...)
	out = append(out, Version)
	out = binary.BigEndian.AppendUint32(out, uint32(len(head)))
	out = append(out, head...)
	out = binary.BigEndian.AppendUint64(out, uint64(body.Len()))
	out = append(out, body.Bytes()...)
	whole := sha256.Sum256(out)
	return append(out, whole[:]...), nil
}

// Decode checks a whole backup file, every checksum and length of it, and returns its header
// and its table. Any damage is an error wrapping ErrCorrupt that says what is wrong.
func Decode(data []byte) (Header, *fsm.Machine, error) {
	var h Header
	fixed := len(Magic) + 1 + 4
	if len(data) < fixed || string(data[:len(Magic)]) != Magic {
		return h, nil, fmt.Errorf("%w: not a raftlock backup (it does not begin with %q)", ErrCorrupt, Magic)
	}
	if v := data[len(Magic)]; v != Version {
		return h, nil, fmt.Errorf("%w: format version %d, this binary reads version %d", ErrCorrupt, v, Version)
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
	hlen := int(binary.BigEndian.Uint32(data[len(Magic)+1:]))
	if hlen > MaxHeader || fixed+hlen+8 > end {
		return h, nil, fmt.Errorf("%w: header length %d", ErrCorrupt, hlen)
	}
	if err := json.Unmarshal(data[fixed:fixed+hlen], &h); err != nil {
		return h, nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	pos := fixed + hlen
	blen := binary.BigEndian.Uint64(data[pos:])
	pos += 8
	if blen > MaxBody || uint64(end-pos) != blen || int64(blen) != h.BodyBytes {
		return h, nil, fmt.Errorf("%w: body of %d bytes where %d remain and the header says %d", ErrCorrupt, blen, end-pos, h.BodyBytes)
	}
	body := data[pos:end]
	if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != h.BodySHA256 {
		return h, nil, fmt.Errorf("%w: the body's SHA-256 does not match the header's", ErrCorrupt)
	}
	m, err := fsm.Restore(bytes.NewReader(body))
	if err != nil {
		return h, nil, fmt.Errorf("%w: table: %v", ErrCorrupt, err)
	}
	if m.Applied() != h.AppliedIndex || m.Len() != h.Keys || uint64(m.LastToken()) < h.LastToken {
		return h, nil, fmt.Errorf("%w: the table (applied %d, %d keys, token counter %d) differs from the header (applied %d, %d keys, token counter %d)",
			ErrCorrupt, m.Applied(), m.Len(), m.LastToken(), h.AppliedIndex, h.Keys, h.LastToken)
	}
	return h, m, nil
}

// ReadFile reads and decodes the backup file at path (Decode), reading at most MaxFile bytes.
func ReadFile(path string) (Header, *fsm.Machine, error) {
	f, err := os.Open(path)
	if err != nil {
		return Header{}, nil, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(MaxFile)+1))
	if err != nil {
		return Header{}, nil, fmt.Errorf("backup: read %s: %w", path, err)
	}
	h, m, err := Decode(data)
	if err != nil {
		return h, nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, m, nil
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
