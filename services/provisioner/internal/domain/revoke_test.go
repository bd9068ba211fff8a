package domain

import (
	"slices"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/auth"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// WithRevocations revokes the identities of the nodes a change removes: up
// to the removal, or to the node's last registration where that names a
// later time; a node removed again keeps the later revocation; expired
// ones go with the write; a change that removes nothing revokes nothing.
func TestWithRevocations(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	ahead := auth.NewRegistration(now.Add(time.Minute), "gw-ahead")
	s := NewState(nil, []*loomv1.Node{
		{Name: "c/nodes/a", Cluster: "c"},
		{Name: "c/nodes/b", Cluster: "c", Registration: ahead},
		{Name: "c/nodes/again", Cluster: "c"},
	}, nil, nil)
	later := auth.NewRegistration(now.Add(2*time.Minute), "earlier-removal")
	s.Revoked["c/nodes/again"] = auth.NodeRevocation{Before: later, Until: now.Add(2 * time.Hour)}
	s.Revoked["c/nodes/old"] = auth.NodeRevocation{Before: auth.NewRegistration(now.Add(-3*time.Hour), "x"), Until: now.Add(-time.Second)}

	if ch := s.WithRevocations(Change{PutNodes: []*loomv1.Node{{Name: "c/nodes/a"}}}, now, time.Hour); len(ch.PutRevocations)+len(ch.DelRevocations) > 0 {
		t.Fatalf("a change removing no node: %+v %v", ch.PutRevocations, ch.DelRevocations)
	}
	ch := s.WithRevocations(Change{DelNodes: []string{"c/nodes/a", "c/nodes/b", "c/nodes/again"}}, now, time.Hour)
	a, b, again := ch.PutRevocations["c/nodes/a"], ch.PutRevocations["c/nodes/b"], ch.PutRevocations["c/nodes/again"]
	if !auth.RegisteredAt(a.Before).Equal(now) || !a.Until.Equal(now.Add(time.Hour+auth.RevocationSlack)) {
		t.Errorf("a: %+v, want up to now, kept an hour and the slack", a)
	}
	if b.Before != ahead || !b.Revokes(ahead) {
		t.Errorf("b: %+v, want up to its registration %s, named after the removal", b, ahead)
	}
	if again.Before != later || !again.Until.Equal(now.Add(2*time.Hour)) {
		t.Errorf("again: %+v, want the earlier removal's later revocation kept", again)
	}
	if !slices.Equal(ch.DelRevocations, []string{"c/nodes/old"}) {
		t.Errorf("expired revocations deleted: %v, want c/nodes/old", ch.DelRevocations)
	}
	s.Apply(ch)
	if _, ok := s.Revoked["c/nodes/old"]; ok || len(s.Revoked) != 3 {
		t.Errorf("revocations after the write: %v", s.Revoked)
	}
}
