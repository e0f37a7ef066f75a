package testutil

import "github.com/raftlock/raftlock/resp"

// Plain returns v as plain Go values, for tests that compare replies with == or switch on their
// type: nil for a null; string for a simple, bulk or verbatim string (without its format), and
// for a double or big number (its text); int64 for an integer; bool for a boolean;
// *resp.ReplyError for an error; []any for an aggregate, a map's keys and values alternating
// as RESP2 sends them.
func Plain(v resp.Value) any {
	switch v.Kind {
	case resp.KindNull:
		return nil
	case resp.KindInteger:
		return v.Int
	case resp.KindBool:
		return v.Int != 0
	case resp.KindError, resp.KindBulkError:
		return v.Err()
	case resp.KindArray, resp.KindMap, resp.KindSet, resp.KindPush:
		out := make([]any, len(v.Elems))
		for i, e := range v.Elems {
			out[i] = Plain(e)
		}
		return out
	}
	return v.Text()
}
