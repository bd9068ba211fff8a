package adapters

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
	"github.com/loom-ml/loom/libs/testkit"
)

// TestRedisDownIsUnavailableToConsumers: a read Redis does not serve is
// errs.Unavailable to callers and, with its network cause kept in the
// chain, bus.Unavailable to consumers, which then wait for Redis instead
// of dead-lettering the record in hand (the cause was formatted away, so
// a gateway consumer lost every record it handled during a restart).
func TestRedisDownIsUnavailableToConsumers(t *testing.T) {
	t.Parallel()
	// Nothing listens on a port reserved for this test process
	// (testkit.FreeAddr): a port bound on :0 and closed again may be handed
	// to a parallel test's server, which answers instead of refusing.
	addr := testkit.FreeAddr()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	st := store.New(rdb, "gateway:")
	ctx := context.Background()
	_, keyErr := NewAuthStore(st).APIKey(ctx, "k1")
	_, reqErr := NewRepo(st).Request(ctx, RequestSubmitJob, "r1")
	for what, err := range map[string]error{"API key": keyErr, "request": reqErr} {
		if errs.Code(err).String() != "Unavailable" || !bus.Unavailable(err) {
			t.Errorf("%s read with Redis down: %v (code %v, bus.Unavailable %v); want Unavailable to both", what, err, errs.Code(err), bus.Unavailable(err))
		}
	}
}
