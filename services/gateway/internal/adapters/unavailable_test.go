package adapters

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loom-ml/loom/libs/bus"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/store"
)

// TestRedisDownIsUnavailableToConsumers: a read Redis does not serve is
// errs.Unavailable to callers and, with its network cause kept in the
// chain, bus.Unavailable to consumers, which then wait for Redis instead
// of dead-lettering the record in hand (the cause was formatted away, so
// a gateway consumer lost every record it handled during a restart).
func TestRedisDownIsUnavailableToConsumers(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
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
