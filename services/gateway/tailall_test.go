package gateway

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestTailAllReadyOnceAllAreAndStopsOnAFailure: the change feed's tails
// run at once; ready is called once, after the last is ready; one failing
// stops the others and its error comes back.
func TestTailAllReadyOnceAllAreAndStopsOnAFailure(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var readies atomic.Int32
	early := make(chan struct{}, 2) // a and b are ready
	readyC := make(chan struct{}, 4)
	lastReady, fail := make(chan struct{}), make(chan struct{})
	boom := errors.New("boom")
	done := make(chan error, 1)
	go func() {
		done <- tailAll(ctx, []string{"a", "b", "c"}, func() { readies.Add(1); readyC <- struct{}{} },
			func(ctx context.Context, topic string, ready func()) error {
				if topic == "c" {
					<-lastReady
				}
				ready()
				ready() // a second call counts once
				if topic != "c" {
					early <- struct{}{}
				}
				if topic == "b" {
					<-fail
					return boom
				}
				<-ctx.Done()
				return nil
			})
	}()
	for range 2 {
		select {
		case <-early:
		case <-ctx.Done():
			t.Fatal("a and b never became ready")
		}
	}
	if n := readies.Load(); n != 0 {
		t.Fatalf("ready called %d times while c was not ready", n)
	}
	close(lastReady)
	select {
	case <-readyC:
	case <-ctx.Done():
		t.Fatal("ready not called once every tail was")
	}
	close(fail)
	select {
	case err := <-done:
		if !errors.Is(err, boom) {
			t.Fatalf("tailAll = %v, want the failing tail's error", err)
		}
	case <-ctx.Done():
		t.Fatal("tailAll did not return after a tail failed: the others were not stopped")
	}
	if n := readies.Load(); n != 1 {
		t.Errorf("ready called %d times, want once", n)
	}
}
