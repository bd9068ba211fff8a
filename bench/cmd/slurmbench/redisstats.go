package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStat is one Redis command's server-side totals in a window.
type redisStat struct {
	Cmd   string
	Calls int64
	Usec  int64
}

// resetRedisStats zeroes Redis' per-command statistics (CONFIG RESETSTAT).
func resetRedisStats(ctx context.Context, addr, password string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: password})
	defer rdb.Close()
	return rdb.ConfigResetStat(ctx).Err()
}

// redisStats reads INFO commandstats, busiest command first.
func redisStats(ctx context.Context, addr, password string) ([]redisStat, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: password})
	defer rdb.Close()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return parseCommandStats(info), nil
}

// parseCommandStats parses "cmdstat_evalsha:calls=3,usec=120,usec_per_call=40.00,…" lines.
func parseCommandStats(info string) []redisStat {
	var out []redisStat
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		cmd, isStat := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isStat {
			continue
		}
		st := redisStat{Cmd: cmd}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.Calls = n
			case "usec":
				st.Usec = n
			}
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Usec > out[j].Usec })
	return out
}

// redisLine summarises the busiest commands: "evalsha 6,012 calls × 41 µs".
func redisLine(stats []redisStat, top int) string {
	var parts []string
	for i, s := range stats {
		if i == top {
			break
		}
		per := time.Duration(0)
		if s.Calls > 0 {
			per = time.Duration(s.Usec) * time.Microsecond / time.Duration(s.Calls)
		}
		parts = append(parts, fmt.Sprintf("%s %d calls × %d µs", s.Cmd, s.Calls, per.Microseconds()))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}
