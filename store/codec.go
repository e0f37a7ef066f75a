package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// logCodecV1 is the first byte of every stored log value. A future layout gets a new version
// byte and decodeLog keeps reading the old one, so a store never needs rewriting on upgrade.
//
// Version 1 layout (Index is not stored: it is the key):
//
//	byte     version = 1
//	uvarint  Term
//	byte     Type
//	uvarint  len(Data), Data
//	uvarint  len(Extensions), Extensions
//	byte     0 = AppendedAt is the zero time, 1 = followed by:
//	varint   AppendedAt.Unix() seconds
//	uvarint  AppendedAt.Nanosecond()
//
// AppendedAt loses its location and monotonic reading, as it does in raft's msgpack
// encoding; it keeps the instant, which is all raft uses it for (metrics).
const logCodecV1 byte = 1

var errTruncated = errors.New("truncated value")

// appendLog appends the encoding of l to dst.
func appendLog(dst []byte, l *raft.Log) []byte {
	dst = append(dst, logCodecV1)
	dst = binary.AppendUvarint(dst, l.Term)
	dst = append(dst, byte(l.Type))
	dst = binary.AppendUvarint(dst, uint64(len(l.Data)))
	dst = append(dst, l.Data...)
	dst = binary.AppendUvarint(dst, uint64(len(l.Extensions)))
	dst = append(dst, l.Extensions...)
	if l.AppendedAt.IsZero() {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	dst = binary.AppendVarint(dst, l.AppendedAt.Unix())
	return binary.AppendUvarint(dst, uint64(l.AppendedAt.Nanosecond()))
}

// decodeLog decodes val into out (all fields but Index). It copies val once, so out does not
// alias memory owned by pebble; Data and Extensions share that one copy, capped so an append
// to one cannot overwrite the other.
func decodeLog(val []byte, out *raft.Log) error {
	return decodeOwnedLog(append([]byte(nil), val...), out)
}

// decodeOwnedLog is decodeLog for a buffer the caller hands over: out's Data and Extensions
// point into it.
func decodeOwnedLog(val []byte, out *raft.Log) error {
	d := decoder{buf: val}
	if v := d.byte(); d.err == nil && v != logCodecV1 {
		return fmt.Errorf("unknown log encoding version %d", v)
	}
	l := raft.Log{Term: d.uvarint(), Type: raft.LogType(d.byte())}
	l.Data = d.bytes()
	l.Extensions = d.bytes()
	if d.byte() == 1 {
		sec, nsec := d.varint(), d.uvarint()
		l.AppendedAt = time.Unix(sec, int64(nsec))
	}
	if d.err == nil && len(d.buf) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.buf))
	}
	if d.err != nil {
		return d.err
	}
	*out = l
	return nil
}

// decoder consumes buf front to back; the first error sticks and later reads return zeros.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.buf) < 1 {
		d.fail()
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// bytes reads a length-prefixed field; an empty field decodes as nil.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n == 0 {
		return nil
	}
	if uint64(len(d.buf)) < n {
		d.fail()
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errTruncated
	}
}
