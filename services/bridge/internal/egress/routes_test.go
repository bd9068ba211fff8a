package egress

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/errs"
)

func TestParseRoutes(t *testing.T) {
	t.Parallel()
	rs, err := ParseRoutes([]string{
		"kafka:loom.public.v1",
		"pubsub:projects/acme-prod/topics/loom-events?project=a,b&type=loom.public.v1.Job,loom.public.v1.Trial",
		"kafka:team-a?project=a",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 || rs[0].Name() != "kafka:loom.public.v1" || rs[1].Name() != "pubsub:projects/acme-prod/topics/loom-events" ||
		!slices.Equal(rs[1].Projects, []string{"a", "b"}) || !slices.Equal(rs[1].Types, []string{"loom.public.v1.Job", "loom.public.v1.Trial"}) {
		t.Fatalf("routes: %+v", rs)
	}
	for _, c := range []struct {
		r            Route
		project, typ string
		want         bool
	}{
		{rs[0], "", "loom.public.v1.NodeChanged", true},
		{rs[1], "a", "loom.public.v1.JobStateChanged", true},
		{rs[1], "b", "loom.public.v1.TrialFinished", true},
		{rs[1], "c", "loom.public.v1.JobStateChanged", false},
		{rs[1], "a", "loom.public.v1.NodeChanged", false},
		{rs[1], "", "loom.public.v1.JobStateChanged", false},
		{rs[2], "a", "loom.public.v1.NodeChanged", true},
	} {
		if got := c.r.Takes(c.project, c.typ); got != c.want {
			t.Errorf("%s takes (%q, %q) = %v, want %v", c.r.Entry, c.project, c.typ, got, c.want)
		}
	}
}

func TestParseRoutesRefusals(t *testing.T) {
	t.Parallel()
	many := make([]string, MaxRoutes+1)
	for i := range many {
		many[i] = fmt.Sprintf("kafka:t%d", i)
	}
	projects := strings.Repeat("p,", MaxRouteProjects) + "p"
	for _, c := range []struct {
		entries []string
		want    string
	}{
		{many, "over the limit of 16"},
		{[]string{"loom.public.v1"}, "want kafka:{topic}"},
		{[]string{"nats:subject"}, `unknown destination "nats"`},
		{[]string{"kafka:"}, "Kafka topic"},
		{[]string{"kafka:a b"}, "Kafka topic"},
		{[]string{"pubsub:loom-events"}, "projects/{project}/topics/{topic}"},
		{[]string{"pubsub:projects/p/topics/ab"}, "3 to 255"},
		{[]string{"kafka:t?region=eu"}, `unknown filter "region"`},
		{[]string{"kafka:t?project=A"}, "is not a project id"},
		{[]string{"kafka:t?project=a&project=b"}, "given 2 times"},
		{[]string{"kafka:t?type=loom public"}, "is not a type prefix"},
		{[]string{"kafka:t?project=" + projects}, "over the limit of 256"},
		{[]string{"kafka:t?type=" + strings.Repeat("a,", MaxRouteTypes) + "a"}, "over the limit of 32"},
		{[]string{"kafka:t", "kafka:t?project=a"}, "one entry per destination"},
		{[]string{"kafka:" + strings.Repeat("t", MaxEntryLen)}, "over the limit of 4096"},
		{[]string{"kafka:t?%zz"}, "filter"},
	} {
		_, err := ParseRoutes(c.entries)
		if err == nil || !strings.Contains(err.Error(), c.want) || errs.Code(err).String() != "InvalidArgument" {
			t.Errorf("%.60q: got %v, want InvalidArgument containing %q", c.entries, err, c.want)
		}
		if err != nil && len(c.entries) <= MaxRoutes && !strings.Contains(err.Error(), "-egress[") {
			t.Errorf("%.60q: %v does not name the entry", c.entries, err)
		}
	}
}

// TestConsumeRetriesWithoutEnd: the egress consumer never dead-letters an
// event for a sink's failure, reads only services' records, and decodes
// only the types that have a public form.
func TestConsumeRetriesWithoutEnd(t *testing.T) {
	t.Parallel()
	c := (&Egress{}).Consume()
	if c.Group != Group || c.Config == nil || c.Config.MaxAttempts < 1<<30 || c.Config.Policy != envelope.ServicesOnly ||
		c.Batch == nil || c.MaxBatch != MaxBatch || !slices.Equal(c.Topics, Topics) {
		t.Fatalf("consume: %+v %+v", c, c.Config)
	}
	if !c.Config.Filter(bus.Record{Type: "loom.events.v1.JobChanged"}) || c.Config.Filter(bus.Record{Type: "loom.events.v1.NodeDrained"}) {
		t.Fatal("filter: want JobChanged only of the job events")
	}
}
