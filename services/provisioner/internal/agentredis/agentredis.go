// Package agentredis makes a Redis ACL user for each node's agent, so that
// an agent reaches its own keys and nothing else: the user
// agent-<cluster>-<host> (service.AgentName), a random password kept in a
// 0600 file in the node's work dir, the key pattern of the agent's prefix
// and the commands of its store (store.ACLRules). The provisioner makes it
// before each start of the agent and again at every reconciler pass
// (ACL SETUSER with reset is idempotent: a restarted Redis or provisioner
// gets it back), and deletes it when the node is removed. A reimage wipes
// the work dir, password file included: the next start deletes the user,
// closing its connections, and makes it again with a new password, so
// neither the old password nor a connection made with it works any more.
//
// An agent's user may not EVAL (store.ACLCommands: a script of its own
// could keep Redis busy, and every service waiting, for ever); it runs the
// store's scripts with EVALSHA, from Redis's script cache. LoadScripts
// therefore loads them (store.Scripts), once per reconciler pass, before
// the pass's Ensures (the local provider's StartPass): a Redis that
// restarted, its cache empty, has them again within a pass, and the
// agents' writes, which wait for them meanwhile, go on. A pass over n
// running agents sends n ACL SETUSER and len(store.Scripts()) SCRIPT LOAD,
// not n of each.
//
// Delete, when the node is removed, also deletes every key under the
// agent's prefix (its outbox, inbox marks, lease, state): an agent of the
// same name later (a cluster id used again, maybe by another project)
// starts with none of them, and its relay publishes nothing the old agent
// left behind. Where agents have no user of their own (they share the
// provisioner's credential), Keys deletes them all the same. DeleteAll
// does it for many nodes at once with one walk of the keyspace (see
// deleteKeys): the local provider's RemoveNodes, which the reconciler
// calls with every node a pass removes.
package agentredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/services/provisioner/internal/provider"
)

// PasswordFile is the file in a node's work dir that holds its agent's
// Redis password (0600), handed to the agent as LOOM_REDIS_PASSWORD_FILE.
const PasswordFile = "redis.password"

// Grant is what the provisioner's own Redis user needs to make and delete
// the agents' users, to load the scripts they run and to delete a removed
// agent's keys.
const Grant = "+acl|setuser +acl|deluser +script|load +scan +unlink ~agent-*"

// probeKey is the key Probe deletes to check that it may delete agents'
// keys: under "agent-" but no agent's (an agent's prefix has a cluster id
// between "agent-" and the host, and cluster ids are not empty).
const probeKey = "agent-:" + probeUser

// deleteBatch is how many keys a SCAN step of Delete asks for, and so
// about how many one UNLINK deletes.
const deleteBatch = 1000

// probeUser is the user Probe makes (disabled, with no permission) and
// deletes.
const probeUser = "loom-provisioner-acl-probe"

// UnsupportedError says that the Redis, or the provisioner's user on it,
// cannot make ACL users, load the scripts they run or delete agents' keys,
// and what to do about it.
type UnsupportedError struct {
	// User is the provisioner's Redis user ("default" when it logs in
	// without a name).
	User string
	// Missing are the rules of Grant that User lacks, in Grant's order
	// (empty when NoACL).
	Missing []string
	// NoACL says that this Redis has no ACL users at all (miniredis, a
	// Redis before 6): no rule helps.
	NoACL bool
	// Err is what Redis answered to each refused probe.
	Err error
}

func (e *UnsupportedError) Error() string {
	if e.NoACL {
		return fmt.Sprintf("this Redis has no ACL users (%v): an agent's own Redis user needs Redis 6 or later, not miniredis", e.Err)
	}
	return fmt.Sprintf("the provisioner's Redis user %q lacks %s of the grant the agents' users need (%v): "+
		"add them on Redis with `%s` (then `ACL SAVE` if Redis keeps its users in an ACL file); the whole grant is %s",
		e.User, strings.Join(e.Missing, " "), strings.ReplaceAll(e.Err.Error(), "\n", "; "), e.Fix(), Grant)
}

// Fix is the command an operator runs on Redis to give User the rules it
// lacks ("" when NoACL).
func (e *UnsupportedError) Fix() string {
	if e.NoACL || len(e.Missing) == 0 {
		return ""
	}
	return "ACL SETUSER " + e.User + " " + strings.Join(e.Missing, " ")
}

