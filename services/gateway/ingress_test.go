package gateway

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/service"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// fakeBridge serves the bridge's internal IngressService behind
// service.InternalAuth, as the bridge does: a call without a service
// token is refused. It records each request and who made it.
type fakeBridge struct {
	loomv1.UnimplementedIngressServiceServer
	mu       sync.Mutex
	requests []proto.Message
	callers  []string
}

func (f *fakeBridge) record(ctx context.Context, req proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, proto.Clone(req))
	if p, ok := auth.FromContext(ctx); ok && p != nil {
		f.callers = append(f.callers, p.Kind.String()+":"+p.Name)
	} else {
		f.callers = append(f.callers, "") // the harness's owners server authenticates nobody
	}
}

func (f *fakeBridge) ListIngressProducers(ctx context.Context, r *loomv1.ListIngressProducersRequest) (*loomv1.ListIngressProducersResponse, error) {
	f.record(ctx, r)
	return &loomv1.ListIngressProducersResponse{Producers: []*loomv1.IngressProducer{
		{Project: "default", Source: "//pipelines/etl", Principal: "users/ana", Received: 3, Accepted: 2, Refused: 1, LastReason: "needs role user"},
	}, NextPageToken: "next"}, nil
}

func (f *fakeBridge) ListIngressMessages(ctx context.Context, r *loomv1.ListIngressMessagesRequest) (*loomv1.ListIngressMessagesResponse, error) {
	f.record(ctx, r)
	return &loomv1.ListIngressMessagesResponse{Messages: []*loomv1.IngressMessage{
		{Id: "m1", Source: "//pipelines/etl", Type: "loom.ingress.v1.SubmitJob", Project: "default", Outcome: "REFUSED",
			Code: "PERMISSION_DENIED", Reason: "needs role user", Transport: "kafka:loom.ingress.v1", Deliveries: 2},
	}}, nil
}

// startFakeBridge serves a fakeBridge keyed with the services' secret of
// c and points the gateway's -bridge-addr at it.
func startFakeBridge(t *testing.T, fb *fakeBridge) func(*Config) {
	return func(c *Config) {
		opts, err := service.InternalAuth(config.Common{ServiceKeyFile: c.ServiceKeyFile})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer(opts...)
		loomv1.RegisterIngressServiceServer(s, fb)
		go func() { _ = s.Serve(ln) }()
		t.Cleanup(s.Stop)
		c.BridgeAddr = ln.Addr().String()
	}
}

// TestIngressForwarding: IngressService's reads go to the bridge with the
// gateway's service token and the request as sent (filter included), and
// answer the bridge's data, on gRPC and REST; a project's viewer reads
// its own project, a member of another project gets NotFound, every
// project ("projects/-") is a cluster administrator's.
func TestIngressForwarding(t *testing.T) {
	t.Parallel()
	fb := &fakeBridge{}
	h := newHarness(t, startFakeBridge(t, fb))
	ctx := testkit.Context(t, wait)
	vic := loomv1.NewIngressServiceClient(h.as(t, "vic"))

	prods, err := vic.ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: project, PageSize: 5})
	if err != nil || len(prods.GetProducers()) != 1 || prods.GetProducers()[0].GetRefused() != 1 || prods.GetNextPageToken() != "next" {
		t.Fatalf("ListIngressProducers as a viewer: %v %v", prods, err)
	}
	filter := `outcome = "REFUSED" AND source = "//pipelines/etl"`
	msgs, err := vic.ListIngressMessages(ctx, &loomv1.ListIngressMessagesRequest{Parent: project, Filter: filter, PageToken: "tok"})
	if err != nil || len(msgs.GetMessages()) != 1 || msgs.GetMessages()[0].GetCode() != "PERMISSION_DENIED" {
		t.Fatalf("ListIngressMessages as a viewer: %v %v", msgs, err)
	}
	fb.mu.Lock()
	wantReqs := []proto.Message{
		&loomv1.ListIngressProducersRequest{Parent: project, PageSize: 5},
		&loomv1.ListIngressMessagesRequest{Parent: project, Filter: filter, PageToken: "tok"},
	}
	if len(fb.requests) != 2 || !proto.Equal(fb.requests[0], wantReqs[0]) || !proto.Equal(fb.requests[1], wantReqs[1]) {
		t.Errorf("the bridge was asked %v, want %v", fb.requests, wantReqs)
	}
	for _, c := range fb.callers {
		if !strings.HasPrefix(c, "service:") {
			t.Errorf("the bridge was called by %q, want the gateway's service token", c)
		}
	}
	fb.mu.Unlock()

	// REST, as the console and curl read it.
	code, body := restCall(ctx, t, h.restAs("vic"), h.restBase, "GET", "/v1/"+project+"/ingressMessages?filter=outcome%20%3D%20%22REFUSED%22", "")
	if code != 200 || !strings.Contains(body, `"outcome":"REFUSED"`) || !strings.Contains(body, `"reason":"needs role user"`) {
		t.Errorf("REST ingressMessages: HTTP %d %s", code, body)
	}
	code, body = restCall(ctx, t, h.restAs("vic"), h.restBase, "GET", "/v1/"+project+"/ingressProducers", "")
	if code != 200 || !strings.Contains(body, `"source":"//pipelines/etl"`) {
		t.Errorf("REST ingressProducers: HTTP %d %s", code, body)
	}

	// Who may read what.
	_, err = loomv1.NewIngressServiceClient(h.as(t, "oz")).ListIngressMessages(ctx, &loomv1.ListIngressMessagesRequest{Parent: project})
	wantCode(t, "another project's admin", err, codes.NotFound, "projects/default")
	_, err = loomv1.NewIngressServiceClient(h.as(t, "pat")).ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: "projects/-"})
	wantCode(t, "a project admin reading every project", err, codes.PermissionDenied, "projects/-", "cluster administrator")
	if _, err := loomv1.NewIngressServiceClient(h.as(t, "root")).ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: "projects/-"}); err != nil {
		t.Errorf("a cluster administrator reading every project: %v", err)
	}
	_, err = loomv1.NewIngressServiceClient(h.anon).ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: project})
	wantCode(t, "anonymous", err, codes.Unauthenticated)
}

