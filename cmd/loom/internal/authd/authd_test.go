package authd

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	"github.com/loom-ml/loom/libs/testkit"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// askEnv, in a test binary's environment, makes it a client of the daemon
// on that socket: it prints the answer as JSON and exits (how a process
// running as another uid asks, in TestTokenForTheCallersOwnUID).
const askEnv = "LOOM_TEST_AUTHD_ASK"

// fakeEnv, in a test binary's environment, makes it a hostile local
// user's stand-in for the login daemon on that socket: it listens, says
// "ready" on stdout, and answers every connection a token of its own
// until its stdin closes (TestRefusesAnotherUsersDaemon).
const fakeEnv = "LOOM_TEST_AUTHD_FAKE"

func TestMain(m *testing.M) {
	if sock := os.Getenv(fakeEnv); sock != "" {
		ln, err := net.Listen("unix", sock)
		if err == nil {
			err = os.Chmod(sock, 0o666)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = json.NewEncoder(c).Encode(Answer{AccessToken: "mallorys-token", User: "root", Principal: "users/root"})
				_ = c.Close()
			}
		}()
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = ln.Close()
		os.Exit(0)
	}
	if sock := os.Getenv(askEnv); sock != "" {
		a, err := Ask(context.Background(), sock)
		if err != nil {
			a = &Answer{Error: err.Error()}
		}
		_ = json.NewEncoder(os.Stdout).Encode(a)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const loginKey = "lk_0123456789abcdef.login-secret"

// daemon serves a login daemon for the fake gateway f on a socket in a
// directory every user may reach, until the test ends.
func daemon(t *testing.T, f *fakegw.Gateway) (sock string) {
	t.Helper()
	return serve(t, &Server{Conn: f.Dial(t), LoginKey: func() (string, error) { return loginKey, nil }})
}

// serve serves s on a socket in a directory every user may reach, until
// the test ends.
func serve(t *testing.T, s *Server) (sock string) {
	t.Helper()
	dir := t.TempDir()
	// t.TempDir's directories are 0700: open the way for other users.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sock = filepath.Join(dir, "authd.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return sock
}

// fakeGateway is a fake gateway whose AuthService knows the login key.
func fakeGateway() *fakegw.Gateway {
	return &fakegw.Gateway{Auth: &fakegw.Auth{Now: time.Now, LoginKey: loginKey, Principals: map[string]*loomv1.Principal{
		loginKey: {Name: "services/login", Kind: loomv1.PrincipalKind_PRINCIPAL_KIND_SERVICE},
	}}}
}

// addUser makes an OS account for the test (useradd), deleted when it
// ends.
func addUser(t *testing.T) *osuser.User {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "loomt" + hex.EncodeToString(b)
	if out, err := exec.Command("useradd", "-M", "-N", "-s", "/bin/sh", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	u, err := osuser.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// needRoot skips a test that makes OS users unless it runs as root with
// useradd.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making OS users (useradd) and running processes as them needs root: run this test as root to check the login daemon against real uids")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("no useradd on this machine: cannot make the OS users this test needs")
	}
}

// askAs runs this test binary as u's uid, asking the daemon on sock with
// USER and LOOM_USER claiming root, and returns its answer.
func askAs(t *testing.T, bin, sock string, u *osuser.User) Answer {
	t.Helper()
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	cmd := exec.Command(bin)
	cmd.Env = []string{askEnv + "=" + sock, "USER=root", "LOOM_USER=root", "LOGNAME=root", "HOME=/"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ask as %s: %v (%s)", u.Username, err, out)
	}
	var a Answer
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatalf("ask as %s: %q: %v", u.Username, out, err)
	}
	return a
}

