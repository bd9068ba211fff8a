package embedded

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/loom-ml/loom/libs/testkit/need"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func startBroker(t *testing.T, addr, dir string) *Broker {
	t.Helper()
	b, err := StartBroker(testCtx(t), addr, dir)
	if err != nil {
		t.Fatalf("StartBroker: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// client returns a kafka-go client with its own transport: kafka-go caches
// metadata per address, which would outlive a broker restart on the same port.
func client(addr string) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(addr), Transport: &kafka.Transport{}, Timeout: 10 * time.Second}
}

func createTopic(t *testing.T, addr, topic string, partitions int) {
	t.Helper()
	resp, err := client(addr).CreateTopics(testCtx(t), &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}},
	})
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	if err := resp.Errors[topic]; err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

func write(t *testing.T, addr, topic string, msgs ...kafka.Message) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(addr), Topic: topic, Transport: &kafka.Transport{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(testCtx(t), msgs...); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func readN(t *testing.T, addr, topic string, n int) []kafka.Message {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: []string{addr}, Topic: topic, Partition: 0, MaxWait: 50 * time.Millisecond,
		Dialer: &kafka.Dialer{Timeout: 5 * time.Second},
	})
	defer r.Close()
	ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Second)
	defer cancel()
	var out []kafka.Message
	for len(out) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read %d of %d: %v", len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

func TestBrokerRoundTrip(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", "")
	if !strings.HasPrefix(b.Addr, "127.0.0.1:") {
		t.Fatalf("Addr = %q, want 127.0.0.1:port", b.Addr)
	}
	createTopic(t, b.Addr, "roundtrip", 1)
	write(t, b.Addr, "roundtrip",
		kafka.Message{Key: []byte("k1"), Value: []byte("one")},
		kafka.Message{Key: []byte("k2"), Value: []byte("two")})
	got := readN(t, b.Addr, "roundtrip", 2)
	if string(got[0].Value) != "one" || string(got[1].Value) != "two" || string(got[1].Key) != "k2" {
		t.Fatalf("read %q/%q, want one/two", got[0].Value, got[1].Value)
	}
}

// The broker takes a group member's session timeout down to
// GroupMinSessionTimeout, below Kafka's 6 s, and refuses a shorter one.
func TestBrokerTakesShortSessionTimeouts(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", "")
	createTopic(t, b.Addr, "sessions", 1)
	join := func(group string, session time.Duration) error {
		req := &kafka.JoinGroupRequest{GroupID: group, SessionTimeout: session, RebalanceTimeout: 10 * time.Second,
			ProtocolType: "consumer", Protocols: []kafka.GroupProtocol{{Name: "range",
				Metadata: kafka.GroupProtocolSubscription{Topics: []string{"sessions"}}}}}
		resp, err := client(b.Addr).JoinGroup(testCtx(t), req)
		if err == nil && errors.Is(resp.Error, kafka.MemberIDRequired) {
			req.MemberID = resp.MemberID
			resp, err = client(b.Addr).JoinGroup(testCtx(t), req)
		}
		if err != nil {
			return err
		}
		return resp.Error
	}
	if err := join("shortest", GroupMinSessionTimeout); err != nil {
		t.Fatalf("join with a %v session: %v", GroupMinSessionTimeout, err)
	}
	if err := join("shorter", GroupMinSessionTimeout-time.Millisecond); !errors.Is(err, kafka.InvalidSessionTimeout) {
		t.Fatalf("join with a session under the minimum: %v, want InvalidSessionTimeout", err)
	}
}

func TestBrokerNoAutoTopicCreation(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "127.0.0.1:0", "")
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr), Topic: "never-created", Transport: &kafka.Transport{},
		AllowAutoTopicCreation: true, BatchTimeout: time.Millisecond, MaxAttempts: 1}
	defer w.Close()
	ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("x")}); err == nil {
		t.Fatal("write to a topic nobody created succeeded; auto creation must be off")
	}
	md, err := client(b.Addr).Metadata(testCtx(t), &kafka.MetadataRequest{})
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	for _, tp := range md.Topics {
		if tp.Name == "never-created" && tp.Error == nil {
			t.Fatal("topic never-created exists")
		}
	}
}

func TestBrokerDataSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := startBroker(t, "", dir)
	addr := b.Addr
	createTopic(t, addr, "durable", 2)
	write(t, addr, "durable", kafka.Message{Value: []byte("before")})
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	// Same port too, as `loom up` restarts it.
	b2 := startBroker(t, addr, dir)
	if b2.Addr != addr {
		t.Fatalf("restart Addr = %q, want %q", b2.Addr, addr)
	}
	write(t, addr, "durable", kafka.Message{Value: []byte("after")})
	var values []string
	for p := range 2 {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: "durable", Partition: p,
			MaxWait: 50 * time.Millisecond})
		conn, err := kafka.DialLeader(testCtx(t), "tcp", addr, "durable", p)
		if err != nil {
			t.Fatalf("dial partition %d (topic lost?): %v", p, err)
		}
		last, err := conn.ReadLastOffset()
		conn.Close()
		if err != nil {
			t.Fatalf("last offset: %v", err)
		}
		ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
		for range last {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("read partition %d: %v", p, err)
			}
			values = append(values, string(m.Value))
		}
		cancel()
		r.Close()
	}
	if len(values) != 2 || !contains(values, "before") || !contains(values, "after") {
		t.Fatalf("after restart read %q, want before and after", values)
	}
}

// TestBrokerDataIsItsOwners: the broker's data dir holds every record in
// the clear (the ingress topic's carry their producers' API keys in
// ce_credential, jobs' scripts and environments), so it is closed to other
// users (0700), as Redis's is, a dir made before (0755) included.
func TestBrokerDataIsItsOwners(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "broker")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, "", dir)
	createTopic(t, b.Addr, "loom.ingress.v1", 1)
	write(t, b.Addr, "loom.ingress.v1", kafka.Message{Value: []byte("{}"), Headers: []kafka.Header{{Key: "ce_credential", Value: []byte("lk_secret")}}})
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	held := false
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if b, rerr := os.ReadFile(p); err == nil && fi.Mode().IsRegular() && rerr == nil && bytes.Contains(b, []byte("lk_secret")) {
			held = true
		}
		return nil
	})
	if !held {
		t.Fatal("no file of the broker's data holds the record's credential: this test no longer shows what the mode guards")
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("broker data dir: mode %v (%v); want 0700: its records are readable through it", st.Mode().Perm(), err)
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func TestStartBrokerRejectsNonLoopback(t *testing.T) {
	t.Parallel()
	if _, err := StartBroker(testCtx(t), "0.0.0.0:0", ""); err == nil {
		t.Fatal("StartBroker on 0.0.0.0 succeeded; want an error")
	}
	if _, err := StartBroker(testCtx(t), "nonsense", ""); err == nil {
		t.Fatal("StartBroker on a bad address succeeded; want an error")
	}
}

func startRedis(t *testing.T, addr, dir string) *Redis {
	t.Helper()
	r, err := StartRedis(testCtx(t), addr, dir)
	if err != nil {
		t.Fatalf("StartRedis: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func rdb(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRedisSetGet(t *testing.T) {
	t.Parallel()
	r := startRedis(t, "", "")
	want := KindMiniredis
	if _, err := exec.LookPath("redis-server"); err == nil {
		want = KindRedisServer
	}
	if r.Kind != want {
		t.Fatalf("Kind = %q, want %q", r.Kind, want)
	}
	// No retries, so that the check after Close fails fast.
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer c.Close()
	ctx := testCtx(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want v", got, err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Close succeeded")
	}
}

func TestMiniredisFallback(t *testing.T) {
	t.Parallel()
	r, err := startMiniredis(0, "")
	if err != nil {
		t.Fatalf("startMiniredis: %v", err)
	}
	defer r.Close()
	if r.Kind != KindMiniredis {
		t.Fatalf("Kind = %q", r.Kind)
	}
	c := rdb(t, r.Addr)
	if err := c.Set(testCtx(t), "a", "1", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, _ := c.Get(testCtx(t), "a").Result(); got != "1" {
		t.Fatalf("GET = %q, want 1", got)
	}
	// Its TTLs run out with the wall clock, as redis-server's do (a
	// crashed service's lease is released to its standby).
	ctx := testCtx(t)
	if err := c.Set(ctx, "lease", "holder", 200*time.Millisecond).Err(); err != nil {
		t.Fatalf("SET PX: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Exists(ctx, "lease").Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("a key set with a 200 ms TTL still exists after 10 s: miniredis' clock does not run")
		}
		time.Sleep(20 * time.Millisecond) // polling the key: its expiry is the condition
	}
	if c.Exists(ctx, "a").Val() != 1 {
		t.Error("a key without a TTL expired")
	}
}

func TestRedisPersistsAcrossRestart(t *testing.T) {
	t.Parallel()
	// miniredis does not persist: this needs the real one.
	need.Tools(t, "apt-get install redis-server", "redis-server")
	dir := t.TempDir()
	r := startRedis(t, "", dir)
	ctx := testCtx(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr, Password: r.Password})
	if err := c.HSet(ctx, "h", "f", "kept").Err(); err != nil {
		t.Fatalf("HSET: %v", err)
	}
	c.Close()
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	r2 := startRedis(t, "", dir)
	if r2.Password != r.Password {
		t.Fatal("the password changed across the restart")
	}
	c2 := redis.NewClient(&redis.Options{Addr: r2.Addr, Password: r2.Password})
	defer c2.Close()
	got, err := c2.HGet(ctx, "h", "f").Result()
	if err != nil || got != "kept" {
		t.Fatalf("HGET after restart = %q, %v; want kept", got, err)
	}
}

// A Redis with a data dir requires its generated password, kept 0600 in
// the data dir; the dir is 0700 and nothing redis-server writes there is
// readable by others.
func TestRedisWithDataDirRequiresItsPassword(t *testing.T) {
	t.Parallel()
	need.Tools(t, "apt-get install redis-server", "redis-server")
	dir := filepath.Join(t.TempDir(), "redis")
	r := startRedis(t, "", dir)
	ctx := testCtx(t)
	if r.Password == "" || r.PasswordFile != filepath.Join(dir, PasswordFileName) {
		t.Fatalf("password %q in %q", r.Password, r.PasswordFile)
	}
	anon := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer anon.Close()
	if err := anon.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("SET without the password = %v, want NOAUTH", err)
	}
	wrong := redis.NewClient(&redis.Options{Addr: r.Addr, Password: "guess", MaxRetries: -1})
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); err == nil {
		t.Fatal("PING with a wrong password succeeded")
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr, Password: r.Password})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET with the password: %v", err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("data dir: %v %v; want mode 0700", st, err)
	}
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && p != dir && fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: readable by others", p, fi.Mode().Perm())
		}
		return nil
	})
	// The password is not on redis-server's command line.
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", r.cmd.Process.Pid)); err == nil && strings.Contains(string(cmdline), r.Password) {
		t.Error("the password is on redis-server's command line")
	}
}

