package server

// globMatch reports whether s matches the glob pattern as Redis's stringmatchlen does
// (util.c), byte for byte: * ? [abc] [^a-z] and \ escapes, with its protection against
// patterns that would take exponential time. PSUBSCRIBE, PUBSUB CHANNELS and KEYS use it.
func globMatch(pattern, s []byte) bool {
	skipLonger := false
	return globMatchAt(pattern, s, &skipLonger, 0)
}

func globMatchAt(pattern, s []byte, skipLonger *bool, nesting int) bool {
	if nesting > 1000 { // Redis's bound on abusive patterns
		return false
	}
	for len(pattern) > 0 && len(s) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for len(s) > 0 {
				if globMatchAt(pattern[1:], s, skipLonger, nesting+1) {
					return true
				}
				if *skipLonger {
					return false
				}
				s = s[1:]
			}
			// No match for the rest of the pattern from anywhere in s: a longer match for an
			// earlier * cannot help either.
			*skipLonger = true
			return false
		case '?':
			s = s[1:]
		case '[':
			var match bool
			pattern, match = matchClass(pattern[1:], s[0])
			if !match {
				return false
			}
			s = s[1:]
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if pattern[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		if len(pattern) > 0 {
			pattern = pattern[1:]
		}
		if len(s) == 0 {
			for len(pattern) > 0 && pattern[0] == '*' {
				pattern = pattern[1:]
			}
			break
		}
	}
	return len(pattern) == 0 && len(s) == 0
}

// matchClass matches c against the class that starts at pattern (just past its '['). It returns
// the pattern at the class's closing ']' (which the caller's step skips), or empty for an
// unterminated class (Redis steps back onto its last byte, and the same step leaves nothing).
func matchClass(pattern []byte, c byte) ([]byte, bool) {
	not := len(pattern) > 0 && pattern[0] == '^'
	if not {
		pattern = pattern[1:]
	}
	match := false
	for {
		if len(pattern) >= 2 && pattern[0] == '\\' {
			pattern = pattern[1:]
			if pattern[0] == c {
				match = true
			}
		} else if len(pattern) > 0 && pattern[0] == ']' {
			break
		} else if len(pattern) == 0 {
			break
		} else if len(pattern) >= 3 && pattern[1] == '-' {
			lo, hi := pattern[0], pattern[2]
			if lo > hi {
				lo, hi = hi, lo
			}
			pattern = pattern[2:]
			if c >= lo && c <= hi {
				match = true
			}
		} else if pattern[0] == c {
			match = true
		}
		pattern = pattern[1:]
	}
	return pattern, match != not
}
