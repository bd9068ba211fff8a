package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/testkit"
)

// execEnv runs loom args with env as the whole environment and configDir
// as the CLI's config directory, without --gateway (unlike run): the
// gateway is the CLI's own default.
func execEnv(t *testing.T, env []string, configDir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	a := newApp()
	a.pollInterval = 50 * time.Millisecond
	a.environ = func() []string { return env }
	a.configDir = configDir
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = a.execute(ctx, args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestDefaultGatewayFollowsTheRunningUp: without --gateway the CLI talks
// to LOOM_GATEWAY, else to the gateway that the running `loom up` of
// LOOM_DATA_DIR recorded, else to 127.0.0.1:7070; a record whose `loom
// up` has exited is not followed.
func TestDefaultGatewayFollowsTheRunningUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gw := func(env ...string) string {
		a := newApp()
		a.environ = func() []string { return env }
		return a.defaultGateway()
	}
	if got := gw("LOOM_DATA_DIR=" + dir); got != DefaultGateway {
		t.Errorf("no loom up: default gateway %q, want %q", got, DefaultGateway)
	}
	if err := writeUpRecord(dir, upRecord{PortBase: 8000, Gateway: "127.0.0.1:8070", REST: "127.0.0.1:8080", Broker: "127.0.0.1:8092"}); err != nil {
		t.Fatal(err)
	}
	if got := gw("LOOM_DATA_DIR=" + dir); got != DefaultGateway {
		t.Errorf("a record but no running loom up: default gateway %q, want %q", got, DefaultGateway)
	}
	// This process as the data dir's running `loom up`.
	release, err := holdDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"LOOM_DATA_DIR=" + dir}, "127.0.0.1:8070"},
		{[]string{"HOME=" + t.TempDir()}, DefaultGateway}, // ~/.loom: none there
		{[]string{"LOOM_DATA_DIR=" + dir, "LOOM_GATEWAY=10.0.0.1:7070"}, "10.0.0.1:7070"},
	} {
		if got := gw(c.env...); got != c.want {
			t.Errorf("default gateway with %q: %q, want %q", c.env, got, c.want)
		}
	}
	// A record naming a gateway off this machine, or one others could have
	// written, is not followed: the CLI would send its key there.
	if err := writeUpRecord(dir, upRecord{PortBase: 8000, Gateway: "10.9.9.9:8070"}); err != nil {
		t.Fatal(err)
	}
	if got := gw("LOOM_DATA_DIR=" + dir); got != DefaultGateway {
		t.Errorf("a record naming 10.9.9.9:8070: default gateway %q, want %q", got, DefaultGateway)
	}
	if err := writeUpRecord(dir, upRecord{PortBase: 8000, Gateway: "127.0.0.1:8070", REST: "127.0.0.1:8080", Broker: "127.0.0.1:8092"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(upRecordFile(dir), 0o666); err != nil {
		t.Fatal(err)
	}
	if got := gw("LOOM_DATA_DIR=" + dir); got != DefaultGateway {
		t.Errorf("a record others may write: default gateway %q, want %q", got, DefaultGateway)
	}
	if err := os.Chmod(upRecordFile(dir), 0o644); err != nil {
		t.Fatal(err)
	}
	// The flag's default follows too.
	a := newApp()
	a.environ = func() []string { return []string{"LOOM_DATA_DIR=" + dir} }
	if f := a.rootCommand().PersistentFlags().Lookup("gateway"); f == nil || f.DefValue != "127.0.0.1:8070" {
		t.Errorf("--gateway's default: %+v, want 127.0.0.1:8070", f)
	}
}

// TestUpPortBaseRefusals: a port base out of range, from the flag or
// LOOM_UP_PORT_BASE, is bad usage naming its source and the limits; a port
// of the base that another program holds stops `loom up` before it starts
// anything, naming the address, its listener and --port-base.
func TestUpPortBaseRefusals(t *testing.T) {
	t.Parallel()
	env := os.Environ()
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--port-base", "80"}, "--port-base 80 is out of range: it must be from 1024 to 63359"},
		{nil, []string{"--port-base", "63360"}, "--port-base 63360 is out of range"},
		{[]string{"LOOM_UP_PORT_BASE=70000"}, nil, "LOOM_UP_PORT_BASE 70000 is out of range: it must be from 1024 to 63359"},
		{[]string{"LOOM_UP_PORT_BASE=eight"}, nil, `LOOM_UP_PORT_BASE="eight" is not a port number`},
	} {
		dir := t.TempDir()
		_, errOut, code := execEnv(t, append(append([]string{}, env...), c.env...), t.TempDir(),
			append([]string{"up", "--data-dir", dir}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("loom up %v with %v: exit %d, %q; want 2 and %q", c.args, c.env, code, errOut, c.want)
		}
		if _, err := os.Stat(upPIDFile(dir)); err == nil {
			t.Errorf("loom up %v with %v left a pidfile: it should refuse before taking the data dir", c.args, c.env)
		}
	}

	// The gateway's port (checked first) held by another program.
	p, err := embedded.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	base := p - 70
	dir := t.TempDir()
	_, errOut, code := execEnv(t, env, t.TempDir(), "up", "--data-dir", dir, "--port-base", strconv.Itoa(base))
	want := fmt.Sprintf("start Loom: 127.0.0.1:%d, for the gateway's gRPC API, is in use by another program (another `loom up`?): give this one other ports with --port-base (LOOM_UP_PORT_BASE; now %d)", p, base)
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("loom up on a held port: exit %d, %q; want 1 and %q", code, errOut, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "broker")); err == nil {
		t.Errorf("loom up on a held port started the broker before it refused")
	}
}

