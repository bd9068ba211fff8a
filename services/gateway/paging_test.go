package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway/internal/adapters"
)

// bigJobs submits n jobs, each with 100 KiB of environment (under the
// gateway's 128 KiB limit; n=48: 4.9 MB,
// more than gRPC's 4 MB in one message), and spreads them over the three
// sources ListJobs merges: a third the scheduler runs, a third ended and
// pruned (the history's only), a third accepted and not yet known to the
// scheduler. It returns their names in job id order.
func bigJobs(t *testing.T, ctx context.Context, h *harness, n int) []string {
	t.Helper()
	big := strings.Repeat("e", 100<<10)
	var names, ended []string
	for i := range n {
		req := validJob()
		// Big in a field every record keeps (the accepted and history
		// records leave out the script and the environment).
		req.Job.Script, req.Job.Command = "", []string{"/bin/echo", big}
		sub, err := h.jobs().SubmitJob(ctx, req)
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		names = append(names, sub.GetName())
		j := proto.Clone(sub).(*loomv1.Job)
		switch i % 3 {
		case 0:
			j.State = loomv1.JobState_RUNNING
			h.w.setJob(j)
		case 1:
			j.State, j.ExitCode, j.EndTime = loomv1.JobState_FAILED, 1, timestamppb.Now()
			j.Runs = []*loomv1.JobRun{{Attempt: 1, State: loomv1.JobState_FAILED, ExitCode: 1}}
			h.w.setJob(j)
			testkit.PublishAs(t, h.broker, "scheduler", envelope.New(topics.JobEvents, cluster1, "loom/scheduler", &eventsv1.JobChanged{Job: j, Attempt: 1}))
			ended = append(ended, j.GetName())
		}
	}
	for _, name := range ended {
		fromHistory(t, ctx, h, name)
	}
	return names
}

// listAll pages through ListJobs with req over gRPC, checking that no page
// comes near gRPC's 4 MB, and returns the names in the order listed and
// the bytes of all pages.
func listAll(t *testing.T, ctx context.Context, h *harness, req *loomv1.ListJobsRequest) (names []string, total int) {
	t.Helper()
	err := paging.Each(func(token string) (string, error) {
		req.PageToken = token
		resp, err := h.jobs().ListJobs(ctx, req)
		if sz := proto.Size(resp); sz > 2*paging.MaxBytes {
			t.Errorf("a page of %d bytes; want at most %d", sz, 2*paging.MaxBytes)
		}
		total += proto.Size(resp)
		for _, j := range resp.GetJobs() {
			names = append(names, j.GetName())
		}
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		t.Fatalf("list jobs %v: %v", req, err)
	}
	return names, total
}

// TestListJobsPagesPastFourMegabytes is the regression test of lists that
// stopped answering: jobs whose environments add up to more than gRPC's
// 4 MB are all listed, each once and in job id order, across the merge of
// the scheduler's jobs, the history and the accepted jobs, whatever the
// page size, over gRPC and REST.
func TestListJobsPagesPastFourMegabytes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 4*wait)
	want := bigJobs(t, ctx, h, 66)

	for _, size := range []int32{0, 1, 5, paging.MaxSize} {
		got, total := listAll(t, ctx, h, &loomv1.ListJobsRequest{Parent: project, PageSize: size})
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("page size %d listed\n%v\nwant each job once, in job id order:\n%v", size, got, want)
		}
		if total <= 4<<20 {
			t.Fatalf("the jobs take %d bytes; the test needs more than 4 MB", total)
		}
	}
	// squeue's list (active only: not the history's) and a filtered one
	// (the accepted jobs are checked with the scheduler by id) page too.
	active, _ := listAll(t, ctx, h, &loomv1.ListJobsRequest{Parent: project, ActiveOnly: true, PageSize: 2})
	var wantActive []string
	for i, n := range want {
		if i%3 != 1 {
			wantActive = append(wantActive, n)
		}
	}
	if strings.Join(active, " ") != strings.Join(wantActive, " ") {
		t.Fatalf("active jobs listed %v, want %v", active, wantActive)
	}
	filtered, _ := listAll(t, ctx, h, &loomv1.ListJobsRequest{Parent: project, Cluster: "c1",
		States: []loomv1.JobState{loomv1.JobState_FAILED}, PageSize: 3})
	if len(filtered) != len(want)/3 {
		t.Fatalf("FAILED jobs listed %v, want the %d ended ones", filtered, len(want)/3)
	}

	// GET /v1/projects/default/jobs pages the same way.
	var rest []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > len(want) {
			t.Fatal("REST paging did not end")
		}
		body := restGet(t, ctx, h, "/v1/projects/default/jobs?pageSize=4&pageToken="+url.QueryEscape(token), http.StatusOK)
		var resp loomv1.ListJobsResponse
		if err := protojson.Unmarshal(body, &resp); err != nil {
			t.Fatalf("decode REST page: %v", err)
		}
		for _, j := range resp.GetJobs() {
			rest = append(rest, j.GetName())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if strings.Join(rest, " ") != strings.Join(want, " ") {
		t.Fatalf("REST listed %v, want %v", rest, want)
	}
}

