package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/authz"
)

// TestTableCoversServer: every method of every service registered on the
// gateway's gRPC server has a rule in authz.Table (a method missing from it
// would be refused to everyone at run time: the table fails closed).
func TestTableCoversServer(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	n := 0
	for svc, info := range h.served {
		for _, m := range info.Methods {
			n++
			if _, ok := authz.Table["/"+svc+"/"+m.Name]; !ok {
				t.Errorf("/%s/%s is served but not in authz.Table", svc, m.Name)
			}
		}
	}
	if n < 30 {
		t.Errorf("the gateway serves %d methods; the test did not see its services", n)
	}
}

// The principals of the matrix, by their credential in the fake
// authenticator ("" is anonymous).
var matrixCallers = []string{"", "vic", "ana", "bob", "pat", "oz", "root", "node", "work40"}

// Outcomes of a cell.
const (
	ok = codes.OK
	un = codes.Unauthenticated
	pd = codes.PermissionDenied
	nf = codes.NotFound
)

const (
	matrixJob  = "projects/default/jobs/40"
	matrixStep = matrixJob + "/steps/0"
	matrixRes  = "projects/default/reservations/r0"
)

// matrixRow is one public RPC: how to call it over gRPC and REST (i is the
// caller's column, for ids that must differ), and the expected outcome for
// each caller of matrixCallers.
type matrixRow struct {
	method string
	grpc   func(ctx context.Context, c *grpc.ClientConn, i int) error
	rest   func(i int) (verb, path, body string)
	want   [9]codes.Code
}

// Expected outcomes, one row per RPC, columns as matrixCallers:
// anonymous, viewer (vic), user and owner of job 40 (ana), another user
// of the same project (bob), project admin (pat), admin of another
// project (oz), cluster admin (root), node, workload of job 40.
var (
	viewerRow  = [9]codes.Code{un, ok, ok, ok, ok, nf, ok, pd, pd}
	adminRow   = [9]codes.Code{un, pd, pd, pd, ok, nf, ok, pd, pd}
	clusterRow = [9]codes.Code{un, pd, pd, pd, pd, nf, ok, pd, pd}
	// Reads of job 40 that its workload may make too.
	jobReadRow = [9]codes.Code{un, ok, ok, ok, ok, nf, ok, pd, ok}
	// Acting on ana's job 40: ana, admins; not bob.
	jobActRow = [9]codes.Code{un, pd, ok, pd, ok, nf, ok, pd, pd}
	// Acting on job 40 from inside it too (scancel $SLURM_JOB_ID): as
	// jobActRow, and its own workload.
	jobSelfRow = [9]codes.Code{un, pd, ok, pd, ok, nf, ok, pd, ok}
	// Reads of the project its workload makes too (its job list, which
	// holds only its own job; sinfo).
	projectReadRow = [9]codes.Code{un, ok, ok, ok, ok, nf, ok, pd, ok}
	// Steps of job 40: as jobActRow, and its own workload.
	stepActRow = [9]codes.Code{un, pd, ok, pd, ok, nf, ok, pd, ok}
	// A new step in job 40 runs as ana: ana, its workload, and the cluster
	// admin (Slurm's root); not the project admin.
	stepRunRow = [9]codes.Code{un, pd, ok, pd, pd, nf, ok, pd, ok}
	// Any authenticated principal, about itself.
	anyoneRow = [9]codes.Code{un, ok, ok, ok, ok, ok, ok, ok, ok}
	// Users only: nodes and workloads have no keys.
	usersRow = [9]codes.Code{un, ok, ok, ok, ok, ok, ok, pd, pd}
	// Changes to a project's models: its users and admins.
	modelActRow = [9]codes.Code{un, pd, ok, ok, ok, nf, ok, pd, pd}
)