// runningUpAt is a `loom up` started by startUpAt.
type runningUpAt struct {
	dir, configDir string
	base           int
	out            *testkit.Buffer
	stop           func() // Ctrl-C, and wait for it to exit 0
}

// startUpAt starts `loom up --data-dir dir --port-base B --provider sim`
// on a port base B of its own, drawn below FreePort's range, again when a
// port of the base turns out to be taken, and returns once it is up.
func startUpAt(t *testing.T, dir string) runningUpAt {
	t.Helper()
	for attempt := 0; ; attempt++ {
		base := 100 * (11 + rand.IntN(57)) // 1100..6700: its ports stay below 10000
		r := runningUpAt{dir: dir, configDir: t.TempDir(), base: base, out: &testkit.Buffer{}}
		a := newApp()
		a.configDir = r.configDir
		ctx, cancel := context.WithCancel(context.Background())
		var errOut testkit.Buffer
		code := make(chan int, 1)
		go func() {
			code <- a.execute(ctx, []string{"up", "--data-dir", dir, "--port-base", strconv.Itoa(base), "--provider", "sim",
				"--log-level", "warn", "--authd-socket", "off"}, r.out, &errOut)
		}()
		up := false
		exited := -1
		testkit.WaitFor(t, 90*time.Second, "loom up to be up", func() (bool, error) {
			select {
			case exited = <-code:
				return true, nil
			default:
			}
			up = strings.Contains(r.out.String(), "Loom is up")
			return up, nil
		})
		if !up {
			cancel()
			if strings.Contains(errOut.String(), "is in use by another program") && attempt < 5 {
				t.Logf("port base %d is taken, drawing another: %s", base, errOut.String())
				continue
			}
			t.Fatalf("loom up --port-base %d exited %d:\n%s%s", base, exited, r.out.String(), errOut.String())
		}
		var once sync.Once
		r.stop = func() { once.Do(func() { stopUp(t, base, cancel, code, r.out, &errOut) }) }
		t.Cleanup(r.stop)
		return r
	}
}

// stopUp stops a `loom up` of startUpAt as Ctrl-C does and waits for it
// to exit 0.
func stopUp(t *testing.T, base int, cancel func(), code chan int, out, errOut *testkit.Buffer) {
	t.Helper()
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("loom up --port-base %d exited %d after Ctrl-C:\n%s%s", base, c, out.String(), errOut.String())
		}
	case <-time.After(time.Minute):
		t.Errorf("loom up --port-base %d did not stop after Ctrl-C", base)
	}
}

