package training

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestMetricsThroughTheBus: a plain job's MetricsReported records become
// series read through MetricsService under the job's name (a CustomJob
// name of the same id is NotFound: there is no such CustomJob); values the
// store cannot keep are dropped alone.
func TestMetricsThroughTheBus(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	cfg := Config{Common: config.Common{
		Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", LogLevel: "warn", CreateTopics: true,
	}}
	addrs := make(chan string, 1)
	svc := testkit.Start(t, "training", func(ctx context.Context) error {
		return run(ctx, cfg, func(a string) { addrs <- a })
	})
	var addr string
	select {
	case addr = <-addrs:
	case <-svc.Done():
		t.Fatalf("training stopped at start: %v", svc.Err())
	case <-time.After(30 * time.Second):
		t.Fatal("training did not start serving gRPC")
	}
	client := trainingv1.NewMetricsServiceClient(testkit.Dial(t, addr))
	ctx := testkit.Context(t, wait)
	d := &driver{t: t, broker: broker}

	t0 := time.Unix(1700000000, 0)
	var pts []*eventsv1.MetricsReported_Point
	for s := 1; s <= 300; s++ {
		pts = append(pts, &eventsv1.MetricsReported_Point{Step: int64(s), Time: timestamppb.New(t0.Add(time.Duration(s) * time.Second)),
			Values: map[string]float64{"loss": 10 / float64(s), "eval/accuracy": float64(s) / 300, "bad name!": 1}})
	}
	// The scheduler runs the job on gpu-1, whose agent reports.
	d.publish(&eventsv1.JobChanged{Attempt: 1, Job: &loomv1.Job{Name: "projects/p/jobs/7", Cluster: gCluster, State: loomv1.JobState_RUNNING,
		Nodes: []string{"gpu-1"}, Runs: []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_RUNNING, Nodes: []string{"gpu-1"}}}}}, gCluster)
	node := gCluster + "/nodes/gpu-1"
	d.publish(&eventsv1.MetricsReported{Job: "projects/p/jobs/7", Attempt: 1, Node: node, Cluster: gCluster, Points: pts[:150]}, "projects/p/jobs/7")
	d.publish(&eventsv1.MetricsReported{Job: "projects/p/jobs/7", Attempt: 1, Node: node, Cluster: gCluster, Points: pts[150:]}, "projects/p/jobs/7")

	var list *trainingv1.ListMetricsResponse
	testkit.WaitFor(t, wait, "both records stored", func() (bool, error) {
		var err error
		list, err = client.ListMetrics(ctx, &trainingv1.ListMetricsRequest{Parent: "projects/p/jobs/7"})
		if status.Code(err) == codes.NotFound {
			return false, nil // a plain job with no series yet: not known
		}
		return err == nil && len(list.GetSeries()) == 2 && list.GetSeries()[1].GetCount() == 300, err
	})
	if s := list.GetSeries()[1]; s.GetMetric() != "loss" || s.GetFirst() != 10 || s.GetLast() != 10.0/300 || s.GetMax() != 10 || s.GetMin() != 10.0/300 {
		t.Errorf("loss summary %v", s)
	}
	from := int64(101)
	r, err := client.ReadMetrics(ctx, &trainingv1.ReadMetricsRequest{Parent: "projects/p/jobs/7", Metric: "eval/accuracy", Points: 50, From: &from})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetTotal() != 200 || len(r.GetPoints()) > 50 || r.GetPoints()[0].GetStep() != 101 || r.GetPoints()[len(r.GetPoints())-1].GetStep() != 300 {
		t.Errorf("read: total %d, %d points, %v..%v", r.GetTotal(), len(r.GetPoints()), r.GetPoints()[0], r.GetPoints()[len(r.GetPoints())-1])
	}
	if got := r.GetPoints()[0].GetTime().AsTime(); !got.Equal(t0.Add(101 * time.Second)) {
		t.Errorf("time %v", got)
	}
	for _, c := range []struct {
		parent string
		code   codes.Code
	}{
		{"projects/p/nodes/7", codes.InvalidArgument},
		{loc + "/customJobs/x", codes.InvalidArgument},
		{loc + "/hyperparameterTuningJobs/9/trials/1", codes.NotFound},
		{loc + "/customJobs/7", codes.NotFound},
		{"projects/p/jobs/99999", codes.NotFound},
	} {
		if _, err := client.ListMetrics(ctx, &trainingv1.ListMetricsRequest{Parent: c.parent}); status.Code(err) != c.code {
			t.Errorf("%s: %v, want %v", c.parent, err, c.code)
		}
	}
	if _, err := client.ReadMetrics(ctx, &trainingv1.ReadMetricsRequest{Parent: "projects/p/jobs/7", Metric: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown metric: %v", err)
	}
	if _, err := client.ReadMetrics(ctx, &trainingv1.ReadMetricsRequest{Parent: "projects/p/jobs/7", Metric: "loss", Points: 10001}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("10001 points: %v", err)
	}
}
