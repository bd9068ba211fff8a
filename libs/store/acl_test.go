package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/testkit"
)

// loadScripts loads the store's scripts into rdb's Redis, as the
// provisioner does for its agents' users.
func loadScripts(t *testing.T, rdb *redis.Client) {
	t.Helper()
	for _, src := range Scripts() {
		if err := rdb.ScriptLoad(context.Background(), src).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// aclClient makes user on rdb's Redis with ACLRules(prefix), loads the
// store's scripts (the user may not EVAL them) and returns a client that is
// that user.
func aclClient(t *testing.T, rdb *redis.Client, user, prefix string) *redis.Client {
	t.Helper()
	ctx := context.Background()
	loadScripts(t, rdb)
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw-" + user}
	for _, r := range ACLRules(prefix) {
		args = append(args, r)
	}
	if err := rdb.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, Username: user, Password: "pw-" + user})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A user with ACLRules can do everything a Store does (every op of Apply,
// the inbox, the change log, every read, the relay with its lease and its
// set-aside entries, breaking the lease), and nothing outside its prefix
// nor any keyless or server-wide command.
func TestACLRulesCoverTheStore(t *testing.T) {
	t.Parallel()
	rdb := realRedis(t)
	ctx := context.Background()
	c := aclClient(t, rdb, "svc-user", "svc:")
	s := New(c, "svc:")

	var tx Tx
	tx.Set("str", []byte("v"))
	tx.HSet("h", "f", []byte("v"))
	tx.HSet("h", "g", []byte("w"))
	tx.SAdd("set", "m")
	tx.ZAdd("z", "a")
	tx.ZAdd("z", "b")
	tx.XAdd("stream", 10, []byte("e"))
	tx.Log("changes", 100, 1<<20, "t")
	tx.Emit(testEvent("k", "one"))
	if _, err := s.Apply(ctx, "in-1", &tx); err != nil {
		t.Fatalf("Apply as the ACL user: %v", err)
	}
	if applied, err := s.Apply(ctx, "in-1", &tx); err != nil || applied {
		t.Fatalf("Apply again = %v, %v; want a no-op", applied, err)
	}
	var tx2 Tx
	tx2.IfHField("h", "f", []byte("v"))
	tx2.HDel("h", "g")
	tx2.SRem("set", "m")
	tx2.ZRem("z", "b")
	tx2.Del("gone")
	if _, err := s.ApplyBatch(ctx, []string{"in-2", "in-3"}, &tx2); err != nil {
		t.Fatalf("ApplyBatch as the ACL user: %v", err)
	}
	if seen, err := s.Seen(ctx, "in-2"); err != nil || !seen {
		t.Fatalf("Seen = %v, %v", seen, err)
	}
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s as the ACL user: %v", what, err)
		}
	}
	_, err := s.Get(ctx, "str")
	check("Get", err)
	_, err = s.HGetAll(ctx, "h")
	check("HGetAll", err)
	_, err = s.HScanAll(ctx, "h", 1)
	check("HScanAll", err)
	_, err = s.HGet(ctx, "h", "f")
	check("HGet", err)
	_, err = s.HMGet(ctx, "h", []string{"f", "g"})
	check("HMGet", err)
	_, err = s.ZRangeByLex(ctx, "z", "", "", 10)
	check("ZRangeByLex", err)
	_, err = s.ZRevRangeByLex(ctx, "z", "", "", 10)
	check("ZRevRangeByLex", err)
	_, err = s.SMembers(ctx, "set")
	check("SMembers", err)
	_, err = s.StreamEntries(ctx, "stream", "", 10)
	check("StreamEntries", err)
	tail, _, err := s.LogTail(ctx, "changes", "str")
	check("LogTail", err)
	_, _, err = s.ReadLog(ctx, "changes", tail.ID, 10, "str")
	check("ReadLog", err)
	ok, err := s.RenewLease(ctx, "lease", "tok", time.Minute)
	check("RenewLease", err)
	_ = ok
	check("ReleaseLease", s.ReleaseLease(ctx, "lease", "tok"))

	// The relay: its lease, reads, deletes, and an undecodable entry set aside.
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: s.outboxKey, Values: []string{"x", "y"}}).Err(); err != nil {
		t.Fatal(err)
	}
	want := append([]string{tx.events[0].ID}, applyEvents(t, s, 3, "acl-")...)
	r := newRecorder()
	stop := runRelay(t, s, r)
	waitDrained(t, s, r, len(want))
	if got := r.ids(); len(got) != len(want) {
		t.Fatalf("relay as the ACL user published %v, want %v", got, want)
	}
	if n, err := rdb.XLen(ctx, s.deadKey).Result(); err != nil || n != 1 {
		t.Fatalf("dead stream has %d entries (%v), want the undecodable one", n, err)
	}
	if err := stop(); err != nil {
		t.Fatalf("relay as the ACL user: %v", err)
	}
	_, err = s.BreakRelayLease(ctx)
	check("BreakRelayLease", err)
	check("PING", c.Ping(ctx).Err())

	// Nothing else: another prefix, keyless and server-wide commands, Pub/Sub.
	other := New(c, "other:")
	var otx Tx
	otx.Set("k", []byte("v"))
	if _, err := other.Apply(ctx, "", &otx); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("Apply under another prefix: %v, want NOPERM", err)
	}
	for _, cmd := range [][]any{
		{"GET", "other:k"}, {"SET", "other:k", "v"}, {"SCAN", "0"}, {"KEYS", "*"}, {"RANDOMKEY"},
		{"CONFIG", "GET", "*"}, {"FLUSHALL"}, {"SCRIPT", "FLUSH"}, {"PUBLISH", "ch", "m"},
		{"ACL", "SETUSER", "x"}, {"CLIENT", "LIST"}, {"CLIENT", "KILL", "ID", "1"}, {"SHUTDOWN"},
		{"EVAL", "return redis.call('GET', KEYS[1])", "1", "other:k"},
		{"EVAL", "return 1", "0"}, {"EVAL", "return redis.call('GET', KEYS[1])", "1", "svc:str"},
		{"SCRIPT", "LOAD", "return 1"}, {"FUNCTION", "LIST"}, {"FCALL", "f", "0"},
	} {
		if err := c.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v as the ACL user: %v, want NOPERM", cmd, err)
		}
	}
}

