package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/testkit"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// authServer is the gateway's side of node identities as docs/security.md states
// it (RegisterNode, RenewNodeIdentity, CreateToken{job}), built on
// libs/auth, for the agent's tests: bootstrap tokens from
// auth.NewBootstrapIssuer on the test's services' secret, used once, for a
// node that exists in that cluster and pool.
type authServer struct {
	loomv1.UnimplementedAuthServiceServer
	boot, tokens *auth.Issuer
	key          ed25519.PrivateKey
	ttl          time.Duration

	mu sync.Mutex
	// pools: node → pool of the nodes the provisioner has.
	pools map[string]string
	used  map[string]bool
	// renewals counts RenewNodeIdentity calls answered; workload the
	// workload tokens issued, each to the job it was issued for.
	renewals int
	workload map[string]string
}

func newAuthServer(t *testing.T, ttl time.Duration, pools map[string]string) (*authServer, string) {
	t.Helper()
	boot, err := auth.NewBootstrapIssuer(testkit.ServiceSecret(), nil)
	if err != nil {
		t.Fatal(err)
	}
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	tokens, _ := auth.NewIssuer(k, "loom", nil)
	s := &authServer{boot: boot, tokens: tokens, key: testkit.ServiceKey(), ttl: ttl, pools: pools,
		used: map[string]bool{}, workload: map[string]string{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	loomv1.RegisterAuthServiceServer(g, s)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return s, ln.Addr().String()
}

func (s *authServer) mint(t *testing.T, node, pool string) string {
	t.Helper()
	tok, _, err := auth.MintBootstrapToken(s.boot, node, cluster, pool, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// identity issues a node identity (access token and certificate) for pub.
func (s *authServer) identity(node, pool string, pub []byte) (*loomv1.NodeIdentity, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, status.Error(codes.InvalidArgument, "public_key must be 32 bytes")
	}
	tok, exp, err := s.tokens.Issue(auth.Claims{Use: auth.UseAccess, Kind: auth.KindNode.String(), Node: node, Cluster: cluster, Pool: pool,
		RegisteredClaims: auth.ForSubject(auth.NodeName(node))}, s.ttl)
	if err != nil {
		return nil, err
	}
	cert, err := auth.SignNodeCert(s.key, auth.NodeCert{Node: node, Cluster: cluster, Pool: pool, PublicKey: pub, NotAfter: exp})
	if err != nil {
		return nil, err
	}
	return &loomv1.NodeIdentity{Node: node, Cluster: cluster, Pool: pool, AccessToken: tok, Certificate: cert,
		ExpireTime: timestamppb.New(exp), ServicePublicKey: s.key.Public().(ed25519.PublicKey),
		CommandKey: auth.CommandKey(testkit.ServiceSecret(), node, "")}, nil
}

func (s *authServer) RegisterNode(_ context.Context, req *loomv1.RegisterNodeRequest) (*loomv1.NodeIdentity, error) {
	c, err := s.boot.Verify(req.GetBootstrapToken(), auth.UseBootstrap)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.Kind != auth.KindNode.String() || c.Node != req.GetNode() || c.Cluster != cluster {
		return nil, status.Error(codes.PermissionDenied, "the bootstrap token is for another node")
	}
	if pool, ok := s.pools[c.Node]; !ok || pool != c.Pool {
		return nil, status.Errorf(codes.PermissionDenied, "node %s is not in pool %s", c.Node, c.Pool)
	}
	if s.used[c.ID] {
		return nil, status.Error(codes.Unauthenticated, "bootstrap token already used")
	}
	s.used[c.ID] = true
	return s.identity(c.Node, c.Pool, req.GetPublicKey())
}

func (s *authServer) node(ctx context.Context) (*auth.Claims, error) {
	cred, err := auth.CredentialFromContext(ctx)
	if err != nil || cred == "" {
		return nil, status.Error(codes.Unauthenticated, "no credential")
	}
	c, err := s.tokens.Verify(cred, auth.UseAccess)
	if err != nil || c.Kind != auth.KindNode.String() {
		return nil, status.Error(codes.Unauthenticated, "not a node identity")
	}
	return c, nil
}

func (s *authServer) RenewNodeIdentity(ctx context.Context, req *loomv1.RenewNodeIdentityRequest) (*loomv1.NodeIdentity, error) {
	c, err := s.node(ctx)
	if err != nil {
		return nil, err
	}
	id, err := s.identity(c.Node, c.Pool, req.GetPublicKey())
	if err == nil {
		s.mu.Lock()
		s.renewals++
		s.mu.Unlock()
	}
	return id, err
}

func (s *authServer) CreateToken(ctx context.Context, req *loomv1.CreateTokenRequest) (*loomv1.Token, error) {
	if _, err := s.node(ctx); err != nil {
		return nil, err
	}
	project, id, ok := strings.Cut(strings.TrimPrefix(req.GetJob(), "projects/"), "/jobs/")
	if !ok {
		return nil, status.Error(codes.InvalidArgument, "job must be projects/p/jobs/id")
	}
	tok, exp, err := s.tokens.Issue(auth.Claims{Use: auth.UseAccess, Kind: auth.KindWorkload.String(), Project: "projects/" + project,
		Job: req.GetJob(), RegisteredClaims: auth.ForSubject(auth.WorkloadName("projects/"+project, id))}, time.Hour)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.workload[tok] = req.GetJob()
	s.mu.Unlock()
	return &loomv1.Token{AccessToken: tok, ExpireTime: timestamppb.New(exp)}, nil
}

func (s *authServer) counts() (renewals int, workload map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := map[string]string{}
	for k, v := range s.workload {
		w[k] = v
	}
	return s.renewals, w
}

// The agent bootstraps with its launch's token, signs its events with the
// identity it got, gives each job attempt a workload token, and renews its
// identity when a third of its life is left while its step goes on running.
func TestBootstrapRenewAndWorkloadToken(t *testing.T) {
	t.Parallel()
	srv, addr := newAuthServer(t, 3*time.Second, map[string]string{node: "gpu"})
	e := &env{broker: testkit.Broker(t), work: t.TempDir(), shared: t.TempDir(), gateway: addr}
	e.redisAddr, e.rdb = testkit.Redis(t)
	cfg := e.config()
	cfg.BootstrapToken = srv.mint(t, node, "gpu")
	testkit.Start(t, "agent", func(ctx context.Context) error { return Run(ctx, cfg) })

	tokFile := filepath.Join(e.shared, "token")
	publish(t, e.broker, command(startStep("1", `echo -n "$LOOM_TOKEN" > `+tokFile+`; sleep 30`, nil, filepath.Join(e.shared, "1.out"))))
	waitStep(t, e.broker, "1", eventsv1.StepState_STEP_RUNNING)
	// Renewed at least once (3 s life, renewed with 1 s left), the step
	// untouched.
	testkit.WaitFor(t, wait, "two renewals", func() (bool, error) {
		n, _ := srv.counts()
		return n >= 2, nil
	})
	// Sealed for the node: the command key came with the identity, and
	// with each renewal.
	publish(t, e.broker, command(sealFor(t, node, startStep("2", `exit 0`, nil, filepath.Join(e.shared, "2.out")))))
	waitStep(t, e.broker, "2", eventsv1.StepState_STEP_EXITED)
	for _, sc := range stepEvents(t, e.broker, "1") {
		if sc.State != eventsv1.StepState_STEP_RUNNING {
			t.Fatalf("step 1 went %v across the renewals; it must go on running", sc.State)
		}
	}
	// A task of an srun step of the job gets one too, as every process of
	// a Slurm job may run its Slurm commands.
	taskTok := filepath.Join(e.shared, "task-token")
	publish(t, e.broker, command(launch("1", 0, 0, 1, filepath.Join(e.shared, ".loom", "steps", "1.0"),
		"sh", "-c", `echo -n "$LOOM_TOKEN" > `+taskTok)))
	waitTasks(t, e.broker, "1", 0, eventsv1.StepState_STEP_EXITED)
	_, workload := srv.counts()
	for _, f := range []string{tokFile, taskTok} {
		got, err := os.ReadFile(f)
		if err != nil || len(got) == 0 || workload[string(got)] != "projects/p/jobs/1" {
			t.Fatalf("%s: LOOM_TOKEN = %q (%v), want a workload token issued for its job (issued: %v)", filepath.Base(f), got, err, workload)
		}
	}

	// Every event the agent wrote verifies as the node's, with certificates
	// from before and after the renewals (each checked at its record's
	// time: the first certificates have expired since), its step events and
	// its telemetry, each keyed as a node's record of its type must be and
	// on its key's partition.
	certs := map[string]bool{}
	records := testkit.Messages(t, e.broker, topics.StepEvents)
	if len(records) == 0 {
		t.Fatal("the agent wrote no step events")
	}
	telemetry := testkit.Messages(t, e.broker, topics.NodeTelemetry)
	if len(telemetry) == 0 {
		t.Fatal("the agent wrote no telemetry")
	}
	for _, m := range append(records, telemetry...) {
		plain, err := envelope.Default.Decode(m)
		if err != nil {
			t.Fatal(err)
		}
		v := envelope.NewVerifier(testkit.ServiceKey().Public().(ed25519.PublicKey), func() time.Time { return plain.Time })
		ev, err := envelope.Default.DecodeVerified(m, v, envelope.AcceptNodeEvents)
		if err != nil || ev.Signer != auth.NodeName(node) {
			t.Fatalf("agent's record: signer %q, %v", ev.Signer, err)
		}
		// On its key's partition, as a verifying consumer requires.
		if want := bus.PartitionOf(string(m.Key), topics.Partitions(m.Topic)); m.Partition != want {
			t.Fatalf("agent's %s keyed %q is on partition %d of %s, want %d", ev.Type, m.Key, m.Partition, m.Topic, want)
		}
		for _, h := range m.Headers {
			if h.Key == envelope.HeaderCert {
				certs[string(h.Value)] = true
			}
		}
	}
	if len(certs) < 2 {
		t.Errorf("the agent's records carry %d certificate(s); want the first and a renewed one", len(certs))
	}
	// The identity is kept 0600 in the work dir, with the command key.
	if st, err := os.Stat(filepath.Join(e.work, IdentityFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("identity file: %v, %v; want mode 0600", st, err)
	}
	if id, err := auth.LoadNodeIdentity(filepath.Join(e.work, IdentityFile)); err != nil || !bytes.Equal(id.CommandKey, auth.CommandKey(testkit.ServiceSecret(), node, "")) {
		t.Errorf("identity file's command key: %v, %v; want the node's", id, err)
	}
}

// A bootstrap token works once, and only for its node's pool; an agent
// whose token is refused stops saying why.
func TestBootstrapTokenWorksOnceAndOnlyForItsPool(t *testing.T) {
	t.Parallel()
	srv, addr := newAuthServer(t, time.Hour, map[string]string{node: "gpu"})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := loomv1.NewAuthServiceClient(conn)
	ctx := testkit.Context(t, wait)
	pub, _, _ := ed25519.GenerateKey(nil)

	tok := srv.mint(t, node, "gpu")
	if _, err := c.RegisterNode(ctx, &loomv1.RegisterNodeRequest{BootstrapToken: tok, Node: node, PublicKey: pub}); err != nil {
		t.Fatalf("first use: %v", err)
	}
	if _, err := c.RegisterNode(ctx, &loomv1.RegisterNodeRequest{BootstrapToken: tok, Node: node, PublicKey: pub}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("second use: %v, want Unauthenticated", err)
	}
	other := srv.mint(t, node, "cpu")
	if _, err := c.RegisterNode(ctx, &loomv1.RegisterNodeRequest{BootstrapToken: other, Node: node, PublicKey: pub}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("token for another pool: %v, want PermissionDenied", err)
	}
	// A token the services' secret did not key.
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	forgedIss, _ := auth.NewIssuer(k, auth.BootstrapIssuerName, nil)
	forged, _, _ := auth.MintBootstrapToken(forgedIss, node, cluster, "gpu", 0)
	if _, err := c.RegisterNode(ctx, &loomv1.RegisterNodeRequest{BootstrapToken: forged, Node: node, PublicKey: pub}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("forged token: %v, want Unauthenticated", err)
	}

	// The agent given the used token stops, saying the gateway refused it.
	e := &env{broker: testkit.Broker(t), work: t.TempDir(), shared: t.TempDir(), gateway: addr}
	e.redisAddr, e.rdb = testkit.Redis(t)
	cfg := e.config()
	cfg.BootstrapToken = tok
	err = Run(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("Run with a used bootstrap token = %v", err)
	}
}

// A StartStep written straight to the broker, unsigned or signed with a key
// that is not the services', runs nothing and is dead-lettered with the
// reason; the genuine command after it runs.
func TestForgedStartStepIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	marker := func(job string) string { return filepath.Join(e.shared, "ran-"+job) }
	forge := func(job string) (kafka.Message, string) {
		ev := command(startStep(job, "touch "+marker(job), nil, filepath.Join(e.shared, job+".out")))
		m, err := envelope.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		return m, ev.ID
	}
	unsigned, unsignedID := forge("66")
	random, randomID := forge("67")
	_, priv, _ := ed25519.GenerateKey(nil)
	envelope.NewServiceSigner("scheduler", priv).Sign(&random)
	testkit.PublishMessages(t, e.broker, unsigned, random)
	publish(t, e.broker, command(startStep("68", "touch "+marker("68"), nil, filepath.Join(e.shared, "68.out"))))
	waitStep(t, e.broker, "68", eventsv1.StepState_STEP_EXITED)

	var reasons map[string]string
	testkit.WaitFor(t, wait, "two dead letters", func() (bool, error) {
		reasons = dlqReasonsOf(t, e.broker, topics.StepCommands)
		return len(reasons) >= 2, nil
	})
	if reasons[unsignedID] != envelope.ReasonUnsigned || reasons[randomID] != envelope.ReasonBadSignature {
		t.Errorf("dead-letter reasons: unsigned %q, random key %q", reasons[unsignedID], reasons[randomID])
	}
	for _, job := range []string{"66", "67"} {
		if _, err := os.Stat(marker(job)); err == nil {
			t.Errorf("forged StartStep %s ran", job)
		}
		if evs := stepEvents(t, e.broker, job); len(evs) != 0 {
			t.Errorf("forged StartStep %s produced step events %v", job, evs)
		}
	}
}

// In a rolling upgrade, a gateway of the release before registrations were
// certified renews an identity of a registration (the node registered
// through a gateway of this release): its certificate names none and its
// command key is the node's of no registration. The registration is the
// same (a renewal never changes it, and one whose node registered again
// is refused): the agent keeps it, and its key, so that it opens what the
// scheduler seals for it instead of reporting every step of its node lost,
// and keeps them on disk for its next start.
func TestRenewalByAnEarlierReleaseKeepsTheRegistration(t *testing.T) {
	t.Parallel()
	srv, addr := newAuthServer(t, time.Hour, map[string]string{node: "gpu"})
	e := &env{broker: testkit.Broker(t), work: t.TempDir(), shared: t.TempDir(), gateway: addr}
	e.redisAddr, e.rdb = testkit.Redis(t)
	now := time.Now()
	reg := auth.NewRegistration(now, "tok")
	id, err := auth.IssueNodeIdentity(testkit.ServiceKey(), node, cluster, "gpu", reg, now, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	id.AccessToken, _, err = srv.tokens.Issue(auth.Claims{Use: auth.UseAccess, Kind: auth.KindNode.String(), Node: node, Cluster: cluster, Pool: "gpu",
		Reg: reg, RegisteredClaims: auth.ForSubject(auth.NodeName(node))}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.work, IdentityFile)
	if err := auth.WriteNodeIdentity(path, id); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	testkit.WaitFor(t, wait, "a renewal", func() (bool, error) {
		n, _ := srv.counts()
		return n >= 1, nil
	})
	testkit.WaitFor(t, wait, "the renewed identity on disk", func() (bool, error) {
		cur, err := auth.LoadNodeIdentity(path)
		return err == nil && auth.CertRegistration(cur.Cert) == "", nil
	})
	if cur, err := auth.LoadNodeIdentity(path); err != nil || cur.Registration != reg ||
		!bytes.Equal(cur.CommandKey, auth.CommandKey(testkit.ServiceSecret(), node, reg)) {
		t.Fatalf("identity on disk after the renewal: registration %q (%v); want %q and its command key", cur.Registration, err, reg)
	}
	marker := filepath.Join(e.shared, "ran-94")
	cmd := startStep("94", "touch "+marker, nil, filepath.Join(e.shared, "94.out"))
	cmd.Registration = reg
	sealed, err := envelope.SealCommand(auth.CommandKey(testkit.ServiceSecret(), node, reg), cmd)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, e.broker, command(sealed.(*eventsv1.StartStep)))
	ev := testkit.WaitEvent(t, e.broker, topics.StepEvents, wait, func(ev envelope.Event) bool {
		sc, ok := ev.Payload.(*eventsv1.StepChanged)
		return ok && sc.Job == "projects/p/jobs/94" && (sc.State == eventsv1.StepState_STEP_EXITED || sc.State == eventsv1.StepState_STEP_LOST)
	})
	if st := ev.Payload.(*eventsv1.StepChanged); st.GetState() != eventsv1.StepState_STEP_EXITED || st.GetExitCode() != 0 {
		t.Fatalf("the step ended %v, exit %d: %s; want it run", st.GetState(), st.GetExitCode(), st.GetMessage())
	}
}
