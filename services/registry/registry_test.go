package registry

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/osuser"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

const (
	testCluster = "projects/default/clusters/c1"
	testModel   = "projects/default/models/tiny"
)

// testOwner is the OS account these tests run as, which owns the artifact
// directories they make: an upload's os_user.
var testOwner = func() string {
	if a := osuser.Self(); a.Name != "" {
		return a.Name
	}
	return strconv.Itoa(os.Geteuid())
}()

// startRegistry runs the service until the test ends and returns a client to
// its gRPC API and a function that stops it.
func startRegistry(t *testing.T, broker, redisAddr string) (loomv1.ModelServiceClient, func()) {
	t.Helper()
	return startRegistryWith(t, broker, redisAddr, nil)
}

// startRegistryWith is startRegistry with the configuration changed by edit.
func startRegistryWith(t *testing.T, broker, redisAddr string, edit func(*Config)) (loomv1.ModelServiceClient, func()) {
	t.Helper()
	cfg := Config{Common: config.Common{
		Brokers: []string{broker}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", LogLevel: "warn", CreateTopics: true,
	}}
	if edit != nil {
		edit(&cfg)
	}
	addrs := make(chan string, 1)
	svc := testkit.Start(t, "registry", func(ctx context.Context) error {
		return run(ctx, cfg, func(a string) { addrs <- a })
	})
	stop := func() {
		if err := svc.Stop(); err != nil {
			t.Error(err)
		}
	}
	var addr string
	select {
	case addr = <-addrs:
	case <-svc.Done():
		t.Fatalf("registry stopped at start: %v", svc.Err())
	case <-time.After(30 * time.Second):
		t.Fatal("registry did not start serving gRPC")
	}
	conn := testkit.Dial(t, addr)
	return loomv1.NewModelServiceClient(conn), stop
}

// exportFixture is a registry that exports under an export root, on a
// broker and Redis of its own, for the tests of exports.
type exportFixture struct {
	t   *testing.T
	ctx context.Context
	// broker and redis are what the registry runs on; root its export root.
	broker, redis, root string
	// c is the registry's gRPC API; stop stops it.
	c    loomv1.ModelServiceClient
	stop func()
	// edit is the configuration the registry started with, for restart.
	edit func(*Config)
}

// newExportFixture starts a registry whose export root is a new temporary
// directory, with its configuration then changed by edit (when not nil: a
// root it sets is the fixture's); the fixture's context ends after
// timeout.
func newExportFixture(t *testing.T, timeout time.Duration, edit func(*Config)) *exportFixture {
	t.Helper()
	x := &exportFixture{t: t, ctx: testkit.Context(t, timeout), broker: testkit.Broker(t), root: t.TempDir()}
	x.redis, _ = testkit.Redis(t)
	root := x.root
	x.edit = func(cfg *Config) {
		cfg.ExportRoot = root
		if edit != nil {
			edit(cfg)
		}
		x.root = cfg.ExportRoot
	}
	x.restart()
	return x
}

// restart starts the registry again with the same configuration, once the
// test has stopped it with stop.
func (x *exportFixture) restart() {
	x.t.Helper()
	x.c, x.stop = startRegistryWith(x.t, x.broker, x.redis, x.edit)
}

// upload registers the artifacts at uri as a version of the model tiny.
func (x *exportFixture) upload(uri string) {
	x.t.Helper()
	if _, err := x.c.UploadModel(x.ctx, &loomv1.UploadModelRequest{Parent: vertexParent, ModelId: "tiny", Model: &loomv1.Model{ArtifactUri: uri}}); err != nil {
		x.t.Fatal(err)
	}
}

func completedJob(id string) envelope.Event {
	return envelope.New(topics.JobEvents, testCluster, "loom/scheduler", &eventsv1.JobChanged{
		Job: &loomv1.Job{
			Name: "projects/default/jobs/" + id, JobId: id, Cluster: testCluster,
			State: loomv1.JobState_COMPLETED, ModelOutput: &loomv1.ModelOutput{ModelId: "tiny"},
		},
		Attempt:  1,
		ModelDir: "/shared/models/tiny/job-" + id,
	})
}

