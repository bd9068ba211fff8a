// Package embedded starts the infrastructure Loom needs on loopback, in process
// or as child processes: a Kafka-protocol broker (kfake, with a data directory
// so it survives restarts) and Redis (a real redis-server when one is on PATH,
// with its own data directory and appendonly; miniredis otherwise).
package embedded

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/twmb/franz-go/pkg/kfake"
)

// GroupMinSessionTimeout is the shortest consumer-group session timeout
// the embedded broker accepts: bus.MinSessionTimeout, the shortest a Loom
// consumer asks for.
const GroupMinSessionTimeout = time.Second

// Broker is a running kfake broker.
type Broker struct {
	// Addr is host:port of the broker, on 127.0.0.1.
	Addr string

	cluster *kfake.Cluster
	once    sync.Once
}

// StartBroker starts a kfake broker on addr ("127.0.0.1:0" or "" picks a free
// port) keeping its data in dataDir ("" keeps it in memory only; made or
// closed to mode 0700, since it holds every record in the clear). The broker
// listens on 127.0.0.1 only and does not create topics on first use: callers
// create the topics they need. Its consumer groups take a session timeout
// down to GroupMinSessionTimeout (Kafka's default minimum is 6 s), so that
// tests and development stacks can run their services with a short one
// (-bus-session-timeout) and a killed service's partitions move within
// seconds; a client asking for a longer one, the services' default among
// them, gets it as on any broker.
func StartBroker(ctx context.Context, addr, dataDir string) (*Broker, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start broker: %w", err)
	}
	port, err := loopbackPort(addr)
	if err != nil {
		return nil, fmt.Errorf("start broker: %w", err)
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(port), kfake.GroupMinSessionTimeout(GroupMinSessionTimeout)}
	if dataDir != "" {
		// Its own alone, as Redis's: the broker keeps every record in the
		// clear there (kfake's files are 0644), the ingress topic's with
		// their producers' API keys among them. A dir made before (0755)
		// is closed too.
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("start broker: data dir: %w", err)
		}
		if err := os.Chmod(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("start broker: data dir: %w", err)
		}
		opts = append(opts, kfake.DataDir(dataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start broker on 127.0.0.1:%d: %w", port, err)
	}
	addrs := c.ListenAddrs()
	if len(addrs) == 0 {
		c.Close()
		return nil, errors.New("start broker: no listener")
	}
	return &Broker{Addr: addrs[0], cluster: c}, nil
}

// Close stops the broker, writing its state to the data directory if it has
// one. Calling it again does nothing.
func (b *Broker) Close() error {
	b.once.Do(b.cluster.Close)
	return nil
}