func matrixRows(opName string) []matrixRow {
	unary := func(f func(ctx context.Context, c *grpc.ClientConn, i int) error) func(context.Context, *grpc.ClientConn, int) error {
		return f
	}
	get := func(path string) func(int) (string, string, string) {
		return func(int) (string, string, string) { return "GET", path, "" }
	}
	cl := func(c *grpc.ClientConn) loomv1.ClusterServiceClient { return loomv1.NewClusterServiceClient(c) }
	rs := func(c *grpc.ClientConn) loomv1.ReservationServiceClient { return loomv1.NewReservationServiceClient(c) }
	js := func(c *grpc.ClientConn) loomv1.JobServiceClient { return loomv1.NewJobServiceClient(c) }
	ss := func(c *grpc.ClientConn) loomv1.SlurmServiceClient { return loomv1.NewSlurmServiceClient(c) }
	ops := func(c *grpc.ClientConn) loomv1.OperationServiceClient { return loomv1.NewOperationServiceClient(c) }
	ms := func(c *grpc.ClientConn) loomv1.ModelServiceClient { return loomv1.NewModelServiceClient(c) }
	as := func(c *grpc.ClientConn) loomv1.AuthServiceClient { return loomv1.NewAuthServiceClient(c) }
	acs := func(c *grpc.ClientConn) loomv1.AccountServiceClient { return loomv1.NewAccountServiceClient(c) }
	hs := func(c *grpc.ClientConn) loomv1.HealthServiceClient { return loomv1.NewHealthServiceClient(c) }
	clusterBody := `{"compute":{"node_pools":[{"id":"gpu","machine_type":"a2-highgpu-1g","node_count":2,"accelerator_count":1}]}}`
	reservation := func() *loomv1.Reservation {
		return &loomv1.Reservation{Zone: "us-central1-a", MachineType: "a2-highgpu-1g", Count: 1}
	}
	unchanged := func() *loomv1.UpdateClusterRequest {
		c := matrixCluster()
		c.Status = nil
		return &loomv1.UpdateClusterRequest{Cluster: c, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"compute.node_pools"}}}
	}
	return []matrixRow{
		{"CreateCluster", unary(func(ctx context.Context, c *grpc.ClientConn, i int) error {
			_, err := cl(c).CreateCluster(ctx, validCluster(fmt.Sprintf("g%d", i)))
			return err
		}), func(i int) (string, string, string) {
			return "POST", fmt.Sprintf("/v1/projects/default/clusters?cluster_id=r%d", i), clusterBody
		}, adminRow},
		{"GetCluster", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := cl(c).GetCluster(ctx, &loomv1.GetClusterRequest{Name: cluster1})
			return err
		}), get("/v1/" + cluster1), viewerRow},
		{"ListClusters", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := cl(c).ListClusters(ctx, &loomv1.ListClustersRequest{Parent: project})
			return err
		}), get("/v1/projects/default/clusters"), viewerRow},
		{"UpdateCluster", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := cl(c).UpdateCluster(ctx, unchanged())
			return err
		}), func(int) (string, string, string) {
			b, _ := json.Marshal(map[string]any{"compute": map[string]any{"node_pools": []any{
				map[string]any{"id": "gpu", "machine_type": "a3-ultragpu-8g", "node_count": 2, "accelerator_count": 8},
				map[string]any{"id": "cpu", "machine_type": "n2-standard-8", "node_count": 1}}}})
			return "PATCH", "/v1/" + cluster1, string(b)
		}, adminRow},
		{"GetSlurmConfig", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := cl(c).GetSlurmConfig(ctx, &loomv1.GetSlurmConfigRequest{Name: cluster1})
			return err
		}), get("/v1/" + cluster1 + ":slurmConfig"), viewerRow},
		{"DeleteCluster", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := cl(c).DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: cluster1})
			return err
		}), func(int) (string, string, string) { return "DELETE", "/v1/" + cluster1, "" }, adminRow},

		{"CreateReservation", unary(func(ctx context.Context, c *grpc.ClientConn, i int) error {
			_, err := rs(c).CreateReservation(ctx, &loomv1.CreateReservationRequest{Parent: project, ReservationId: fmt.Sprintf("g%d", i), Reservation: reservation()})
			return err
		}), func(i int) (string, string, string) {
			return "POST", fmt.Sprintf("/v1/projects/default/reservations?reservation_id=r%d", i),
				`{"zone":"us-central1-a","machine_type":"a2-highgpu-1g","count":1}`
		}, clusterRow},
		{"GetReservation", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := rs(c).GetReservation(ctx, &loomv1.GetReservationRequest{Name: matrixRes})
			return err
		}), get("/v1/" + matrixRes), viewerRow},
		{"ListReservations", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := rs(c).ListReservations(ctx, &loomv1.ListReservationsRequest{Parent: project})
			return err
		}), get("/v1/projects/default/reservations"), viewerRow},
		{"ListCapacity", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := rs(c).ListCapacity(ctx, &loomv1.ListCapacityRequest{Parent: project})
			return err
		}), get("/v1/projects/default/capacity"), viewerRow},
		{"DeleteReservation", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := rs(c).DeleteReservation(ctx, &loomv1.DeleteReservationRequest{Name: matrixRes})
			return err
		}), func(int) (string, string, string) { return "DELETE", "/v1/" + matrixRes, "" }, clusterRow},

		{"SubmitJob", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := js(c).SubmitJob(ctx, validJob())
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/projects/default/jobs", `{"cluster":"c1","script":"echo hi"}`
		}, [9]codes.Code{un, pd, ok, ok, ok, nf, ok, pd, ok}},
		{"GetJob", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := js(c).GetJob(ctx, &loomv1.GetJobRequest{Name: matrixJob})
			return err
		}), get("/v1/" + matrixJob), jobReadRow},
		{"ListJobs", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := js(c).ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project})
			return err
		}), get("/v1/projects/default/jobs"), projectReadRow},
		{"WatchJob", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			st, err := js(c).WatchJob(ctx, &loomv1.WatchJobRequest{Name: matrixJob})
			if err == nil {
				_, err = st.Recv()
			}
			return err
		}), get("/v1/" + matrixJob + ":watch"), jobReadRow},
		{"WatchChanges", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			st, err := loomv1.NewChangeServiceClient(c).WatchChanges(ctx, &loomv1.WatchChangesRequest{Project: project, Collections: []string{"clusters"}})
			if err == nil {
				_, err = st.Recv()
			}
			return err
		}), get("/v1/projects/default:watchChanges?collections=clusters"), viewerRow},
		{"CancelJob", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := js(c).CancelJob(ctx, &loomv1.CancelJobRequest{Name: matrixJob, Signal: "USR1"})
			return err
		}), func(int) (string, string, string) { return "POST", "/v1/" + matrixJob + ":cancel", `{"signal":"USR1"}` }, jobSelfRow},
		{"UpdateJob", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := js(c).UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: matrixJob, Action: "requeue"})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/" + matrixJob + ":update", `{"action":"requeue"}`
		}, jobSelfRow},
		{"ReadJobLogs", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			st, err := js(c).ReadJobLogs(ctx, &loomv1.ReadJobLogsRequest{Name: matrixJob})
			for err == nil {
				_, err = st.Recv()
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}), get("/v1/" + matrixJob + ":logs"), jobActRow},
		{"CreateJobStep", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			// The request id of step 0: an allowed caller gets it back at once.
			_, err := js(c).CreateJobStep(ctx, &loomv1.CreateJobStepRequest{Parent: matrixJob, RequestId: "matrix", Command: []string{"hostname"}})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/" + matrixJob + "/steps", `{"request_id":"matrix","command":["hostname"]}`
		}, stepRunRow},
		{"GetJobStep", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := js(c).GetJobStep(ctx, &loomv1.GetJobStepRequest{Name: matrixStep})
			return err
		}), get("/v1/" + matrixStep), jobReadRow},
		{"ListJobSteps", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := js(c).ListJobSteps(ctx, &loomv1.ListJobStepsRequest{Parent: matrixJob})
			return err
		}), get("/v1/" + matrixJob + "/steps"), jobReadRow},
		{"CancelJobStep", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := js(c).CancelJobStep(ctx, &loomv1.CancelJobStepRequest{Name: matrixStep})
			return err
		}), func(int) (string, string, string) { return "POST", "/v1/" + matrixStep + ":cancel", `{}` }, stepActRow},

		{"ListPartitions", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ss(c).ListPartitions(ctx, &loomv1.ListPartitionsRequest{Cluster: cluster1})
			return err
		}), get("/v1/" + cluster1 + "/partitions"), projectReadRow},
		{"ListShares", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ss(c).ListShares(ctx, &loomv1.ListSharesRequest{Cluster: cluster1})
			return err
		}), get("/v1/" + cluster1 + "/shares"), viewerRow},
		{"ListSlurmNodes", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ss(c).ListSlurmNodes(ctx, &loomv1.ListSlurmNodesRequest{Cluster: cluster1})
			return err
		}), get("/v1/" + cluster1 + "/slurmNodes"), projectReadRow},
		{"UpdateSlurmNode", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ss(c).UpdateSlurmNode(ctx, &loomv1.UpdateSlurmNodeRequest{Cluster: cluster1, Hostname: "gpu-0001", State: "RESUME"})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/" + cluster1 + "/slurmNodes/gpu-0001:update", `{"state":"RESUME"}`
		}, clusterRow},

		{"GetOperation", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ops(c).GetOperation(ctx, &loomv1.GetOperationRequest{Name: opName})
			return err
		}), get("/v1/" + opName), viewerRow},
		{"WaitOperation", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ops(c).WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: opName, TimeoutSeconds: 1})
			return err
		}), func(int) (string, string, string) { return "POST", "/v1/" + opName + ":wait", `{"timeout_seconds":1}` }, viewerRow},
		{"ListOperations", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ops(c).ListOperations(ctx, &loomv1.ListOperationsRequest{Parent: project})
			return err
		}), get("/v1/" + project + "/operations"), viewerRow},
		// The first admin's cancel ends the create; later ones answer it again.
		{"CancelOperation", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ops(c).CancelOperation(ctx, &loomv1.CancelOperationRequest{Name: opName})
			return err
		}), func(int) (string, string, string) { return "POST", "/v1/" + opName + ":cancel", `{}` }, adminRow},

		{"ListNodes", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := loomv1.NewNodeServiceClient(c).ListNodes(ctx, &loomv1.ListNodesRequest{Parent: cluster1})
			return err
		}), get("/v1/" + cluster1 + "/nodes"), viewerRow},

		{"ListModels", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ms(c).ListModels(ctx, &loomv1.ListModelsRequest{Parent: project})
			return err
		}), get("/v1/projects/default/models"), viewerRow},
		{"GetModel", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ms(c).GetModel(ctx, &loomv1.GetModelRequest{Name: project + "/models/m1"})
			return err
		}), get("/v1/projects/default/models/m1"), viewerRow},
		{"ListModelVersions", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ms(c).ListModelVersions(ctx, &loomv1.ListModelVersionsRequest{Parent: project + "/models/m1"})
			return err
		}), get("/v1/projects/default/models/m1/versions"), viewerRow},
		// Changes to models: project users (UploadModel also a workload of
		// the project, as SubmitJob); the fake registry accepts each.
		{"UploadModel", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ms(c).UploadModel(ctx, &loomv1.UploadModelRequest{Parent: project, Model: &loomv1.Model{ArtifactUri: "/m"}})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/projects/default/locations/global/models:upload", `{"model":{"artifactUri":"/m"}}`
		}, [9]codes.Code{un, pd, ok, ok, ok, nf, ok, pd, ok}},
		{"UpdateModel", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ms(c).UpdateModel(ctx, &loomv1.UpdateModelRequest{Model: &loomv1.Model{Name: project + "/models/m1"}})
			return err
		}), func(int) (string, string, string) {
			return "PATCH", "/v1/projects/default/locations/global/models/m1?updateMask=labels", `{"labels":{"a":"b"}}`
		}, modelActRow},
		{"MergeVersionAliases", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ms(c).MergeVersionAliases(ctx, &loomv1.MergeVersionAliasesRequest{Name: project + "/models/m1@1", VersionAliases: []string{"prod"}})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/projects/default/locations/global/models/m1@1:mergeVersionAliases", `{"versionAliases":["prod"]}`
		}, modelActRow},
		{"DeleteModelVersion", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ms(c).DeleteModelVersion(ctx, &loomv1.DeleteModelVersionRequest{Name: project + "/models/m1@2"})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/projects/default/locations/global/models/m1@2:deleteVersion", `{}`
		}, modelActRow},
		{"DeleteModel", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ms(c).DeleteModel(ctx, &loomv1.DeleteModelRequest{Name: project + "/models/m9"})
			return err
		}), func(int) (string, string, string) {
			return "DELETE", "/v1/projects/default/locations/global/models/m9", ""
		}, modelActRow},
		{"ExportModel", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ms(c).ExportModel(ctx, &loomv1.ExportModelRequest{Name: project + "/models/m1", OutputConfig: &loomv1.ExportModelOutputConfig{ArtifactDestination: &loomv1.GcsDestination{OutputUriPrefix: "s3://b/x"}}})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/projects/default/locations/global/models/m1:export", `{"outputConfig":{"artifactDestination":{"outputUriPrefix":"s3://b/x"}}}`
		}, modelActRow},

		// A new token for the caller itself: users only (a node renews its
		// identity, a workload gets its token from its node).
		{"CreateToken", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := as(c).CreateToken(ctx, &loomv1.CreateTokenRequest{})
			return err
		}), func(int) (string, string, string) { return "POST", "/v1/auth:token", `{}` }, usersRow},
		// Public: the refresh token is the proof, and a bogus one proves
		// nothing, whoever sends it.
		{"RevokeToken", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := as(c).RevokeToken(ctx, &loomv1.RevokeTokenRequest{RefreshToken: "x.y.z"})
			return err
		}), func(int) (string, string, string) { return "POST", "/v1/auth:revoke", `{"refresh_token":"x.y.z"}` },
			[9]codes.Code{un, un, un, un, un, un, un, un, un}},
		{"WhoAmI", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := as(c).WhoAmI(ctx, &loomv1.WhoAmIRequest{})
			return err
		}), get("/v1/auth:whoami"), anyoneRow},
		// Keys are users' own: nodes and workloads have none.
		{"CreateApiKey", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := as(c).CreateApiKey(ctx, &loomv1.CreateApiKeyRequest{Parent: "users/-"})
			return err
		}), func(int) (string, string, string) { return "POST", "/v1/users/-/keys", `{}` }, usersRow},
		// ana's keys: hers, her project's admin's (all her memberships are
		// in default), a cluster admin's; other users do not know of them.
		{"ListApiKeys", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := as(c).ListApiKeys(ctx, &loomv1.ListApiKeysRequest{Parent: "users/ana"})
			return err
		}), get("/v1/users/ana/keys"), [9]codes.Code{un, nf, ok, nf, ok, nf, ok, pd, pd}},
		// A key of ana's that does not exist: NotFound for the users who may
		// see her keys and the ones who may not alike; nodes and workloads
		// have no business with keys.
		{"RevokeApiKey", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := as(c).RevokeApiKey(ctx, &loomv1.RevokeApiKeyRequest{Name: "users/ana/keys/0000000000000000"})
			return err
		}), func(int) (string, string, string) { return "POST", "/v1/users/ana/keys/0000000000000000:revoke", `{}` },
			[9]codes.Code{un, nf, nf, nf, nf, nf, nf, pd, pd}},
		// ana has no OIDC binding: NotFound to everyone who may ask, and
		// to everyone who may not; nodes and workloads have no business.
		{"GetOidcBinding", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := as(c).GetOidcBinding(ctx, &loomv1.GetOidcBindingRequest{Name: "users/ana/oidcBinding"})
			return err
		}), get("/v1/users/ana/oidcBinding"), [9]codes.Code{un, nf, nf, nf, nf, nf, nf, pd, pd}},
		// Only a cluster administrator releases one (root reaches the
		// store: none to release); ana is told she may not, the rest that
		// there is nothing of hers to know of.
		{"DeleteOidcBinding", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := as(c).DeleteOidcBinding(ctx, &loomv1.DeleteOidcBindingRequest{Name: "users/ana/oidcBinding"})
			return err
		}), func(int) (string, string, string) { return "DELETE", "/v1/users/ana/oidcBinding", "" },
			[9]codes.Code{un, nf, pd, nf, nf, nf, nf, pd, pd}},
		{"SetMember", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := as(c).SetMember(ctx, &loomv1.SetMemberRequest{Parent: project, User: "zed", Role: "viewer"})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/projects/default/members", `{"user":"zed","role":"viewer"}`
		}, adminRow},
		{"ListMembers", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := as(c).ListMembers(ctx, &loomv1.ListMembersRequest{Parent: project})
			return err
		}), get("/v1/projects/default/members"), adminRow},
		// Public, but a token that is not a bootstrap token proves nothing.
		{"RegisterNode", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := as(c).RegisterNode(ctx, &loomv1.RegisterNodeRequest{BootstrapToken: "bogus", Node: "gpu-0001", PublicKey: make([]byte, 32)})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/auth:registerNode", `{"bootstrap_token":"bogus","node":"gpu-0001","public_key":"` + zeroKey + `"}`
		}, [9]codes.Code{un, un, un, un, un, un, un, un, un}},
		{"RenewNodeIdentity", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := as(c).RenewNodeIdentity(ctx, &loomv1.RenewNodeIdentityRequest{PublicKey: make([]byte, 32)})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/auth:renewNode", `{"public_key":"` + zeroKey + `"}`
		},
			[9]codes.Code{un, pd, pd, pd, pd, pd, pd, ok, pd}},

		{"ListAuditRecords", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := loomv1.NewAuditServiceClient(c).ListAuditRecords(ctx, &loomv1.ListAuditRecordsRequest{Parent: project})
			return err
		}), get("/v1/projects/default/auditRecords"), adminRow},

		{"CreateAccount", unary(func(ctx context.Context, c *grpc.ClientConn, i int) error {
			_, err := acs(c).CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: fmt.Sprintf("g%d", i)}})
			return err
		}), func(i int) (string, string, string) {
			return "POST", "/v1/projects/default/accounts", fmt.Sprintf(`{"name":"r%d"}`, i)
		}, adminRow},
		{"UpdateAccount", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := acs(c).UpdateAccount(ctx, &loomv1.UpdateAccountRequest{Account: &loomv1.Account{Name: project + "/accounts/matrix", Fairshare: 2},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"fairshare"}}})
			return err
		}), func(int) (string, string, string) {
			return "PATCH", "/v1/projects/default/accounts/matrix?updateMask=fairshare", `{"fairshare":2}`
		}, adminRow},
		{"DeleteAccount", unary(func(ctx context.Context, c *grpc.ClientConn, i int) error {
			_, err := acs(c).DeleteAccount(ctx, &loomv1.DeleteAccountRequest{Name: fmt.Sprintf("%s/accounts/dg%d", project, i)})
			return err
		}), func(i int) (string, string, string) {
			return "DELETE", fmt.Sprintf("/v1/projects/default/accounts/dr%d", i), ""
		}, adminRow},
		{"DeleteAssociation", unary(func(ctx context.Context, c *grpc.ClientConn, i int) error {
			_, err := acs(c).DeleteAssociation(ctx, &loomv1.DeleteAssociationRequest{Parent: project, User: fmt.Sprintf("ug%d", i), Account: "root"})
			return err
		}), func(i int) (string, string, string) {
			return "DELETE", fmt.Sprintf("/v1/projects/default/associations?user=ur%d&account=root", i), ""
		}, adminRow},
		{"ListAccounts", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := acs(c).ListAccounts(ctx, &loomv1.ListAccountsRequest{Parent: project})
			return err
		}), get("/v1/projects/default/accounts"), viewerRow},
		{"SetAssociation", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := acs(c).SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{Account: "root", User: "zed"}})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/projects/default/associations", `{"account":"root","user":"zed"}`
		}, adminRow},
		{"ListAssociations", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := acs(c).ListAssociations(ctx, &loomv1.ListAssociationsRequest{Parent: project})
			return err
		}), get("/v1/projects/default/associations"), viewerRow},

		// Hardware health: viewers read; acting on nodes is the cluster
		// administrator's, as draining them (UpdateSlurmNode) is.
		{"ListNodeHealth", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := hs(c).ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: cluster1})
			return err
		}), get("/v1/" + cluster1 + "/nodeHealth"), viewerRow},
		{"ListNodeHealthEvents", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := hs(c).ListNodeHealthEvents(ctx, &loomv1.ListNodeHealthEventsRequest{Cluster: cluster1})
			return err
		}), get("/v1/" + cluster1 + "/nodeHealthEvents"), viewerRow},
		{"ListHealthResults", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := hs(c).ListHealthResults(ctx, &loomv1.ListHealthResultsRequest{Cluster: cluster1, Check: "disk"})
			return err
		}), get("/v1/" + cluster1 + "/healthResults?check=disk"), viewerRow},
		{"GetHealthScan", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := hs(c).GetHealthScan(ctx, &loomv1.GetHealthScanRequest{Cluster: cluster1, ScanId: "s1"})
			return err
		}), get("/v1/" + cluster1 + "/healthScans/s1"), viewerRow},
		{"ListHealthScans", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := hs(c).ListHealthScans(ctx, &loomv1.ListHealthScansRequest{Cluster: cluster1})
			return err
		}), get("/v1/" + cluster1 + "/healthScans"), viewerRow},
		{"GetHealthPolicy", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := hs(c).GetHealthPolicy(ctx, &loomv1.GetHealthPolicyRequest{Cluster: cluster1})
			return err
		}), get("/v1/" + cluster1 + "/healthPolicy"), viewerRow},
		{"ScanNodes", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := hs(c).ScanNodes(ctx, &loomv1.ScanNodesRequest{Cluster: cluster1, Hostnames: []string{"gpu-0001"}})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/" + cluster1 + "/health:scan", `{"hostnames":["gpu-0001"],"checks":["disk"]}`
		}, clusterRow},
		{"ReportFaultyNodes", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := hs(c).ReportFaultyNodes(ctx, &loomv1.ReportFaultyNodesRequest{Cluster: cluster1, Hostnames: []string{"gpu-0001"}, Reason: "matrix"})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/" + cluster1 + ":reportFaultyNodes", `{"hostnames":["gpu-0001"],"reason":"matrix"}`
		}, clusterRow},
		{"UpdateNodeRemediation", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := hs(c).UpdateNodeRemediation(ctx, &loomv1.UpdateNodeRemediationRequest{Cluster: cluster1, Hostname: "gpu-0001",
				Action: loomv1.RemediationAction_ACTION_RESUME})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/" + cluster1 + "/nodeHealth/gpu-0001:update", `{"action":"ACTION_RESUME"}`
		}, clusterRow},
		{"InjectFault", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := hs(c).InjectFault(ctx, &loomv1.InjectFaultRequest{Cluster: cluster1, Hostname: "gpu-0001",
				Fault: &loomv1.Fault{Kind: loomv1.FaultKind_FAULT_XID, Gpu: 3, Xid: 79}})
			return err
		}), func(int) (string, string, string) {
			return "POST", "/v1/" + cluster1 + "/nodes/gpu-0001:injectFault", `{"fault":{"kind":"FAULT_XID","gpu":3,"xid":79}}`
		}, clusterRow},
		{"GetJobGoodput", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := loomv1.NewGoodputServiceClient(c).GetJobGoodput(ctx, &loomv1.GetJobGoodputRequest{Name: matrixJob})
			return err
		}), get("/v1/" + matrixJob + ":goodput"), jobReadRow},
		{"GetClusterGoodput", unary(func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := loomv1.NewGoodputServiceClient(c).GetClusterGoodput(ctx, &loomv1.GetClusterGoodputRequest{Name: cluster1})
			return err
		}), get("/v1/" + cluster1 + ":goodput"), viewerRow},
	}
}

