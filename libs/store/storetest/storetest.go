// Package storetest injects the store faults a service cannot provoke on its
// own: an Apply whose answer never reached the caller (a timeout), whether
// Redis ran its script (LoseApplyReplies) or never got it
// (DropApplyRequests): the outcome-unknown case store.Driver handles. It is
// for tests only.
package storetest

import (
	"context"
	"net"
	"os"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// LostReplies is a go-redis hook on a test's client: while armed, the apply
// script of the store with its prefix runs in Redis as usual, and then the
// caller gets a read timeout instead of its answer.
type LostReplies struct {
	outbox string
	// drop: the armed script is not run at all (the request was lost).
	drop bool
	left atomic.Int32
	lost atomic.Int32
}

// LoseApplyReplies installs the hook on rdb for the store with prefix (for
// example "scheduler:") and returns it, disarmed.
func LoseApplyReplies(rdb *redis.Client, prefix string) *LostReplies {
	l := &LostReplies{outbox: prefix + "outbox"}
	rdb.AddHook(l)
	return l
}

// DropApplyRequests is LoseApplyReplies for a request lost on its way: while
// armed, the apply script is not run, and the caller gets the same read
// timeout, so that it cannot tell this from a lost answer.
func DropApplyRequests(rdb *redis.Client, prefix string) *LostReplies {
	l := &LostReplies{outbox: prefix + "outbox", drop: true}
	rdb.AddHook(l)
	return l
}

// Arm makes the next n apply scripts lose their answers.
func (l *LostReplies) Arm(n int) { l.left.Store(int32(n)) }

// Lost returns how many answers the hook has lost so far.
func (l *LostReplies) Lost() int { return int(l.lost.Load()) }

// timeout is what go-redis returns when the answer does not come in time.
var timeout = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

// DialHook implements redis.Hook.
func (l *LostReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: for an armed apply script it runs the
// command (not when dropping requests) and replaces its answer by a timeout.
func (l *LostReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if l.drop {
			if !l.isApply(cmd) || !l.take() {
				return next(ctx, cmd)
			}
			l.lost.Add(1)
			cmd.SetErr(timeout)
			return timeout
		}
		err := next(ctx, cmd)
		if err != nil || !l.isApply(cmd) {
			return err
		}
		if !l.take() {
			return nil
		}
		l.lost.Add(1)
		cmd.SetErr(timeout)
		return timeout
	}
}

// take uses up one armed loss, if any is left.
func (l *LostReplies) take() bool {
	for {
		n := l.left.Load()
		if n <= 0 {
			return false
		}
		if l.left.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// ProcessPipelineHook implements redis.Hook; the apply script is never
// pipelined.
func (l *LostReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// isApply reports whether cmd is the store's apply script: EVAL or EVALSHA
// whose first key is the store's outbox (no other script of the store's has
// it first).
func (l *LostReplies) isApply(cmd redis.Cmder) bool {
	name := strings.ToLower(cmd.Name())
	if name != "evalsha" && name != "eval" {
		return false
	}
	args := cmd.Args()
	if len(args) < 4 {
		return false
	}
	k, _ := args[3].(string)
	return k == l.outbox
}
