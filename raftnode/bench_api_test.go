package raftnode

import "github.com/raftlock/raftlock/fsm"

// benchEntry encodes one command as the log entry raftnode proposes for it.
func benchEntry(c fsm.Command) []byte { return fsm.EncodeEntry(nil, []fsm.Command{c}) }
