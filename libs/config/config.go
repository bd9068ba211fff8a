// Package config reads service settings from flags and LOOM_* environment
// variables. A flag given on the command line wins over the variable, which wins
// over the documented default.
package config

import (
	"flag"
	"os"
	"strconv"
	"strings"
	"time"
)

// Common holds the settings every Loom service takes.
type Common struct {
	// Brokers are the Kafka bootstrap addresses (LOOM_BROKERS, comma-separated;
	// default 127.0.0.1:9092).
	Brokers []string
	// RedisAddr is the service's Redis (LOOM_REDIS_ADDR; default 127.0.0.1:6379).
	RedisAddr string
	// GRPCAddr is where the service serves gRPC (LOOM_<SVC>_GRPC_ADDR).
	GRPCAddr string
	// HTTPAddr serves /metrics, /healthz and /readyz (LOOM_<SVC>_HTTP_ADDR).
	HTTPAddr string
	// LogLevel is debug, info, warn or error (LOOM_LOG_LEVEL; default info).
	LogLevel string
	// CreateTopics makes the service create the topics it uses at start
	// (LOOM_CREATE_TOPICS; default true).
	CreateTopics bool
}

// Register adds the common flags to fs, with defaults from the environment.
// svc is the service's name in upper case for the per-service variables
// (for example "SCHEDULER" reads LOOM_SCHEDULER_GRPC_ADDR).
func (c *Common) Register(fs *flag.FlagSet, svc, defGRPC, defHTTP string) {
	c.Brokers = SplitList(Env("LOOM_BROKERS", "127.0.0.1:9092"))
	fs.Var((*listValue)(&c.Brokers), "brokers", "Kafka bootstrap addresses, comma-separated (LOOM_BROKERS; default 127.0.0.1:9092)")
	fs.StringVar(&c.RedisAddr, "redis", Env("LOOM_REDIS_ADDR", "127.0.0.1:6379"), "Redis address (LOOM_REDIS_ADDR)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", Env("LOOM_"+svc+"_GRPC_ADDR", defGRPC), "gRPC listen address (LOOM_"+svc+"_GRPC_ADDR)")
	fs.StringVar(&c.HTTPAddr, "http-addr", Env("LOOM_"+svc+"_HTTP_ADDR", defHTTP), "HTTP address for /metrics, /healthz, /readyz (LOOM_"+svc+"_HTTP_ADDR)")
	fs.StringVar(&c.LogLevel, "log-level", Env("LOOM_LOG_LEVEL", "info"), "log level: debug, info, warn, error (LOOM_LOG_LEVEL)")
	fs.BoolVar(&c.CreateTopics, "create-topics", EnvBool("LOOM_CREATE_TOPICS", true), "create Loom's topics at start (LOOM_CREATE_TOPICS)")
}

// listValue is a comma-separated list flag.
type listValue []string

func (l *listValue) String() string { return strings.Join(*l, ",") }

func (l *listValue) Set(s string) error {
	*l = SplitList(s)
	return nil
}

// Env returns the environment variable key, or def when it is unset or empty.
func Env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// EnvBool parses a boolean environment variable; def when unset or unparsable.
func EnvBool(key string, def bool) bool {
	if b, err := strconv.ParseBool(os.Getenv(key)); err == nil {
		return b
	}
	return def
}

// EnvDuration parses a duration environment variable; def when unset or unparsable.
func EnvDuration(key string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(key)); err == nil {
		return d
	}
	return def
}

// SplitList splits a comma-separated list, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
