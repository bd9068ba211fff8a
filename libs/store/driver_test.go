package store

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store/storetest"
)

// counterMem is a service's memory in miniature: a counter kept in step
// with the key "n".
type counterMem struct {
	st      *Store
	n       int
	reloads int
	failing bool
}

func (m *counterMem) reload(ctx context.Context) error {
	m.reloads++
	if m.failing {
		return errors.New("redis away")
	}
	b, err := m.st.Get(ctx, "n")
	if errors.Is(err, ErrNotFound) {
		m.n = 0
		return nil
	}
	if err != nil {
		return err
	}
	m.n, err = strconv.Atoi(string(b))
	return err
}

// incr decides n+1 from memory and applies it through d with inboxID.
func (m *counterMem) incr(ctx context.Context, d *Driver, inboxID string) (bool, error) {
	if err := d.Ready(ctx); err != nil {
		return false, err
	}
	next := m.n + 1
	var tx Tx
	tx.Set("n", []byte(strconv.Itoa(next)))
	return d.Apply(ctx, inboxID, &tx, func() { m.n = next })
}

func (m *counterMem) stored(t *testing.T) int {
	t.Helper()
	b, err := m.st.Get(context.Background(), "n")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(string(b))
	return n
}

// An Apply whose script ran but whose answer was lost: the driver reports
// the outcome unknown and reloads, so memory holds the write Redis holds,
// and the redelivered event (seen in the inbox) changes nothing.
func TestDriverReloadsAfterAnApplyWhoseOutcomeIsUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := realRedis(t)
	lost := storetest.LoseApplyReplies(rdb, "svc:")
	m := &counterMem{st: New(rdb, "svc:")}
	d := NewDriver(m.st, m.reload)
	if _, err := m.incr(ctx, d, "ev-1"); err != nil {
		t.Fatal(err)
	}
	lost.Arm(1)
	_, err := m.incr(ctx, d, "ev-2")
	if !OutcomeUnknown(err) || lost.Lost() != 1 {
		t.Fatalf("Apply with a lost answer = %v (lost %d); want ErrOutcomeUnknown", err, lost.Lost())
	}
	if m.n != 2 || m.stored(t) != 2 || m.reloads != 1 {
		t.Fatalf("memory %d, Redis %d, reloads %d; want both 2 after one reload", m.n, m.stored(t), m.reloads)
	}
	applied, err := m.incr(ctx, d, "ev-2") // the redelivery
	if err != nil || applied {
		t.Fatalf("redelivered event: applied %v, %v; want a no-op", applied, err)
	}
	if m.n != 2 || m.stored(t) != 2 {
		t.Fatalf("memory %d, Redis %d after the redelivery; want 2", m.n, m.stored(t))
	}
}

// When the reload after an unknown outcome fails as well, the driver owes
// it: Apply refuses to write what stale memory decided, and Ready reloads.
func TestDriverOwesTheReloadUntilItSucceeds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := realRedis(t)
	lost := storetest.LoseApplyReplies(rdb, "svc:")
	m := &counterMem{st: New(rdb, "svc:")}
	d := NewDriver(m.st, m.reload)
	lost.Arm(1)
	m.failing = true
	if _, err := m.incr(ctx, d, "ev-1"); !OutcomeUnknown(err) {
		t.Fatalf("Apply = %v, want ErrOutcomeUnknown", err)
	}
	if !d.Stale() || m.n != 0 {
		t.Fatalf("stale %v, memory %d; want stale with memory behind", d.Stale(), m.n)
	}
	var tx Tx
	tx.Set("n", []byte("99"))
	if _, err := d.Apply(ctx, "", &tx, nil); err == nil {
		t.Fatal("Apply wrote while a reload was owed")
	}
	if err := d.Ready(ctx); err == nil {
		t.Fatal("Ready succeeded with the reload failing")
	}
	m.failing = false
	applied, err := m.incr(ctx, d, "ev-1") // the redelivery, after Ready reloads
	if err != nil || applied || d.Stale() {
		t.Fatalf("redelivery: applied %v, %v, stale %v; want a no-op after the reload", applied, err, d.Stale())
	}
	if m.n != 1 || m.stored(t) != 1 {
		t.Fatalf("memory %d, Redis %d; want 1", m.n, m.stored(t))
	}
}