// TestTwoUpsOnOneMachine: two `loom up` run at once with their own data
// dirs and port bases; each listens where its base says and prints its
// console there, and a loom command without --gateway reaches the one
// whose data dir LOOM_DATA_DIR names, with the key that one saved.
func TestTwoUpsOnOneMachine(t *testing.T) {
	t.Parallel()
	ups := []runningUpAt{startUpAt(t, t.TempDir()), startUpAt(t, t.TempDir())}
	for i, u := range ups {
		gw, rest := fmt.Sprintf("127.0.0.1:%d", u.base+70), fmt.Sprintf("127.0.0.1:%d", u.base+80)
		if want := fmt.Sprintf("Loom is up: gateway %s (gRPC), REST and web console http://%s/, data in %s\n", gw, rest, u.dir); !strings.Contains(u.out.String(), want) {
			t.Errorf("loom up %d said:\n%s\nwant %q", i, u.out.String(), want)
		}
		if want := "loom commands reach this Loom with LOOM_DATA_DIR=" + u.dir + " (or --gateway " + gw + ")"; !strings.Contains(u.out.String(), want) {
			t.Errorf("loom up %d does not say how to reach it:\n%s\nwant %q", i, u.out.String(), want)
		}
		resp, err := http.Get("http://" + rest + "/")
		if err != nil {
			t.Fatalf("the console of loom up %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(bytes.ToLower(body), []byte("<html")) {
			t.Errorf("the console of loom up %d at %s: %s %.200q", i, rest, resp.Status, body)
		}
		name := fmt.Sprintf("only-in-%d", i)
		env := []string{"LOOM_DATA_DIR=" + u.dir, "HOME=" + os.Getenv("HOME"), "PATH=" + os.Getenv("PATH")}
		if _, errOut, code := execEnv(t, env, u.configDir, "clusters", "create", "--async", "-f", writeFile(t, "c.json",
			`{"name": "`+name+`", "compute": {"node_pools": [{"id": "cpu", "machine_type": "n2-standard-8", "node_count": 1}]}}`)); code != 0 {
			t.Fatalf("loom clusters create with LOOM_DATA_DIR of loom up %d: exit %d %s", i, code, errOut)
		}
	}
	for i, u := range ups {
		env := []string{"LOOM_DATA_DIR=" + u.dir, "HOME=" + os.Getenv("HOME"), "PATH=" + os.Getenv("PATH")}
		var out string
		// The list is a view of the cluster store: the create shows in
		// it shortly.
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("loom up %d to list its cluster", i), func() (bool, error) {
			o, errOut, code := execEnv(t, env, u.configDir, "clusters", "list")
			if code != 0 {
				return false, fmt.Errorf("loom clusters list with LOOM_DATA_DIR of loom up %d: exit %d %s", i, code, errOut)
			}
			out = o
			return strings.Contains(out, fmt.Sprintf("only-in-%d", i)), nil
		})
		if strings.Contains(out, fmt.Sprintf("only-in-%d", 1-i)) {
			t.Errorf("loom clusters list with LOOM_DATA_DIR of loom up %d:\n%s\nwant its cluster only-in-%d alone", i, out, i)
		}
	}
	// Each recorded where it listens; once it stops, the CLI's default is
	// 127.0.0.1:7070 again (its record is no running loom up's).
	u := ups[0]
	u.stop()
	if r, ok := readUpRecord(u.dir); !ok || r.PortBase != u.base || r.Gateway != fmt.Sprintf("127.0.0.1:%d", u.base+70) {
		t.Errorf("record of loom up 0: %+v %v", r, ok)
	}
	if _, running := runningUp(u.dir); running {
		t.Fatal("loom up 0 still holds its data dir after it stopped")
	}
	a := newApp()
	a.environ = func() []string { return []string{"LOOM_DATA_DIR=" + u.dir} }
	if got := a.defaultGateway(); got != DefaultGateway {
		t.Errorf("default gateway after loom up 0 stopped: %q, want %q", got, DefaultGateway)
	}
}

// TestUpRefusesOtherPortsWhileItsAgentsRun: node agents that a `loom up`
// of the data dir left keep the broker and gateway they were started
// with, so another `loom up` there on other ports refuses, saying how to
// start it as before or end them; on the same ports it goes on.
func TestUpRefusesOtherPortsWhileItsAgentsRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	node := filepath.Join(dir, "provisioner", "clusters", "c", "nodes", "c-cpu-0")
	if err := os.MkdirAll(node, 0o755); err != nil {
		t.Fatal(err)
	}
	// An agent as the local provider leaves one: its pidfile, and
	// LOOM_WORK_DIR in its environment.
	livePIDFile(t, filepath.Join(node, "agent.pid"), "LOOM_WORK_DIR="+node)
	if err := writeUpRecord(dir, upRecord{PortBase: 8000, Gateway: "127.0.0.1:8070", REST: "127.0.0.1:8080", Broker: "127.0.0.1:8092"}); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := execEnv(t, os.Environ(), t.TempDir(), "up", "--data-dir", dir, "--port-base", "9000")
	want := "1 node agent of " + dir + " still uses the ports of the last `loom up` there (--port-base 8000, gateway 127.0.0.1:8070), not these (gateway 127.0.0.1:9070): " +
		"start it as before, `loom up --data-dir " + dir + " --port-base 8000`, or end it first with `loom down --data-dir " + dir + "`"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("loom up on other ports while the agents run: exit %d, %q; want 1 and %q", code, errOut, want)
	}
	if _, running := runningUp(dir); running {
		t.Error("the refused loom up still holds the data dir")
	}
}

