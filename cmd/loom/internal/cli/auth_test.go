package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/loom-ml/loom/cmd/loom/internal/authd"
	"github.com/loom-ml/loom/cmd/loom/internal/creds"
	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	"github.com/loom-ml/loom/cmd/loom/internal/slurmcli"
	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/gateway"
)

// authGateway is the CLI tests' fake gateway with an AuthService that
// knows alice's API key (a cluster administrator, admin of project
// default) and bob's token "tok-bob"; its tokens are on the real clock.
func authGateway(t *testing.T) (f *fakegw.Gateway, gw, aliceKey string) {
	t.Helper()
	_, aliceKey, err := auth.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	alice := fakegw.UserPrincipal("alice")
	alice.ClusterAdmin, alice.Roles, alice.How = true, map[string]string{"default": "admin", "ml": "viewer"}, "api-key"
	f = newFakeGatewayData()
	f.Auth = &fakegw.Auth{Now: time.Now, Principals: map[string]*loomv1.Principal{aliceKey: alice, "tok-bob": fakegw.UserPrincipal("bob")}}
	return f, f.Serve(t), aliceKey
}

// authCLI runs the CLI with config directory dir and the environment env
// (LOOM_TOKEN, ...), nothing else of this process's.
func authCLI(t *testing.T, gw, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	return runWith(t, gw, func(a *app) {
		a.configDir = dir
		a.environ = func() []string { return env }
	}, args...)
}

// lastBearer is the credential the last call to f carried.
func lastBearer(f *fakegw.Gateway) string {
	b := f.Bearers()
	if len(b) == 0 {
		return "<no call>"
	}
	return b[len(b)-1]
}