// zeroKey is 32 zero bytes in base64, a well-formed Ed25519 public key
// for the node calls' bodies.
const zeroKey = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

// matrixCluster is c1 with machine types, so that an update of it passes.
func matrixCluster() *loomv1.Cluster {
	c := c1()
	pools := c.GetCompute().GetNodePools()
	pools[0].MachineType, pools[1].MachineType = "a3-ultragpu-8g", "n2-standard-8"
	return c
}

// matrixWorld sets up what the matrix acts on: ana's running job 40 (with a
// secret in its environment) and its step 0, reservation r0, a Slurm node,
// and an operation (returned).
func matrixWorld(t *testing.T, h *harness) string {
	t.Helper()
	ctx := testkit.Context(t, wait)
	h.w.setCluster(matrixCluster())
	h.w.setJob(&loomv1.Job{Name: matrixJob, JobId: "40", Cluster: cluster1, State: loomv1.JobState_RUNNING, User: "ana",
		Partition: "all", Nodes: []string{"gpu-0001"}, Env: map[string]string{"HF_TOKEN": "hf_s3cret"}, Export: "ALL,HF_TOKEN=hf_s3cret",
		Script: "#!/bin/sh\nexport WANDB_API_KEY=wb_s3cret\ntrain\n"})
	stepsOf(h.w).add(&loomv1.JobStep{Name: matrixStep, Job: matrixJob, State: loomv1.JobState_RUNNING, RequestId: "matrix"})
	h.w.setReservation(&loomv1.Reservation{Name: matrixRes, Zone: "us-central1-a", MachineType: "a2-highgpu-1g", Count: 1})
	h.w.mu.Lock()
	h.w.slurmNodes = []*loomv1.SlurmNode{{Hostname: "gpu-0001", Cluster: cluster1, State: loomv1.SlurmNode_IDLE}}
	h.w.mu.Unlock()
	// The account UpdateAccount's row changes, and what each caller of
	// DeleteAccount's and DeleteAssociation's rows deletes (by its index;
	// "g" over gRPC, "r" over REST).
	if _, err := h.accounts().CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: "matrix"}}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	for i := range len(matrixCallers) {
		for _, via := range []string{"g", "r"} {
			if _, err := h.accounts().CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project,
				Account: &loomv1.Account{Name: fmt.Sprintf("d%s%d", via, i)}}, h.call("pat")); err != nil {
				t.Fatal(err)
			}
			if _, err := h.accounts().SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project,
				Association: &loomv1.Association{Account: "root", User: fmt.Sprintf("u%s%d", via, i)}}, h.call("pat")); err != nil {
				t.Fatal(err)
			}
		}
	}
	op, err := h.clusters().CreateCluster(ctx, validCluster("opsrc"))
	if err != nil {
		t.Fatal(err)
	}
	return op.GetName()
}