// TestTokenForTheCallersOwnUID: processes running as two real OS users
// (useradd) each get a token for exactly their own account, though their
// USER and LOOM_USER say root: the daemon goes by the uid the kernel
// reports (SO_PEERCRED) and asks the gateway with the login key.
func TestTokenForTheCallersOwnUID(t *testing.T) {
	needRoot(t)
	t.Parallel()
	f := fakeGateway()
	sock := daemon(t, f)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket %s: %v (%v); want a socket of mode 0666", sock, fi.Mode(), err)
	}
	// The test binary, where the users may run it.
	bin := filepath.Join(filepath.Dir(sock), "authd.test")
	copyFile(t, bin)

	for _, u := range []*osuser.User{addUser(t), addUser(t)} {
		a := askAs(t, bin, sock, u)
		if a.Error != "" || a.User != u.Username || a.Principal != "users/"+u.Username || a.AccessToken == "" {
			t.Fatalf("%s (uid %s) with USER=root got %+v; want a token for %s", u.Username, u.Uid, a, u.Username)
		}
		if p := f.Auth.Principals[a.AccessToken]; p.GetUser() != u.Username {
			t.Errorf("the token %s handed to %s is the gateway's token for %q", a.AccessToken, u.Username, p.GetUser())
		}
		if req, _ := fakegw.LastRequest[*loomv1.CreateTokenRequest](f); req.GetUser() != u.Username {
			t.Errorf("the daemon asked the gateway for %q's token for %s", req.GetUser(), u.Username)
		}
	}
	// The daemon asked with the login key, every time.
	for i, b := range f.Bearers() {
		if b != loginKey {
			t.Errorf("call %d to the gateway carried %q, want the login key", i, b)
		}
	}
}

func copyFile(t *testing.T, dst string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAskAndCache: this process asks in-process and gets its own
// account's token; a second ask reuses it (one CreateToken); a daemon
// without a usable login key, or one the gateway refuses, answers why.
func TestAskAndCache(t *testing.T) {
	t.Parallel()
	me, err := osuser.Current()
	if err != nil {
		t.Skip(err)
	}
	f := fakeGateway()
	sock := daemon(t, f)
	ctx := context.Background()
	a1, err := Ask(ctx, sock)
	if err != nil || a1.User != me.Username {
		t.Fatalf("Ask: %+v, %v; want a token for %s", a1, err, me.Username)
	}
	a2, err := Ask(ctx, sock)
	if err != nil || a2.AccessToken != a1.AccessToken {
		t.Errorf("second Ask: %+v, %v; want the cached token %s", a2, err, a1.AccessToken)
	}
	if n := len(fakegw.Requests[*loomv1.CreateTokenRequest](f)); n != 1 {
		t.Errorf("%d CreateToken calls for two asks, want 1", n)
	}
	if req, _ := fakegw.LastRequest[*loomv1.CreateTokenRequest](f); req.GetUser() != me.Username {
		t.Errorf("CreateToken for %q, want %q", req.GetUser(), me.Username)
	}

	// The gateway refuses a key that is not the login key.
	g := fakeGateway()
	g.Auth.LoginKey = "lk_other.key"
	if _, err := Ask(ctx, daemon(t, g)); err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Errorf("Ask of a daemon whose key the gateway refuses: %v", err)
	}
	// No daemon there: the error says so (fs.ErrNotExist), for the CLI to
	// try its next source.
	if _, err := Ask(ctx, filepath.Join(t.TempDir(), "none.sock")); err == nil || !os.IsNotExist(err) && !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Ask with no daemon: %v", err)
	}
}

