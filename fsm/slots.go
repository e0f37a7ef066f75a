package fsm

// Hash slots: a cluster of several raft groups (docs/groups.md) serves each of Redis Cluster's
// 16384 hash slots from one group. A key's slot is the CRC16 (XMODEM) of the key, or of its hash
// tag: the bytes between the first '{' and the first '}' after it, when there are any. This is
// the one home of the rule: the server routes by it, and the state machine will check by it
// which slots a group owns.

// HashSlots is Redis Cluster's number of hash slots.
const HashSlots = 16384

// KeySlot is the hash slot of a client's key (CLUSTER KEYSLOT).
func KeySlot(key []byte) int {
	for i, c := range key {
		if c != '{' {
			continue
		}
		for j, d := range key[i+1:] {
			if d == '}' {
				if j > 0 {
					key = key[i+1 : i+1+j]
				}
				break
			}
		}
		break
	}
	return int(crc16(key) & (HashSlots - 1))
}

// SlotOf is the hash slot of a table key: its database byte left out, and a hidden key of the
// lock kinds or queues (kinds.go, queues.go) in the slot of the key it belongs to.
func SlotOf(tableKey []byte) int {
	_, key := SplitDBKey(BaseKey(tableKey))
	return KeySlot(key)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), as Redis Cluster computes it.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, x := range b {
		crc ^= uint16(x) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