// TestAuthorizationMatrix calls every public RPC as each kind of caller,
// through gRPC and through REST (which forwards the Authorization header
// to the gateway's own gRPC endpoint), and checks each outcome against
// the table above; then that no command was written by a caller outside
// the project, and none on ana's job by another user.
func TestAuthorizationMatrix(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	opName := matrixWorld(t, h)
	trainingMatrixWorld(t, h)
	rows := append(append(append(matrixRows(opName), trainingMatrixRows(t)...), metricsMatrixRows()...), ingressMatrixRows()...)
	covered := map[string]bool{}
	for _, r := range rows {
		covered[r.method] = true
	}
	for svc, info := range h.served {
		if !strings.HasPrefix(svc, "loom.v1.") && !strings.HasPrefix(svc, "loom.training.v1.") {
			continue
		}
		for _, m := range info.Methods {
			if !covered[m.Name] {
				t.Errorf("%s/%s has no row in the matrix", svc, m.Name)
			}
		}
	}

	t.Run("grpc", func(t *testing.T) {
		ctx := testkit.Context(t, 4*wait)
		for i, who := range matrixCallers {
			conn := h.as(t, who)
			for _, r := range rows {
				err := r.grpc(ctx, conn, i)
				if got := status.Code(err); got != r.want[i] {
					t.Errorf("gRPC %s as %q: %v (%v), want %v", r.method, who, got, err, r.want[i])
				}
			}
		}
	})
	t.Run("rest", func(t *testing.T) {
		ctx := testkit.Context(t, 4*wait)
		for i, who := range matrixCallers {
			client := h.restAs(who)
			for _, r := range rows {
				verb, path, body := r.rest(i)
				code, msg := restCall(ctx, t, client, h.restBase, verb, path, body)
				if want := runtime.HTTPStatusFromCode(r.want[i]); code != want {
					t.Errorf("REST %s %s (%s) as %q: HTTP %d %s, want %d", verb, path, r.method, who, code, msg, want)
				}
			}
		}
	})

	// 0 cross-project writes, 0 writes on another user's job: every
	// command names its principal, and none is by oz, vic, the node, or
	// by bob on ana's job.
	ctx := testkit.Context(t, wait)
	// A last command, so that everything before it has been relayed.
	if _, err := h.jobs().CancelJob(ctx, &loomv1.CancelJobRequest{Name: matrixJob, Signal: "USR2"}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CancelJob)
		return ok && c.GetSignal() == "USR2"
	})
	n := 0
	for _, topic := range []string{topics.JobCommands, topics.ClusterCommands, topics.HealthCommands, topics.TrainingCommands} {
		for _, e := range testkit.Events(t, h.broker, topic) {
			n++
			switch e.Principal {
			case "", "users/oz", "users/vic", "nodes/gpu-0001":
				t.Errorf("%s command %s by %q", topic, e.Type, e.Principal)
			case "users/bob":
				// bob's own creations are his; nothing else of his may pass.
				switch e.Payload.(type) {
				case *eventsv1.SubmitJob, *eventsv1.CreateCustomJob, *eventsv1.CreateHyperparameterTuningJob, *eventsv1.CreateTrainingPipeline:
				default:
					t.Errorf("bob's %s command on another's job: %v", e.Type, e.Payload)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no commands were written")
	}
}

// restCall makes one REST call and returns the HTTP status and the body
// (for a stream, what came before it was cut off).
func restCall(ctx context.Context, t *testing.T, c *http.Client, base, verb, path, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, verb, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", verb, path, err)
	}
	defer resp.Body.Close()
	// A watch of a running job streams on: the first line is enough.
	buf := make([]byte, 4096)
	n, _ := io.ReadAtLeast(resp.Body, buf, 1)
	return resp.StatusCode, string(buf[:n])
}

// TestEnvironmentOnlyToOwnerAndAdmins: GetJob, ListJobs and WatchJob show
// the job's exported environment (env, export) and batch script to its owner, its
// workload and administrators only, over gRPC and REST (which proves the
// REST call carries its caller).
func TestEnvironmentOnlyToOwnerAndAdmins(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	matrixWorld(t, h)
	ctx := testkit.Context(t, 2*wait)
	for who, sees := range map[string]bool{"ana": true, "pat": true, "root": true, "work40": true, "bob": false, "vic": false} {
		js := loomv1.NewJobServiceClient(h.as(t, who))
		j, err := js.GetJob(ctx, &loomv1.GetJobRequest{Name: matrixJob})
		if err != nil {
			t.Fatalf("GetJob as %s: %v", who, err)
		}
		check := func(how string, j *loomv1.Job) {
			t.Helper()
			shown := j.GetEnv()["HF_TOKEN"] == "hf_s3cret" && j.GetExport() != "" && strings.Contains(j.GetScript(), "wb_s3cret")
			if shown != sees || (!sees && (len(j.GetEnv()) > 0 || strings.Contains(j.GetExport(), "hf_s3cret") || j.GetScript() != "")) {
				t.Errorf("%s as %s: env %v export %q script %q, want shown=%v", how, who, j.GetEnv(), j.GetExport(), j.GetScript(), sees)
			}
		}
		check("GetJob", j)
		st, err := js.WatchJob(ctx, &loomv1.WatchJobRequest{Name: matrixJob})
		if err != nil {
			t.Fatal(err)
		}
		first, err := st.Recv()
		if err != nil {
			t.Fatalf("WatchJob as %s: %v", who, err)
		}
		check("WatchJob", first)
		list, err := js.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project})
		if err != nil || len(list.GetJobs()) != 1 {
			t.Fatalf("ListJobs as %s: %v %v", who, list, err)
		}
		check("ListJobs", list.GetJobs()[0])
		code, body := restCall(ctx, t, h.restAs(who), h.restBase, "GET", "/v1/"+matrixJob, "")
		if code != http.StatusOK || strings.Contains(body, "hf_s3cret") != sees {
			t.Errorf("REST GetJob as %s: HTTP %d %s, want the secret shown=%v", who, code, body, sees)
		}
	}
}