// TestUpRecordJudgedAsRead: the record the CLI follows is the one whose
// owner and mode were checked. In a data directory another user can write
// to, they can put their record (theirs, naming their listener) in place,
// and rename the trusted one back once the CLI has read theirs: the
// checks must be of the file read, not of what the path names later.
func TestUpRecordJudgedAsRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	release, err := holdDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	// The trusted record, kept aside while the other one is in place.
	if err := writeUpRecord(dir, upRecord{PortBase: 8000, Gateway: "127.0.0.1:8070", REST: "127.0.0.1:8080", Broker: "127.0.0.1:8092"}); err != nil {
		t.Fatal(err)
	}
	aside := filepath.Join(dir, "trusted.json")
	if err := os.Rename(upRecordFile(dir), aside); err != nil {
		t.Fatal(err)
	}
	// Another user's record: writable by others, as a file of another
	// account would be untrusted.
	if err := os.WriteFile(upRecordFile(dir), []byte(`{"gateway":"127.0.0.1:9999"}`), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(upRecordFile(dir), 0o666); err != nil {
		t.Fatal(err)
	}
	a := newApp()
	a.environ = func() []string { return []string{"LOOM_DATA_DIR=" + dir} }
	a.upRecordRead = func(string) {
		if err := os.Rename(aside, upRecordFile(dir)); err != nil {
			t.Error(err)
		}
	}
	if got := a.defaultGateway(); got != DefaultGateway {
		t.Fatalf("the record read was another's (mode 0666, 127.0.0.1:9999), then replaced: default gateway %q, want %q", got, DefaultGateway)
	}
}

// TestUnreachableSuggestsTheDataDirsPortBase: after Ctrl-C of `loom up
// --port-base 23000`, a command (which then falls back to 127.0.0.1:7070)
// said "start it with `loom up`": on the default ports, where that data
// dir's agents do not look, and refused while they run. It names the base
// of the data dir's last `loom up` (its record stays), and only when the
// gateway was not chosen otherwise.
func TestUnreachableSuggestsTheDataDirsPortBase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	refused := status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp `+DefaultGateway+`: connect: connection refused"`)
	msg := func(env ...string) string {
		a := newApp()
		a.environ = func() []string { return env }
		a.gateway = a.defaultGateway()
		return a.explainMsg("list clusters", refused).Error()
	}
	if got := msg("LOOM_DATA_DIR=" + dir); !strings.Contains(got, "start it with `loom up` (") {
		t.Errorf("no record: %q, want plain `loom up`", got)
	}
	if err := writeUpRecord(dir, upRecord{PortBase: 8000, Gateway: "127.0.0.1:8070", REST: "127.0.0.1:8080", Broker: "127.0.0.1:8092"}); err != nil {
		t.Fatal(err)
	}
	if got := msg("LOOM_DATA_DIR=" + dir); !strings.Contains(got, "cannot reach the Loom gateway at "+DefaultGateway) || !strings.Contains(got, "start it with `loom up --port-base 8000`") {
		t.Errorf("a stopped loom up on base 8000: %q, want `loom up --port-base 8000`", got)
	}
	if got := msg("LOOM_DATA_DIR="+dir, "LOOM_GATEWAY="+DefaultGateway); !strings.Contains(got, "start it with `loom up` (") {
		t.Errorf("LOOM_GATEWAY set: %q, want plain `loom up`", got)
	}
	if err := writeUpRecord(dir, upRecord{PortBase: 7000, Gateway: DefaultGateway, REST: "127.0.0.1:7080", Broker: "127.0.0.1:7092"}); err != nil {
		t.Fatal(err)
	}
	if got := msg("LOOM_DATA_DIR=" + dir); !strings.Contains(got, "start it with `loom up` (") {
		t.Errorf("the default base: %q, want plain `loom up`", got)
	}
}