func (e *UnsupportedError) Unwrap() error { return e.Err }

// probeStep is one command Probe sends and the rules of Grant that let it
// through: cmdRules when Redis refuses the command, keyRules when it
// refuses its key.
type probeStep struct {
	cmd                []any
	cmdRules, keyRules []string
}

// userProbes check that the provisioner may make and delete ACL users
// (with a user that is disabled and has no permission) and load the
// store's scripts.
var userProbes = []probeStep{
	{cmd: []any{"ACL", "SETUSER", probeUser, "reset"}, cmdRules: []string{"+acl|setuser"}},
	{cmd: []any{"ACL", "DELUSER", probeUser}, cmdRules: []string{"+acl|deluser"}},
	{cmd: []any{"SCRIPT", "LOAD", store.Scripts()[0]}, cmdRules: []string{"+script|load"}},
}

// keyProbes check that the provisioner may find and delete agents' keys,
// with a key that is no agent's. Where UNLINK itself is refused, whether
// the key pattern is there cannot be told, so ~agent-* is named too
// (adding a pattern the user has changes nothing).
var keyProbes = []probeStep{
	{cmd: []any{"SCAN", "0", "MATCH", probeKey, "COUNT", "1"}, cmdRules: []string{"+scan"}},
	{cmd: []any{"UNLINK", probeKey}, cmdRules: []string{"+unlink", "~agent-*"}, keyRules: []string{"~agent-*"}},
}

// Probe checks that rdb, logged in as user ("" for the default user), may
// make and delete ACL users, load the store's scripts and find and delete
// agents' keys: every command of Grant is tried. A Redis that refuses
// (miniredis, a user without all of Grant, such as the grant of an older
// Loom) gives an *UnsupportedError naming the rules it lacks and the
// command that adds them; a Redis that does not answer, its error.
func Probe(ctx context.Context, rdb redis.UniversalClient, user string) error {
	return probe(ctx, rdb, user, append(append([]probeStep(nil), userProbes...), keyProbes...))
}

