// Package authd is Loom's login daemon: a local service on a Unix socket
// that gives each local user a short-lived token for their own account, as
// munge vouches for a uid to Slurm. The operating system establishes who
// is asking (SO_PEERCRED: the uid of the process that connected); the
// daemon never takes a name from the client, so `USER=root scancel` is
// still its caller's uid. It asks the gateway with the login key (the
// service principal "services/login", which alone may CreateToken for
// another user) and answers the token.
//
// The protocol is one JSON line each way per connection: the client sends
// nothing (what it could send would be a claim), the daemon answers an
// Answer and closes.
package authd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	osuser "os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/loom-ml/loom/libs/auth"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Answer is the daemon's reply: a token for the caller's account, or why
// not.
type Answer struct {
	AccessToken string    `json:"access_token,omitempty"`
	ExpireTime  time.Time `json:"expire_time,omitzero"`
	// User is the caller's account name; Principal its principal
	// ("users/alice").
	User      string `json:"user,omitempty"`
	Principal string `json:"principal,omitempty"`
	Error     string `json:"error,omitempty"`
}

// maxAnswerBytes bounds an answer a client reads.
const maxAnswerBytes = 64 << 10

// Ask asks the daemon on socket for the calling process's token. An
// error dialling wraps the system's (fs.ErrNotExist, ECONNREFUSED) so
// that a caller can tell "no daemon here" from a refusal. A process
// listening there that could be any local user's (see CheckDaemon) is
// refused before its answer is read: its token would make this user's
// commands act as someone else.
func Ask(ctx context.Context, socket string) (*Answer, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	srv, err := PeerUID(conn)
	if err != nil {
		return nil, fmt.Errorf("cannot tell who runs the login daemon at %s: %w", socket, err)
	}
	if err := CheckDaemon(socket, srv); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(15 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	b, err := io.ReadAll(io.LimitReader(conn, maxAnswerBytes))
	if err != nil {
		return nil, fmt.Errorf("read the login daemon's answer: %w", err)
	}
	var a Answer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("the login daemon's answer is not JSON: %v", err)
	}
	if a.Error != "" {
		return nil, errors.New(a.Error)
	}
	if a.AccessToken == "" {
		return nil, errors.New("the login daemon answered no token")
	}
	return &a, nil
}

// Server is the login daemon.
type Server struct {
	// Conn reaches the gateway.
	Conn grpc.ClientConnInterface
	// LoginKey returns the login key (read on each token the daemon asks
	// for, so that a key the gateway writes after the daemon starts, or a
	// rotated one, is used).
	LoginKey func() (string, error)
	// Lookup maps a uid to its account name (nil: os/user.LookupId).
	Lookup func(uid uint32) (string, error)
	// Log receives one line per token given or refused (nil: discarded).
	Log *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu    sync.Mutex
	cache map[string]*loomv1.Token // by user, until near expiry
	open  map[uint32]int           // connections being answered, by peer uid
}

// Bounds on the connections the daemon answers at once: any local user
// may connect, and each connection holds a goroutine and a descriptor for
// up to its deadline, so without them one user could exhaust the daemon's
// descriptors and lock every other user out (munge bounds this with a
// fixed pool of threads).
const (
	// maxConns is the most connections answered at once; past it the
	// daemon accepts no more until one ends (they wait in the socket's
	// backlog).
	maxConns = 128
	// maxConnsPerUID is the most one account has answered at once; past
	// it a connection is answered at once with an error.
	maxConnsPerUID = 8
	// connDeadline bounds one connection, its question to the gateway
	// included.
	connDeadline = 20 * time.Second
)

// Listen listens on the Unix socket path, mode 0666 so that every local
// user may ask (the answer is theirs alone). A socket file left by a
// daemon that is gone is replaced; one a live daemon answers on is not.
//
// Listen refuses a place the commands of other users would refuse the
// daemon at (CheckDaemon), unless it runs as root, whom they believe
// anywhere: a directory others may write, or an abstract socket
// ("@name", which has no owner or directory to check). Such a daemon would
// start and answer only its own account, and every other user's command
// would fail later with a refusal they cannot act on.
func Listen(path string) (net.Listener, error) {
	return listen(path, os.Geteuid() != 0)
}