// A write refused before or by the script's checks wrote nothing: memory
// stays as it is, nothing reloads, the next write goes through.
func TestDriverDoesNotReloadForARefusedWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := realRedis(t)
	m := &counterMem{st: New(rdb, "svc:")}
	d := NewDriver(m.st, m.reload)
	var bad Tx
	bad.Set("", []byte("x"))
	_, err := d.Apply(ctx, "", &bad, func() { t.Error("committed a refused write") })
	var inv *errs.InvalidError
	if !errors.As(err, &inv) || OutcomeUnknown(err) {
		t.Fatalf("Apply of an invalid tx = %v, want an InvalidError", err)
	}
	if err := rdb.Set(ctx, "svc:h", "a string", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var wrong Tx
	wrong.HSet("h", "f", []byte("v"))
	if _, err := d.Apply(ctx, "", &wrong, nil); !errors.Is(err, errs.FailedPrecondition) || OutcomeUnknown(err) {
		t.Fatalf("Apply on a wrong type = %v, want FailedPrecondition", err)
	}
	if m.reloads != 0 || d.Stale() {
		t.Fatalf("reloaded %d times after refused writes", m.reloads)
	}
	if _, err := m.incr(ctx, d, "ev-1"); err != nil || m.n != 1 {
		t.Fatalf("next write: %v, memory %d", err, m.n)
	}
}

// TestRelayPublishesOnlyCommittedChanges: an event a Driver's Apply wrote
// is published only once its commit changed memory, so a client that sees
// the event and asks the service reads the change. The commit here holds
// until the relay has read the entry and is waiting for it (or, without
// the gate, until the event was published: the failure).
func TestRelayPublishesOnlyCommittedChanges(t *testing.T) {
	t.Parallel()
	rdb := realRedis(t)
	s := New(rdb, "svc:")
	waiting := make(chan struct{}, 1)
	s.fp.commitWait = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	r := newRecorder()
	runRelay(t, s, r)
	d := NewDriver(s, func(context.Context) error { return nil })
	ev := testEvent("key-1", "committed-1")
	var tx Tx
	tx.Set("last", []byte(ev.ID))
	tx.Emit(ev)
	var inMemory atomic.Bool
	applied, err := d.Apply(context.Background(), "", &tx, func() {
		deadline := time.After(20 * time.Second)
		for {
			select {
			case <-waiting:
				if got := r.ids(); len(got) != 0 {
					t.Errorf("published %v before the commit", got)
				}
				inMemory.Store(true)
				return
			case <-deadline:
				t.Errorf("the relay neither waited for the commit nor published")
				return
			default:
			}
			if got := r.ids(); len(got) != 0 {
				t.Errorf("published %v while the change was not in memory yet", got)
				return
			}
			runtime.Gosched()
		}
	})
	if err != nil || !applied {
		t.Fatalf("Apply: applied=%v err=%v", applied, err)
	}
	waitFor(t, 20*time.Second, "the event published after the commit", func() (bool, error) {
		return slices.Contains(r.ids(), ev.ID), nil
	})
	if !inMemory.Load() {
		t.Fatal("the commit never saw the relay wait")
	}
}

// TestCommitGateWaitsOnlyForAppliesInFlight: the relay waits for the
// Applies in flight when it looks, not for later ones (no starvation), and
// gives up after its bound.
func TestCommitGateWaitsOnlyForAppliesInFlight(t *testing.T) {
	t.Parallel()
	var g commitGate
	if !g.wait(context.Background(), time.Millisecond) {
		t.Fatal("an empty gate made the relay wait")
	}
	leaveA := g.enter()
	done := make(chan bool, 1)
	go func() { done <- g.wait(context.Background(), time.Minute) }()
	leaveA()
	if !<-done {
		t.Fatal("the wait for a finished Apply reported a timeout")
	}
	leaveB := g.enter()
	defer leaveB()
	if g.wait(context.Background(), 10*time.Millisecond) {
		t.Fatal("a wait for an Apply still in flight reported it done")
	}
}