// TestAuthLoginWhoAmIKeysLogout: the whole of `loom auth` against a fake
// AuthService that checks the bearer of every call: not logged in says
// what to do; login with an API key saves an access token (mode 0600) and
// the commands send it, not the key; whoami, keys create/list/revoke
// (tables and JSON); LOOM_TOKEN wins over the file; logout forgets.
func TestAuthLoginWhoAmIKeysLogout(t *testing.T) {
	t.Parallel()
	f, gw, aliceKey := authGateway(t)
	dir := filepath.Join(t.TempDir(), "loom")

	// Not logged in: the gateway refuses, and the CLI says what to do.
	_, errOut, code := authCLI(t, gw, dir, nil, "auth", "whoami")
	if want := "not logged in to " + gw + ": run `loom auth login --gateway " + gw + "` (or set LOOM_TOKEN)"; code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("whoami before login: exit %d, %q; want %q", code, errOut, want)
	}

	// A key that is not one is refused before any call.
	_, errOut, code = authCLI(t, gw, dir, nil, "auth", "login", "--key-file", writeFile(t, "tok", "eyJhbGciOi.x.y\n"))
	if code != 2 || !strings.Contains(errOut, "not an API key") {
		t.Fatalf("login with a token: exit %d, %q", code, errOut)
	}
	out, errOut, code := authCLI(t, gw, dir, nil, "auth", "login", "--key-file", writeFile(t, "key", aliceKey+"\n"))
	path := filepath.Join(dir, creds.FileName)
	if code != 0 || out != "Logged in to "+gw+" as users/alice (cluster administrator); credentials saved in "+path+".\n" || errOut != "" {
		t.Fatalf("login: exit %d, %q, %q", code, out, errOut)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	e, err := creds.Open(dir).Get(gw)
	if err != nil || e == nil || e.APIKey != aliceKey || !strings.HasPrefix(e.AccessToken, "at-") || e.User != "alice" {
		t.Fatalf("saved entry %+v (%v)", e, err)
	}

	out, errOut, code = authCLI(t, gw, dir, nil, "auth", "whoami")
	if code != 0 {
		t.Fatalf("whoami: exit %d, %s", code, errOut)
	}
	golden(t, out, `
PRINCIPAL      users/alice
KIND           user
USER           alice
CLUSTER ADMIN  yes
ROLES          default=admin, ml=viewer
CREDENTIAL     token (from credentials file)
GATEWAY        `+gw+`
`)
	if got := lastBearer(f); got != e.AccessToken {
		t.Errorf("whoami sent %q; want the saved access token %q (not the key)", got, e.AccessToken)
	}
	// Every command's connection carries it.
	if _, errOut, code := authCLI(t, gw, dir, nil, "clusters", "list"); code != 0 || lastBearer(f) != e.AccessToken {
		t.Errorf("clusters list: exit %d (%s), sent %q; want the access token", code, errOut, lastBearer(f))
	}
	out, _, code = authCLI(t, gw, dir, nil, "auth", "whoami", "-o", "json")
	var p map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &p) != nil || p["name"] != "users/alice" || p["clusterAdmin"] != true {
		t.Errorf("whoami -o json: exit %d, %s", code, out)
	}

	// Keys: create (the secret shown once), list, revoke.
	out, errOut, code = authCLI(t, gw, dir, nil, "auth", "keys", "create", "--display-name", "ci")
	if code != 0 || !strings.HasPrefix(out, "Created API key ") || !strings.Contains(out, " for alice (never expires). Its secret is shown this once") {
		t.Fatalf("keys create: exit %d, %q, %q", code, out, errOut)
	}
	var secret string
	for _, l := range strings.Split(out, "\n") {
		if s := strings.TrimSpace(l); strings.HasPrefix(s, auth.APIKeyPrefix) {
			secret = s
		}
	}
	id, _, err := auth.ParseAPIKey(secret)
	if err != nil {
		t.Fatalf("keys create printed no key: %q (%v)", out, err)
	}
	out, _, code = authCLI(t, gw, dir, nil, "auth", "keys", "create", "--user", "bob", "--ttl", "720h", "-o", "json")
	if code != 0 || !strings.Contains(out, `"name": "users/bob/keys/`) || !strings.Contains(out, `"secret": "lk_`) {
		t.Fatalf("keys create --user bob -o json: exit %d, %s", code, out)
	}
	// Bob's key by its id alone is looked up among alice's: the refusal
	// says how to name another user's key.
	bobKey := regexp.MustCompile(`"name": "users/bob/keys/([0-9a-f]+)"`).FindStringSubmatch(out)
	if bobKey == nil {
		t.Fatalf("keys create --user bob -o json: no key name in %s", out)
	}
	_, errOut, code = authCLI(t, gw, dir, nil, "auth", "keys", "revoke", bobKey[1])
	if code != 1 || !strings.Contains(errOut, "users/alice/keys/"+bobKey[1]) || !strings.Contains(errOut, "another user's key is revoked with --user USER") {
		t.Errorf("keys revoke of bob's key id without --user: exit %d, %q; want exit 1 and how to name another user's key", code, errOut)
	}
	out, errOut, code = authCLI(t, gw, dir, nil, "auth", "keys", "list")
	if code != 0 {
		t.Fatalf("keys list: exit %d, %s", code, errOut)
	}
	// The fake's keys are made now; the CLI's clock is testNow, earlier.
	golden(t, out, `
ID                NAME  STATE   AGE  EXPIRES  CREATOR
`+id+`  ci    active  0s   never    users/alice
`)
	out, _, code = authCLI(t, gw, dir, nil, "auth", "keys", "revoke", id)
	if want := "Revoked API key users/alice/keys/" + id + "; calls with it are refused within 30 s.\n"; code != 0 || out != want {
		t.Fatalf("keys revoke: exit %d, %q, want %q", code, out, want)
	}
	out, _, code = authCLI(t, gw, dir, nil, "auth", "keys", "list", "-o", "json")
	if code != 0 || !strings.Contains(out, `"revokeTime"`) || !strings.Contains(out, `"keyId": "`+id+`"`) {
		t.Errorf("keys list -o json after revoke: exit %d, %s", code, out)
	}
	// The revoked key no longer authenticates.
	_, errOut, code = authCLI(t, gw, dir, []string{"LOOM_TOKEN=" + secret}, "auth", "whoami")
	if code != 1 || !strings.Contains(errOut, "refused your credential (from LOOM_TOKEN): API key ") || strings.Contains(errOut, "unauthenticated") ||
		!strings.HasSuffix(errOut, "LOOM_TOKEN wins over a saved login, so set it to a valid key or token, or unset it to use the login `loom auth login --gateway "+gw+"` saves\n") {
		// A login changes nothing while LOOM_TOKEN is set: it said
		// "run `loom auth login` again".
		t.Errorf("whoami with a revoked key: exit %d, %q", code, errOut)
	}

	// LOOM_TOKEN wins over the file.
	out, _, code = authCLI(t, gw, dir, []string{"LOOM_TOKEN=tok-bob"}, "auth", "whoami")
	if code != 0 || !strings.Contains(out, "PRINCIPAL      users/bob\n") || !strings.Contains(out, "(from LOOM_TOKEN)") || lastBearer(f) != "tok-bob" {
		t.Errorf("whoami with LOOM_TOKEN: exit %d, %q, sent %q", code, out, lastBearer(f))
	}

	// Logout forgets the entry (the key stays valid: nothing revoked).
	out, _, code = authCLI(t, gw, dir, nil, "auth", "logout")
	if code != 0 || out != "Logged out of "+gw+" (its entry is gone from "+path+").\n" {
		t.Fatalf("logout: exit %d, %q", code, out)
	}
	if e, err := creds.Open(dir).Get(gw); e != nil || err != nil {
		t.Errorf("entry after logout: %+v (%v)", e, err)
	}
	if _, errOut, code := authCLI(t, gw, dir, nil, "auth", "whoami"); code != 1 || !strings.Contains(errOut, "not logged in to "+gw) {
		t.Errorf("whoami after logout: exit %d, %q", code, errOut)
	}
	if out, _, code := authCLI(t, gw, dir, nil, "auth", "logout"); code != 0 || !strings.HasPrefix(out, "Not logged in to "+gw) {
		t.Errorf("logout again: exit %d, %q", code, out)
	}
	// logout --revoke ends the key on the gateway too.
	if _, errOut, code := authCLI(t, gw, dir, nil, "auth", "login", "--key-file", "-"); code != 2 || !strings.Contains(errOut, "no API key given") {
		t.Errorf("login with an empty stdin: exit %d, %q", code, errOut)
	}
	if _, errOut, code := authCLI(t, gw, dir, nil, "auth", "login", "--key-file", writeFile(t, "key", secret)); code != 1 || !strings.Contains(errOut, "refused the credential") {
		t.Errorf("login with a revoked key: exit %d, %q", code, errOut)
	}
}

