package stack

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/cmd/loom/internal/agentcmd"
	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/embedded"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestMain runs this test binary as a node agent when the local provider
// starts it with LOOM_TEST_RUN_AGENT=1 (see testOptions).
func TestMain(m *testing.M) {
	if os.Getenv("LOOM_TEST_RUN_AGENT") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := agentcmd.Run(ctx, os.Args[1:], os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func testOptions(t *testing.T) Options {
	return Options{
		DataDir:      t.TempDir(),
		AgentCommand: []string{os.Args[0]},
		AgentEnv:     []string{"LOOM_TEST_RUN_AGENT=1"},
		LogLevel:     "warn",
	}
}

func TestStackRunsAClusterAndStops(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	opts := testOptions(t)
	st := startOnChosenGateway(ctx, t, &opts)
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = st.Close(context.Background())
		}
	})
	if st.GatewayAddr != opts.Addrs.Gateway {
		t.Fatalf("GatewayAddr = %s, want the chosen %s", st.GatewayAddr, opts.Addrs.Gateway)
	}
	for _, a := range []string{st.RESTAddr, st.BrokerAddr, st.RedisAddr, st.PubSubAddr, st.Addrs.Provisioner, st.Addrs.Scheduler, st.Addrs.Registry, st.Addrs.Health, st.Addrs.Training} {
		if !strings.HasPrefix(a, "127.0.0.1:") || strings.HasSuffix(a, ":0") {
			t.Fatalf("address %q is not a bound loopback address", a)
		}
	}
	checkPubSub(ctx, t, st)

	// The keys: made once, 0600 in a 0700 directory.
	tokenKey := checkKeys(t, st)
	// The administrator's key, when the gateway made one (it is new), is
	// every call's credential.
	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	key, keyErr := st.AdminKey()
	switch {
	case keyErr == nil:
		if !st.NewAdminKey {
			t.Errorf("the administrator key %s was made at this start, but NewAdminKey is false", st.Keys.Admin)
		}
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(auth.Bearer(key)))
	case errors.Is(keyErr, fs.ErrNotExist):
		if st.NewAdminKey {
			t.Error("NewAdminKey with no administrator key file")
		}
	default:
		t.Fatalf("AdminKey: %v", keyErr)
	}
	conn, err := grpc.NewClient(st.GatewayAddr, dialOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	clusters := loomv1.NewClusterServiceClient(conn)
	ops := loomv1.NewOperationServiceClient(conn)
	list, err := clusters.ListClusters(ctx, &loomv1.ListClustersRequest{Parent: "projects/default"})
	if err != nil || len(list.GetClusters()) != 0 {
		t.Fatalf("ListClusters on a new stack = %v, %v; want none", list, err)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+st.RESTAddr+"/v1/projects/default/clusters", nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("REST: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("REST list clusters: %s", resp.Status)
	}

	// A one-node cluster exercises the provisioner's local provider and an
	// agent process (this test binary, re-executed).
	op, err := clusters.CreateCluster(ctx, &loomv1.CreateClusterRequest{
		Parent: "projects/default", ClusterId: "t1",
		Cluster: &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "cpu", MachineType: "n2-standard-8", NodeCount: 1}}}},
	})
	if err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	op = waitOp(ctx, t, ops, op)
	if op.GetError() != nil || op.GetCluster().GetStatus().GetState() != loomv1.Cluster_RUNNING {
		t.Fatalf("create operation ended %v", op)
	}
	op, err = clusters.DeleteCluster(ctx, &loomv1.DeleteClusterRequest{Name: "projects/default/clusters/t1"})
	if err != nil {
		t.Fatalf("DeleteCluster: %v", err)
	}
	if op = waitOp(ctx, t, ops, op); op.GetError() != nil {
		t.Fatalf("delete operation ended %v", op)
	}

	closed = true
	if err := st.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-st.Done():
		t.Fatalf("Done closed by a graceful Close: %v", st.Err())
	default:
	}
	if c, err := net.DialTimeout("tcp", st.GatewayAddr, time.Second); err == nil {
		c.Close()
		t.Fatal("gateway still listening after Close")
	}
	if c, err := net.DialTimeout("tcp", st.RedisAddr, time.Second); err == nil {
		c.Close()
		t.Fatal("redis still listening after Close")
	}
	if c, err := net.DialTimeout("tcp", st.PubSubAddr, time.Second); err == nil {
		c.Close()
		t.Fatal("pubsub still listening after Close")
	}

	// A second start on the data directory keeps its keys, and the
	// administrator's key is not new.
	opts.Addrs = Addrs{}
	st2, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("second Start: %v", err)
	}
	defer st2.Close(context.Background())
	if st2.NewAdminKey {
		t.Error("NewAdminKey at the second start on the same data directory")
	}
	if again := checkKeys(t, st2); string(again) != string(tokenKey) {
		t.Error("the token key changed at the second start")
	}
}