// TestListJobsReadsOnlyItsPage: a list reads the history through its
// project's index from the page token on, a bounded number of entries a
// call: ten thousand ended jobs a filter leaves out (and as many of
// another project) cost short pages with a token to go on from, not a
// read of every record, and the jobs it keeps are all listed, once, in
// order.
func TestListJobsReadsOnlyItsPage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, 4*wait)
	repo := adapters.NewRepo(store.New(h.redis, "gateway:"))
	ended := func(p string, id int, user string) *loomv1.Job {
		return &loomv1.Job{Name: fmt.Sprintf("projects/%s/jobs/%d", p, id), JobId: strconv.Itoa(id), User: user,
			Cluster: cluster1, State: loomv1.JobState_COMPLETED, EndTime: timestamppb.Now()}
	}
	var want []string
	for batch := 0; batch < 11; batch++ {
		tx := &store.Tx{}
		for i := range 1000 {
			id := 100000 + batch*1000 + i
			for _, j := range []*loomv1.Job{ended("default", id, "bob"), ended("other", id, "ada")} {
				if err := adapters.PutHistory(tx, j); err != nil {
					t.Fatal(err)
				}
			}
		}
		if batch == 10 {
			for _, id := range []int{200001, 200002} {
				j := ended("default", id, "ada")
				want = append(want, j.GetName())
				if err := adapters.PutHistory(tx, j); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := repo.Apply(ctx, "", tx); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	pages := 0
	err := paging.Each(func(token string) (string, error) {
		pages++
		resp, err := h.jobs().ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, Users: []string{"ada"}, PageToken: token})
		for _, j := range resp.GetJobs() {
			got = append(got, j.GetName())
		}
		return resp.GetNextPageToken(), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("ada's jobs listed %v, want %v", got, want)
	}
	if pages < 2 {
		t.Fatalf("%d page(s): the list read more than %d index entries in one call", pages, 10000)
	}
	// Unfiltered, a page holds the first jobs at once.
	resp, err := h.jobs().ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, PageSize: 3})
	if err != nil || len(resp.GetJobs()) != 3 || resp.GetJobs()[0].GetName() != "projects/default/jobs/100000" || resp.GetNextPageToken() == "" {
		t.Fatalf("first page %v, %v", resp.GetJobs(), err)
	}
}

// TestListJobsRefusesBadPaging: a negative page size and a token sent with
// other filters (or made up) are InvalidArgument naming the field, and 400
// over REST.
func TestListJobsRefusesBadPaging(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	for range 3 {
		if _, err := h.jobs().SubmitJob(ctx, validJob()); err != nil {
			t.Fatalf("submit: %v", err)
		}
	}
	first, err := h.jobs().ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, PageSize: 1})
	if err != nil || len(first.GetJobs()) != 1 || first.GetNextPageToken() == "" {
		t.Fatalf("first page: %v, %v; want one job and a token", first, err)
	}
	for field, req := range map[string]*loomv1.ListJobsRequest{
		"page_size":  {Parent: project, PageSize: -1},
		"page_token": {Parent: project, ActiveOnly: true, PageToken: first.GetNextPageToken()},
	} {
		_, err := h.jobs().ListJobs(ctx, req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), field) {
			t.Errorf("%v: %v; want InvalidArgument naming %s", req, err, field)
		}
	}
	if _, err := h.jobs().ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, PageToken: "forged"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a forged token: %v; want InvalidArgument", err)
	}
	body := restGet(t, ctx, h, "/v1/projects/default/jobs?pageSize=-1", http.StatusBadRequest)
	var e struct{ Message string }
	if err := json.Unmarshal(body, &e); err != nil || !strings.Contains(e.Message, "page_size") {
		t.Errorf("REST pageSize=-1: %s; want a 400 naming page_size", body)
	}
}

