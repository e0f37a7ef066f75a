package server

// ACL users: Redis 6/7's rules (on/off, passwords kept as SHA-256, key and channel patterns,
// command and category rules), their canonical text (what ACL LIST prints and what the log
// replicates), and the permission checks every command passes (dispatch, redis.call, EXEC).
//
// A user's command rules are kept as Redis 7.0 prints them: "+@all" or "-@all", then the rules
// that still change something, in order. A rule first removes the earlier rules on the same
// command or category (a command's rule also its subcommands'), is appended, and then the list
// is replayed from the base, dropping every rule that changes no permission. The list is then a
// fixed point of the same procedure, so parsing a user's description gives back the same user:
// what makes the description a safe replicated encoding.

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
)

// aclCatalog indexes the names ACL rules can name: every command of the table and every known
// subcommand of a container command ("client|kill"), with their categories.
type aclCatalog struct {
	names []string
	index map[string]int
	subs  map[int][]int    // a command's subcommands
	cats  map[string][]int // category -> the names in it
}

// aclCategoryNames is ACL CAT's list: Redis 7.0's categories, in its order, then raftlock's
// own @lock (LOCK, UNLOCK, RENEW, LOCKINFO, VALIDATE).
var aclCategoryNames = []string{"keyspace", "read", "write", "set", "sortedset", "list", "hash", "string",
	"bitmap", "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous",
	"connection", "transaction", "scripting", "lock"}

var catalog *aclCatalog

// buildACLCatalog indexes the command table (commands.go's init calls it once the table is
// complete) and gives each command its ACL ID.
func buildACLCatalog() {
	c := &aclCatalog{index: map[string]int{}, subs: map[int][]int{}, cats: map[string][]int{}}
	for _, cat := range aclCategoryNames {
		c.cats[cat] = nil
	}
	add := func(name, cats string) int {
		id := len(c.names)
		c.names = append(c.names, name)
		c.index[name] = id
		for _, cat := range strings.Fields(cats) {
			c.cats[cat] = append(c.cats[cat], id)
		}
		return id
	}
	for _, name := range commandNames() {
		cmd := commands[name]
		cats, ok := aclCategories[name]
		if !ok {
			cats = derivedCategories(cmd)
		}
		cmd.aclID = add(name, cats)
		cmd.keyPerm = keyPermOfFlags(aclKeyFlags[name])
	}
	for _, full := range slices.Sorted(mapKeys(aclSubcommands)) {
		parent, sub, _ := strings.Cut(full, "|")
		cmd := commands[parent]
		if cmd == nil {
			continue
		}
		id := add(full, aclSubcommands[full])
		c.subs[cmd.aclID] = append(c.subs[cmd.aclID], id)
		if cmd.aclSubs == nil {
			cmd.aclSubs = map[string]int{}
		}
		cmd.aclSubs[sub] = id
	}
	catalog = c
}

