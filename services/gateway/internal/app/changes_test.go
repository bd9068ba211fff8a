package app

import (
	"context"
	"testing"

	"github.com/loom-ml/loom/libs/envelope"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestChangeEventsPokeTheirProject: an event pokes the watchers of its
// subject's project (else its key's; else every project's) for the
// collections its type changes, and only those that hold one of them;
// pokes merge while a watcher does not take them, never blocking; the
// feed's filter passes over unwatched projects and unknown types.
func TestChangeEventsPokeTheirProject(t *testing.T) {
	t.Parallel()
	g := &Gateway{pokes: newPokes()}
	models := g.pokes.subscribe("projects/a", colsOf("models"))
	clusters := g.pokes.subscribe("projects/a", colsOf("clusters", "nodes"))
	other := g.pokes.subscribe("projects/b", colsOf("clusters"))
	pending := func(w *poke) colSet {
		select {
		case <-w.C:
			return w.take()
		default:
			return 0
		}
	}
	clusterChanged := envelope.TypeOf(&eventsv1.ClusterChanged{})
	if !g.ChangeWatched(clusterChanged, "projects/a/clusters/c") || g.ChangeWatched(clusterChanged, "projects/z/clusters/c") ||
		!g.ChangeWatched(clusterChanged, "") || g.ChangeWatched(envelope.TypeOf(&eventsv1.Heartbeat{}), "projects/a/x") {
		t.Error("ChangeWatched: want a watched project's and a projectless ClusterChanged only")
	}
	if g.ChangeWatched(envelope.TypeOf(&eventsv1.CustomJobChanged{}), "projects/a") {
		t.Error("ChangeWatched: a CustomJobChanged passes, though nobody watches customJobs")
	}

	// Twice, untaken: one wake-up, the collections merged.
	for range 2 {
		_ = g.HandleChangeEvent(context.Background(), envelope.Event{Type: clusterChanged, Subject: "projects/a/clusters/c"})
	}
	if got := pending(clusters); got != colsOf("clusters", "nodes") {
		t.Errorf("cluster watcher of a: %b, want clusters and nodes", got)
	}
	if got := pending(clusters); got != 0 {
		t.Errorf("cluster watcher of a, taken already: %b, want nothing", got)
	}
	if pending(models) != 0 || pending(other) != 0 {
		t.Error("a ClusterChanged of project a poked a models watcher or project b")
	}
	// The key names the project when the subject does not.
	_ = g.HandleChangeEvent(context.Background(), envelope.Event{Type: envelope.TypeOf(&eventsv1.ModelVersionRegistered{}),
		Key: "projects/a/locations/global/models/m"})
	if pending(models) != colsOf("models") {
		t.Error("a ModelVersionRegistered keyed by a's model did not poke a's models watcher")
	}
	// Neither: every project's watchers of the collections.
	_ = g.HandleChangeEvent(context.Background(), envelope.Event{Type: clusterChanged, Payload: &eventsv1.ClusterChanged{Cluster: &loomv1.Cluster{}}})
	if pending(clusters) == 0 || pending(other) == 0 || pending(models) != 0 {
		t.Error("a projectless ClusterChanged: want both projects' cluster watchers poked, not the models watcher")
	}
	// The gateway's own model edits.
	g.changedModels("projects/a/locations/us-central1/models/m@2")
	if pending(models) != colsOf("models") || pending(clusters) != 0 {
		t.Error("a model edit through the gateway: want a's models watcher poked alone")
	}
	g.pokes.unsubscribe(models)
	if g.pokes.watched("projects/a", colsOf("models")) {
		t.Error("an unsubscribed watcher is still watched")
	}
}
