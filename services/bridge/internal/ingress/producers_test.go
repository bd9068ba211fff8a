package ingress

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Anyone who can publish to the ingress may name any source: messages
// filed under no project (no credential, or one of no member) are counted
// against a bound of their own, so that a flood of made-up sources cannot
// take every producer row and leave a project's real producers uncounted;
// and one project's producers past its bound share that project's overflow
// row, leaving the other projects theirs.
func TestFloodOfSourcesLeavesProjectsTheirProducers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.MaxProducers, c.MaxProjectProducers = 6, 2 })
	ctx := testkit.Context(t, 30*time.Second)
	from := func(source, id, cred string) error {
		return f.h(ctx, Delivery("kafka:loom.ingress.v1", record(TypePrefix+"SubmitJob",
			`{"parent":"projects/default","job":{"cluster":"projects/default/clusters/c"}}`,
			map[string]string{"ce_id": id, "ce_source": source, "ce_credential": cred})))
	}
	for i := range 6 { // no credential, then one of no member of default
		cred := ""
		if i%2 == 1 {
			cred = "loomk_stranger"
		}
		if err := from(fmt.Sprintf("//flood/%d", i), fmt.Sprint("f", i), cred); err != nil {
			t.Fatal(err)
		}
	}
	for _, src := range []string{"//pipeline/real", "//pipeline/b", "//pipeline/c", "//pipeline/d"} {
		if err := from(src, "m-"+src, "loomk_good"); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := f.app.Server().ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: "projects/default"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps.GetProducers() {
		got = append(got, fmt.Sprintf("%s %s %s %d", p.GetProject(), p.GetSource(), p.GetPrincipal(), p.GetReceived()))
	}
	want := []string{
		"default " + OverflowSource + "  2", // c and d: past the project's bound
		"default //pipeline/b users/alice 1",
		"default //pipeline/real users/alice 1",
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("project default's producers:\n%q\nwant\n%q", got, want)
	}
	all, err := f.app.Server().ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: "projects/-"})
	if err != nil {
		t.Fatal(err)
	}
	// The flood: two rows of its own and the overflow row of messages of
	// no project; default: its three.
	if n := len(all.GetProducers()); n != 6 {
		t.Fatalf("%d producers in all, want 6 (the bound)", n)
	}
}
