package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// TestTailAllReadyOnceAllAreAndRestartsAFailedTailAlone: the change feed's
// tails run at once; ready is called once, after the last is ready; a tail
// that fails is started again by itself, with backoff, while the others
// run on untouched (their contexts are not cancelled, they are not started
// again), and ready is not called again when it comes back. tailAll
// returns once ctx ends.
func TestTailAllReadyOnceAllAreAndRestartsAFailedTailAlone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run, stop := context.WithCancel(ctx)
	defer stop()
	var readies atomic.Int32
	var starts [3]atomic.Int32      // a, b, c
	early := make(chan struct{}, 2) // a and c are ready
	readyC := make(chan struct{}, 4)
	bStarted := make(chan int32, 8)
	lastReady, fail := make(chan struct{}), make(chan struct{})
	othersCut := make(chan string, 2)
	boom := errors.New("topic b cannot be read")
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		done <- tailAll(run, log, []string{"a", "b", "c"}, func() { readies.Add(1); readyC <- struct{}{} },
			func(ctx context.Context, topic string, ready func()) error {
				n := starts[topic[0]-'a'].Add(1)
				if topic == "b" {
					bStarted <- n
					switch n {
					case 1:
						<-lastReady
						ready()
						<-fail
						return boom
					case 2:
						return boom // still unreadable: backs off again
					}
					ready()
					<-ctx.Done()
					return nil
				}
				ready()
				ready() // a second call counts once
				early <- struct{}{}
				<-ctx.Done()
				if run.Err() == nil {
					othersCut <- topic // cancelled while tailAll runs on
				}
				return nil
			})
	}()
	for range 2 {
		select {
		case <-early:
		case <-ctx.Done():
			t.Fatal("a and c never became ready")
		}
	}
	if n := readies.Load(); n != 0 {
		t.Fatalf("ready called %d times while b was not ready", n)
	}
	close(lastReady)
	select {
	case <-readyC:
	case <-ctx.Done():
		t.Fatal("ready not called once every tail was")
	}
	close(fail)
	// b fails twice and is started a third time, by itself.
	for want := int32(1); want <= 3; want++ {
		select {
		case n := <-bStarted:
			if n != want {
				t.Fatalf("b started for the %d. time, want the %d.", n, want)
			}
		case <-ctx.Done():
			t.Fatalf("b was not started again after failing (start %d)", want)
		}
	}
	select {
	case topic := <-othersCut:
		t.Fatalf("b's failure cut %s's tail; want only b restarted", topic)
	default:
	}
	if a, c := starts[0].Load(), starts[2].Load(); a != 1 || c != 1 {
		t.Fatalf("a started %d times, c %d; want once each while b failed", a, c)
	}
	stop()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("tailAll = %v, want the context's end", err)
		}
	case <-ctx.Done():
		t.Fatal("tailAll did not return after its context ended")
	}
	if n := readies.Load(); n != 1 {
		t.Errorf("ready called %d times, want once", n)
	}
}