// TestAuthRenewsExpiredTokens: an access token about to expire is
// replaced before a call, with the saved API key, or with the refresh
// token of an OIDC login (used once: the new one is saved); a refresh
// token the gateway no longer takes says to log in again.
func TestAuthRenewsExpiredTokens(t *testing.T) {
	t.Parallel()
	f, gw, aliceKey := authGateway(t)
	f.Auth.TokenTTL = 30 * time.Second // less than creds.RefreshBefore: always renewed
	f.Auth.OIDC = map[string]string{"id-token-carol": "carol"}
	dir := t.TempDir()
	st := creds.Open(dir)

	if _, errOut, code := authCLI(t, gw, dir, nil, "auth", "login", "--key-file", writeFile(t, "key", aliceKey)); code != 0 {
		t.Fatalf("login: %s", errOut)
	}
	before, _ := st.Get(gw)
	if _, errOut, code := authCLI(t, gw, dir, nil, "auth", "whoami"); code != 0 {
		t.Fatalf("whoami: %s", errOut)
	}
	after, _ := st.Get(gw)
	if after.AccessToken == before.AccessToken || lastBearer(f) != after.AccessToken || after.APIKey != aliceKey {
		t.Errorf("renewal with the API key: before %q, after %q, sent %q", before.AccessToken, after.AccessToken, lastBearer(f))
	}

	out, errOut, code := authCLI(t, gw, dir, nil, "auth", "login", "--oidc-token-file", writeFile(t, "id", "id-token-carol\n"))
	if code != 0 || !strings.Contains(out, "as users/carol;") {
		t.Fatalf("OIDC login: exit %d, %q, %q", code, out, errOut)
	}
	before, _ = st.Get(gw)
	if before.APIKey != "" || !strings.HasPrefix(before.RefreshToken, "rt-") {
		t.Fatalf("OIDC login saved %+v; want a refresh token and no key", before)
	}
	out, errOut, code = authCLI(t, gw, dir, nil, "auth", "whoami")
	after, _ = st.Get(gw)
	if code != 0 || !strings.Contains(out, "users/carol") || after.RefreshToken == before.RefreshToken || lastBearer(f) != after.AccessToken {
		t.Fatalf("renewal with the refresh token: exit %d (%s), refresh %q -> %q", code, errOut, before.RefreshToken, after.RefreshToken)
	}
	// A refresh token the gateway does not take (expired, used).
	after.RefreshToken, after.ExpireTime = "rt-gone", time.Now().Add(-time.Hour)
	if err := st.Put(gw, after); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = authCLI(t, gw, dir, nil, "clusters", "list")
	if code != 1 || !strings.Contains(errOut, "your login to "+gw+" has expired or was revoked") || !strings.Contains(errOut, "run `loom auth login --gateway "+gw+"`") {
		t.Errorf("an unusable refresh token: exit %d, %q", code, errOut)
	}
}

