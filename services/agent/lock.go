package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// LockFile, in the node's work directory, is locked (flock) by the node's
// agent for as long as it runs and holds its pid. The kernel drops the
// lock when the process dies, however it dies, so an agent that holds it
// knows every earlier agent of its node has ended: it takes over their
// outbox relay lease and their consumer group memberships at once instead
// of waiting for them to expire (5 s and 10 s), and a second agent started
// for the node while one runs waits, then refuses to start.
const LockFile = "agent.lock"

// lockWait is how long a starting agent waits for the node's previous agent
// to exit (one being stopped gracefully still reports its steps) before it
// refuses to start.
const lockWait = 10 * time.Second

// nodeLock is the node's LockFile, held unless the filesystem cannot lock.
type nodeLock struct {
	f *os.File
	// held: the lock is this agent's, so its predecessors are dead. False
	// where the filesystem refuses locks (ENOLCK, EOPNOTSUPP): the agent
	// runs, but takes over nothing and waits out what they held.
	held bool
}

// lockNode takes dir's LockFile, waiting up to wait for an agent that holds
// it to exit, and writes this process's pid into it.
func lockNode(ctx context.Context, dir, node string, wait time.Duration, log *slog.Logger) (*nodeLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agent %s: lock the node: %w", node, err)
	}
	deadline := time.Now().Add(wait)
	logged := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if errors.Is(err, unix.ENOLCK) || errors.Is(err, unix.EOPNOTSUPP) {
			log.Warn("the node directory's filesystem cannot lock: a restarted agent waits for what its predecessor held (5-10 s)",
				"node", node, "file", path, "err", err)
			return &nodeLock{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("agent %s: lock the node: %w", node, err)
		}
		holder := lockHolder(path)
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("agent %s: another agent of this node runs (pid %s, holding %s); stop it first, or run this one with another --work-dir",
				node, holder, path)
		}
		if !logged {
			log.Info("waiting for the node's previous agent to exit", "node", node, "pid", holder, "up_to", wait)
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The pid only names the holder in a later agent's refusal: a failed
	// write costs that message its pid, not the lock.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &nodeLock{f: f, held: true}, nil
}

// lockHolder is the pid written in the lock file at path, or "unknown".
func lockHolder(path string) string {
	b, err := os.ReadFile(path)
	if s := strings.TrimSpace(string(b)); err == nil && s != "" {
		return s
	}
	return "unknown"
}

// Close releases the lock.
func (l *nodeLock) Close() error { return l.f.Close() }