// TestListen: a live daemon's socket is not taken over; a stale one is
// replaced; a file that is not a socket is left alone.
func TestListen(t *testing.T) {
	t.Parallel()
	sock := daemon(t, fakeGateway())
	if _, err := Listen(sock); err == nil || !strings.Contains(err.Error(), "another login daemon answers there") {
		t.Errorf("Listen on a live daemon's socket: %v", err)
	}
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	ln, err := Listen(stale)
	if err != nil {
		t.Fatal(err)
	}
	// A daemon killed leaves its socket file: simulate with the file kept.
	if ul, ok := ln.(interface{ SetUnlinkOnClose(bool) }); ok {
		ul.SetUnlinkOnClose(false)
	}
	_ = ln.Close()
	// The socket stops answering once the last copy of its descriptor
	// is closed: a parallel test's fork (useradd, a daemon) holds a copy,
	// close-on-exec or not, until its child execs, and a connect meanwhile
	// is accepted into the backlog. Wait for what a killed daemon leaves.
	testkit.WaitFor(t, 10*time.Second, "the closed socket to refuse connections", func() (bool, error) {
		c, err := net.DialTimeout("unix", stale, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err != nil, nil
	})
	if ln, err := Listen(stale); err != nil {
		t.Errorf("Listen on a stale socket: %v", err)
	} else {
		_ = ln.Close()
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(plain); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen on a plain file: %v", err)
	}
}

// TestListenRefusesAPlaceOthersRefuse: a daemon not run as root does not
// start where the commands of other users would refuse it (a directory
// every user may write) or on an abstract socket, whose owner no one can
// check: it would answer its own account only, and everyone else's
// commands would fail later with a refusal they cannot act on.
func TestListenRefusesAPlaceOthersRefuse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := listen(filepath.Join(open, "authd.sock"), true); err == nil || !strings.Contains(err.Error(), "the commands of other users would refuse this daemon") {
		t.Errorf("a directory every user may write: %v; want it refused", err)
	}
	if _, err := os.Lstat(filepath.Join(open, "authd.sock")); !os.IsNotExist(err) {
		t.Errorf("the refused socket is left behind: %v", err)
	}
	ln, err := listen(filepath.Join(dir, "authd.sock"), true)
	if err != nil {
		t.Fatalf("a directory only this account may write: %v", err)
	}
	_ = ln.Close()
	if _, err := Listen("@loom-authd-test"); err == nil || !strings.Contains(err.Error(), "abstract socket") {
		t.Errorf("an abstract socket: %v; want it refused, saying why", err)
	}
}

// TestBoundsOneAccountsConnections: an account holding maxConnsPerUID
// connections that are still being answered gets its next one refused at
// once, saying why, instead of holding another goroutine and descriptor;
// once one ends it is answered again.
func TestBoundsOneAccountsConnections(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	held := make(chan struct{}, maxConnsPerUID)
	sock := serve(t, &Server{Conn: fakeGateway().Dial(t), LoginKey: func() (string, error) { return loginKey, nil },
		Lookup: func(uint32) (string, error) {
			held <- struct{}{}
			<-release
			return "", errors.New("no such account")
		}})
	answers := make(chan error, maxConnsPerUID)
	for range maxConnsPerUID {
		go func() { _, err := Ask(context.Background(), sock); answers <- err }()
	}
	for range maxConnsPerUID {
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Fatal("the daemon did not take the first connections")
		}
	}
	if _, err := Ask(context.Background(), sock); err == nil || !strings.Contains(err.Error(), "try again in a moment") {
		t.Fatalf("a connection past %d of one account: %v, want it refused at once", maxConnsPerUID, err)
	}
	close(release)
	for range maxConnsPerUID {
		if err := <-answers; err == nil || !strings.Contains(err.Error(), "no such account") {
			t.Errorf("a held connection's answer: %v", err)
		}
	}
	if _, err := Ask(context.Background(), sock); err == nil || strings.Contains(err.Error(), "try again in a moment") {
		t.Errorf("a connection once the others ended: %v, want it answered", err)
	}
}

