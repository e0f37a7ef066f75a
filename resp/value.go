package resp

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind is the type of a reply: the byte that starts it on the wire.
type Kind byte

// The kinds of reply, RESP2 then RESP3. A RESP2 null bulk string ("$-1") or null array ("*-1")
// decodes as KindNull, like RESP3's "_".
const (
	KindSimple  Kind = '+' // simple string: Str
	KindError   Kind = '-' // error: Str is the text after '-', starting with its code
	KindInteger Kind = ':' // integer: Int
	KindBulk    Kind = '$' // bulk string: Str
	KindArray   Kind = '*' // array: Elems

	KindNull      Kind = '_' // null, and RESP2's null bulk string and null array
	KindBool      Kind = '#' // boolean: Int is 1 for true, 0 for false
	KindDouble    Kind = ',' // double: Str is its text ("1.5", "inf", "-inf", "nan")
	KindBigNumber Kind = '(' // big number: Str is its decimal text
	KindBulkError Kind = '!' // bulk error: Str, as for KindError
	KindVerbatim  Kind = '=' // verbatim string: Str is "fmt:text" (Text drops "fmt:")
	KindMap       Kind = '%' // map: Elems alternate key, value
	KindSet       Kind = '~' // set: Elems
	KindPush      Kind = '>' // push (out of band): Elems, the first naming the kind of push

	// kindAttribute (RESP3 '|') never reaches a caller: ReadValue drops it and returns the reply
	// it annotates.
	kindAttribute Kind = '|'
)

// Value is one decoded reply.
type Value struct {
	Kind  Kind
	Str   []byte  // KindSimple, KindError, KindBulk, KindDouble, KindBigNumber, KindBulkError, KindVerbatim
	Int   int64   // KindInteger, KindBool
	Elems []Value // KindArray, KindMap, KindSet, KindPush
}

// ReplyError is an error reply from the server (RESP '-' or '!'). Msg is its text, starting
// with its code: "ERR unknown command", "MOVED 3999 127.0.0.1:6381".
type ReplyError struct {
	Msg string
}

var _ error = (*ReplyError)(nil)

func (e *ReplyError) Error() string { return e.Msg }

// Code returns the error's first word ("ERR", "CLUSTERDOWN", "MOVED").
func (e *ReplyError) Code() string {
	code, _, _ := strings.Cut(e.Msg, " ")
	return code
}

// Err returns a *ReplyError for an error reply and nil for any other.
func (v Value) Err() error {
	if v.Kind == KindError || v.Kind == KindBulkError {
		return &ReplyError{Msg: string(v.Str)}
	}
	return nil
}

// IsNull reports whether v is a null (RESP3 "_", RESP2 "$-1" or "*-1").
func (v Value) IsNull() bool { return v.Kind == KindNull }

// Text returns a scalar's text: the string of a string kind (a verbatim string without its
// format), the decimal text of an integer, "1" or "0" for a boolean, and "" for a null or an
// aggregate.
func (v Value) Text() string {
	switch v.Kind {
	case KindInteger:
		return strconv.FormatInt(v.Int, 10)
	case KindBool:
		return strconv.FormatInt(v.Int, 10)
	case KindVerbatim:
		if len(v.Str) >= 4 {
			return string(v.Str[4:])
		}
	case KindNull, KindArray, KindMap, KindSet, KindPush:
		return ""
	}
	return string(v.Str)
}

// String renders v for logs and test failures: strings quoted, errors as (error "..."), nulls as
// nil, aggregates in brackets (a map's pairs as key: value).
func (v Value) String() string {
	var b strings.Builder
	v.format(&b)
	return b.String()
}

func (v Value) format(b *strings.Builder) {
	switch v.Kind {
	case KindNull:
		b.WriteString("nil")
	case KindInteger, KindDouble, KindBigNumber:
		b.WriteString(v.Text())
	case KindBool:
		b.WriteString(strconv.FormatBool(v.Int != 0))
	case KindError, KindBulkError:
		fmt.Fprintf(b, "(error %q)", v.Str)
	case KindArray, KindSet, KindPush, KindMap:
		open, end := "[", "]"
		switch v.Kind {
		case KindSet:
			open, end = "{", "}"
		case KindPush:
			open = ">["
		case KindMap:
			open, end = "map[", "]"
		}
		b.WriteString(open)
		for i, e := range v.Elems {
			switch {
			case i == 0:
			case v.Kind == KindMap && i%2 == 1:
				b.WriteString(": ")
			default:
				b.WriteString(" ")
			}
			e.format(b)
		}
		b.WriteString(end)
	default:
		fmt.Fprintf(b, "%q", v.Text())
	}
}
