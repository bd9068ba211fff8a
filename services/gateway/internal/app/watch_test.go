package app

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// someJobs is a scheduler whose jobs the test changes.
type someJobs struct {
	loomv1.UnimplementedJobServiceServer
	mu   sync.Mutex
	jobs []*loomv1.Job
}

func (s *someJobs) GetJob(_ context.Context, req *loomv1.GetJobRequest) (*loomv1.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.jobs {
		if j.GetName() == req.GetName() {
			return proto.Clone(j).(*loomv1.Job), nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "job %s not found", req.GetName())
}

func (s *someJobs) ListJobs(context.Context, *loomv1.ListJobsRequest) (*loomv1.ListJobsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &loomv1.ListJobsResponse{}
	for _, j := range s.jobs {
		out.Jobs = append(out.Jobs, proto.Clone(j).(*loomv1.Job))
	}
	return out, nil
}

// set replaces job n's state (adding the job when it is new) and returns
// the job as its JobChanged carries it.
func (s *someJobs) set(n int, st loomv1.JobState) *loomv1.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := &loomv1.Job{Name: "projects/p/jobs/" + strconv.Itoa(n), JobId: strconv.Itoa(n), Cluster: "projects/p/clusters/c1", State: st, User: "ana"}
	for i, old := range s.jobs {
		if old.GetName() == j.GetName() {
			s.jobs[i] = j
			return proto.Clone(j).(*loomv1.Job)
		}
	}
	s.jobs = append(s.jobs, j)
	return proto.Clone(j).(*loomv1.Job)
}