// derivedCategories gives a command Redis does not have its categories from its flags.
func derivedCategories(cmd *command) string {
	var cats []string
	for _, f := range cmd.flagList {
		switch f {
		case "write":
			cats = append(cats, "write")
		case "readonly":
			cats = append(cats, "read")
		case "pubsub":
			cats = append(cats, "pubsub")
		case "blocking":
			cats = append(cats, "blocking")
		}
	}
	if slices.Contains(cmd.flagList, "fast") {
		cats = append(cats, "fast")
	} else {
		cats = append(cats, "slow")
	}
	return strings.Join(cats, " ")
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// aclID is the ACL name a command line runs as: a container command's subcommand when it is a
// known one, the command otherwise.
func (cmd *command) aclIDOf(args [][]byte) int {
	if cmd.aclSubs != nil && len(args) > 1 {
		if id, ok := cmd.aclSubs[lower(args[1])]; ok {
			return id
		}
	}
	return cmd.aclID
}

// keyPerm is what a key pattern allows: reading, writing, or both.
type keyPerm uint8

const (
	permRead keyPerm = 1 << iota
	permWrite
	permRW = permRead | permWrite
)

type keyPattern struct {
	pattern string
	perm    keyPerm
}

func (p keyPattern) String() string {
	switch p.perm {
	case permRead:
		return "%R~" + p.pattern
	case permWrite:
		return "%W~" + p.pattern
	}
	return "~" + p.pattern
}

// aclUser is one user. Users are replaced, never changed in place, once published.
type aclUser struct {
	name      string
	enabled   bool
	nopass    bool
	sanitize  int8     // 0: not said, 1: sanitize-payload, 2: skip-sanitize-payload
	passwords []string // SHA-256 hex, in the order added
	allCmds   bool     // the base of the command rules: +@all, or -@all
	rules     []string // the command rules after the base ("+get", "-@admin", "+client|id")
	allowed   []bool   // by catalog ID, computed from allCmds and rules
	allKeys   bool
	keys      []keyPattern
	allChans  bool
	channels  []string
}

// newACLUser is a user as ACL SETUSER creates it: off, no password, no keys, no channels, no
// commands (Redis 7.0 with acl-pubsub-default resetchannels).
func newACLUser(name string) *aclUser {
	u := &aclUser{name: name}
	u.allowed = u.compute(nil)
	return u
}

func (u *aclUser) clone() *aclUser {
	c := *u
	c.passwords = slices.Clone(u.passwords)
	c.rules = slices.Clone(u.rules)
	c.allowed = slices.Clone(u.allowed)
	c.keys = slices.Clone(u.keys)
	c.channels = slices.Clone(u.channels)
	return &c
}

// unrestricted reports whether the user may run everything on every key and channel: the
// default user's common case, which the checks skip.
func (u *aclUser) unrestricted() bool {
	return u.allCmds && len(u.rules) == 0 && u.allKeys && u.allChans
}

// errACLSyntax and friends are the reasons Redis gives for a rule it refuses.
var (
	errACLSyntax       = errors.New("Syntax error")
	errACLUnknown      = errors.New("Unknown command or category name in ACL")
	errACLHash         = errors.New("The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters")
	errACLNoSuchPass   = errors.New("The password you are trying to remove from the user does not exist")
	errACLKeyAfterAll  = errors.New("Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns")
	errACLChanAfterAll = errors.New("Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels")
)

func passwordHash(pw []byte) string {
	sum := sha256.Sum256(pw)
	return hex.EncodeToString(sum[:])
}

func validHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if !('0' <= h[i] && h[i] <= '9' || 'a' <= h[i] && h[i] <= 'f') {
			return false
		}
	}
	return true
}

