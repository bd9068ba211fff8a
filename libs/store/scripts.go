package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptSources are the sources of the store's Lua scripts (newScript).
var scriptSources []string

// newScript returns the script of src and records src for Scripts.
func newScript(src string) *redis.Script {
	scriptSources = append(scriptSources, src)
	return redis.NewScript(src)
}

// Scripts returns the sources of every Lua script the store runs, for a
// trusted process to SCRIPT LOAD. A user that may not EVAL (an agent's:
// ACLCommands has EVALSHA only) can run them only once they are in Redis's
// script cache, which a restart or SCRIPT FLUSH empties; the provisioner
// loads them once at the start of every reconciler pass.
func Scripts() []string { return append([]string(nil), scriptSources...) }

// errScriptNotLoaded says that a script was not in Redis's script cache and
// that this store's user may not EVAL it: nothing ran.
var errScriptNotLoaded = errors.New("the store's script is not in Redis's script cache and this Redis user may not EVAL it: " +
	"a trusted process must SCRIPT LOAD store.Scripts() (the provisioner does at every pass)")

// runScript runs sc with EVALSHA and, when Redis does not have it (NOSCRIPT:
// a restart or SCRIPT FLUSH emptied its script cache), with EVAL, which
// caches it again. A user that may not EVAL (an agent's: ACLCommands) waits
// instead, with backoff, until a trusted process loaded it (the provisioner
// does at every pass), and logs that once per outage; nothing is lost, the
// call only takes longer. When ctx ends first, the error wraps
// errScriptNotLoaded and ctx's: the script never ran.
func (s *Store) runScript(ctx context.Context, sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	backoff := minBackoff
	for {
		c := sc.EvalSha(ctx, s.rdb, keys, args...)
		if isNoScript(c.Err()) && !s.noEval.Load() {
			c = sc.Eval(ctx, s.rdb, keys, args...)
			if isEvalRefused(c.Err()) {
				s.noEval.Store(true)
			}
		}
		if !isNoScript(c.Err()) && !isEvalRefused(c.Err()) {
			if s.scriptWait.CompareAndSwap(true, false) {
				s.log().Info("the store's scripts are loaded again; going on")
			}
			return c
		}
		if s.scriptWait.CompareAndSwap(false, true) {
			s.log().Warn("waiting for the store's scripts to be loaded into Redis (the provisioner loads them at every pass); writes wait",
				"err", errScriptNotLoaded)
		}
		if f := s.fp.scriptMissing; f != nil {
			f()
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			c := redis.NewCmd(ctx)
			c.SetErr(fmt.Errorf("%w: %w", errScriptNotLoaded, ctx.Err()))
			return c
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// isNoScript reports whether err is Redis's NOSCRIPT reply: the script is
// not in its cache.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// isEvalRefused reports whether err is Redis's refusal of the EVAL command
// itself to this user (not of a key: that is the caller's error).
func isEvalRefused(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOPERM") && strings.Contains(err.Error(), "'eval' command")
}