// A script of the user's own, which could run for ever and make Redis
// answer BUSY to every other client, every service's, is refused: the user
// runs only the scripts in Redis's cache (EVALSHA).
func TestACLRulesRefuseEval(t *testing.T) {
	t.Parallel()
	rdb := realRedis(t)
	ctx := testkit.Context(t, 30*time.Second)
	c := aclClient(t, rdb, "agent-user", "agent-c-h:")
	err := c.Do(ctx, "EVAL", "local i = 0 while true do i = i + 1 end", "0").Err()
	if err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("an endless EVAL as the ACL user: %v, want NOPERM", err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("another client after the EVAL: %v", err)
	}
}

// After Redis lost its script cache (a restart, SCRIPT FLUSH), a user that
// may not EVAL waits for the scripts (the provisioner loads them at every
// pass) instead of failing: its Apply lands once they are loaded, its relay
// publishes, nothing is lost. A user that may EVAL loads them itself.
func TestACLUserWaitsForScriptsAfterFlush(t *testing.T) {
	t.Parallel()
	rdb := realRedis(t)
	ctx := testkit.Context(t, 30*time.Second)
	c := aclClient(t, rdb, "agent-user", "agent-c-h:")
	s := New(c, "agent-c-h:")
	waiting := make(chan struct{}, 1)
	s.fp.scriptMissing = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	r := newRecorder()
	stop := runRelay(t, s, r)
	want := applyEvents(t, s, 1, "before-")

	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var tx Tx
	ev := testEvent("k", "after-flush")
	tx.Emit(ev)
	tx.Set("v", []byte("1"))
	done := make(chan error, 1)
	go func() {
		_, err := s.Apply(ctx, "in-after-flush", &tx)
		done <- err
	}()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("Apply after SCRIPT FLUSH returned %v before the scripts were loaded: the user ran a script of its own (EVAL)", err)
	case <-ctx.Done():
		t.Fatal("Apply after SCRIPT FLUSH neither waited nor returned")
	}
	loadScripts(t, rdb) // the provisioner's next pass
	if err := <-done; err != nil {
		t.Fatalf("Apply once the scripts are loaded again: %v", err)
	}
	if v, err := s.Get(ctx, "v"); err != nil || string(v) != "1" {
		t.Fatalf("v = %q, %v; want 1", v, err)
	}
	want = append(want, ev.ID)
	waitDrained(t, s, r, len(want))
	if got := r.ids(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("relay published %v, want %v", got, want)
	}
	if err := stop(); err != nil {
		t.Fatalf("relay: %v", err)
	}

	// A user with EVAL (a service's) does not wait: its EVAL caches the
	// script again.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	svc := New(rdb, "svc:")
	svc.fp.scriptMissing = func() { t.Error("a user with EVAL waited for the scripts") }
	var stx Tx
	stx.Set("v", []byte("1"))
	if _, err := svc.Apply(ctx, "", &stx); err != nil {
		t.Fatalf("Apply with EVAL after SCRIPT FLUSH: %v", err)
	}
}

// A waiting Apply whose ctx ends says that nothing ran: it is no
// outcome-unknown (no reload of the service's memory is owed).
func TestApplyWaitingForScriptsEndsWithItsContext(t *testing.T) {
	t.Parallel()
	rdb := realRedis(t)
	c := aclClient(t, rdb, "agent-user", "agent-c-h:")
	if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	s := New(c, "agent-c-h:")
	ctx, cancel := context.WithCancel(context.Background())
	s.fp.scriptMissing = cancel
	var tx Tx
	tx.Set("v", []byte("1"))
	_, err := s.Apply(ctx, "", &tx)
	if err == nil || OutcomeUnknown(err) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "SCRIPT LOAD") {
		t.Fatalf("Apply whose ctx ended while it waited for the scripts: %v; want a known failure naming SCRIPT LOAD", err)
	}
}