// waitVersions waits until the model has n versions and returns them.
func waitVersions(t *testing.T, c loomv1.ModelServiceClient, n int) []*loomv1.ModelVersion {
	t.Helper()
	var got []*loomv1.ModelVersion
	testkit.WaitFor(t, 30*time.Second, "model versions", func() (bool, error) {
		resp, err := c.ListModelVersions(context.Background(), &loomv1.ListModelVersionsRequest{Parent: testModel})
		if status.Code(err) == codes.NotFound {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		got = resp.GetVersions()
		return len(got) >= n, nil
	})
	return got
}

func TestRegistersVersionOnCompletedJob(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	client, stop := startRegistry(t, broker, redisAddr)
	ctx := context.Background()

	if _, err := client.GetModel(ctx, &loomv1.GetModelRequest{Name: testModel}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetModel of an unknown model: %v, want NotFound", err)
	}
	if _, err := client.ListModelVersions(ctx, &loomv1.ListModelVersionsRequest{Parent: "bad"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ListModelVersions with a bad parent: %v, want InvalidArgument", err)
	}

	prod := bus.NewProducer([]string{broker})
	prod.SetSigner(testkit.SignerAs("scheduler"))
	t.Cleanup(func() { _ = prod.Close() })
	first := completedJob("1")
	if err := prod.Publish(ctx, first); err != nil {
		t.Fatalf("publish: %v", err)
	}
	ev := testkit.WaitEvent(t, broker, topics.ModelEvents, 30*time.Second, func(e envelope.Event) bool {
		r, ok := e.Payload.(*eventsv1.ModelVersionRegistered)
		return ok && r.GetVersion().GetSourceJob() == "projects/default/jobs/1"
	})
	reg := ev.Payload.(*eventsv1.ModelVersionRegistered)
	if reg.GetModel() != testModel || reg.GetVersion().GetVersion() != 1 ||
		reg.GetVersion().GetArtifactUri() != "file:///shared/models/tiny/job-1" || ev.Key != testModel {
		t.Fatalf("registered %v (key %q)", reg, ev.Key)
	}
	vs := waitVersions(t, client, 1)
	if len(vs) != 1 || vs[0].GetName() != testModel+"/versions/1" {
		t.Fatalf("versions %v, want exactly version 1", vs)
	}

	// The same event again, and a second COMPLETED for the same job, then a
	// different job as a barrier: same key, so handled after the duplicates.
	if err := prod.Publish(ctx, first, completedJob("1"), completedJob("2")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	vs = waitVersions(t, client, 2)
	if len(vs) != 2 || vs[1].GetSourceJob() != "projects/default/jobs/2" || vs[1].GetVersion() != 2 {
		t.Fatalf("versions %v, want job 1 → v1 and job 2 → v2 only", vs)
	}
	m, err := client.GetModel(ctx, &loomv1.GetModelRequest{Name: testModel})
	if err != nil || m.GetLatestVersion() != 2 {
		t.Fatalf("GetModel: %v %v, want latest_version 2", m, err)
	}

	// After a restart the state comes back from Redis and job 1 still cannot
	// register again.
	stop()
	client, _ = startRegistry(t, broker, redisAddr)
	if err := prod.Publish(ctx, completedJob("1"), completedJob("3")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	vs = waitVersions(t, client, 3)
	if len(vs) != 3 || vs[2].GetSourceJob() != "projects/default/jobs/3" {
		t.Fatalf("versions after restart %v, want v3 from job 3", vs)
	}
	list, err := client.ListModels(ctx, &loomv1.ListModelsRequest{Parent: "projects/default"})
	if err != nil || len(list.GetModels()) != 1 {
		t.Fatalf("ListModels: %v %v", list, err)
	}
}

// TestListModelVersionsPages: versions page in version order (10 after 9,
// not by name), each once, and a bad page size is InvalidArgument.
func TestListModelVersionsPages(t *testing.T) {
	t.Parallel()
	broker := testkit.Broker(t)
	redisAddr, _ := testkit.Redis(t)
	client, _ := startRegistry(t, broker, redisAddr)
	ctx := context.Background()
	prod := bus.NewProducer([]string{broker})
	prod.SetSigner(testkit.SignerAs("scheduler"))
	t.Cleanup(func() { _ = prod.Close() })
	const n = 12
	for i := 1; i <= n; i++ {
		if err := prod.Publish(ctx, completedJob(strconv.Itoa(i))); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	waitVersions(t, client, n)
	var got []int64
	token, pages := "", 0
	for {
		resp, err := client.ListModelVersions(ctx, &loomv1.ListModelVersionsRequest{Parent: testModel, PageSize: 5, PageToken: token})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, v := range resp.GetVersions() {
			got = append(got, v.GetVersion())
		}
		pages++
		if token = resp.GetNextPageToken(); token == "" || pages > n {
			break
		}
	}
	if pages != 3 || len(got) != n {
		t.Fatalf("%d versions in %d pages: %v; want %d in 3", len(got), pages, got, n)
	}
	for i, v := range got {
		if v != int64(i+1) {
			t.Fatalf("versions listed %v; want 1..%d in order", got, n)
		}
	}
	if _, err := client.ListModelVersions(ctx, &loomv1.ListModelVersionsRequest{Parent: testModel, PageSize: -1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("page_size -1: %v; want InvalidArgument", err)
	}
}