// TestWatchChangesResyncsWhenBehind: a watcher that does not read while
// more job changes arrive than the hub buffers gets a RESYNC, not an
// unbounded buffer, and its watch goes on from the state listed then.
func TestWatchChangesResyncsWhenBehind(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	sched := &someJobs{}
	sched.set(1, loomv1.JobState_PENDING)
	owners := serveOwners(t, func(srv *grpc.Server) { loomv1.RegisterJobServiceServer(srv, sched) })
	// No refresh within the test: only the hub brings changes.
	g := New(adapters.NewRepo(store.New(rdb, "gateway:")), owners, Options{ChangeRefresh: time.Hour, Poll: 10 * time.Millisecond})
	ctx = auth.NewContext(ctx, &auth.Principal{Name: "users/vic", Kind: auth.KindUser, User: "vic",
		Roles: map[string]auth.Role{"p": auth.RoleViewer}})

	// send hands each event to the test and, once blocked, waits until
	// the test lets it go on.
	events := make(chan *loomv1.ChangeEvent)
	var block sync.Mutex
	entered := make(chan struct{}, 1) // told each time send is called
	done := make(chan error, 1)
	go func() {
		done <- g.WatchChanges(ctx, &loomv1.WatchChangesRequest{Project: "projects/p", Collections: []string{"jobs"}},
			func(ev *loomv1.ChangeEvent) error {
				select {
				case entered <- struct{}{}:
				default:
				}
				block.Lock()
				block.Unlock() //nolint:staticcheck // waits while the test holds it
				select {
				case events <- ev:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
	}()
	next := func() *loomv1.ChangeEvent {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case err := <-done:
			t.Fatalf("the watch ended: %v", err)
		case <-ctx.Done():
			t.Fatal("no event")
		}
		return nil
	}
	publish := func(j *loomv1.Job) {
		_ = g.HandleJobEvent(ctx, envelope.Event{Payload: &eventsv1.JobChanged{Job: j}})
	}
	if ev := next(); ev.GetType() != loomv1.ChangeEvent_CHANGED || ev.GetName() != "projects/p/jobs/1" {
		t.Fatalf("first event %v, want job 1 CHANGED", ev)
	}
	if ev := next(); ev.GetType() != loomv1.ChangeEvent_SYNCED {
		t.Fatalf("second event %v, want SYNCED", ev)
	}
	// The watcher stops reading; a change makes the watch send, and it
	// blocks in send.
	block.Lock()
	select {
	case <-entered:
	default:
	}
	publish(sched.set(1, loomv1.JobState_RUNNING))
	select {
	case <-entered: // the watch is in send now, and stays there
	case <-ctx.Done():
		t.Fatal("the change was not sent")
	}
	// Far more changes than the hub buffers for one watcher.
	for i := 0; i < 4*watchBuffer; i++ {
		publish(sched.set(2, loomv1.JobState_PENDING))
	}
	testkit.WaitFor(t, 30*time.Second, "the hub drops the slow watcher", func() (bool, error) {
		return !g.jobs.watched("projects/p"), nil
	})
	block.Unlock()
	// What was sent before it fell behind comes first; then the RESYNC.
	var resync bool
	for !resync {
		ev := next()
		switch ev.GetType() {
		case loomv1.ChangeEvent_RESYNC:
			resync = true
		case loomv1.ChangeEvent_CHANGED:
		default:
			t.Fatalf("event %v before the RESYNC, want CHANGED or RESYNC", ev)
		}
	}
	// The whole state again, then SYNCED.
	seen := map[string]bool{}
	for ev := next(); ev.GetType() != loomv1.ChangeEvent_SYNCED; ev = next() {
		if ev.GetType() != loomv1.ChangeEvent_CHANGED {
			t.Fatalf("after the RESYNC: %v, want the state again (CHANGED) and SYNCED", ev)
		}
		seen[ev.GetName()] = true
	}
	if !seen["projects/p/jobs/1"] || !seen["projects/p/jobs/2"] || len(seen) != 2 {
		t.Errorf("state after the RESYNC: %v, want jobs 1 and 2", seen)
	}
	// The watch goes on: a later change arrives as a CHANGED of the job.
	publish(sched.set(3, loomv1.JobState_PENDING))
	ev := next()
	if ev.GetType() != loomv1.ChangeEvent_CHANGED || ev.GetName() != "projects/p/jobs/3" || ev.GetJob().GetState() != loomv1.JobState_PENDING {
		t.Fatalf("after the RESYNC: %v, want job 3 CHANGED (PENDING)", ev)
	}
}

// TestWatchJobGoesOnThroughARetriedRun: a run's end that the scheduler
// requeues in the same change (requeue_follows) is not the job's end: a
// watch of the job does not stop at it, and sends the requeued job next.
func TestWatchJobGoesOnThroughARetriedRun(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t, 30*time.Second)
	_, rdb := testkit.Redis(t)
	sched := &someJobs{}
	sched.set(1, loomv1.JobState_RUNNING)
	owners := serveOwners(t, func(srv *grpc.Server) { loomv1.RegisterJobServiceServer(srv, sched) })
	g := New(adapters.NewRepo(store.New(rdb, "gateway:")), owners, Options{ChangeRefresh: time.Hour, WatchRefresh: time.Hour, Poll: 10 * time.Millisecond})
	ctx = auth.NewContext(ctx, &auth.Principal{Name: "users/vic", Kind: auth.KindUser, User: "vic",
		Roles: map[string]auth.Role{"p": auth.RoleViewer}})
	states := make(chan loomv1.JobState, 8)
	done := make(chan error, 1)
	go func() {
		done <- g.WatchJob(ctx, &loomv1.WatchJobRequest{Name: "projects/p/jobs/1"}, func(j *loomv1.Job) error {
			states <- j.GetState()
			return nil
		})
	}()
	next := func() loomv1.JobState {
		t.Helper()
		select {
		case st := <-states:
			return st
		case err := <-done:
			t.Fatalf("the watch ended: %v", err)
		case <-ctx.Done():
			t.Fatal("no state")
		}
		return 0
	}
	if st := next(); st != loomv1.JobState_RUNNING {
		t.Fatalf("first state %v, want RUNNING", st)
	}
	failed := sched.set(1, loomv1.JobState_FAILED)
	_ = g.HandleJobEvent(ctx, envelope.Event{Payload: &eventsv1.JobChanged{Job: failed, RequeueFollows: true}})
	requeued := sched.set(1, loomv1.JobState_PENDING)
	requeued.RestartCount = 1 // as the scheduler's requeue counts it
	_ = g.HandleJobEvent(ctx, envelope.Event{Payload: &eventsv1.JobChanged{Job: requeued}})
	if st := next(); st != loomv1.JobState_PENDING {
		t.Fatalf("after a retried run's end: %v, want the requeued job PENDING", st)
	}
	completed := sched.set(1, loomv1.JobState_COMPLETED)
	completed.RestartCount = 1
	_ = g.HandleJobEvent(ctx, envelope.Event{Payload: &eventsv1.JobChanged{Job: completed}})
	if st := next(); st != loomv1.JobState_COMPLETED {
		t.Fatalf("the job's end: %v, want COMPLETED", st)
	}
	if err := <-done; err != nil {
		t.Fatalf("the watch after the job's end: %v", err)
	}
}