// probe sends each step's command and collects the rules of the refused
// ones.
func probe(ctx context.Context, rdb redis.UniversalClient, user string, steps []probeStep) error {
	if user == "" {
		user = "default"
	}
	var missing []string
	var refused []error
	add := func(rules []string) {
		for _, r := range rules {
			if !slices.Contains(missing, r) {
				missing = append(missing, r)
			}
		}
	}
	for i, st := range steps {
		err := rdb.Do(ctx, st.cmd...).Err()
		if err == nil {
			continue
		}
		what := fmt.Sprintf("%s %s", st.cmd[0], st.cmd[1])
		var re redis.Error
		if !errors.As(err, &re) {
			return fmt.Errorf("redis: %s: %w", what, err)
		}
		refused = append(refused, fmt.Errorf("%s: %w", what, err))
		msg := err.Error()
		switch {
		case !strings.HasPrefix(msg, "NOPERM") && i == 0 && st.cmd[0] == "ACL":
			// Not a refusal of this user: this Redis knows no ACL.
			return &UnsupportedError{User: user, NoACL: true, Err: refused[0]}
		case strings.HasPrefix(msg, "NOPERM") && strings.Contains(msg, "key"):
			add(st.keyRules)
		default:
			add(st.cmdRules)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	// In Grant's order, whatever the order of the probes.
	grant := strings.Fields(Grant)
	slices.SortFunc(missing, func(a, b string) int { return slices.Index(grant, a) - slices.Index(grant, b) })
	return &UnsupportedError{User: user, Missing: missing, Err: errors.Join(refused...)}
}

// ProbeKeys checks that rdb, logged in as user ("" for the default user),
// may find and delete agents' keys (Keys), as Probe does for the part of
// Grant that needs: +scan +unlink ~agent-*.
func ProbeKeys(ctx context.Context, rdb redis.UniversalClient, user string) error {
	return probe(ctx, rdb, user, keyProbes)
}

// Keys deletes a removed node's agent's keys where the agents have no
// Redis user of their own (they share the provisioner's credential:
// -agent-redis-users=off, or auto on a Redis that cannot make users): the
// keys' names do not depend on the user, and an agent of the same name
// later must not inherit them either.
type Keys struct {
	rdb redis.UniversalClient
}

// NewKeys returns Keys that delete through rdb, the provisioner's client
// (see ProbeKeys).
func NewKeys(rdb redis.UniversalClient) *Keys { return &Keys{rdb: rdb} }

// Delete deletes every key under the prefix of n's agent, as Users.Delete
// does after deleting its user. Call it once the agent is stopped;
// idempotent.
func (k *Keys) Delete(ctx context.Context, n provider.Node) error {
	return k.DeleteAll(ctx, []provider.Node{n})[0]
}

// DeleteAll deletes the keys of every node of nodes' agents, as Delete
// does, with one walk of the keyspace for all of them (deleteKeys): an
// error per node, in order, nil for a node whose keys are gone. Call it
// once the agents are stopped; idempotent, and a failure is retried by
// calling it again.
func (k *Keys) DeleteAll(ctx context.Context, nodes []provider.Node) []error {
	errs := make([]error, len(nodes))
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = UserName(n)
	}
	if err := deleteKeys(ctx, k.rdb, names); err != nil {
		for i, name := range names {
			errs[i] = fmt.Errorf("agent %s: delete its keys: %w", name, err)
		}
	}
	return errs
}

// Users makes and deletes the agents' Redis users.
type Users struct {
	rdb redis.UniversalClient
}

// New returns Users that manage the agents' users through rdb, the
// provisioner's client (see Probe).
func New(rdb redis.UniversalClient) *Users { return &Users{rdb: rdb} }

// UserName is the Redis user of node n's agent: its service name.
func UserName(n provider.Node) string { return service.AgentName(n.ClusterID, n.Hostname) }

// LoadScripts loads the store's scripts (store.Scripts) into Redis's
// script cache, in one round trip: an agent's user may run them but not
// EVAL its own, so after a Redis restart or SCRIPT FLUSH its writes wait
// until this runs again. Call it once per reconciler pass, before the
// pass's Ensures (the scripts are the same for every agent).
func (u *Users) LoadScripts(ctx context.Context) error {
	pipe := u.rdb.Pipeline()
	loads := make([]*redis.StringCmd, 0, len(store.Scripts()))
	for _, src := range store.Scripts() {
		loads = append(loads, pipe.ScriptLoad(ctx, src))
	}
	_, _ = pipe.Exec(ctx)
	for _, l := range loads {
		if err := l.Err(); err != nil {
			return fmt.Errorf("redis: the agents' scripts: SCRIPT LOAD: %w", err)
		}
	}
	return nil
}

// Ensure makes (or makes again, with the same password) the Redis user of
// n's agent and returns its name and the path of its password file: a new
// random password when the node's work dir has none (its first start, or a
// reimage wiped it). The scripts the user runs are LoadScripts', once per
// pass.
func (u *Users) Ensure(ctx context.Context, n provider.Node) (user, passwordFile string, err error) {
	user = UserName(n)
	path := filepath.Join(n.WorkDir, PasswordFile)
	pw, err := load(path)
	if err != nil {
		return "", "", fmt.Errorf("redis user %s: %w", user, err)
	}
	if pw == "" {
		// A new password (a first start, or a reimage wiped the file):
		// delete the user first, which closes the connections it has. ACL
		// SETUSER alone changes the password but leaves them logged in, so
		// a process of the node from before the reimage would keep the
		// prefix. Before the file is written, so that a failure here is
		// tried again.
		if err := u.rdb.Do(ctx, "ACL", "DELUSER", user).Err(); err != nil {
			return "", "", fmt.Errorf("redis user %s: ACL DELUSER: %w", user, err)
		}
		if pw, err = create(n.WorkDir, path); err != nil {
			return "", "", fmt.Errorf("redis user %s: %w", user, err)
		}
	}
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">" + pw}
	for _, r := range store.ACLRules(user + ":") {
		args = append(args, r)
	}
	if err := u.rdb.Do(ctx, args...).Err(); err != nil {
		return "", "", fmt.Errorf("redis user %s: ACL SETUSER: %w", user, err)
	}
	return user, path, nil
}

// Delete deletes the Redis user of n's agent (Redis closes its
// connections), then every key under its prefix ("agent-<cluster>-<host>:",
// colon included: not another agent's whose host starts the same), in
// batches: nothing of a removed node is left for an agent of the same name
// to inherit. Call it once the agent is stopped. Idempotent: a user or keys
// that are gone are not an error, and a failure is retried by calling it
// again.
func (u *Users) Delete(ctx context.Context, n provider.Node) error {
	return u.DeleteAll(ctx, []provider.Node{n})[0]
}