func restGet(t *testing.T, ctx context.Context, h *harness, path string, wantStatus int) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", h.restBase+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.http.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != wantStatus {
		t.Fatalf("GET %s: %d %s (%v); want %d", path, resp.StatusCode, body, err, wantStatus)
	}
	return body
}

// TestListsRefuseANegativePageSizeOnGRPC: a negative page_size is
// InvalidArgument in ListJobs' words (paging.CheckSize) on every list,
// those the gateway passes to their owner unread included: it used to be
// the owner's to refuse or not (the harness's owners answered a page); a
// page size past the maximum is taken as the maximum (AIP-158).
func TestListsRefuseANegativePageSizeOnGRPC(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := testkit.Context(t, wait)
	conn := h.as(t, "root")
	want := fmt.Sprintf("page_size: must not be negative, got -1 (0 is the default, %d; at most %d)", paging.DefaultSize, paging.MaxSize)
	lists := map[string]func(size int32) error{
		"ListClusters": func(n int32) error {
			_, err := loomv1.NewClusterServiceClient(conn).ListClusters(ctx, &loomv1.ListClustersRequest{Parent: project, PageSize: n})
			return err
		},
		"ListReservations": func(n int32) error {
			_, err := loomv1.NewReservationServiceClient(conn).ListReservations(ctx, &loomv1.ListReservationsRequest{Parent: project, PageSize: n})
			return err
		},
		"ListCapacity": func(n int32) error {
			_, err := loomv1.NewReservationServiceClient(conn).ListCapacity(ctx, &loomv1.ListCapacityRequest{Parent: project, PageSize: n})
			return err
		},
		"ListNodes": func(n int32) error {
			_, err := loomv1.NewNodeServiceClient(conn).ListNodes(ctx, &loomv1.ListNodesRequest{Parent: cluster1, PageSize: n})
			return err
		},
		"ListPartitions": func(n int32) error {
			_, err := loomv1.NewSlurmServiceClient(conn).ListPartitions(ctx, &loomv1.ListPartitionsRequest{Cluster: cluster1, PageSize: n})
			return err
		},
		"ListSlurmNodes": func(n int32) error {
			_, err := loomv1.NewSlurmServiceClient(conn).ListSlurmNodes(ctx, &loomv1.ListSlurmNodesRequest{Cluster: cluster1, PageSize: n})
			return err
		},
		"ListModels": func(n int32) error {
			_, err := loomv1.NewModelServiceClient(conn).ListModels(ctx, &loomv1.ListModelsRequest{Parent: project, PageSize: n})
			return err
		},
		"ListModelVersions": func(n int32) error {
			_, err := loomv1.NewModelServiceClient(conn).ListModelVersions(ctx, &loomv1.ListModelVersionsRequest{Parent: project + "/models/m1", PageSize: n})
			return err
		},
		"ListJobs": func(n int32) error {
			_, err := loomv1.NewJobServiceClient(conn).ListJobs(ctx, &loomv1.ListJobsRequest{Parent: project, PageSize: n})
			return err
		},
	}
	for name, list := range lists {
		if err := list(-1); status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("%s with page_size -1: %v; want InvalidArgument: %s", name, err, want)
		}
		if err := list(paging.MaxSize + 1); err != nil {
			t.Errorf("%s with page_size %d: %v; want it taken as %d", name, paging.MaxSize+1, err, paging.MaxSize)
		}
	}
}
