package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrOutcomeUnknown marks an Apply that failed without saying whether it
// wrote: the script was sent to Redis but no answer came back (a timeout, a
// dropped connection, a cancelled context). Redis may have run it, all of
// it, or not at all; only reading Redis tells which. An Apply refused before
// its script ran, or by its script's checks (an InvalidError, a
// FailedPrecondition), wrote nothing and does not carry it.
var ErrOutcomeUnknown error = outcomeUnknown{}

// outcomeUnknown is ErrOutcomeUnknown's type: it says it is Unavailable
// (libs/bus), so that a consumer retries a record whose write got no
// answer until Redis answers, rather than dead-lettering it.
type outcomeUnknown struct{}

func (outcomeUnknown) Error() string     { return "the write may or may not have been applied" }
func (outcomeUnknown) Unavailable() bool { return true }

// OutcomeUnknown reports whether err is an Apply failure whose outcome is
// unknown (ErrOutcomeUnknown).
func OutcomeUnknown(err error) bool { return errors.Is(err, ErrOutcomeUnknown) }

// reloadTimeout bounds the reload a Driver tries at once after a write whose
// outcome is unknown; the caller's context may be the one that just ran out.
const reloadTimeout = 5 * time.Second

// Driver is the one way a service's memory follows its store: the service
// decides from memory, Driver.Apply writes the decision (state, outbox and
// inbox marks, atomically) and only once Redis has it does commit change
// memory. It owns the one case this order cannot settle by itself: an Apply
// whose outcome is unknown (ErrOutcomeUnknown). Memory is then maybe behind
// Redis — had the write landed, its redelivered event would be dropped as
// already seen and memory would never get it — so the driver reloads memory
// from Redis (the service's reload) before anything decides again: at once,
// and, should that fail too, in Ready before the next decision.
//
// A Driver does not serialise its callers: a service calls Ready, decides,
// and calls Apply under its own lock, as it did before. It is safe for
// concurrent use where the service's reload is.
type Driver struct {
	st     *Store
	reload func(context.Context) error

	mu    sync.Mutex
	stale bool
}

// NewDriver returns the driver of st for a service whose reload rebuilds
// memory from st (what it does at start), replacing what memory holds.
func NewDriver(st *Store, reload func(ctx context.Context) error) *Driver {
	return &Driver{st: st, reload: reload}
}

// Store returns the driver's store.
func (d *Driver) Store() *Store { return d.st }

// Ready reloads memory when an earlier Apply's outcome was unknown and the
// reload after it failed; a service calls it before deciding, under the lock
// its decisions take. It returns the reload's error, memory staying stale.
func (d *Driver) Ready(ctx context.Context) error {
	if !d.Stale() {
		return nil
	}
	return d.doReload(ctx)
}

// Stale reports whether memory may lag Redis (a reload is owed).
func (d *Driver) Stale() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stale
}

// Apply is ApplyBatch for a change with one inbox mark, inboxID ("" for
// none), as Store.Apply is.
func (d *Driver) Apply(ctx context.Context, inboxID string, tx *Tx, commit func()) (applied bool, err error) {
	if inboxID == "" {
		return d.ApplyBatch(ctx, nil, tx, commit)
	}
	return d.ApplyBatch(ctx, []string{inboxID}, tx, commit)
}

// ApplyBatch writes tx with the inbox marks of inboxIDs (none, one, or a
// batch's: see Store.ApplyBatch) and, when it was applied, calls commit (nil: nothing
// to commit), which changes memory to match. applied=false (an inbox mark was
// there: a redelivery) commits nothing. An error commits nothing: an
// InvalidError or FailedPrecondition wrote nothing either; an error with its
// outcome unknown (ErrOutcomeUnknown) reloads memory from Redis before Apply
// returns — memory then holds the write exactly when Redis does — and when
// the reload fails the next Ready does it. Apply refuses to write (an error)
// while a reload is owed: its tx was decided from memory that may lag.
func (d *Driver) ApplyBatch(ctx context.Context, inboxIDs []string, tx *Tx, commit func()) (applied bool, err error) {
	if d.Stale() {
		return false, fmt.Errorf("store %s: memory may lag Redis after a write whose outcome is unknown; reload first: %w",
			d.st.prefix, ErrOutcomeUnknown)
	}
	// Until commit has run the relay holds back the events this write
	// adds (commitGate): whoever sees one reads memory that has it.
	leave := d.st.commits.enter()
	defer leave()
	applied, err = d.st.ApplyBatch(ctx, inboxIDs, tx)
	if err != nil {
		if OutcomeUnknown(err) {
			d.mu.Lock()
			d.stale = true
			d.mu.Unlock()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reloadTimeout)
			if rerr := d.doReload(rctx); rerr != nil {
				d.st.log().Warn("reload after a write whose outcome is unknown failed; the next change reloads first",
					"err", rerr, "write_err", err)
			}
			cancel()
		}
		return false, err
	}
	if applied && commit != nil {
		commit()
	}
	return applied, nil
}

// doReload reloads memory and clears the stale mark when it succeeded.
func (d *Driver) doReload(ctx context.Context) error {
	if err := d.reload(ctx); err != nil {
		return fmt.Errorf("store %s: reload: %w", d.st.prefix, err)
	}
	d.mu.Lock()
	d.stale = false
	d.mu.Unlock()
	return nil
}