// setRule applies one ACL rule to u.
func (u *aclUser) setRule(rule string) error {
	switch strings.ToLower(rule) {
	case "on":
		u.enabled = true
		return nil
	case "off":
		u.enabled = false
		return nil
	case "nopass":
		u.nopass, u.passwords = true, nil
		return nil
	case "resetpass":
		u.nopass, u.passwords = false, nil
		return nil
	case "allkeys":
		u.allKeys, u.keys = true, []keyPattern{{"*", permRW}}
		return nil
	case "resetkeys":
		u.allKeys, u.keys = false, nil
		return nil
	case "allchannels":
		u.allChans, u.channels = true, []string{"*"}
		return nil
	case "resetchannels":
		u.allChans, u.channels = false, nil
		return nil
	case "allcommands":
		return u.commandRule("+@all")
	case "nocommands":
		return u.commandRule("-@all")
	case "sanitize-payload":
		u.sanitize = 1
		return nil
	case "skip-sanitize-payload":
		u.sanitize = 2
		return nil
	case "reset":
		for _, r := range []string{"resetpass", "resetkeys", "resetchannels", "off", "-@all", "sanitize-payload"} {
			if err := u.setRule(r); err != nil {
				return err
			}
		}
		return nil
	}
	if rule == "" {
		return errACLSyntax
	}
	switch rule[0] {
	case '>':
		h := passwordHash([]byte(rule[1:]))
		if !slices.Contains(u.passwords, h) {
			u.passwords = append(u.passwords, h)
		}
		u.nopass = false
		return nil
	case '#':
		if !validHash(rule[1:]) {
			return errACLHash
		}
		if !slices.Contains(u.passwords, rule[1:]) {
			u.passwords = append(u.passwords, rule[1:])
		}
		u.nopass = false
		return nil
	case '<', '!':
		h := rule[1:]
		if rule[0] == '<' {
			h = passwordHash([]byte(rule[1:]))
		} else if !validHash(h) {
			return errACLHash
		}
		i := slices.Index(u.passwords, h)
		if i < 0 {
			return errACLNoSuchPass
		}
		u.passwords = slices.Delete(u.passwords, i, i+1)
		return nil
	case '~':
		return u.addKeys(rule[1:], permRW)
	case '%':
		flags, pat, ok := strings.Cut(rule[1:], "~")
		if !ok || flags == "" {
			return errACLSyntax
		}
		var perm keyPerm
		for _, f := range strings.ToUpper(flags) {
			switch f {
			case 'R':
				perm |= permRead
			case 'W':
				perm |= permWrite
			default:
				return errACLSyntax
			}
		}
		return u.addKeys(pat, perm)
	case '&':
		if !spaceFree(rule[1:]) {
			return errACLSyntax
		}
		if u.allChans {
			return errACLChanAfterAll
		}
		if rule[1:] == "*" {
			u.allChans, u.channels = true, []string{"*"}
			return nil
		}
		if !slices.Contains(u.channels, rule[1:]) {
			u.channels = append(u.channels, rule[1:])
		}
		return nil
	case '+', '-':
		return u.commandRule(rule)
	}
	return errACLSyntax
}

func (u *aclUser) addKeys(pat string, perm keyPerm) error {
	if !spaceFree(pat) {
		return errACLSyntax // the canonical form could not say it
	}
	if u.allKeys {
		return errACLKeyAfterAll
	}
	if pat == "*" && perm == permRW {
		u.allKeys, u.keys = true, []keyPattern{{"*", permRW}}
		return nil
	}
	for i := range u.keys {
		if u.keys[i].pattern == pat {
			u.keys[i].perm |= perm
			return nil
		}
	}
	u.keys = append(u.keys, keyPattern{pat, perm})
	return nil
}

// commandRule applies +name, -name, +@category or -@category (see the file comment).
func (u *aclUser) commandRule(rule string) error {
	allow, target := rule[0] == '+', strings.ToLower(rule[1:])
	if target == "@all" {
		u.allCmds, u.rules = allow, nil
		u.allowed = u.compute(nil)
		return nil
	}
	if _, ok := ruleIDs(target); !ok {
		return errACLUnknown
	}
	kept := u.rules[:0:0]
	for _, r := range u.rules {
		t := r[1:]
		if t == target || !strings.Contains(target, "|") && target[0] != '@' && strings.HasPrefix(t, target+"|") {
			continue
		}
		kept = append(kept, r)
	}
	kept = append(kept, rule[:1]+target)
	u.rules = u.normalize(kept)
	u.allowed = u.compute(u.rules)
	return nil
}

// ruleIDs are the catalog IDs a rule's target names: a category's commands, or a command and
// its subcommands, or one subcommand.
func ruleIDs(target string) ([]int, bool) {
	if cat, ok := strings.CutPrefix(target, "@"); ok {
		ids, ok := catalog.cats[cat]
		return ids, ok
	}
	id, ok := catalog.index[target]
	if !ok {
		return nil, false
	}
	return append([]int{id}, catalog.subs[id]...), true
}