// TestRefusesAnotherUsersDaemon: a local user (a real OS account) who
// listens on the login daemon's path in a directory every user may write
// (the daemon down, or a socket put in /tmp) is not believed: the
// token it hands out is its own account's (whatever its answer says), and
// the asking user's commands would act as it. Another user's process and
// root each get an error saying why, not the listener's token.
func TestRefusesAnotherUsersDaemon(t *testing.T) {
	needRoot(t)
	t.Parallel()
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o1777); err != nil { // as /tmp
		t.Fatal(err)
	}
	bin := filepath.Join(filepath.Dir(dir), "authd.test")
	copyFile(t, bin)
	sock := filepath.Join(dir, "authd.sock")

	mallory, victim := addUser(t), addUser(t)
	uid, _ := strconv.ParseUint(mallory.Uid, 10, 32)
	gid, _ := strconv.ParseUint(mallory.Gid, 10, 32)
	fake := exec.Command(bin)
	fake.Env = []string{fakeEnv + "=" + sock, "HOME=/"}
	fake.Dir = "/"
	fake.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	stdin, err := fake.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := fake.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	fake.Stderr = os.Stderr
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = fake.Wait()
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the stand-in daemon of %s: %q, %v", mallory.Username, line, err)
	}

	if a := askAs(t, bin, sock, victim); a.AccessToken != "" || !strings.Contains(a.Error, "refusing the login daemon") {
		t.Errorf("%s asking a daemon run by %s in a directory every user may write got %+v; want it refused", victim.Username, mallory.Username, a)
	}
	if a, err := Ask(context.Background(), sock); err == nil || !strings.Contains(err.Error(), "refusing the login daemon") {
		t.Errorf("root asking a daemon run by %s: %+v, %v; want it refused", mallory.Username, a, err)
	}
}

// TestCheckDaemon: a daemon that runs as neither root nor the asking user
// is believed where only root and its account could have put its socket:
// a socket of its own in its own directory (not writable by others),
// under directories of root's, sticky ones such as /tmp included; not in
// a directory others may write (sticky or not), nor another user's, nor
// on a socket that is not its own. A link to a good socket is followed.
func TestCheckDaemon(t *testing.T) {
	needRoot(t)
	t.Parallel()
	svc, other := addUser(t), addUser(t)
	svcUID64, _ := strconv.ParseUint(svc.Uid, 10, 32)
	otherUID, _ := strconv.Atoi(other.Uid)
	svcUID := uint32(svcUID64)
	root := t.TempDir() // under /tmp: sticky and writable by all, which is fine above
	if err := os.Chmod(filepath.Dir(root), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	// mk makes dir (mode, owner uid) with a socket of sockUID in it.
	mk := func(name string, mode os.FileMode, dirUID, sockUID int) string {
		d := filepath.Join(root, name)
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(d, dirUID, -1); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(d, "authd.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		if err := os.Lchown(sock, sockUID, -1); err != nil {
			t.Fatal(err)
		}
		return sock
	}
	s := int(svcUID)
	own := mk("own", 0o755, s, s)
	rootGroup := mk("rootdir", 0o775, 0, s)
	if err := CheckDaemon(own, svcUID); err != nil {
		t.Errorf("a socket of the daemon's in its own directory: %v", err)
	}
	if err := CheckDaemon(rootGroup, svcUID); err != nil {
		t.Errorf("a socket of the daemon's in a root directory its group may write: %v", err)
	}
	link := filepath.Join(root, "link.sock")
	if err := os.Symlink(own, link); err != nil {
		t.Fatal(err)
	}
	if err := CheckDaemon(link, svcUID); err != nil {
		t.Errorf("a link to a good socket: %v", err)
	}
	for _, c := range []struct{ what, sock string }{
		{"a directory every user may write", mk("open", 0o777, s, s)},
		{"a sticky directory every user may write", mk("sticky", 0o1777, 0, s)},
		{"another user's directory", mk("others", 0o755, otherUID, s)},
		{"a socket that is another user's", mk("notours", 0o755, s, otherUID)},
	} {
		if err := CheckDaemon(c.sock, svcUID); err == nil || !strings.Contains(err.Error(), "refusing the login daemon") {
			t.Errorf("%s: %v; want it refused", c.what, err)
		}
	}
	if err := CheckDaemon(mk("open2", 0o777, s, s), 0); err != nil {
		t.Errorf("root's daemon is root's wherever it is: %v", err)
	}
}