// TestRefusalsSayWhoCanHelp: two refusals an operator met pointed the wrong
// way. A project the caller holds no role in ("projects/pa: not found",
// the gateway's wall) said "see `loom clusters list`", which is refused the
// same; and a call that needs a cluster administrator said "a project admin
// grants one", which no project admin can.
func TestRefusalsSayWhoCanHelp(t *testing.T) {
	t.Parallel()
	a := newApp()
	wall := status.Error(codes.NotFound, "projects/pa: not found")
	got := a.notFoundHint(a.explain("list jobs", wall), wall, "loom jobs list").Error()
	if want := "list jobs: projects/pa: not found: you hold no role in project pa, or there is no such project (`loom auth whoami` lists your projects; pick one with --project or LOOM_PROJECT; an admin of pa gives you a role with `loom auth members set`)"; got != want {
		t.Errorf("project wall:\n got %q\nwant %q", got, want)
	}
	// Another NotFound keeps its list.
	job := status.Error(codes.NotFound, "job projects/pa/jobs/9: not found")
	if got := a.notFoundHint(a.explain("get job 9", job), job, "loom jobs list").Error(); got != "get job 9: job projects/pa/jobs/9: not found (see `loom jobs list`)" {
		t.Errorf("missing job: %q", got)
	}
	admin := status.Error(codes.PermissionDenied, "Access/permission denied: /loom.v1.HealthService/UpdateNodeRemediation needs a cluster administrator: permission denied")
	got = a.explainMsg("drain node cpu-0001", admin).Error()
	if want := "drain node cpu-0001: permission denied: /loom.v1.HealthService/UpdateNodeRemediation needs a cluster administrator (`loom auth whoami` shows who you are and your roles; a cluster administrator makes another with `loom auth members set USER cluster-admin --global`)"; got != want {
		t.Errorf("cluster admin:\n got %q\nwant %q", got, want)
	}
	role := status.Error(codes.PermissionDenied, "Access/permission denied: /loom.v1.AuditService/ListAuditRecords needs role admin in projects/pb; users/bob is user there: permission denied")
	if got := a.explainMsg("read the audit trail", role).Error(); !strings.HasSuffix(got, "a project admin grants one with `loom auth members set`)") {
		t.Errorf("project role: %q", got)
	}
}

// TestGatewayKindSaidOnce: the gateway's messages carry libs/errs' word
// for their kind, first ("failed precondition: this gateway accepts no
// OIDC ID tokens") or last; the CLI's one mapping (explainMsg) says the
// kind itself, so the gateway's word is dropped wherever it stands, for
// every code, not only for a revoked key's Unauthenticated.
func TestGatewayKindSaidOnce(t *testing.T) {
	t.Parallel()
	a := newApp()
	a.gateway = DefaultGateway
	for _, c := range []struct {
		err  error
		want string
	}{
		{status.Error(codes.FailedPrecondition, "failed precondition: this gateway accepts no OIDC ID tokens (it has no -oidc-issuer)"),
			"log in: FailedPrecondition: this gateway accepts no OIDC ID tokens (it has no -oidc-issuer)"},
		{status.Error(codes.FailedPrecondition, "cluster demo has running jobs; cancel them first: failed precondition"),
			"log in: FailedPrecondition: cluster demo has running jobs; cancel them first"},
		{status.Error(codes.ResourceExhausted, "resource exhausted: at most 20 API keys a user; revoke one first"),
			"log in: ResourceExhausted: at most 20 API keys a user; revoke one first"},
		{status.Error(codes.PermissionDenied, "permission denied: only the login service (services/login) may get a token for another user; use `loom auth login`"),
			"log in: permission denied: only the login service (services/login) may get a token for another user; use `loom auth login` (`loom auth whoami`"},
		{status.Error(codes.Unavailable, "unavailable: OIDC issuer https://idp: connection refused"),
			"log in: Loom is unavailable right now (OIDC issuer https://idp: connection refused)"},
	} {
		got := a.explainMsg("log in", c.err).Error()
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%v:\n got %q\nwant %q...", c.err, got, c.want)
		}
	}
}

// TestHintsNameTheProject: a command run with --project pa told the user to
// run `loom health nodes ca` (or `loom operations wait ID`), which asks the
// default project and is answered not found. A hint names the project
// when a bare command would not reach it.
func TestHintsNameTheProject(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env        []string
		name, want string
	}{
		{nil, "projects/default/clusters/demo", "demo"},
		{nil, "projects/pa/clusters/ca", "ca --project pa"},
		{nil, "projects/pa/operations/01ABC", "01ABC --project pa"},
		{[]string{"LOOM_PROJECT=pa"}, "projects/pa/clusters/ca", "ca"},
		{[]string{"LOOM_PROJECT=pa"}, "projects/default/clusters/demo", "demo --project default"},
		{nil, "demo", "demo"},
	} {
		a := newApp()
		env := c.env
		a.environ = func() []string { return env }
		if got := a.shortIn(c.name); got != c.want {
			t.Errorf("env %v: shortIn(%q) = %q, want %q", c.env, c.name, got, c.want)
		}
	}
}
