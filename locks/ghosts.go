package locks

import (
	"bytes"
	"context"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// ReleaseAbandoned proposes a Release for each lock that cmds granted (results are their
// applied results) to a client that was gone by the time they applied: nobody would ever
// release it otherwise until its lease ran out (or never, without one). The core calls it for
// every request whose commands applied; whether the client is gone (node.ClientGone: its
// context ended, or its connection's hang-up check says so, which may cost a system call) is
// asked once, and only when one of them took a lock.
//
// It releases only a new holder's grant, guarded by its token and lease revision, so it can
// never touch a lock granted to anyone else meanwhile, nor one a retrying owner renewed (LOCK
// with the same OWNER) after the grant. A same-owner SET ... KEEPTTL keeps the revision: that
// retry is not told apart.
func (p *Policy) ReleaseAbandoned(ctx context.Context, cmds []fsm.Command, results []fsm.Result) {
	asked, gone := false, false
	for i, r := range results {
		c := cmds[i]
		if !c.Acquire || r.Status != fsm.StatusGranted || c.Kind != fsm.KindGrant && c.Kind != fsm.KindAcquire {
			continue // only a lock taken is released: a write that overwrites or counts stays
		}
		if r.Existed && bytes.Equal(r.PrevOwner, c.Owner) {
			continue // the same owner set its lock again: it held it before this request
		}
		if !asked {
			asked, gone = true, node.ClientGone(ctx)
		}
		if !gone {
			return
		}
		key, token, rev := fsm.LeaseKey(c, r), r.Token, r.LeaseRev // a share's or a permit's own key
		p.ghosts.Add(1)
		p.goFunc(func() {
			ctx, cancel := context.WithTimeout(context.Background(), p.applyTimeout)
			defer cancel()
			_, err := p.replica.Exec(ctx, [][]byte{key}, func(v node.View) []fsm.Command {
				if l, _, held := v.Lookup(key); !held || l.Token != token || l.LeaseRev != rev {
					return nil // released, re-granted, or renewed by a retrying owner since
				}
				return []fsm.Command{{Kind: fsm.KindRelease, Key: key, LeaseRev: rev, Match: fsm.Match{Kind: fsm.MatchLease, Token: token}}}
			}, nil)
			if err != nil {
				// The lease still ends it; a lock without a lease stays until someone DELs it.
				p.log.Warn("ghost lock release failed", "key", key, "token", token, "err", err)
			}
		})
	}
}
