package stack

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestServerlessCustomJobRunsOnItsOwnCluster: `loom up`'s training service
// carries a CustomJob command out with the real provisioner, scheduler and
// an agent process: its own cluster is made, its job runs as its owner and
// succeeds, and the cluster is deleted. (The gateway's side, which writes
// the command, is tested in the gateway; here the test writes it as the
// gateway would.)
func TestServerlessCustomJobRunsOnItsOwnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster with an agent process")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := Start(ctx, testOptions(t))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer st.Close(context.Background())

	secret, err := auth.LoadSecret(st.Keys.Service)
	if err != nil {
		t.Fatal(err)
	}
	key, err := auth.ServiceKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	prod := bus.NewProducer([]string{st.BrokerAddr})
	prod.SetSigner(envelope.NewServiceSigner("gateway", key))
	defer prod.Close()
	const name = "projects/default/locations/local/customJobs/9001"
	ev, err := envelope.Route("projects/default", "loom/gateway", &eventsv1.CreateCustomJob{CustomJob: &trainingv1.CustomJob{
		Name: name, DisplayName: "serverless", User: st.Admin,
		JobSpec: &trainingv1.CustomJobSpec{
			WorkerPoolSpecs: []*trainingv1.WorkerPoolSpec{{MachineSpec: &trainingv1.MachineSpec{MachineType: "n2-standard-8"}, ReplicaCount: 1,
				Task: &trainingv1.WorkerPoolSpec_ContainerSpec{ContainerSpec: &trainingv1.ContainerSpec{
					Command: []string{"/bin/sh", "-c", `test "$CLOUD_ML_JOB_ID" = 9001 && test -n "$LOOM_WORKER_POOLS"`}}}}},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ev.Principal = "users/" + st.Admin
	if err := prod.Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}

	iss, err := auth.NewServiceTokenIssuer(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(st.Addrs.Training, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.ServiceTokenSource(iss, "gateway")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := trainingv1.NewTrainingServiceClient(conn)
	var cj *trainingv1.CustomJob
	testkit.WaitFor(t, 2*time.Minute, "the custom job's end", func() (bool, error) {
		cj, err = client.GetCustomJob(ctx, &trainingv1.GetCustomJobRequest{Name: name})
		return err == nil && (cj.GetState() == trainingv1.JobState_JOB_STATE_SUCCEEDED || cj.GetState() == trainingv1.JobState_JOB_STATE_FAILED), nil
	})
	if cj.GetState() != trainingv1.JobState_JOB_STATE_SUCCEEDED || cj.GetCluster() != "projects/default/clusters/cj-9001" ||
		cj.GetJob() != "projects/default/jobs/9001" || cj.GetStartTime() == nil {
		t.Fatalf("custom job %v", cj)
	}
	// Its cluster is deleted once it ended.
	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if k, err := st.AdminKey(); err == nil {
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(auth.Bearer(k)))
	}
	gw, err := grpc.NewClient(st.GatewayAddr, dialOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	clusters := loomv1.NewClusterServiceClient(gw)
	testkit.WaitFor(t, time.Minute, "its cluster deleted", func() (bool, error) {
		_, err := clusters.GetCluster(ctx, &loomv1.GetClusterRequest{Name: cj.GetCluster()})
		return status.Code(err) == codes.NotFound, nil
	})
}
