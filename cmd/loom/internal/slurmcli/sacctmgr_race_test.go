package slurmcli

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway"
)

// realGateway starts the gateway itself, on a real Redis and broker, with
// authentication off (every call is a cluster administrator), and returns
// a connection to it. The services it reads from are not there: only
// what the gateway answers itself (AccountService) may be called.
func realGateway(t *testing.T) *grpc.ClientConn {
	t.Helper()
	redisAddr, _ := testkit.Redis(t)
	nowhere := testkit.FreeAddr()
	cfg := gateway.Config{
		Common: config.Common{Brokers: []string{testkit.Broker(t)}, RedisAddr: redisAddr, ServiceKeyFile: testkit.ServiceKeyFile(t),
			GRPCAddr: testkit.FreeAddr(), HTTPAddr: testkit.FreeAddr(), LogLevel: "error", CreateTopics: true},
		RESTAddr:        testkit.FreeAddr(),
		ProvisionerAddr: nowhere, SchedulerAddr: nowhere, RegistryAddr: nowhere, HealthAddr: nowhere,
		TrainingAddr: nowhere, BridgeAddr: nowhere,
		Auth: gateway.AuthConfig{Mode: "off"},
	}
	testkit.Start(t, "gateway", func(ctx context.Context) error { return gateway.Run(ctx, cfg) })
	conn, err := grpc.NewClient(cfg.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	accts := loomv1.NewAccountServiceClient(conn)
	testkit.WaitFor(t, 30*time.Second, "the gateway to serve", func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := accts.ListAccounts(ctx, &loomv1.ListAccountsRequest{Parent: "projects/default"})
		return err == nil, nil
	})
	return conn
}

// TestSacctmgrRacingQOSEditsBothLand: two admins running sacctmgr modify
// user ... set QOS+=x (and QOS-=) on one association at once, through the
// real gateway on a real Redis: each reads the association, edits its
// list and writes it whole with the etag it read; the one that read
// before the other wrote is refused (Aborted) and edits the association
// as it is then. Neither change is lost.
func TestSacctmgrRacingQOSEditsBothLand(t *testing.T) {
	t.Parallel()
	sacctmgr := sacctmgrWithPhysics(t)
	qos := func(user string) string {
		_, out := sacctmgr("-n", "-P", "show", "assoc", "user="+user, "format=QOS")
		return strings.TrimSpace(out)
	}
	const rounds = 10
	for round := range rounds {
		user := fmt.Sprintf("u%d", round)
		if code, out := sacctmgr("add", "user", user, "account=physics", "QOS=old"); code != 0 {
			t.Fatalf("add user: exit %d: %s", code, out)
		}
		edits := [][]string{
			{"modify", "user", user, "set", "QOS+=high"},
			{"modify", "user", user, "set", "QOS+=debug"},
			{"modify", "user", user, "set", "QOS-=old"},
		}
		if round%2 == 1 {
			edits = edits[:2] // two at once: the refused one's retry always lands
		}
		codes, outs := make([]int, len(edits)), make([]string, len(edits))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, e := range edits {
			wg.Go(func() {
				<-start
				codes[i], outs[i] = sacctmgr(e...)
			})
		}
		close(start)
		wg.Wait()
		// With three at once, one may be refused twice (it says so, and
		// changed nothing); what each that succeeded did is kept.
		want := map[string]bool{"old": true}
		for i, e := range edits {
			switch {
			case codes[i] == 0 && e[4] == "QOS-=old":
				delete(want, "old")
			case codes[i] == 0:
				want[strings.TrimPrefix(e[4], "QOS+=")] = true
			case !strings.Contains(outs[i], "changed meanwhile") || len(edits) == 2:
				t.Fatalf("round %d: %v: exit %d: %s", round, e, codes[i], outs[i])
			}
		}
		var wantList []string
		for _, q := range []string{"debug", "high", "low", "normal", "old"} {
			if want[q] || q == "low" || q == "normal" {
				wantList = append(wantList, q)
			}
		}
		if got := qos(user); got != strings.Join(wantList, ",") {
			t.Fatalf("round %d: QOS after racing edits %v (exits %v): %q, want %q", round, edits, codes, got, strings.Join(wantList, ","))
		}
	}
}

// TestSacctmgrRacingAddsKeepOne: two admins adding one user to one
// account at once, with different settings: one adds it, the other says
// Nothing new added (as for an association that was there), and what is
// stored is the first's whole: an add never replaces another's limits.
func TestSacctmgrRacingAddsKeepOne(t *testing.T) {
	t.Parallel()
	sacctmgr := sacctmgrWithPhysics(t)
	for round := range 6 {
		user := fmt.Sprintf("a%d", round)
		adds := [][]string{{"add", "user", user, "account=physics", "MaxJobs=3"}, {"add", "user", user, "account=physics", "MaxSubmitJobs=7"}}
		codes, outs := make([]int, 2), make([]string, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, a := range adds {
			wg.Go(func() {
				<-start
				codes[i], outs[i] = sacctmgr(a...)
			})
		}
		close(start)
		wg.Wait()
		won := slices.Index(codes, 0)
		if won < 0 || codes[1-won] != 1 || !strings.Contains(outs[1-won], "Nothing new added") {
			t.Fatalf("round %d: exits %v: %q, %q: want one add and one Nothing new added", round, codes, outs[0], outs[1])
		}
		_, got := sacctmgr("-n", "-P", "show", "assoc", "user="+user, "format=MaxJobs,MaxSubmit")
		want := map[int]string{0: "3|", 1: "|7"}[won]
		if strings.TrimSpace(got) != want {
			t.Fatalf("round %d: stored MaxJobs|MaxSubmit %q, want the adding call's %q", round, strings.TrimSpace(got), want)
		}
	}
}

// sacctmgrWithPhysics returns a runner of sacctmgr -i as an admin against
// a real gateway on a real Redis, whose project has the account physics:
// each call's exit code and its output and errors together.
func sacctmgrWithPhysics(t *testing.T) func(args ...string) (int, string) {
	t.Helper()
	env := Env{Conn: realGateway(t), Project: "default", Cluster: "demo", User: "admin", CallTimeout: 30 * time.Second}
	ctx := testkit.Context(t, 3*time.Minute)
	sacctmgr := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := Main(ctx, "sacctmgr", append([]string{"-i"}, args...), env, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := sacctmgr("add", "account", "physics"); code != 0 {
		t.Fatalf("add account: exit %d: %s", code, out)
	}
	return sacctmgr
}