// compute is the permissions of the base plus rules.
func (u *aclUser) compute(rules []string) []bool {
	bits := make([]bool, len(catalog.names))
	for i := range bits {
		bits[i] = u.allCmds
	}
	for _, r := range rules {
		ids, _ := ruleIDs(r[1:])
		for _, id := range ids {
			bits[id] = r[0] == '+'
		}
	}
	return bits
}

// normalize replays rules from the base, keeping those that change a permission.
func (u *aclUser) normalize(rules []string) []string {
	bits := u.compute(nil)
	var kept []string
	for _, r := range rules {
		ids, _ := ruleIDs(r[1:])
		changed := false
		for _, id := range ids {
			if bits[id] != (r[0] == '+') {
				bits[id] = r[0] == '+'
				changed = true
			}
		}
		if changed {
			kept = append(kept, r)
		}
	}
	return kept
}

// flags is ACL GETUSER's flags list.
func (u *aclUser) flags() []string {
	f := []string{"off"}
	if u.enabled {
		f[0] = "on"
	}
	if u.nopass {
		f = append(f, "nopass")
	}
	switch u.sanitize {
	case 1:
		f = append(f, "sanitize-payload")
	case 2:
		f = append(f, "skip-sanitize-payload")
	}
	return f
}

func (u *aclUser) commandsText() string {
	s := "-@all"
	if u.allCmds {
		s = "+@all"
	}
	for _, r := range u.rules {
		s += " " + r
	}
	return s
}

func (u *aclUser) keysText() string {
	parts := make([]string, len(u.keys))
	for i, k := range u.keys {
		parts[i] = k.String()
	}
	return strings.Join(parts, " ")
}

func (u *aclUser) channelsText() string {
	parts := make([]string, len(u.channels))
	for i, c := range u.channels {
		parts[i] = "&" + c
	}
	return strings.Join(parts, " ")
}

// describe is the user's rules in canonical form: ACL LIST's line after "user <name> ", the
// text KindSetUser replicates. Parsing it on a new user gives back this user.
func (u *aclUser) describe() string {
	parts := u.flags()
	for _, h := range u.passwords {
		parts = append(parts, "#"+h)
	}
	if k := u.keysText(); k != "" {
		parts = append(parts, k)
	}
	if u.allChans {
		parts = append(parts, "&*")
	} else {
		parts = append(parts, "resetchannels")
		if c := u.channelsText(); c != "" {
			parts = append(parts, c)
		}
	}
	parts = append(parts, u.commandsText())
	return strings.Join(parts, " ")
}

// parseACLUser builds user name from rules applied to a new user; it fails on the first rule
// it refuses, saying which.
func parseACLUser(name string, rules []string) (*aclUser, error) {
	u := newACLUser(name)
	if err := u.apply(rules); err != nil {
		return nil, err
	}
	return u, nil
}

// apply applies rules in order; on an error u is partly changed (callers work on a clone).
func (u *aclUser) apply(rules []string) error {
	for _, r := range rules {
		if strings.HasPrefix(r, "(") {
			return &ruleError{rule: r, err: errors.New("selectors are not supported by raftlock")}
		}
		if err := u.setRule(r); err != nil {
			return &ruleError{rule: r, err: err}
		}
	}
	return nil
}

// ruleError is a refused rule, in Redis's words.
type ruleError struct {
	rule string
	err  error
}

func (e *ruleError) Error() string {
	return "Error in ACL SETUSER modifier '" + e.rule + "': " + e.err.Error()
}

// validUserName is Redis's rule: no spaces, no NUL.
func validUserName(name string) bool {
	return !strings.ContainsAny(name, " \x00") && name != ""
}

// checkPassword reports whether pass opens u (any password for a nopass user).
func (u *aclUser) checkPassword(pass []byte) bool {
	if !u.enabled {
		return false
	}
	if u.nopass {
		return true
	}
	h := passwordHash(pass)
	ok := false
	for _, p := range u.passwords {
		if subtle.ConstantTimeCompare([]byte(p), []byte(h)) == 1 {
			ok = true
		}
	}
	return ok
}