// listen is Listen; placed says whether to check the socket's place as
// the commands of another user would.
func listen(path string, placed bool) (net.Listener, error) {
	if strings.HasPrefix(path, "@") || strings.HasPrefix(path, "\x00") {
		return nil, fmt.Errorf("login daemon socket %q: an abstract socket has no owner or directory the commands can check, and they refuse it; give a file path such as /run/loom/authd.sock", path)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("login daemon socket %s: a file that is not a socket is in the way", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("login daemon socket %s: another login daemon answers there", path)
		}
		_ = os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("login daemon: %w", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("login daemon: %w", err)
	}
	if placed {
		if err := placement(path, uint32(os.Geteuid())); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("login daemon socket %s: the commands of other users would refuse this daemon (%v); put the socket in a directory only root or this account may write, such as /run/loom", path, err)
		}
	}
	return ln, nil
}

// Serve answers connections on ln until ctx ends, then closes ln (which
// removes the socket file).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, maxConns)
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		c, err := ln.Accept()
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("login daemon: %w", err)
		}
		wg.Go(func() {
			defer func() { <-slots }()
			s.handle(ctx, c)
		})
	}
}

// handle answers one connection: at most maxConnsPerUID of one account's
// at once.
func (s *Server) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(connDeadline))
	var a Answer
	if uid, err := PeerUID(c); err == nil && !s.enter(uid) {
		a = Answer{Error: fmt.Sprintf("the login daemon is answering %d requests of uid %d already; try again in a moment", maxConnsPerUID, uid)}
	} else {
		if err == nil {
			defer s.leave(uid)
		}
		a = s.answer(ctx, c)
	}
	b, _ := json.Marshal(a)
	_, _ = c.Write(append(b, '\n'))
}

// enter counts a connection of uid, unless it has maxConnsPerUID already.
func (s *Server) enter(uid uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		s.open = map[uint32]int{}
	}
	if s.open[uid] >= maxConnsPerUID {
		return false
	}
	s.open[uid]++
	return true
}

// leave ends what enter counted.
func (s *Server) leave(uid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[uid]--; s.open[uid] <= 0 {
		delete(s.open, uid)
	}
}

func (s *Server) answer(ctx context.Context, c net.Conn) Answer {
	uid, err := PeerUID(c)
	if err != nil {
		s.log().Warn("login daemon: cannot tell who is asking", "err", err)
		return Answer{Error: "the login daemon cannot tell who is asking: " + err.Error()}
	}
	lookup := s.Lookup
	if lookup == nil {
		lookup = lookupUID
	}
	name, err := lookup(uid)
	if err != nil {
		s.log().Warn("login daemon: uid has no account name", "uid", uid, "err", err)
		return Answer{Error: fmt.Sprintf("uid %d has no account name on this machine: %v", uid, err)}
	}
	tok, err := s.token(ctx, name)
	if err != nil {
		s.log().Warn("login daemon: no token", "user", name, "uid", uid, "err", err)
		return Answer{Error: fmt.Sprintf("no token for %s: %s", name, errText(err))}
	}
	s.log().Info("login daemon: token given", "user", name, "uid", uid)
	return Answer{AccessToken: tok.GetAccessToken(), ExpireTime: tok.GetExpireTime().AsTime(), User: name,
		Principal: tok.GetPrincipal().GetName()}
}

// errText is a gRPC error's message (without the "rpc error: code = "
// wrapping), else err's text.
func errText(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Code().String() + ": " + st.Message()
	}
	return err.Error()
}

// reuseFor is the shortest life left on a cached token that is handed
// out again; one closer to its expiry is replaced.
const reuseFor = 5 * time.Minute

