package auth_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/auth"
)

// A node identity carries the node's own command key, and keeps it on disk
// (0600) with the rest of it.
func TestNodeIdentityCarriesItsCommandKey(t *testing.T) {
	t.Parallel()
	seed := bytes.Repeat([]byte{3}, 32)
	sk, err := auth.ServiceKey(seed)
	if err != nil {
		t.Fatal(err)
	}
	const node = "clusters/c1/nodes/n1"
	id, err := auth.IssueNodeIdentity(sk, node, "clusters/c1", "gpu", "", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := auth.CommandKey(seed, node, "")
	if len(want) != 32 || !bytes.Equal(id.CommandKey, want) {
		t.Fatalf("identity's command key %x, want %x", id.CommandKey, want)
	}
	if bytes.Equal(want, auth.CommandKey(seed, "clusters/c1/nodes/n2", "")) || bytes.Equal(want, auth.DeriveKey(seed, auth.PurposeBootstrap)) {
		t.Fatal("command keys are not per node and per purpose")
	}
	path := filepath.Join(t.TempDir(), "identity.json")
	if err := auth.WriteNodeIdentity(path, id); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("identity file: %v, %v", st, err)
	}
	got, err := auth.LoadNodeIdentity(path)
	if err != nil || !bytes.Equal(got.CommandKey, want) {
		t.Fatalf("loaded command key %x (%v), want %x", got.CommandKey, err, want)
	}
}

// A registration that does not say when it was made — adopted at a
// renewal, or kept by a gateway of the release before registrations were
// timed (the bootstrap token's id) and carried into a certificate by a
// renewal since — seals as none: no AgentRegistered ever named it to the
// scheduler, which seals the node's commands for none. A timed one (a
// registration since) has a key of its own.
func TestUntimedRegistrationSealsAsNone(t *testing.T) {
	t.Parallel()
	seed := bytes.Repeat([]byte{5}, 32)
	const node = "clusters/c1/nodes/n1"
	none := auth.CommandKey(seed, node, "")
	for _, reg := range []string{auth.AdoptedRegistrationPrefix + "01JABCDEF", "q2Vx8F_rZ-3kLmN0pQ1sTw"} {
		if got := auth.SealingRegistration(reg); got != "" {
			t.Errorf("SealingRegistration(%q) = %q, want none", reg, got)
		}
		if !bytes.Equal(auth.CommandKey(seed, node, reg), none) {
			t.Errorf("registration %q has a command key of its own; want that of no registration", reg)
		}
	}
	timed := auth.NewRegistration(time.Now(), "q2Vx8F_rZ-3kLmN0pQ1sTw")
	if auth.SealingRegistration(timed) != timed || bytes.Equal(auth.CommandKey(seed, node, timed), none) {
		t.Errorf("timed registration %q seals as none", timed)
	}
}