// canKey reports whether the user may touch key as need says: as in Redis 7.0, one pattern
// must match the key and allow all of need (none: any pattern that matches).
func (u *aclUser) canKey(key []byte, need keyPerm) bool {
	if u.allKeys {
		return true
	}
	for _, p := range u.keys {
		if p.perm&need == need && globMatch([]byte(p.pattern), key) {
			return true
		}
	}
	return false
}

// keyPermOf is what cmd with args needs on each of its keys: its key-spec flags' (aclKeyFlags),
// and for SET, read and write with GET, write only without it (Redis's setGetKeys).
func (cmd *command) keyPermOf(args [][]byte) keyPerm {
	if cmd.name == "set" {
		for _, a := range args[min(3, len(args)):] {
			if is(a, "get") {
				return permRW
			}
		}
		return permWrite
	}
	return cmd.keyPerm
}

// canChannel reports whether the user may publish or subscribe to channel; for PSUBSCRIBE
// (pattern) the pattern must be one of the user's own, as in Redis.
func (u *aclUser) canChannel(channel []byte, pattern bool) bool {
	if u.allChans {
		return true
	}
	for _, c := range u.channels {
		if pattern && c == string(channel) || !pattern && globMatch([]byte(c), channel) {
			return true
		}
	}
	return false
}

// denial is why a user may not run a command line: nothing (zero), the command, a key or a
// channel, with the name that was refused.
type denial struct {
	reason string // "command", "key", "channel"
	object string
}

// check reports whether u may run cmd with args (client keys, before the database rewrite).
func (u *aclUser) check(cmd *command, args [][]byte) (denial, bool) {
	if u.unrestricted() {
		return denial{}, true
	}
	id := cmd.aclIDOf(args)
	// AUTH, HELLO, QUIT and RESET run for every user, as in Redis.
	if !u.allowed[id] && !cmd.noAuth {
		return denial{"command", catalog.names[id]}, false
	}
	need := cmd.keyPermOf(args)
	for _, k := range cmd.keyArgs(args) {
		if !u.canKey(k, need) {
			return denial{"key", string(k)}, false
		}
	}
	switch cmd.name {
	case "publish", "spublish":
		if !u.canChannel(args[1], false) {
			return denial{"channel", string(args[1])}, false
		}
	case "subscribe", "ssubscribe", "psubscribe":
		for _, ch := range args[1:] {
			if !u.canChannel(ch, cmd.name == "psubscribe") {
				return denial{"channel", string(ch)}, false
			}
		}
	}
	return denial{}, true
}

// noperm is Redis 7.0's NOPERM reply for a denial.
func (d denial) noperm() string {
	switch d.reason {
	case "key":
		return "NOPERM this user has no permissions to access one of the keys used as arguments"
	case "channel":
		return "NOPERM this user has no permissions to access one of the channels used as arguments"
	}
	return "NOPERM this user has no permissions to run the '" + d.object + "' command"
}

// scriptError is the error a redis.call gets for a denial, in Redis 7.0's words.
func (d denial) scriptError() string {
	switch d.reason {
	case "key":
		return "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments"
	case "channel":
		return "ERR The user executing the script can't publish to the channel mentioned in the command"
	}
	return "ERR The user executing the script can't run this command or subcommand"
}

// dryRun is ACL DRYRUN's text for a denial.
func (d denial) dryRun() string {
	switch d.reason {
	case "key":
		return "This user has no permissions to access the '" + d.object + "' key"
	case "channel":
		return "This user has no permissions to access the '" + d.object + "' channel"
	}
	return "This user has no permissions to run the '" + d.object + "' command"
}

// execReason is why EXEC refuses a queued command the user may no longer run.
func (d denial) execReason() string {
	switch d.reason {
	case "key":
		return "no permission to touch the specified keys"
	case "channel":
		return "no permission to access one of the channels used as arguments"
	}
	return "no permission to execute the '" + d.object + "' command"
}
