package envelope

import (
	"errors"
	"testing"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	payload := &eventsv1.SubmitJob{Job: &loomv1.Job{Name: "projects/p/jobs/7", NodeCount: 2}}
	e := New("loom.job.commands.v1", "projects/p/clusters/c", "loom/gateway", payload)
	e.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	m, err := Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Default.Decode(m)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != e.ID || got.Type != "loom.events.v1.SubmitJob" || got.Source != e.Source ||
		got.Subject != e.Subject || got.TraceParent != e.TraceParent || got.Key != e.Key ||
		!got.Time.Equal(e.Time) {
		t.Fatalf("attributes differ: got %+v want %+v", got, e)
	}
	if !proto.Equal(got.Payload, payload) {
		t.Fatalf("payload differs: %v", got.Payload)
	}
}

// TestDecodeKeepsThePosition: a consumed event carries where its record
// stood in its partition, high-water mark included (health judges its own
// lag by it).
func TestDecodeKeepsThePosition(t *testing.T) {
	t.Parallel()
	m, err := Encode(New(topics.NodeTelemetry, "n", "loom/agent", &eventsv1.Heartbeat{Node: "n"}))
	if err != nil {
		t.Fatal(err)
	}
	m.Partition, m.Offset, m.HighWaterMark = 3, 41, 97
	got, err := Default.Decode(m)
	if err != nil {
		t.Fatal(err)
	}
	if got.Partition != 3 || got.Offset != 41 || got.HighWaterMark != 97 {
		t.Fatalf("position %d@%d of %d, want 3@41 of 97", got.Partition, got.Offset, got.HighWaterMark)
	}
}

func TestUnknownTypeIsReported(t *testing.T) {
	t.Parallel()
	m, err := Encode(New("t", "k", "s", wrapperspb.String("x")))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Default.Decode(m)
	if !errors.Is(err, ErrUnknownType) {
		t.Fatalf("want ErrUnknownType, got %v", err)
	}
	if !NewRegistry(wrapperspb.String("")).Known("google.protobuf.StringValue") {
		t.Fatal("registered type not known")
	}
}

func TestMalformed(t *testing.T) {
	t.Parallel()
	if _, err := Default.Decode(kafka.Message{Value: []byte("x")}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("missing headers: want ErrMalformed, got %v", err)
	}
	m := kafka.Message{Value: []byte{0xff, 0xff}, Headers: []kafka.Header{
		{Key: HeaderID, Value: []byte("1")}, {Key: HeaderType, Value: []byte("loom.events.v1.SubmitJob")}}}
	if _, err := Default.Decode(m); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad payload: want ErrMalformed, got %v", err)
	}
	if _, err := Encode(Event{}); err == nil {
		t.Fatal("encoding an empty event succeeded")
	}
}

// TestRoutePicksTheTopic checks that Route puts an event on its payload's
// topic with New's attributes, and refuses a payload no topic carries.
func TestRoutePicksTheTopic(t *testing.T) {
	t.Parallel()
	payload := &eventsv1.NodeDrained{Node: "n", Cluster: "projects/p/clusters/c"}
	e, err := Route("projects/p/clusters/c", "loom/scheduler", payload)
	if err != nil {
		t.Fatal(err)
	}
	if e.Topic != topics.JobEvents || e.Key != "projects/p/clusters/c" || e.Subject != e.Key || e.ID == "" ||
		e.Type != "loom.events.v1.NodeDrained" || e.Source != "loom/scheduler" || e.Payload != payload || e.Time.IsZero() {
		t.Fatalf("Route gave %+v", e)
	}
	if e, err := Route("k", "loom/test", wrapperspb.String("x")); !errors.Is(err, topics.ErrUnrouted) || e.Topic != "" || e.Payload != nil {
		t.Fatalf("Route(unrouted) = %+v, %v; want no event and ErrUnrouted", e, err)
	}
}

// Ids made one after another sort in the order they were made, also the
// many made within one millisecond, from several goroutines alike.
func TestNewIDSortsInCreationOrder(t *testing.T) {
	t.Parallel()
	prev := NewID()
	for i := 0; i < 10000; i++ {
		id := NewID()
		if id <= prev {
			t.Fatalf("id %d %s does not sort after %s", i, id, prev)
		}
		prev = id
	}
	seen := make(chan string, 4000)
	for g := 0; g < 4; g++ {
		go func() {
			for i := 0; i < 1000; i++ {
				seen <- NewID()
			}
		}()
	}
	ids := map[string]bool{}
	for i := 0; i < 4000; i++ {
		ids[<-seen] = true
	}
	if len(ids) != 4000 {
		t.Fatalf("%d distinct ids of 4000", len(ids))
	}
}
