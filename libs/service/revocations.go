package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/auth"
)

// RevocationPoll is how often a service reads whether the revocation list
// of removed nodes' identities (auth.RevokedNodesKey) changed: a removed
// node's records are refused by every service's consumers within it.
const RevocationPoll = 250 * time.Millisecond

// RevocationStale is how long a service's copy of the revocation list may
// go unread before the service says it is not ready (Check): past it a
// removed node's records may be taken, and an operator must see that
// rather than a WARN logged once.
const RevocationStale = 5 * time.Second

// NodeRevocations is a service's copy of the revocation list of removed
// nodes' identities, which the provisioner writes when it removes a node:
// Lookup answers from memory (the bus verifier asks it for every node
// record), Refresh reads Redis again when the list's version changed. It is
// safe for concurrent use.
type NodeRevocations struct {
	rdb redis.UniversalClient
	now func() time.Time

	list    atomic.Pointer[map[string]auth.NodeRevocation]
	version atomic.Pointer[string]
	// failing is set while reads fail, so that a failure is logged once,
	// and its recovery once.
	failing atomic.Bool
	// read is when a Refresh last succeeded (unix nanoseconds; 0: never),
	// lastErr why the last one failed, when none has succeeded since.
	read    atomic.Int64
	lastErr atomic.Pointer[string]
	mu      sync.Mutex // one Refresh at a time
}

// NewNodeRevocations returns an empty copy of the list in rdb; now is the
// clock entries expire on (nil: time.Now).
func NewNodeRevocations(rdb redis.UniversalClient, now func() time.Time) *NodeRevocations {
	if now == nil {
		now = time.Now
	}
	r := &NodeRevocations{rdb: rdb, now: now}
	r.list.Store(&map[string]auth.NodeRevocation{})
	return r
}

// Lookup is the revocation of node in force (envelope.Revocations).
func (r *NodeRevocations) Lookup(node string) (auth.NodeRevocation, bool) {
	rev, ok := (*r.list.Load())[node]
	if !ok || !rev.Live(r.now()) {
		return auth.NodeRevocation{}, false
	}
	return rev, true
}

// Refresh reads the list again if its version changed since the last read
// (the whole hash, entries past their Until left out). An entry that does
// not decode is left out, the others kept.
func (r *NodeRevocations) Refresh(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.refresh(ctx)
	if err != nil {
		msg := err.Error()
		r.lastErr.Store(&msg)
		return err
	}
	r.read.Store(r.now().UnixNano())
	// A failure before this read is no longer why the copy is what it
	// is: Check must not name it should reads stop later.
	r.lastErr.Store(nil)
	return nil
}

// Check is nil while the copy is current: read within RevocationStale.
// Otherwise it says since when it is not, and why (the service's /readyz
// answers 503 with it): a service that cannot read the list takes every
// removed node's records, which must not pass unseen.
func (r *NodeRevocations) Check() error {
	why := ""
	if p := r.lastErr.Load(); p != nil {
		why = ": " + *p
	}
	last := r.read.Load()
	if last == 0 {
		return fmt.Errorf("the revocation list of removed nodes' identities (%s*) has never been read%s; "+
			"removed nodes' records are not refused until it is (the service's Redis user needs read access to it)", auth.RevokedNodesKey, why)
	}
	if age := r.now().Sub(time.Unix(0, last)); age > RevocationStale {
		return fmt.Errorf("the revocation list of removed nodes' identities (%s*) has not been read for %v%s; "+
			"nodes removed since are not refused (the service's Redis user needs read access to it)", auth.RevokedNodesKey, age.Round(time.Second), why)
	}
	return nil
}

// refresh is Refresh, under its lock.
func (r *NodeRevocations) refresh(ctx context.Context) error {
	ver, err := r.rdb.Get(ctx, auth.RevokedNodesVersionKey).Result()
	switch {
	case errors.Is(err, redis.Nil):
		ver = ""
	case err != nil:
		return err
	}
	if p := r.version.Load(); p != nil && *p == ver {
		return nil
	}
	raw, err := r.rdb.HGetAll(ctx, auth.RevokedNodesKey).Result()
	if err != nil {
		return err
	}
	now := r.now()
	list := make(map[string]auth.NodeRevocation, len(raw))
	for node, b := range raw {
		rev, err := auth.DecodeNodeRevocation([]byte(b))
		if err != nil || !rev.Live(now) {
			continue
		}
		list[node] = rev
	}
	r.list.Store(&list)
	r.version.Store(&ver)
	return nil
}

// Run refreshes the copy every RevocationPoll until ctx ends. A read that
// fails is logged (once until one succeeds again) and the copy kept.
func (r *NodeRevocations) Run(ctx context.Context, log *slog.Logger) error {
	t := time.NewTicker(RevocationPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		r.refreshLogged(ctx, log)
	}
}

// refreshLogged is Refresh, logging the first failure and the recovery.
func (r *NodeRevocations) refreshLogged(ctx context.Context, log *slog.Logger) {
	if err := r.Refresh(ctx); err != nil {
		if ctx.Err() == nil && !r.failing.Swap(true) {
			log.Warn("cannot read the revocation list of removed nodes' identities; "+
				"the copy read before stays in force (the service's Redis user needs read access to "+
				auth.RevokedNodesKey+"*)", "err", err)
		}
		return
	}
	if r.failing.Swap(false) {
		log.Info("the revocation list of removed nodes' identities is read again")
	}
}