// loopbackPort returns the port of addr, which must be on loopback; "" and
// port 0 give 0, which makes the listener pick a free port.
func loopbackPort(addr string) (int, error) {
	if addr == "" {
		return 0, nil
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("address %q: %w", addr, err)
	}
	switch host {
	case "", "127.0.0.1", "localhost":
	default:
		// Loom's embedded infrastructure is for one machine only.
		return 0, fmt.Errorf("address %q: only 127.0.0.1 is supported", addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return 0, fmt.Errorf("address %q: bad port", addr)
	}
	return port, nil
}

// Redis kinds.
const (
	KindRedisServer = "redis-server"
	KindMiniredis   = "miniredis"
)

// Redis is a running Redis.
type Redis struct {
	// Addr is host:port, on 127.0.0.1.
	Addr string
	// Kind is "redis-server" or "miniredis".
	Kind string
	// Password is what a client must AUTH with ("" for a Redis without a
	// data dir: a test's, gone with it); PasswordFile the 0600 file in the
	// data dir that holds it, for the services (LOOM_REDIS_PASSWORD_FILE).
	Password, PasswordFile string

	mini    *miniredis.Miniredis
	stop    chan struct{} // ends miniredis' clock (runClock)
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been waited for
	tempDir string        // removed on Close
	once    sync.Once
	err     error
}

// redisStartTimeout bounds how long StartRedis waits for redis-server to
// answer PING when ctx has no earlier deadline.
const redisStartTimeout = 15 * time.Second

// StartRedis starts redis-server (when on PATH; with dir=dataDir and
// appendonly yes) or else miniredis, on addr ("" picks a free port). With
// redis-server and dataDir "", the data lives in a temporary directory that
// Close removes.
//
// With a dataDir, Redis requires a password (requirepass), generated on
// first start and kept in dataDir/PasswordFileName (mode 0600); the data
// dir is mode 0700 and redis-server runs with umask 077, so that its
// append-only files are readable by no one else.
func StartRedis(ctx context.Context, addr, dataDir string) (*Redis, error) {
	port, err := loopbackPort(addr)
	if err != nil {
		return nil, fmt.Errorf("start redis: %w", err)
	}
	var password, pwFile string
	if dataDir != "" {
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("start redis: data dir: %w", err)
		}
		// A data dir made before (0755) is closed too.
		if err := os.Chmod(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("start redis: data dir: %w", err)
		}
		pwFile = filepath.Join(dataDir, PasswordFileName)
		password, err = loadOrCreatePassword(pwFile)
		if err != nil {
			return nil, fmt.Errorf("start redis: %w", err)
		}
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		r, err := startMiniredis(port, password)
		if r != nil {
			r.Password, r.PasswordFile = password, pwFile
		}
		return r, err
	}
	// A picked port can be taken between picking and binding; try again then.
	attempts := 1
	if port == 0 {
		attempts = 3
	}
	for i := 0; ; i++ {
		r, err := startRedisServer(ctx, bin, port, dataDir, password)
		if r != nil {
			r.Password, r.PasswordFile = password, pwFile
		}
		if err == nil || i+1 >= attempts || ctx.Err() != nil {
			return r, err
		}
	}
}

func startMiniredis(port int, password string) (*Redis, error) {
	m := miniredis.NewMiniRedis()
	if password != "" {
		m.RequireAuth(password)
	}
	if err := m.StartAddr(fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		return nil, fmt.Errorf("start miniredis on 127.0.0.1:%d: %w", port, err)
	}
	r := &Redis{Addr: m.Addr(), Kind: KindMiniredis, mini: m, stop: make(chan struct{})}
	go runClock(m, r.stop)
	return r, nil
}

// miniredisTick is how often runClock moves miniredis' clock: the most a
// key outlives its TTL there.
const miniredisTick = 50 * time.Millisecond

// runClock moves miniredis' clock with the wall clock until stop closes.
// Why: miniredis expires keys only when told time has passed
// (FastForward), so without it no TTL ever ran out: a crashed service's
// lease (PX) was never released to its standby, and keys meant to expire
// (request records, markers, rate counters) stayed for good.
func runClock(m *miniredis.Miniredis, stop <-chan struct{}) {
	last := time.Now()
	m.SetTime(last)
	tk := time.NewTicker(miniredisTick)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tk.C:
			m.SetTime(now)
			m.FastForward(now.Sub(last))
			last = now
		}
	}
}

func startRedisServer(ctx context.Context, bin string, port int, dataDir, password string) (*Redis, error) {
	if port == 0 {
		p, err := FreePort()
		if err != nil {
			return nil, fmt.Errorf("start redis: %w", err)
		}
		port = p
	}
	r := &Redis{Addr: fmt.Sprintf("127.0.0.1:%d", port), Kind: KindRedisServer, exited: make(chan struct{})}
	if dataDir == "" {
		d, err := os.MkdirTemp("", "loom-redis-")
		if err != nil {
			return nil, fmt.Errorf("start redis: %w", err)
		}
		dataDir, r.tempDir = d, d
	}
	r.Password = password
	out := &tailBuffer{max: 4096}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dataDir,
		"--appendonly", "yes",
		"--save", "",
		"--daemonize", "no",
		"--logfile", "",
	}
	if password != "" {
		// On stdin as a config line, not on the command line, which every
		// user of the machine sees in ps.
		args = append([]string{"-"}, args...)
	}
	// umask 077: the append-only files redis-server writes (and rewrites)
	// are its user's alone.
	cmd := exec.Command("/bin/sh", append([]string{"-c", `umask 077 && exec "$0" "$@"`, bin}, args...)...)
	if password != "" {
		cmd.Stdin = strings.NewReader("requirepass " + strconv.Quote(password) + "\n")
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		r.removeTemp()
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	r.cmd = cmd
	go func() {
		_ = cmd.Wait()
		close(r.exited)
	}()

	wctx, cancel := context.WithTimeout(ctx, redisStartTimeout)
	defer cancel()
	if err := waitPing(wctx, r.Addr, r.exited, password); err != nil {
		r.kill()
		r.removeTemp()
		return nil, fmt.Errorf("start redis-server on %s: %w (output: %s)", r.Addr, err, bytes.TrimSpace(out.Bytes()))
	}
	return r, nil
}

