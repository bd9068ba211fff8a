package creds

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loom-ml/loom/cmd/loom/internal/authd"
	"github.com/loom-ml/loom/cmd/loom/internal/fakegw"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// TestStoreModes: the file is written 0600 in a 0700 directory, entries
// are kept per gateway, and a file others may read is refused with what
// to do.
func TestStoreModes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "cfg", "loom")
	st := Open(dir)
	if e, err := st.Get("gw:1"); e != nil || err != nil {
		t.Fatalf("Get with no file: %+v, %v", e, err)
	}
	if err := st.Put("gw:1", &Entry{APIKey: "lk_a", User: "alice"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Put("gw:2", &Entry{AccessToken: "t2", ExpireTime: time.Unix(2e9, 0).UTC()}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, st.Path(): 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	if e, _ := st.Get("gw:1"); e == nil || e.APIKey != "lk_a" || e.User != "alice" {
		t.Errorf("gw:1 = %+v", e)
	}
	if e, _ := st.Get("gw:2"); e == nil || !e.ExpireTime.Equal(time.Unix(2e9, 0)) {
		t.Errorf("gw:2 = %+v", e)
	}
	if ok, err := st.Delete("gw:1"); !ok || err != nil {
		t.Errorf("Delete: %v %v", ok, err)
	}
	if e, _ := st.Get("gw:1"); e != nil {
		t.Errorf("gw:1 after Delete = %+v", e)
	}
	if err := os.Chmod(st.Path(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get("gw:2"); err == nil || !strings.Contains(err.Error(), "chmod 600 "+st.Path()) {
		t.Errorf("Get of a 0644 file: %v; want a refusal saying chmod 600", err)
	}
	if d, _ := Dir(func(k string) string { return map[string]string{"LOOM_CONFIG_DIR": "/x/y"}[k] }); d != "/x/y" {
		t.Errorf("Dir with LOOM_CONFIG_DIR = %q", d)
	}
}

// TestSourceOrder: LOOM_TOKEN wins over the login daemon, which wins over
// the file; a socket with no daemon behind it falls through to the file;
// with nothing, calls go anonymous.
func TestSourceOrder(t *testing.T) {
	t.Parallel()
	const gw = "127.0.0.1:7070"
	st := Open(t.TempDir())
	if err := st.Put(gw, &Entry{AccessToken: "file-token", ExpireTime: time.Now().Add(time.Hour), User: "carol"}); err != nil {
		t.Fatal(err)
	}
	f := &fakegw.Gateway{Auth: &fakegw.Auth{Now: time.Now, LoginKey: "lk_login", Principals: map[string]*loomv1.Principal{
		"lk_login": {Name: "services/login", Kind: loomv1.PrincipalKind_PRINCIPAL_KIND_SERVICE}}}}
	sock := filepath.Join(t.TempDir(), "authd.sock")
	ln, err := authd.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&authd.Server{Conn: f.Dial(t), LoginKey: func() (string, error) { return "lk_login", nil }}).Serve(ctx, ln)
	}()
	t.Cleanup(func() { cancel(); <-done })

	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		name      string
		src       *Source
		want      string
		from      string
		knownUser bool
	}{
		{"LOOM_TOKEN first", &Source{Gateway: gw, Getenv: env(map[string]string{"LOOM_TOKEN": "env-token"}), Authd: sock, Store: st}, "env-token", FromEnv, false},
		{"then the daemon", &Source{Gateway: gw, Getenv: env(nil), Authd: sock, Store: st}, "at-", FromAuthd, true},
		{"no daemon there: the file", &Source{Gateway: gw, Getenv: env(nil), Authd: filepath.Join(t.TempDir(), "none.sock"), Store: st}, "file-token", FromFile, true},
		{"another gateway: nothing", &Source{Gateway: "other:1", Getenv: env(nil), Store: st}, "", FromNone, false},
	} {
		tok, err := c.src.Token(context.Background())
		if err != nil || !strings.HasPrefix(tok, c.want) || (c.want == "" && tok != "") || c.src.From() != c.from {
			t.Errorf("%s: %q from %s (%v); want %q from %s", c.name, tok, c.src.From(), err, c.want, c.from)
		}
		if _, _, ok := c.src.Identity(); ok != c.knownUser {
			t.Errorf("%s: identity known %v, want %v", c.name, ok, c.knownUser)
		}
	}
}