// TestSlurmCommandsActAsTheirCredential: a Slurm command sends its
// credential and acts as its principal: `USER=root LOOM_USER=root sbatch`
// with bob's token submits as bob; with no credential, as the OS account.
func TestSlurmCommandsActAsTheirCredential(t *testing.T) {
	t.Parallel()
	f, gw, _ := authGateway(t)
	_, errOut, code := authCLI(t, gw, t.TempDir(), []string{"LOOM_TOKEN=tok-bob", "USER=root", "LOOM_USER=root"},
		"slurm", "sbatch", "-M", "demo", "--parsable", "--wrap", "true")
	if code != 0 {
		t.Fatalf("sbatch: exit %d, %s", code, errOut)
	}
	req, ok := fakegw.LastRequest[*loomv1.SubmitJobRequest](f)
	if !ok || req.GetJob().GetUser() != "bob" {
		t.Errorf("sbatch as bob with USER=root submitted for %q", req.GetJob().GetUser())
	}
	for i, b := range f.Bearers() {
		if b != "tok-bob" {
			t.Errorf("call %d carried %q, want bob's token", i, b)
		}
	}
	// With no credential, to a gateway that authenticates: the OS
	// account, not what USER claims.
	if _, errOut, code := authCLI(t, gw, t.TempDir(), []string{"USER=someone-else", "LOOM_USER=someone-else"},
		"slurm", "sbatch", "-M", "demo", "--parsable", "--wrap", "true"); code != 0 {
		t.Fatalf("anonymous sbatch: exit %d, %s", code, errOut)
	}
	if req, _ := fakegw.LastRequest[*loomv1.SubmitJobRequest](f); req.GetJob().GetUser() != slurmcli.AccountName() {
		t.Errorf("anonymous sbatch with USER=someone-else submitted for %q, want the OS account %q", req.GetJob().GetUser(), slurmcli.AccountName())
	}
}