// waitPing waits until the Redis at addr answers PING, the process exits, or
// ctx ends.
func waitPing(ctx context.Context, addr string, exited <-chan struct{}, password string) error {
	delay := 5 * time.Millisecond
	for {
		err := ping(ctx, addr, password)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("redis-server exited")
		case <-ctx.Done():
			return fmt.Errorf("waiting for PING: %w (last: %v)", ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 200*time.Millisecond)
	}
}

// ping sends one RESP command and checks for a non-error reply, without a
// client library so that this package needs none.
func ping(ctx context.Context, addr, password string) error {
	if password != "" {
		return commands(ctx, addr, 500*time.Millisecond, []string{"AUTH", password}, []string{"PING"})
	}
	return command(ctx, addr, 500*time.Millisecond, "PING")
}

// command sends args to the Redis at addr and waits up to timeout for a reply.
func command(ctx context.Context, addr string, timeout time.Duration, args ...string) error {
	return commands(ctx, addr, timeout, args)
}

// commands sends each command in turn on one connection, each after the
// reply to the one before; the first error reply ends it.
func commands(ctx context.Context, addr string, timeout time.Duration, cmds ...[]string) error {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	for _, args := range cmds {
		if err := roundTrip(conn, args); err != nil {
			return err
		}
	}
	return nil
}

// roundTrip sends one command on conn and reads its reply.
func roundTrip(conn net.Conn, args []string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write(b.Bytes()); err != nil {
		return err
	}
	buf := make([]byte, 256)
	n, err := conn.Read(buf)
	if n > 0 && buf[0] == '-' {
		return fmt.Errorf("redis: %s", bytes.TrimSpace(buf[1:n]))
	}
	if n > 0 {
		return nil
	}
	return err
}

// PasswordFileName is the file in a Redis data dir that holds its password.
const PasswordFileName = "redis.password"

// loadOrCreatePassword reads the password in path, or makes one (32 random
// bytes, hex) and writes it there, mode 0600.
func loadOrCreatePassword(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		if pw := strings.TrimSpace(string(b)); pw != "" {
			return pw, os.Chmod(path, 0o600)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("redis password: %w", err)
	}
	return pw, nil
}

// redisStopTimeout bounds how long Close waits for redis-server to exit after
// SHUTDOWN (and then after SIGTERM) before killing it.
const redisStopTimeout = 10 * time.Second

// Close stops Redis (SHUTDOWN for redis-server, so its data is on disk).
// Calling it again returns the first result.
func (r *Redis) Close() error {
	r.once.Do(func() {
		defer r.removeTemp()
		if r.mini != nil {
			close(r.stop)
			r.mini.Close()
			return
		}
		// SHUTDOWN closes the connection instead of replying on success.
		if r.Password != "" {
			_ = commands(context.Background(), r.Addr, redisStopTimeout, []string{"AUTH", r.Password}, []string{"SHUTDOWN"})
		} else {
			_ = command(context.Background(), r.Addr, redisStopTimeout, "SHUTDOWN")
		}
		if r.waitExit(redisStopTimeout) {
			return
		}
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		if r.waitExit(redisStopTimeout) {
			return
		}
		r.kill()
		r.err = fmt.Errorf("redis-server on %s did not stop; killed", r.Addr)
	})
	return r.err
}

func (r *Redis) waitExit(d time.Duration) bool {
	select {
	case <-r.exited:
		return true
	case <-time.After(d):
		return false
	}
}

func (r *Redis) kill() {
	_ = r.cmd.Process.Kill()
	<-r.exited
}

func (r *Redis) removeTemp() {
	if r.tempDir != "" {
		_ = os.RemoveAll(r.tempDir)
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.b...)
}
