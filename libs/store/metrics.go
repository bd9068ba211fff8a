package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// outboxScrapeTimeout bounds the one Redis round trip a scrape of the
// outbox's gauges costs.
const outboxScrapeTimeout = 2 * time.Second

// RegisterOutboxMetrics registers on reg the store's outbox gauges, read
// from Redis on each scrape in one pipelined round trip (XLEN and the first
// entry: O(1) whatever the outbox holds):
//
//   - loom_outbox_depth: entries waiting to be published;
//   - loom_outbox_oldest_age_seconds: now minus the time the oldest waiting
//     entry was written (its stream id's milliseconds); 0 when empty.
//
// A scrape during which Redis does not answer reports neither.
func (s *Store) RegisterOutboxMetrics(reg prometheus.Registerer) error {
	return reg.Register(&outboxCollector{s: s,
		depth: prometheus.NewDesc("loom_outbox_depth", "Outbox entries waiting to be published to Kafka.", nil, nil),
		age: prometheus.NewDesc("loom_outbox_oldest_age_seconds",
			"Age of the oldest outbox entry waiting to be published (0 when the outbox is empty).", nil, nil),
	})
}

type outboxCollector struct {
	s          *Store
	depth, age *prometheus.Desc
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.depth; ch <- c.age }

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), outboxScrapeTimeout)
	defer cancel()
	n, oldest, err := c.s.outboxHead(ctx)
	if err != nil {
		c.s.log().Debug("outbox metrics not read", "err", err)
		return
	}
	age := 0.0
	if n > 0 && !oldest.IsZero() {
		age = max(time.Since(oldest).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, age)
}

// outboxHead returns the outbox's length and when its first entry was
// written (zero when empty).
func (s *Store) outboxHead(ctx context.Context) (int64, time.Time, error) {
	pipe := s.rdb.Pipeline()
	l := pipe.XLen(ctx, s.outboxKey)
	first := pipe.XRangeN(ctx, s.outboxKey, "-", "+", 1)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return 0, time.Time{}, err
	}
	var at time.Time
	if es := first.Val(); len(es) > 0 {
		ms, _, _ := strings.Cut(es[0].ID, "-")
		if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
			at = time.UnixMilli(v)
		}
	}
	return l.Val(), at, nil
}

// redisCommands are the command names loom_redis_call_seconds labels by
// name; any other command is "other", so that the label's values are a
// fixed set whatever a caller sends.
var redisCommands = map[string]bool{}

func init() {
	for _, c := range strings.Fields(`get set setnx setex getset getdel del exists expire pexpire ttl pttl incr incrby decr
		mget mset hget hset hsetnx hdel hgetall hmget hkeys hlen hexists hincrby hscan
		sadd srem smembers sismember scard sscan zadd zrem zrange zrangebyscore zrevrange zcard zscore zscan zincrby
		lpush rpush lpop rpop lrange llen ltrim
		xadd xlen xrange xrevrange xdel xtrim xread xreadgroup xack xgroup xinfo
		eval evalsha script scan keys type ping publish subscribe info multi exec watch unwatch`) {
		redisCommands[c] = true
	}
}

// redisCommand is cmd's label: its name when in redisCommands, else "other".
func redisCommand(name string) string {
	name = strings.ToLower(name)
	if redisCommands[name] {
		return name
	}
	return "other"
}

// InstrumentRedis adds to rdb a hook timing every call:
// loom_redis_call_seconds{command} on reg. A command is labelled by its name
// from a fixed set (others "other"); a pipeline or transaction is one call
// labelled "pipeline", timed from send to last reply.
func InstrumentRedis(rdb redis.UniversalClient, reg prometheus.Registerer) error {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "loom_redis_call_seconds",
		Help:    "Time of a Redis call from send to reply, by command (a pipeline is one call, \"pipeline\").",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"command"})
	if err := reg.Register(h); err != nil {
		return err
	}
	rdb.AddHook(redisHook{h: h})
	return nil
}

type redisHook struct{ h *prometheus.HistogramVec }

func (redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		r.h.WithLabelValues(redisCommand(cmd.Name())).Observe(time.Since(start).Seconds())
		return err
	}
}

func (r redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		r.h.WithLabelValues("pipeline").Observe(time.Since(start).Seconds())
		return err
	}
}