// TestUpSavesTheAdministratorKeyOnce: `loom up` hands the administrator
// key the gateway made at this start to the CLI's credentials file (0600)
// and says so; at a later start (the key is not new) it says nothing.
func TestUpSavesTheAdministratorKeyOnce(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	keys := stack.KeysIn(data)
	if err := os.MkdirAll(keys.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	_, key, _ := auth.NewAPIKey()
	if err := os.WriteFile(keys.Admin, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newApp()
	a.configDir = t.TempDir()
	st := &stack.Stack{GatewayAddr: "127.0.0.1:7070", DataDir: data, Keys: keys, Admin: "alice", NewAdminKey: true}
	var out strings.Builder
	if err := a.saveAdminKey(st, &out); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(a.configDir, creds.FileName)
	if !strings.Contains(out.String(), "Created an administrator API key for alice (cluster admin) and saved it in "+path) {
		t.Errorf("loom up said %q", out.String())
	}
	e, err := creds.Open(a.configDir).Get("127.0.0.1:7070")
	if err != nil || e == nil || e.APIKey != key || e.User != "alice" {
		t.Fatalf("saved %+v (%v)", e, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("credentials file mode %v (%v)", fi.Mode().Perm(), err)
	}
	out.Reset()
	st.NewAdminKey = false
	if err := a.saveAdminKey(st, &out); err != nil || out.Len() != 0 {
		t.Errorf("a later start said %q (%v); want nothing", out.String(), err)
	}
}

// gatewayHasFlag says whether the gateway takes flag name.
func gatewayHasFlag(name string) bool {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	new(gateway.Config).RegisterFlags(fs)
	return fs.Lookup(name) != nil
}

// upAndStop runs `loom up` on dataDir with the CLI config directory
// cfg, calls while(gateway address) once it is up, then stops it (Ctrl-C)
// and returns what it printed.
func upAndStop(t *testing.T, dataDir, cfg string, while func(gw string)) string {
	t.Helper()
	a := newApp()
	a.upAddrs = func(int) (stack.Addrs, error) { return stack.Addrs{}, nil }
	a.configDir = cfg
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testkit.Buffer
	code := make(chan int, 1)
	go func() {
		code <- a.execute(ctx, []string{"up", "--data-dir", dataDir, "--log-level", "warn"}, &out, &errOut)
	}()
	up := regexp.MustCompile(`Loom is up: gateway (\S+) `)
	var gw string
	testkit.WaitFor(t, 90*time.Second, "loom up to be up", func() (bool, error) {
		select {
		case c := <-code:
			t.Fatalf("loom up exited %d:\n%s%s", c, out.String(), errOut.String())
		default:
		}
		if m := up.FindStringSubmatch(out.String()); m != nil {
			gw = m[1]
			return true, nil
		}
		return false, nil
	})
	while(gw)
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("loom up exited %d after Ctrl-C:\n%s%s", c, out.String(), errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("loom up did not stop after Ctrl-C")
	}
	return out.String()
}

// TestUpHandsTheAdministratorKeyOverOnce: the first `loom up` on a data
// directory saves the administrator key the gateway made in the CLI's
// credentials file and says so; loom commands then just work, as the
// cluster administrator (the OS user running loom up); its login daemon
// gives this process a token for its own account. The second `loom up`
// on the same data directory says nothing of a key.
func TestUpHandsTheAdministratorKeyOverOnce(t *testing.T) {
	if !gatewayHasFlag("bootstrap-key-file") {
		t.Skip("this gateway makes no administrator key (no -bootstrap-key-file: issue 13's gateway side): nothing for loom up to hand over")
	}
	t.Parallel()
	me := slurmcli.AccountName()
	data, cfg := t.TempDir(), t.TempDir()
	const said = "Created an administrator API key for "
	first := upAndStop(t, data, cfg, func(gw string) {
		e, err := creds.Open(cfg).Get(gw)
		if err != nil || e == nil || e.APIKey == "" || e.User != me {
			t.Fatalf("credentials entry for %s after the first loom up: %+v (%v)", gw, e, err)
		}
		// No LOOM_TOKEN, no flag: the saved key is what the CLI sends.
		out, errOut, code := authCLI(t, gw, cfg, nil, "auth", "whoami")
		if code != 0 || !strings.Contains(out, "PRINCIPAL      users/"+me+"\n") || !strings.Contains(out, "CLUSTER ADMIN  yes\n") {
			t.Errorf("whoami after loom up: exit %d, %q, %q", code, out, errOut)
		}
		if a, err := authd.Ask(context.Background(), filepath.Join(data, "authd.sock")); err != nil || a.User != me {
			t.Errorf("loom up's login daemon answered %+v, %v; want a token for %s", a, err, me)
		}
	})
	if n := strings.Count(first, said); n != 1 {
		t.Errorf("the first loom up said %q %d times, want once:\n%s", said, n, first)
	}
	second := upAndStop(t, data, cfg, func(string) {})
	if strings.Contains(second, said) {
		t.Errorf("the second loom up on the same data directory spoke of the key again:\n%s", second)
	}
}

// TestAuthdNeedsTheLoginKey: `loom authd` without the login key says
// where it comes from, and listens on nothing.
func TestAuthdNeedsTheLoginKey(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	_, errOut, code := run(t, "127.0.0.1:1", "authd", "--data-dir", data)
	if code != 1 || !strings.Contains(errOut, "login key: ") || !strings.Contains(errOut, "--login-key-file") {
		t.Errorf("authd without a login key: exit %d, %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(data, "authd.sock")); err == nil {
		t.Error("authd left a socket behind")
	}
}

// TestAuthdServesItsDataDirsUp: without --gateway, `loom authd --data-dir
// D` serves the gateway that D's running `loom up` recorded, not the
// default data directory's; --gateway still wins.
func TestAuthdServesItsDataDirsUp(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	keys := stack.KeysIn(data)
	if err := os.MkdirAll(keys.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keys.Login, []byte("lk_test.key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// This process as D's running `loom up`, on ports of its own.
	if err := writeUpRecord(data, upRecord{PortBase: 8100, Gateway: "127.0.0.1:8170", REST: "127.0.0.1:8180", Broker: "127.0.0.1:8192"}); err != nil {
		t.Fatal(err)
	}
	release, err := holdDataDir(data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	for i, c := range []struct {
		args []string
		want string
	}{
		{nil, "127.0.0.1:8170"},
		{[]string{"--gateway", "127.0.0.1:9170"}, "127.0.0.1:9170"},
	} {
		a := newApp()
		// The default data directory (~/.loom of an empty home) has no
		// `loom up`: its gateway would be DefaultGateway.
		a.environ = func() []string { return []string{"HOME=" + t.TempDir()} }
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel) // should the test stop before its Ctrl-C
		var out, errOut testkit.Buffer
		code := make(chan int, 1)
		socket := filepath.Join(data, "authd"+strconv.Itoa(i)+".sock")
		go func() {
			code <- a.execute(ctx, append([]string{"authd", "--data-dir", data, "--socket", socket}, c.args...), &out, &errOut)
		}()
		testkit.WaitFor(t, 30*time.Second, "loom authd to listen", func() (bool, error) {
			select {
			case n := <-code:
				return false, fmt.Errorf("loom authd %v exited %d: %s%s", c.args, n, out.String(), errOut.String())
			default:
			}
			return strings.Contains(out.String(), "Login daemon on "), nil
		})
		if want := "for the gateway at " + c.want + "."; !strings.Contains(out.String(), want) {
			t.Errorf("loom authd --data-dir D %v said %q, want %q", c.args, out.String(), want)
		}
		cancel() // Ctrl-C
		select {
		case n := <-code:
			if n != 0 {
				t.Errorf("loom authd exited %d after Ctrl-C: %s", n, errOut.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatal("loom authd did not stop after Ctrl-C")
		}
	}
}

// TestReadSecretFromAPipe: off a terminal the key is read as it comes,
// one line, trimmed, with no prompt written.
func TestReadSecretFromAPipe(t *testing.T) {
	t.Parallel()
	var prompt strings.Builder
	got, err := readSecret(strings.NewReader("  lk_abc.def  \nrest\n"), &prompt, "API key: ")
	if err != nil || got != "lk_abc.def" || prompt.Len() != 0 {
		t.Errorf("readSecret = %q, %v, prompt %q", got, err, prompt.String())
	}
}

// TestReadSecretOnATerminalDoesNotEcho: on a terminal (a pty here) the key
// is read with echo off, so it never shows, and echo is on again after.
func TestReadSecretOnATerminalDoesNotEcho(t *testing.T) {
	t.Parallel()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer master.Close()
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Skipf("pty number: %v", err)
	}
	term, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open pty: %v", err)
	}
	defer term.Close()
	echo := func() bool {
		tio, err := unix.IoctlGetTermios(int(term.Fd()), unix.TCGETS)
		return err == nil && tio.Lflag&unix.ECHO != 0
	}
	if !echo() {
		t.Fatal("a new pty does not echo: nothing to check")
	}
	var prompt strings.Builder
	type result struct {
		key string
		err error
	}
	done := make(chan result, 1)
	go func() {
		k, err := readSecret(term, &prompt, "API key: ")
		done <- result{k, err}
	}()
	testkit.WaitFor(t, 10*time.Second, "echo off", func() (bool, error) { return !echo(), nil })
	if _, err := master.Write([]byte("lk_secret.value\n")); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.key != "lk_secret.value" || prompt.String() != "API key: \n" {
		t.Fatalf("readSecret = %q, %v; prompt %q", r.key, r.err, prompt.String())
	}
	if !echo() {
		t.Error("echo is still off after the key was read")
	}
	// What the terminal showed: the newline (ECHONL), never the key.
	shown := make(chan string, 1)
	go func() {
		b := make([]byte, 256)
		k, _ := master.Read(b)
		shown <- string(b[:k])
	}()
	select {
	case out := <-shown:
		if out != "\r\n" && out != "\n" {
			t.Errorf("the terminal showed %q; want only the newline, never the key", out)
		}
	case <-time.After(10 * time.Second):
		t.Error("the terminal showed nothing, not even the newline (ECHONL)")
	}
}

// TestAuthMembers: `loom auth members` sets, lists and removes a project's
// members (and with --global the cluster administrators), in an aligned
// table or JSON; a bad role is refused with the gateway's reason and a
// caller who may not is told so.
func TestAuthMembers(t *testing.T) {
	t.Parallel()
	_, gw, aliceKey := authGateway(t)
	env := []string{"LOOM_TOKEN=" + aliceKey}
	dir := t.TempDir()
	for _, args := range [][]string{{"set", "carol", "user"}, {"set", "bob", "viewer"}, {"set", "dave", "admin"}} {
		out, errOut, code := authCLI(t, gw, dir, env, append([]string{"auth", "members"}, args...)...)
		if want := args[1] + " is " + args[2] + " in projects/default.\n"; code != 0 || out != want {
			t.Fatalf("members %v: exit %d, %q %q; want %q", args, code, out, errOut, want)
		}
	}
	if out, _, code := authCLI(t, gw, dir, env, "auth", "members", "remove", "dave"); code != 0 || out != "dave has no role in projects/default any more.\n" {
		t.Fatalf("remove: exit %d, %q", code, out)
	}
	out, _, code := authCLI(t, gw, dir, env, "auth", "members", "list")
	if code != 0 {
		t.Fatalf("list: exit %d", code)
	}
	golden(t, out, `
USER   ROLE
bob    viewer
carol  user
`)
	out, _, code = authCLI(t, gw, dir, env, "auth", "members", "list", "-o", "json")
	var resp map[string][]map[string]string
	if code != 0 || json.Unmarshal([]byte(out), &resp) != nil || len(resp["members"]) != 2 || resp["members"][1]["user"] != "carol" {
		t.Errorf("list -o json: exit %d, %s", code, out)
	}
	if out, _, code := authCLI(t, gw, dir, env, "auth", "members", "set", "--global", "erin", "cluster-admin"); code != 0 || out != "erin is cluster-admin in global.\n" {
		t.Errorf("set --global: exit %d, %q", code, out)
	}
	_, errOut, code := authCLI(t, gw, dir, env, "auth", "members", "set", "carol", "owner")
	if code != 1 || !strings.Contains(errOut, `unknown role "owner"`) {
		t.Errorf("a bad role: exit %d, %q", code, errOut)
	}
	_, errOut, code = authCLI(t, gw, dir, []string{"LOOM_TOKEN=tok-bob"}, "auth", "members", "set", "bob", "admin")
	if code != 1 || !strings.Contains(errOut, "permission denied") {
		t.Errorf("bob makes himself admin: exit %d, %q", code, errOut)
	}
	if _, errOut, code := authCLI(t, gw, dir, env, "auth", "members", "set", "carol"); code != 2 || !strings.Contains(errOut, "give the user and the role") {
		t.Errorf("set without a role: exit %d, %q", code, errOut)
	}
}

// TestAuthOIDCBindingCommands: against a live stack (no OIDC sign-in has
// bound anyone), `loom auth oidc-binding` says there is none and how one
// is made, for the caller and for another user, and `release` says there
// is nothing to release; `login --link` needs an ID token.
func TestAuthOIDCBindingCommands(t *testing.T) {
	t.Parallel()
	upWhile(t, t.TempDir(), func(c liveCLI) {
		for _, args := range [][]string{{"auth", "oidc-binding"}, {"auth", "oidc-binding", "alice"}, {"auth", "oidc-binding", "release", "alice"}} {
			_, errOut, code := c.run(args...)
			if code == 0 || !strings.Contains(errOut, "has no OIDC binding") {
				t.Errorf("loom %s: exit %d, %q; want the refusal saying there is no binding", strings.Join(args, " "), code, errOut)
			}
		}
		if _, errOut, code := c.run("auth", "oidc-binding", "release"); code != 2 || !strings.Contains(errOut, "loom auth oidc-binding release alice") {
			t.Errorf("release without a user: exit %d, %q; want a usage error with an example", code, errOut)
		}
		if _, errOut, code := c.run("auth", "login", "--link"); code != 2 || !strings.Contains(errOut, "give --oidc-token-file too") {
			t.Errorf("login --link without a token: exit %d, %q; want a usage error", code, errOut)
		}
		idFile := filepath.Join(t.TempDir(), "id-token")
		if err := os.WriteFile(idFile, []byte("a.b.c"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := c.run("auth", "login", "--oidc-token-file", idFile, "--link"); code != 2 || !strings.Contains(errOut, "--link needs a login with an API key first") {
			t.Errorf("login --link with no saved API key: exit %d, %q; want a usage error", code, errOut)
		}
	})
}

// TestRefusedLoginDaemonSaysSo: in a `loom clusters login` shell the
// login daemon of LOOM_AUTHD_SOCKET wins over a saved login, so a refusal
// through it says to ask whoever runs it or unset LOOM_AUTHD_SOCKET, not
// to log in again (which changed nothing); and a refusal by the daemon
// itself is not passed off as the gateway's. It said "the gateway refused
// your credential (from ): the login daemon at ...; run `loom auth login`
// again".
func TestRefusedLoginDaemonSaysSo(t *testing.T) {
	t.Parallel()
	_, gw, _ := authGateway(t)
	// daemon answers every connection with answer, as the login daemon's
	// one JSON line.
	daemon := func(answer string) string {
		sock := filepath.Join(t.TempDir(), "authd.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte(answer + "\n"))
				_ = c.Close()
			}
		}()
		return sock
	}
	advice := "unset LOOM_AUTHD_SOCKET to use the login `loom auth login --gateway " + gw + "` saves\n"
	for _, tc := range []struct {
		name, answer, want string
	}{
		{"a token the gateway refuses", `{"access_token":"not-a-token","user":"bob","principal":"users/bob"}`,
			"the gateway at " + gw + " refused your credential (from the login daemon at "},
		{"the daemon's own refusal", `{"error":"uid 1234 has no account"}`, "the login daemon at "},
	} {
		sock := daemon(tc.answer)
		_, errOut, code := authCLI(t, gw, filepath.Join(t.TempDir(), "loom"), []string{"LOOM_AUTHD_SOCKET=" + sock}, "auth", "whoami")
		if code != 1 || !strings.HasPrefix(errOut, "Error: who am I: "+tc.want+sock) || !strings.HasSuffix(errOut, advice) ||
			strings.Contains(errOut, "(from )") || strings.Contains(errOut, "again") {
			t.Errorf("%s: exit %d, %q; want %q ... %q", tc.name, code, errOut, tc.want+sock, advice)
		}
	}
}
