package series

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/errs"
)

// seed gives job one series of one point.
func seed(t *testing.T, s *Store, job string) {
	t.Helper()
	if _, err := s.Append(context.Background(), job, Source{}, Batch{"loss": {{Step: 1, Value: 1}}}); err != nil {
		t.Fatal(err)
	}
}

func kept(t *testing.T, s *Store, job string) bool {
	t.Helper()
	l, err := s.List(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	return len(l) > 0
}

// TestSweep: a job ended longer ago than the retention loses its series, a
// recently ended one and a running one (never ended, or ended then running
// again) keep theirs; a second sweep finds nothing; retention 0 keeps all.
func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{})
	now := time.Unix(1800000000, 0)
	ret := 24 * time.Hour
	for _, j := range []string{"old", "recent", "running", "requeued"} {
		seed(t, s, j)
	}
	for j, end := range map[string]time.Time{"old": now.Add(-ret - time.Second), "recent": now.Add(-ret + time.Minute),
		"requeued": now.Add(-2 * ret)} {
		if err := s.Ended(ctx, j, end); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Running(ctx, "requeued"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, now, 0, 100); err != nil || n != 0 || !kept(t, s, "old") {
		t.Fatalf("retention 0: %d deleted, %v; want none", n, err)
	}
	if n, err := s.Sweep(ctx, now, ret, 100); err != nil || n != 1 {
		t.Fatalf("sweep: %d deleted, %v; want 1", n, err)
	}
	if kept(t, s, "old") {
		t.Error("the old job's series survived the sweep")
	}
	if n, _ := s.rdb.Exists(ctx, s.key("old", "seen"), s.key("old", "s:loss")).Result(); n != 0 {
		t.Errorf("%d of the old job's keys left", n)
	}
	for _, j := range []string{"recent", "running", "requeued"} {
		if !kept(t, s, j) {
			t.Errorf("%s lost its series", j)
		}
	}
	if n, err := s.Sweep(ctx, now, ret, 100); err != nil || n != 0 {
		t.Fatalf("second sweep: %d, %v; want 0", n, err)
	}
	// An hour later the recent job is due.
	if n, err := s.Sweep(ctx, now.Add(time.Hour), ret, 100); err != nil || n != 1 || kept(t, s, "recent") {
		t.Fatalf("an hour later: %d deleted, %v; want the recent job's", n, err)
	}
	if z, _ := s.rdb.ZCard(ctx, s.endedKey()).Result(); z != 0 {
		t.Errorf("ended set holds %d, want 0", z)
	}
}

// TestSweepBatch: one sweep deletes at most its limit, oldest first, and
// the rest go on the next sweeps.
func TestSweepBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{})
	now := time.Unix(1800000000, 0)
	for i := 0; i < 7; i++ {
		j := fmt.Sprintf("j%d", i)
		seed(t, s, j)
		if err := s.Ended(ctx, j, now.Add(-48*time.Hour+time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	var got []int
	for range 4 {
		n, err := s.Sweep(ctx, now, time.Hour, 3)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	if fmt.Sprint(got) != "[3 3 1 0]" {
		t.Fatalf("sweeps deleted %v, want [3 3 1 0]", got)
	}
	for i := 0; i < 7; i++ {
		if kept(t, s, fmt.Sprintf("j%d", i)) {
			t.Errorf("j%d kept", i)
		}
	}
}

// TestSweepOldestFirst: with a limit of 1 the oldest end goes first.
func TestSweepOldestFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{})
	now := time.Unix(1800000000, 0)
	for i, j := range []string{"newer", "oldest"} {
		seed(t, s, j)
		if err := s.Ended(ctx, j, now.Add(-time.Duration(10+i)*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Sweep(ctx, now, time.Hour, 1); err != nil || n != 1 || kept(t, s, "oldest") || !kept(t, s, "newer") {
		t.Fatalf("sweep of 1: %d, %v; want the oldest deleted, the newer kept", n, err)
	}
}

// TestSweepBounds: a limit below 1 sweeps one job, a bad job id is
// InvalidArgument and records nothing.
func TestSweepBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, Limits{})
	now := time.Unix(1800000000, 0)
	if err := s.Ended(ctx, "a{b}", now); errs.Code(err) != codes.InvalidArgument {
		t.Errorf("bad job id: %v, want InvalidArgument", err)
	}
	for _, j := range []string{"x", "y"} {
		seed(t, s, j)
		if err := s.Ended(ctx, j, now.Add(-2*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Sweep(ctx, now, time.Hour, 0); err != nil || n != 1 {
		t.Fatalf("limit 0: %d deleted, %v; want 1", n, err)
	}
	if z, _ := s.rdb.ZCard(ctx, s.endedKey()).Result(); z != 1 {
		t.Errorf("ended set holds %d, want 1", z)
	}
}