// TestWorkloadSeesAndActsOnItsOwnJob: a job's own processes (its
// workload) list only their job, whatever the filters — not the owner's
// other jobs, not another task of its array — and may cancel and update
// it (scancel $SLURM_JOB_ID, scontrol requeue $SLURM_JOB_ID), but no other
// job of the owner's: NotFound, as for a job that does not exist.
func TestWorkloadSeesAndActsOnItsOwnJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	matrixWorld(t, h)
	ctx := testkit.Context(t, 2*wait)
	// Ana's other jobs: 41, and 42 as task 2 of an array 40 (the job id
	// filter "40" names every task of array 40: the check of the page's
	// jobs keeps it out, as for a workload of an array's first task).
	h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/41", JobId: "41", Cluster: cluster1, State: loomv1.JobState_PENDING, User: "ana", Partition: "all"})
	h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/42", JobId: "42", ArrayJobId: "40", ArrayTaskId: 2, Cluster: cluster1,
		State: loomv1.JobState_PENDING, User: "ana", Partition: "all"})
	ana := loomv1.NewJobServiceClient(h.as(t, "ana"))
	if l, err := ana.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project}); err != nil || len(l.GetJobs()) != 3 {
		t.Fatalf("ana lists %v %v, want her 3 jobs", l, err)
	}
	wl := loomv1.NewJobServiceClient(h.as(t, "work40"))
	for _, req := range []*loomv1.ListJobsRequest{
		{Parent: project},
		{Parent: project, Users: []string{"ana"}},
		{Parent: project, JobIds: []string{"40"}},
		{Parent: project, ActiveOnly: true, PageSize: 1},
	} {
		l, err := wl.ListJobs(ctx, req)
		if err != nil || len(l.GetJobs()) != 1 || l.GetJobs()[0].GetName() != matrixJob {
			t.Errorf("workload lists %v: %v %v, want job 40 alone", req, l, err)
		}
	}
	if l, err := wl.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, JobIds: []string{"41"}}); err != nil || len(l.GetJobs()) != 0 {
		t.Errorf("workload lists job 41: %v %v, want nothing", l, err)
	}
	_, err := wl.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: "projects/other"})
	wantCode(t, "workload lists another project", err, codes.NotFound)
	_, err = wl.CancelJob(ctx, &loomv1.CancelJobRequest{Name: "projects/default/jobs/41"})
	wantCode(t, "workload cancels its owner's other job", err, codes.NotFound)
	_, err = wl.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: "projects/default/jobs/41", Action: "hold"})
	wantCode(t, "workload holds its owner's other job", err, codes.NotFound)
	if _, err := wl.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: matrixJob, Action: "requeue"}); err != nil {
		t.Errorf("workload requeues its own job: %v", err)
	}
	if _, err := wl.CancelJob(ctx, &loomv1.CancelJobRequest{Name: matrixJob}); err != nil {
		t.Errorf("workload cancels its own job: %v", err)
	}
}