// DeleteAll does what Delete does for every node of nodes: their users
// deleted in one round trip (pipelined ACL DELUSER), then the keys of those
// whose user went, with one walk of the keyspace for all of them
// (deleteKeys), however many they are. It returns an error per node, in
// order: nil for a node whose user and keys are gone. Call it once the
// agents are stopped; idempotent, and a failure is retried by calling it
// again.
func (u *Users) DeleteAll(ctx context.Context, nodes []provider.Node) []error {
	errs := make([]error, len(nodes))
	if len(nodes) == 0 {
		return errs
	}
	pipe := u.rdb.Pipeline()
	dels := make([]*redis.Cmd, len(nodes))
	for i, n := range nodes {
		dels[i] = pipe.Do(ctx, "ACL", "DELUSER", UserName(n))
	}
	_, _ = pipe.Exec(ctx)
	var names []string
	var gone []int
	for i, n := range nodes {
		if err := dels[i].Err(); err != nil {
			errs[i] = fmt.Errorf("redis user %s: ACL DELUSER: %w", UserName(n), err)
			continue
		}
		names = append(names, UserName(n))
		gone = append(gone, i)
	}
	if err := deleteKeys(ctx, u.rdb, names); err != nil {
		for j, i := range gone {
			errs[i] = fmt.Errorf("redis user %s: delete its keys: %w", names[j], err)
		}
	}
	return errs
}

// deleteKeys deletes every key under the prefix of each agent of names
// ("<name>:", colon included): one SCAN MATCH walk of the keyspace for
// them all, each step's keys of theirs unlinked (freed in the background:
// an outbox may be large). The walk's pattern is the names' longest
// common prefix, so that Redis sends back few keys but theirs; a key is
// deleted only when a prefix of it up to one of its colons is one of
// theirs ("agent-c-n1:" is not a prefix of "agent-c-n10:x"). SCAN MATCH
// walks the whole keyspace, whatever the pattern: about keys/deleteBatch
// round trips per call, which is why removals come in batches
// (BenchmarkDeleteManyInLargeKeyspace: one walk per node made a
// 1,000-node removal among 200,000 keys take minutes).
//
// No walk at all would need the names of an agent's keys: the fixed ones
// (outbox, outbox:dead, outbox:lease, steps, tasks, metrics, boot_id) are
// known, but its inbox marks are one key per applied event, named by the
// event's id ("inbox:<id>", expiring after store.InboxTTL), and only an
// index written by the store's Apply script with each mark (on every
// agent's hot path, and kept in step with the marks' expiry) would name
// them.
func deleteKeys(ctx context.Context, rdb redis.UniversalClient, names []string) error {
	if len(names) == 0 {
		return nil
	}
	prefixes := make(map[string]bool, len(names))
	common := names[0] + ":"
	for _, name := range names {
		p := name + ":"
		prefixes[p] = true
		common = commonPrefix(common, p)
	}
	match := globEscape(common) + "*"
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, match, deleteBatch).Result()
		if err != nil {
			return fmt.Errorf("SCAN: %w", err)
		}
		theirs := keys[:0]
		for _, k := range keys {
			if underOneOf(k, prefixes) {
				theirs = append(theirs, k)
			}
		}
		if len(theirs) > 0 {
			if err := rdb.Unlink(ctx, theirs...).Err(); err != nil {
				return fmt.Errorf("UNLINK: %w", err)
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// underOneOf reports whether key starts with one of prefixes, each of
// which ends with a colon: whether key up to one of its colons is one.
func underOneOf(key string, prefixes map[string]bool) bool {
	for i := 0; i < len(key); i++ {
		if key[i] == ':' && prefixes[key[:i+1]] {
			return true
		}
	}
	return false
}

// commonPrefix returns the longest prefix of a and b.
func commonPrefix(a, b string) string {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return a[:i]
		}
	}
	return a[:n]
}

// globEscape escapes s for a Redis glob pattern, so that it matches s
// only. Byte by byte: a common prefix (deleteKeys) may end inside a
// multi-byte character, and Redis matches bytes.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// load returns the password in path, "" when there is none.
func load(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(b)), err
}

// create writes a new random password to path (0600, atomically) and
// returns it.
func create(dir, path string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(b[:])
	tmp, err := os.CreateTemp(dir, PasswordFile+".*.tmp")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", err
	}
	if _, err := tmp.WriteString(pw + "\n"); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return pw, nil
}