// checkKeys checks the stack's key directory (0700) and secrets (0600)
// and returns the token key.
func checkKeys(t *testing.T, st *Stack) []byte {
	t.Helper()
	if st.Keys.Dir != filepath.Join(st.DataDir, "keys") {
		t.Errorf("keys in %s, want <data dir>/keys", st.Keys.Dir)
	}
	if fi, err := os.Stat(st.Keys.Dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("keys directory: %v (%v), want mode 0700", fi.Mode().Perm(), err)
	}
	for _, k := range []string{st.Keys.Token, st.Keys.Service} {
		if _, err := auth.LoadSecret(k); err != nil { // refuses a mode other than 0600
			t.Errorf("key file %s: %v", k, err)
		}
	}
	b, _ := auth.LoadSecret(st.Keys.Token)
	return b
}

// TestKeyArgs: a service gets each authentication setting as its flag
// when it has that flag, else as its variable (only a service run as its
// own process sees it), so that one that predates a setting still starts.
func TestKeyArgs(t *testing.T) {
	t.Parallel()
	svc := &service{name: "gw", args: []string{"-grpc-addr=x"},
		flags: func(fs *flag.FlagSet) { fs.String("token-key-file", "", "") },
		keys:  []keyArg{{"token-key-file", "LOOM_GATEWAY_TOKEN_KEY_FILE", "/k/token.key"}, {"bootstrap-admin", "LOOM_GATEWAY_BOOTSTRAP_ADMIN", "alice"}}}
	svc.addKeyArgs()
	if want := []string{"-grpc-addr=x", "-token-key-file=/k/token.key"}; !slices.Equal(svc.args, want) {
		t.Errorf("args %q, want %q", svc.args, want)
	}
	if want := []string{"LOOM_GATEWAY_BOOTSTRAP_ADMIN=alice"}; !slices.Equal(svc.env, want) {
		t.Errorf("env %q, want %q", svc.env, want)
	}
}

// waitOp waits for op with WaitOperation until it is done.
func waitOp(ctx context.Context, t *testing.T, ops loomv1.OperationServiceClient, op *loomv1.Operation) *loomv1.Operation {
	t.Helper()
	for !op.GetDone() {
		next, err := ops.WaitOperation(ctx, &loomv1.WaitOperationRequest{Name: op.GetName(), TimeoutSeconds: 5})
		if err != nil {
			t.Fatalf("WaitOperation %s: %v", op.GetName(), err)
		}
		op = next
	}
	return op
}

func TestStartFailsCleanlyWhenAPortIsTaken(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	opts := testOptions(t)
	opts.Addrs.Scheduler = ln.Addr().String()
	st, err := Start(ctx, opts)
	if err == nil {
		_ = st.Close(ctx)
		t.Fatal("Start succeeded on a taken port")
	}
	// Another service may fail beside it (a port Start picked, taken by a
	// parallel test meanwhile): the error names each.
	if !strings.HasPrefix(err.Error(), "start stack: ") || !strings.Contains(err.Error(), "scheduler: service scheduler: listen gRPC on "+ln.Addr().String()) {
		t.Fatalf("error %q does not name the scheduler and its address", err)
	}
}