// TestAttacks: the attacks, as regression tests.
func TestAttacks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.PrivateData = "jobs" })
	matrixWorld(t, h)
	ctx := testkit.Context(t, 2*wait)
	bob := loomv1.NewJobServiceClient(h.as(t, "bob"))
	ana := loomv1.NewJobServiceClient(h.as(t, "ana"))

	// Claiming another identity: a submission naming another user is
	// refused, naming the field; one naming nobody is the caller's.
	claim := validJob()
	claim.Job.User = "ana"
	_, err := bob.SubmitJob(ctx, claim)
	wantCode(t, "bob submits as ana", err, codes.PermissionDenied, "job.user", "Access/permission denied")
	own, err := bob.SubmitJob(ctx, validJob())
	if err != nil || own.GetUser() != "bob" {
		t.Fatalf("bob's own job: %v %v, want user bob", own, err)
	}
	cmd := testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		s, ok := e.Payload.(*eventsv1.SubmitJob)
		return ok && s.GetJob().GetName() == own.GetName()
	})
	if cmd.Principal != "users/bob" || cmd.Payload.(*eventsv1.SubmitJob).GetJob().GetUser() != "bob" {
		t.Errorf("SubmitJob command by %q for user %q, want users/bob, bob", cmd.Principal, cmd.Payload.(*eventsv1.SubmitJob).GetJob().GetUser())
	}
	// A workload's jobs are its owner's.
	wj, err := loomv1.NewJobServiceClient(h.as(t, "work40")).SubmitJob(ctx, validJob())
	if err != nil || wj.GetUser() != "ana" {
		t.Fatalf("workload's job: %v %v, want user ana", wj, err)
	}
	// A cluster admin may submit as another user (Slurm: only root may sbatch --uid).
	asAna := validJob()
	asAna.Job.User = "ana"
	if j, err := h.jobs().SubmitJob(ctx, asAna); err != nil || j.GetUser() != "ana" {
		t.Fatalf("root submits as ana: %v %v", j, err)
	}

	// Reading another user's environment and logs, with PrivateData=jobs:
	// ana's job is not there for bob, with the answer a missing job gets.
	_, missing := bob.GetJob(ctx, &loomv1.GetJobRequest{Name: "projects/default/jobs/999"})
	wantCode(t, "GetJob of a missing job", missing, codes.NotFound)
	for what, err := range map[string]error{
		"GetJob": func() error { _, err := bob.GetJob(ctx, &loomv1.GetJobRequest{Name: matrixJob}); return err }(),
		"WatchJob": func() error {
			st, err := bob.WatchJob(ctx, &loomv1.WatchJobRequest{Name: matrixJob})
			if err == nil {
				_, err = st.Recv()
			}
			return err
		}(),
		"ReadJobLogs": func() error {
			st, err := bob.ReadJobLogs(ctx, &loomv1.ReadJobLogsRequest{Name: matrixJob})
			if err == nil {
				_, err = st.Recv()
			}
			return err
		}(),
		"CancelJob": func() error {
			_, err := bob.CancelJob(ctx, &loomv1.CancelJobRequest{Name: matrixJob, User: "ana"})
			return err
		}(),
		"CreateJobStep": func() error {
			_, err := bob.CreateJobStep(ctx, &loomv1.CreateJobStepRequest{Parent: matrixJob, Command: []string{"cat", "/etc/shadow"}})
			return err
		}(),
	} {
		wantCode(t, "bob's "+what+" of ana's hidden job", err, codes.NotFound, matrixJob)
		if status.Convert(err).Message() != strings.Replace(status.Convert(missing).Message(), "999", "40", 1) {
			t.Errorf("bob's %s: %q, not the missing job's answer %q", what, status.Convert(err).Message(), status.Convert(missing).Message())
		}
	}
	list, err := bob.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range list.GetJobs() {
		if j.GetUser() != "bob" {
			t.Errorf("bob lists %s's job %s", j.GetUser(), j.GetName())
		}
	}
	if l, err := bob.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, Users: []string{"ana"}}); err != nil || len(l.GetJobs()) != 0 {
		t.Errorf("bob lists ana's jobs: %v %v, want none", l, err)
	}
	// An array of ana's: its tasks are not there for bob either, and the
	// answer does not say whether it is an array.
	arr := validJob()
	arr.Job.Array = "0-3"
	a, err := ana.SubmitJob(ctx, arr)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{a.GetName() + "_2", a.GetName() + "_9", a.GetName()} {
		_, err := bob.GetJob(ctx, &loomv1.GetJobRequest{Name: name})
		wantCode(t, "bob's GetJob of ana's array "+name, err, codes.NotFound)
		if want := "job " + name + ": not found"; status.Convert(err).Message() != want {
			t.Errorf("bob's GetJob of %s: %q, want %q", name, status.Convert(err).Message(), want)
		}
	}
	// A cluster of another project does not widen a list.
	_, err = bob.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, Cluster: "projects/other/clusters/c1"})
	wantCode(t, "ListJobs with another project's cluster", err, codes.InvalidArgument, "cluster", "is not in projects/default")
	// The owner and admins still see it, env included.
	if j, err := ana.GetJob(ctx, &loomv1.GetJobRequest{Name: matrixJob}); err != nil || j.GetEnv()["HF_TOKEN"] == "" {
		t.Errorf("ana's own job: %v %v", j, err)
	}
	if l, err := loomv1.NewJobServiceClient(h.as(t, "pat")).ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project}); err != nil ||
		!slices.ContainsFunc(l.GetJobs(), func(j *loomv1.Job) bool { return j.GetName() == matrixJob }) {
		t.Errorf("the project admin's list: %v %v, want ana's job in it", l, err)
	}

	// srun --jobid into another user's job without PrivateData: refused as
	// Slurm does, and no step command is written.
	open := newHarness(t)
	matrixWorld(t, open)
	bobOpen := loomv1.NewJobServiceClient(open.as(t, "bob"))
	_, err = bobOpen.CreateJobStep(ctx, &loomv1.CreateJobStepRequest{Parent: matrixJob, Command: []string{"sh", "-c", "id"}})
	wantCode(t, "bob's srun --jobid into ana's job", err, codes.PermissionDenied, "Access/permission denied")
	_, err = bobOpen.CancelJobStep(ctx, &loomv1.CancelJobStepRequest{Name: matrixStep})
	wantCode(t, "bob's scancel of ana's step", err, codes.PermissionDenied, "Access/permission denied")
	// Without PrivateData a member sees the job, but not its environment.
	if j, err := bobOpen.GetJob(ctx, &loomv1.GetJobRequest{Name: matrixJob}); err != nil || len(j.GetEnv()) != 0 || j.GetExport() != "" {
		t.Errorf("bob's GetJob of ana's job: %v %v, want it without env", j, err)
	}
	// A request id ana used does not hand bob her job.
	rid := validJob()
	rid.RequestId = "ana-1"
	if _, err := loomv1.NewJobServiceClient(open.as(t, "ana")).SubmitJob(ctx, rid); err != nil {
		t.Fatal(err)
	}
	_, err = bobOpen.SubmitJob(ctx, rid)
	wantCode(t, "bob replays ana's request id", err, codes.AlreadyExists, "another caller")
	// The last command written is ana's submission: a marker, then none
	// by bob may be a step or a cancel.
	testkit.WaitEvent(t, open.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		_, ok := e.Payload.(*eventsv1.SubmitJob)
		return ok && e.Principal == "users/ana"
	})
	for _, e := range testkit.Events(t, open.broker, topics.JobCommands) {
		if e.Principal == "users/bob" {
			t.Errorf("bob wrote %s: %v", e.Type, proto.MessageName(e.Payload))
		}
	}
}