// TestIngressValidation: a bad parent, a negative page size, an oversized
// page token or filter are InvalidArgument naming the field and the
// limit, and never reach the bridge; with the bridge down the reads say
// so (Unavailable naming the bridge and -bridge-addr).
func TestIngressValidation(t *testing.T) {
	t.Parallel()
	fb := &fakeBridge{}
	h := newHarness(t, startFakeBridge(t, fb))
	ctx := testkit.Context(t, wait)
	root := loomv1.NewIngressServiceClient(h.as(t, "root"))
	_, err := root.ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: "projects/Not_An_Id"})
	wantCode(t, "a bad parent", err, codes.InvalidArgument, "parent", "projects/-")
	_, err = root.ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: project, PageSize: -1})
	wantCode(t, "a negative page size", err, codes.InvalidArgument, "page_size", "negative")
	_, err = root.ListIngressMessages(ctx, &loomv1.ListIngressMessagesRequest{Parent: project, PageToken: strings.Repeat("t", 2049)})
	wantCode(t, "a long page token", err, codes.InvalidArgument, "page_token", "at most 2048")
	_, err = root.ListIngressMessages(ctx, &loomv1.ListIngressMessagesRequest{Parent: project, Filter: strings.Repeat("f", 4097)})
	wantCode(t, "a long filter", err, codes.InvalidArgument, "filter", "limit of 4096")
	fb.mu.Lock()
	if len(fb.requests) != 0 {
		t.Errorf("refused requests reached the bridge: %v", fb.requests)
	}
	fb.mu.Unlock()

	down := newHarness(t, func(c *Config) { c.BridgeAddr = "127.0.0.1:1" })
	_, err = loomv1.NewIngressServiceClient(down.conn).ListIngressMessages(ctx, &loomv1.ListIngressMessagesRequest{Parent: project})
	wantCode(t, "bridge down", err, codes.Unavailable, "bridge", "-bridge-addr")
}

// ingressMatrixRows are IngressService's rows of TestAuthorizationMatrix:
// what came in for a project is its viewers' (and up) to read, as its jobs
// are; callers outside the project learn nothing (NotFound).
func ingressMatrixRows() []matrixRow {
	ic := func(c *grpc.ClientConn) loomv1.IngressServiceClient { return loomv1.NewIngressServiceClient(c) }
	return []matrixRow{
		{"ListIngressProducers", func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ic(c).ListIngressProducers(ctx, &loomv1.ListIngressProducersRequest{Parent: "projects/default"})
			return err
		}, func(int) (string, string, string) { return "GET", "/v1/projects/default/ingressProducers", "" }, viewerRow},
		{"ListIngressMessages", func(ctx context.Context, c *grpc.ClientConn, _ int) error {
			_, err := ic(c).ListIngressMessages(ctx, &loomv1.ListIngressMessagesRequest{Parent: "projects/default", Filter: `outcome = "REFUSED"`})
			return err
		}, func(int) (string, string, string) {
			return "GET", "/v1/projects/default/ingressMessages?filter=outcome%20%3D%20%22REFUSED%22", ""
		}, viewerRow},
	}
}