// token returns a token for user: a cached one with life left, else a new
// one from the gateway.
func (s *Server) token(ctx context.Context, user string) (*loomv1.Token, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	s.mu.Lock()
	if t := s.cache[user]; t != nil && now().Add(reuseFor).Before(t.GetExpireTime().AsTime()) {
		s.mu.Unlock()
		return t, nil
	}
	s.mu.Unlock()
	if s.LoginKey == nil {
		return nil, errors.New("the login daemon has no login key")
	}
	key, err := s.LoginKey()
	if err != nil {
		return nil, fmt.Errorf("the login daemon's login key: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t, err := loomv1.NewAuthServiceClient(s.Conn).CreateToken(cctx, &loomv1.CreateTokenRequest{User: user},
		grpc.PerRPCCredentials(auth.Bearer(key)))
	if err != nil {
		return nil, err
	}
	if t.GetAccessToken() == "" {
		return nil, errors.New("the gateway answered no token")
	}
	s.mu.Lock()
	if s.cache == nil {
		s.cache = map[string]*loomv1.Token{}
	}
	s.cache[user] = t
	s.mu.Unlock()
	return t, nil
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// PeerUID is the uid of the process at the other end of a Unix socket
// connection, as the kernel recorded it when that process connected
// (SO_PEERCRED): nothing the process says or sets changes it.
func PeerUID(c net.Conn) (uint32, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, fmt.Errorf("not a Unix socket connection (%T)", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return cred.Uid, nil
}

// CheckDaemon says whether the process of uid srv listening on socket
// may be trusted as the login daemon. Whoever answers there hands this
// user the token its commands act with, so a token for another account
// (the listener's own) would make them act as that account: submit this
// user's scripts as the listener's jobs, which the listener reads. The
// daemon is trusted when it runs as root or as this process's own
// user; otherwise only when no one but root and srv could have put a
// socket at that path: the socket is srv's, its directory is owned by
// root or srv and not writable by others, and every directory above it
// is owned by root or srv and is either not writable by others or
// sticky (as /tmp: others may not rename what is in it). The
// directory's group is trusted as its owner is (a site's /run/loom may
// be root:loom 0775). Symbolic links on the way are followed first.
func CheckDaemon(socket string, srv uint32) error {
	if srv == 0 || srv == uint32(os.Geteuid()) {
		return nil
	}
	return placement(socket, srv)
}

// placement is CheckDaemon's test of where the socket of a daemon run by
// srv is, for a caller who is neither root nor srv.
func placement(socket string, srv uint32) error {
	refuse := func(why string) error {
		return fmt.Errorf("refusing the login daemon at %s, run by uid %d: %s, so any local user could have put a daemon there; the socket belongs in a directory only root or the daemon's account may write (such as /run/loom)", socket, srv, why)
	}
	real, err := filepath.EvalSymlinks(socket)
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		return fmt.Errorf("refusing the login daemon at %s: %w", socket, err)
	}
	owner := func(fi os.FileInfo) uint32 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			return st.Uid
		}
		return ^uint32(0)
	}
	fi, err := os.Lstat(real)
	if err != nil {
		return fmt.Errorf("refusing the login daemon at %s: %w", socket, err)
	}
	if fi.Mode().Type() != os.ModeSocket || owner(fi) != srv {
		return refuse(fmt.Sprintf("%s is not a socket of uid %d", real, srv))
	}
	for d, first := filepath.Dir(real), true; ; d, first = filepath.Dir(d), false {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("refusing the login daemon at %s: %w", socket, err)
		}
		switch u, m := owner(fi), fi.Mode(); {
		case u != 0 && u != srv:
			return refuse(fmt.Sprintf("directory %s belongs to uid %d", d, u))
		case m.Perm()&0o002 != 0 && (first || m&os.ModeSticky == 0):
			return refuse(fmt.Sprintf("directory %s (mode %v) is writable by every user", d, m))
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// lookupUID is the account name of uid in the system's account database.
func lookupUID(uid uint32) (string, error) {
	u, err := osuser.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return "", err
	}
	return u.Username, nil
}