// TestRESTForwardsAuthorization: grpc-gateway passes the REST call's
// Authorization header on to the gateway's own gRPC endpoint, so REST is
// authenticated and authorized as gRPC is: no header → 401, an unknown
// credential → 401, a caller outside the project → 404, its member → 200.
func TestRESTForwardsAuthorization(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	for _, tc := range []struct {
		header string
		want   int
	}{{"", http.StatusUnauthorized}, {"Bearer nobody", http.StatusUnauthorized}, {"Basic YW5hOg==", http.StatusUnauthorized},
		{"Bearer oz", http.StatusNotFound}, {"Bearer vic", http.StatusOK}, {"bearer vic", http.StatusOK}} {
		req, err := http.NewRequestWithContext(ctx, "GET", h.restBase+"/v1/projects/default/clusters", nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.header != "" {
			// A test principal's name stands for its real credential.
			scheme, name, _ := strings.Cut(tc.header, " ")
			req.Header.Set("Authorization", scheme+" "+h.cred(name))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Authorization %q: HTTP %d %s, want %d", tc.header, resp.StatusCode, body, tc.want)
		}
	}
}

// TestWorkloadWithinItsOwnersLimits: what a job's own token does counts
// against its owner as the owner's would: its submissions against the
// owner's MaxSubmitJobs (counted over the owner's jobs, not the one job the
// token may list); as an array's first task it cancels itself, not the
// array whose name it shares, and it may not change the array's throttle;
// as a later task it lists itself by its array id ("A_k").
func TestWorkloadWithinItsOwnersLimits(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	matrixWorld(t, h)
	ctx := testkit.Context(t, 2*wait)
	if _, err := h.accounts().CreateAccount(ctx, &loomv1.CreateAccountRequest{Parent: project, Account: &loomv1.Account{Name: "lab"}}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.accounts().SetAssociation(ctx, &loomv1.SetAssociationRequest{Parent: project, Association: &loomv1.Association{
		Account: "lab", User: "ana", MaxSubmitJobs: 2}}, h.call("pat")); err != nil {
		t.Fatal(err)
	}
	// Job 40 is task 0 of array 40 (tasks 40, 41), both in lab.
	acc := &loomv1.Job{Name: matrixJob, JobId: "40", Cluster: cluster1, State: loomv1.JobState_PENDING, User: "ana", Account: "lab", Partition: "all", Array: "0-1"}
	h.accept(ctx, t, acc)
	for k, st := range []loomv1.JobState{loomv1.JobState_RUNNING, loomv1.JobState_PENDING} {
		id := strconv.Itoa(40 + k)
		h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/" + id, JobId: id, Cluster: cluster1, State: st, User: "ana", Account: "lab",
			Partition: "all", Array: "0-1", ArrayJobId: "40", ArrayTaskId: int32(k)})
	}
	wl := loomv1.NewJobServiceClient(h.as(t, "work40"))
	sub := validJob()
	sub.Job.Account = "lab"
	_, err := wl.SubmitJob(ctx, sub)
	wantCode(t, "the workload submits a third job into lab", err, codes.ResourceExhausted, "MaxSubmitJobs=2")

	_, err = wl.UpdateJob(ctx, &loomv1.UpdateJobRequest{Name: matrixJob, Action: "update", ArrayTaskThrottle: new(int32(0))})
	wantCode(t, "the workload lifts its array's throttle", err, codes.PermissionDenied, "throttle")
	if _, err := wl.CancelJob(ctx, &loomv1.CancelJobRequest{Name: matrixJob}); err != nil {
		t.Fatalf("the workload cancels itself: %v", err)
	}
	testkit.WaitEvent(t, h.broker, topics.JobCommands, wait, func(e envelope.Event) bool {
		c, ok := e.Payload.(*eventsv1.CancelJob)
		if ok && c.GetJob() == matrixJob {
			t.Errorf("the workload of task 0 cancelled the whole array (%s)", c.GetJob())
		}
		return ok && c.GetJob() == matrixJob+"_0"
	})

	// As task 1 of array 39 it finds itself by "39_1" and by "39".
	h.w.setJob(&loomv1.Job{Name: matrixJob, JobId: "40", Cluster: cluster1, State: loomv1.JobState_RUNNING, User: "ana",
		Partition: "all", Array: "0-1", ArrayJobId: "39", ArrayTaskId: 1})
	h.w.setJob(&loomv1.Job{Name: "projects/default/jobs/39", JobId: "39", Cluster: cluster1, State: loomv1.JobState_RUNNING, User: "ana",
		Partition: "all", Array: "0-1", ArrayJobId: "39", ArrayTaskId: 0})
	for _, ids := range [][]string{{"39_1"}, {"39"}} {
		l, err := wl.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, JobIds: ids})
		if err != nil || len(l.GetJobs()) != 1 || l.GetJobs()[0].GetName() != matrixJob {
			t.Errorf("task 39_1's workload lists %v: %v %v, want itself alone", ids, l, err)
		}
	}
}