func TestRedisPortTaken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = StartRedis(testCtx(t), ln.Addr().String(), "")
	if err == nil {
		t.Fatal("StartRedis on a taken port succeeded")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("StartRedis waited for the deadline instead of noticing the exit: %v", err)
	}
}

// TestMain lets the test binary act as a broker process that the kill -9 test
// starts and kills.
func TestMain(m *testing.M) {
	if dir := os.Getenv("LOOM_EMBEDDED_TEST_BROKER_DIR"); dir != "" {
		brokerChild(dir)
		return
	}
	os.Exit(m.Run())
}

// brokerChild starts a broker on dir, writes one record to topic "crash",
// reports the address on stdout and waits to be killed.
func brokerChild(dir string) {
	ctx := context.Background()
	b, err := StartBroker(ctx, "", dir)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	resp, err := client(b.Addr).CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: "crash", NumPartitions: 1, ReplicationFactor: 1}},
	})
	if err == nil {
		err = resp.Errors["crash"]
	}
	if err == nil {
		w := &kafka.Writer{Addr: kafka.TCP(b.Addr), Topic: "crash", RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
		err = w.WriteMessages(ctx, kafka.Message{Value: []byte("acked before the crash")})
	}
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("READY", b.Addr)
	select {}
}

func TestBrokerDataSurvivesKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOOM_EMBEDDED_TEST_BROKER_DIR="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "READY ") {
		t.Fatalf("child broker: %q, %v", line, err)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no chance to save state
		t.Fatal(err)
	}
	_ = cmd.Wait()

	b := startBroker(t, "", dir)
	got := readN(t, b.Addr, "crash", 1)
	if string(got[0].Value) != "acked before the crash" {
		t.Fatalf("after kill -9 read %q", got[0].Value)
	}
}

// TestFreePortIsReservedBelowTheEphemeralRange: picked ports are below the
// kernel's ephemeral range (which outgoing connections and :0 binds draw
// from), never twice in a process, and locked against another process's
// FreePort (another open file description of the lock file, as another
// process has).
func TestFreePortIsReservedBelowTheEphemeralRange(t *testing.T) {
	t.Parallel()
	low := ephemeralLow()
	if low <= minPickedPort {
		t.Skipf("ephemeral range starts at %d: the kernel picks", low)
	}
	seen := map[int]bool{}
	for range 20 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < minPickedPort || p >= low {
			t.Errorf("picked %d, outside %d to %d", p, minPickedPort, low)
		}
		if seen[p] {
			t.Errorf("picked %d twice", p)
		}
		seen[p] = true
	}
	other, err := os.OpenFile(portLocksFile, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for p := range seen {
		if lockPort(other, p) {
			t.Errorf("another process could take %d", p)
		}
	}
	// And the lock works at all: a port no one picked can be locked.
	lockable := false
	for p := minPickedPort; p < minPickedPort+100 && !lockable; p++ {
		if !seen[p] && lockPort(other, p) {
			lockable = true
			unlockPort(other, p)
		}
	}
	if !lockable {
		t.Error("no port could be locked: the check above proves nothing")
	}
}