// Another gRPC server that answers health SERVING on a service's port is
// not that service: Start waits for the service's own instance, sees it
// fail to bind, and says so (it used to report the stack up).
func TestStartIsNotFooledByAnotherServerOnItsPort(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other := grpc.NewServer()
	healthpb.RegisterHealthServer(other, grpchealth.NewServer()) // "" is SERVING
	go func() { _ = other.Serve(ln) }()
	defer other.Stop()
	opts := testOptions(t)
	opts.Addrs.Registry = ln.Addr().String()
	st, err := Start(ctx, opts)
	if err == nil {
		_ = st.Close(ctx)
		t.Fatal("Start reported the stack up while another server held the registry's port")
	}
	if !strings.Contains(err.Error(), "registry: service registry: listen gRPC on "+ln.Addr().String()) {
		t.Fatalf("error %q does not name the registry and its address", err)
	}
}

// A port Start picked and lost to another process is worth new ports; an
// address the caller gave is not, nor is any other failure.
func TestRetryableOnlyForPickedPorts(t *testing.T) {
	t.Parallel()
	inUse := fmt.Errorf("start stack: health: telemetry server: listen on 127.0.0.1:39823: %w",
		&net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)})
	fixed := DefaultAddrs()
	for _, c := range []struct {
		name  string
		err   error
		addrs Addrs
		want  bool
	}{
		{"picked port taken", inUse, Addrs{}, true},
		{"picked port taken, others given", inUse, Addrs{Gateway: "127.0.0.1:7070"}, true},
		{"the given address taken", inUse, Addrs{HealthHTTP: "127.0.0.1:39823"}, false},
		{"every address given", inUse, fixed, false},
		{"the given Pub/Sub address taken", errors.New("start stack: start pubsub on 127.0.0.1:7085: listen tcp 127.0.0.1:7085: bind: address already in use"),
			Addrs{PubSub: "127.0.0.1:7085"}, false},
		{"as text only", errors.New("listen tcp 127.0.0.1:5: bind: address already in use"), Addrs{}, true},
		{"another failure", errors.New("start stack: scheduler: boom"), Addrs{}, false},
	} {
		if got := retryable(c.err, c.addrs); got != c.want {
			t.Errorf("%s: retryable = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestStartPassesProviderAndCapacity(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		opts func(*Options)
		want string
	}{
		{func(o *Options) { o.Provider = "cloud9" }, `provider: must be local or sim, got "cloud9"`},
		{func(o *Options) { o.Capacity = "everywhere=lots" }, "capacity: "},
		{func(o *Options) { o.ProvisionerArgs = []string{"-max-batch=-1"} }, "max_batch: must be at least 1"},
	} {
		opts := testOptions(t)
		c.opts(&opts)
		st, err := Start(ctx, opts)
		if err == nil {
			_ = st.Close(ctx)
			t.Fatalf("Start with %+v succeeded", opts)
		}
		if !strings.Contains(err.Error(), "provisioner") || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("error %q does not name the provisioner's %q", err, c.want)
		}
	}
}

// TestStartPassesHealthArgs: HealthArgs reach the health service's
// command line (a value it refuses stops the stack, naming it).
func TestStartPassesHealthArgs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := testOptions(t)
	opts.HealthArgs = []string{"-remediation=maybe"}
	st, err := Start(ctx, opts)
	if err == nil {
		_ = st.Close(ctx)
		t.Fatal("Start with -remediation=maybe succeeded")
	}
	if !strings.Contains(err.Error(), "health") || !strings.Contains(err.Error(), "remediation") {
		t.Fatalf("error %q does not name health's remediation", err)
	}
}

func TestOnSimLaunchNeedsTheProvisionerInProcess(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	opts.Provider, opts.BinDir = "sim", t.TempDir()
	opts.OnSimLaunch = func(string, time.Duration) {}
	st, err := Start(context.Background(), opts)
	if err == nil {
		_ = st.Close(context.Background())
		t.Fatal("Start with OnSimLaunch and BinDir succeeded")
	}
	if !strings.Contains(err.Error(), "OnSimLaunch") {
		t.Fatalf("error %q does not name OnSimLaunch", err)
	}
}

// TestGatewayReachesHealth: the stack gives the gateway the health
// service's address (-health-addr), and the gateway reaches it, and the
// scheduler's GoodputService, with its service token: a HealthService
// read through the gateway is answered by health (whatever health
// answers: not Unavailable, not Unauthenticated).
func TestGatewayReachesHealth(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := Start(ctx, testOptions(t))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	key, err := st.AdminKey()
	if err != nil {
		t.Fatalf("AdminKey: %v", err)
	}
	conn, err := grpc.NewClient(st.GatewayAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.Bearer(key)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = loomv1.NewHealthServiceClient(conn).ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: "projects/default/clusters/none"})
	_, gerr := loomv1.NewGoodputServiceClient(conn).GetClusterGoodput(ctx, &loomv1.GetClusterGoodputRequest{Name: "projects/default/clusters/none"})
	for what, err := range map[string]error{"ListNodeHealth": err, "GetClusterGoodput": gerr} {
		switch status.Code(err) {
		case codes.Unavailable, codes.Unauthenticated, codes.PermissionDenied, codes.Internal, codes.DeadlineExceeded:
			t.Errorf("%s through the gateway: %v, want the owning service's answer", what, err)
		}
	}
}

// adminConn is a gateway client of st as its administrator (closed when
// the test ends).
func adminConn(t *testing.T, st *Stack) *grpc.ClientConn {
	t.Helper()
	key, err := st.AdminKey()
	if err != nil {
		t.Fatalf("AdminKey: %v", err)
	}
	conn, err := grpc.NewClient(st.GatewayAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.Bearer(key)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// createCPUCluster creates cluster id of one CPU node in project default
// and waits for it; it returns the cluster's name.
func createCPUCluster(ctx context.Context, t *testing.T, conn *grpc.ClientConn, id string) string {
	t.Helper()
	op, err := loomv1.NewClusterServiceClient(conn).CreateCluster(ctx, &loomv1.CreateClusterRequest{
		Parent: "projects/default", ClusterId: id,
		Cluster: &loomv1.Cluster{Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{{Id: "cpu", MachineType: "n2-standard-8", NodeCount: 1}}}},
	})
	if err != nil {
		t.Fatalf("CreateCluster: %v", err)
	}
	if op = waitOp(ctx, t, loomv1.NewOperationServiceClient(conn), op); op.GetError() != nil {
		t.Fatalf("create operation ended %v", op)
	}
	return "projects/default/clusters/" + id
}

// startOnChosenGateway starts the stack with its gateway on a port the
// test chose, as a user who names -gateway-addr does. A chosen port can be
// taken by a parallel test between choosing and binding, and Start rightly
// does not move a chosen address, so only then it chooses again.
func startOnChosenGateway(ctx context.Context, t *testing.T, opts *Options) *Stack {
	t.Helper()
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		port, perr := embedded.FreePort()
		if perr != nil {
			t.Fatal(perr)
		}
		opts.Addrs.Gateway = fmt.Sprintf("127.0.0.1:%d", port)
		var st *Stack
		if st, err = Start(ctx, *opts); err == nil {
			return st
		}
		if !strings.Contains(err.Error(), opts.Addrs.Gateway) || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("Start: %v", err)
	return nil
}
