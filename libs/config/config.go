// Package config reads service settings from flags and LOOM_* environment
// variables. A flag given on the command line wins over the variable, which wins
// over the documented default.
package config

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/loom-ml/loom/libs/errs"
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
	// MetricsSDDir, when set, is a directory where the service registers
	// its /metrics address for Prometheus' file-based service discovery
	// (LOOM_METRICS_SD_DIR, -metrics-sd; default none): a file_sd JSON file
	// named after the service, written atomically once HTTPAddr is bound and
	// removed when the service stops (libs/service.RegisterFileSD). Node
	// agents listen on ports nobody chose; this is how Prometheus finds them.
	MetricsSDDir string
	// LaunchID, when set, names this launch of the service to whoever
	// started it (LOOM_LAUNCH_ID, -launch-id; default none): the service's
	// gRPC health service also reports its status under the name
	// "loom.launch/<LaunchID>", SERVING only once all its listeners are
	// bound. A supervisor that picked the service's port tells its own
	// process from another that took the port first by asking for that name.
	LaunchID string
	// CreateTopics makes the service create the topics it uses at start
	// (LOOM_CREATE_TOPICS; default true).
	CreateTopics bool
	// ServiceKeyFile is the services' 32-byte secret (LOOM_SERVICE_KEY_FILE):
	// the seed of the Ed25519 key every service signs its records with and
	// checks every record it reads against (and nodes' certificates), and
	// what service-to-service tokens are derived from. Every service of a
	// deployment reads the same file; it must be mode 0600.
	ServiceKeyFile string
	// InsecureBus turns signing and verification of records off
	// (LOOM_INSECURE_BUS; default false). For development only: anything
	// that reaches Kafka can then command every node. Logged at WARN.
	InsecureBus bool
	// ServicePublicKey, when set without ServiceKeyFile, makes the service
	// verify what it reads against it without signing what it writes (its
	// caller sets a signer of its own): how an agent, which holds a node
	// identity and not the services' secret, runs. No flag sets it.
	ServicePublicKey []byte
	// Kafka is how the service authenticates to Kafka and secures its
	// connections (LOOM_KAFKA_SASL_MECHANISM PLAIN|SCRAM-SHA-256|SCRAM-SHA-512,
	// LOOM_KAFKA_SASL_USER, LOOM_KAFKA_SASL_PASSWORD (no flag: a command
	// line is visible to every user), LOOM_KAFKA_TLS=true, LOOM_KAFKA_TLS_CA,
	// LOOM_KAFKA_TLS_CERT, LOOM_KAFKA_TLS_KEY). Empty: plaintext, no SASL.
	Kafka KafkaSecurity
	// Redis' ACL user, password and TLS (LOOM_REDIS_USERNAME,
	// LOOM_REDIS_PASSWORD or the 0600 file LOOM_REDIS_PASSWORD_FILE,
	// LOOM_REDIS_TLS=true, LOOM_REDIS_TLS_CA, LOOM_REDIS_TLS_CERT,
	// LOOM_REDIS_TLS_KEY).
	RedisUsername, RedisPassword, RedisPasswordFile string
	RedisTLS                                        bool
	RedisTLSCA, RedisTLSCert, RedisTLSKey           string
	// BusNodeRate and BusNodeBurst hold each node to BusNodeRate records a
	// second, BusNodeBurst at once, on the records it signs that each of the
	// service's consumers reads (bus.ConsumerConfig.NodeRate): past it they
	// are dropped (-bus-node-rate, LOOM_BUS_NODE_RATE; -bus-node-burst,
	// LOOM_BUS_NODE_BURST; 0: bus.DefaultNodeRate, DefaultNodeBurst).
	BusNodeRate  float64
	BusNodeBurst int
	// BusSessionTimeout is how long the service's consumer groups wait for
	// a member that stopped heartbeating (a killed instance) before its
	// partitions go to the others, and so how long records on them wait
	// after a crash (bus.ConsumerConfig.SessionTimeout;
	// -bus-session-timeout, LOOM_BUS_SESSION_TIMEOUT; 0: the default,
	// 10 s). The brokers must allow it (group.min.session.timeout.ms, 6 s
	// on Apache Kafka by default): shorter is for tests and development
	// stacks on the embedded broker, whose minimum is 1 s.
	BusSessionTimeout time.Duration
	// Clock is the time the service's domain reads and its loops (ticks,
	// prunes, heartbeat checks, reconciles) wait on; nil is the real clock.
	// Tests set a clockwork.FakeClock and advance it instead of waiting.
	// No flag or variable sets it.
	Clock clockwork.Clock
}

// KafkaSecurity is a deployment's Kafka SASL and TLS settings.
type KafkaSecurity struct {
	SASLMechanism, User, Password string
	TLS                           bool
	TLSCA, TLSCert, TLSKey        string
}

// Register adds the common flags to fs, with defaults from the environment.
// svc is the service's name in upper case for the per-service variables
// (for example "SCHEDULER" reads LOOM_SCHEDULER_GRPC_ADDR).
func (c *Common) Register(fs *flag.FlagSet, svc, defGRPC, defHTTP string) {
	c.Brokers = SplitList(Env("LOOM_BROKERS", "127.0.0.1:9092"))
	fs.Var((*listValue)(&c.Brokers), "brokers", "Kafka bootstrap addresses, comma-separated (LOOM_BROKERS)")
	fs.StringVar(&c.RedisAddr, "redis", Env("LOOM_REDIS_ADDR", "127.0.0.1:6379"), "Redis address (LOOM_REDIS_ADDR)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", Env("LOOM_"+svc+"_GRPC_ADDR", defGRPC), "gRPC listen address (LOOM_"+svc+"_GRPC_ADDR)")
	fs.StringVar(&c.HTTPAddr, "http-addr", Env("LOOM_"+svc+"_HTTP_ADDR", defHTTP), "HTTP address for /metrics, /healthz, /readyz (LOOM_"+svc+"_HTTP_ADDR)")
	fs.StringVar(&c.LogLevel, "log-level", Env("LOOM_LOG_LEVEL", "info"), "log level: debug, info, warn, error (LOOM_LOG_LEVEL)")
	fs.StringVar(&c.LaunchID, "launch-id", Env("LOOM_LAUNCH_ID", ""),
		"name of this process for its supervisor: gRPC health also reports under \"loom.launch/<id>\" (LOOM_LAUNCH_ID; default none)")
	fs.BoolVar(&c.CreateTopics, "create-topics", EnvBool("LOOM_CREATE_TOPICS", true), "create Loom's topics at start (LOOM_CREATE_TOPICS)")
	fs.StringVar(&c.MetricsSDDir, "metrics-sd", Env("LOOM_METRICS_SD_DIR", ""),
		"directory where the service registers its /metrics address as a Prometheus file_sd JSON file (LOOM_METRICS_SD_DIR; default none)")
	fs.StringVar(&c.ServiceKeyFile, "service-key-file", Env("LOOM_SERVICE_KEY_FILE", ""),
		"the services' secret (mode 0600): signs and verifies the bus's records and service tokens (LOOM_SERVICE_KEY_FILE)")
	fs.StringVar(&c.Kafka.SASLMechanism, "kafka-sasl-mechanism", Env("LOOM_KAFKA_SASL_MECHANISM", ""), "Kafka SASL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (LOOM_KAFKA_SASL_MECHANISM; default none)")
	fs.StringVar(&c.Kafka.User, "kafka-sasl-user", Env("LOOM_KAFKA_SASL_USER", ""), "Kafka SASL user (LOOM_KAFKA_SASL_USER); its password only from LOOM_KAFKA_SASL_PASSWORD")
	c.Kafka.Password = os.Getenv("LOOM_KAFKA_SASL_PASSWORD")
	fs.BoolVar(&c.Kafka.TLS, "kafka-tls", EnvBool("LOOM_KAFKA_TLS", false), "TLS to Kafka (LOOM_KAFKA_TLS; on as well when a file below is set)")
	fs.StringVar(&c.Kafka.TLSCA, "kafka-tls-ca", Env("LOOM_KAFKA_TLS_CA", ""), "PEM file of the brokers' CAs (LOOM_KAFKA_TLS_CA)")
	fs.StringVar(&c.Kafka.TLSCert, "kafka-tls-cert", Env("LOOM_KAFKA_TLS_CERT", ""), "client certificate for Kafka, PEM (LOOM_KAFKA_TLS_CERT)")
	fs.StringVar(&c.Kafka.TLSKey, "kafka-tls-key", Env("LOOM_KAFKA_TLS_KEY", ""), "its key, PEM (LOOM_KAFKA_TLS_KEY)")
	fs.StringVar(&c.RedisUsername, "redis-username", Env("LOOM_REDIS_USERNAME", ""), "Redis ACL user (LOOM_REDIS_USERNAME; default: the default user)")
	c.RedisPassword = os.Getenv("LOOM_REDIS_PASSWORD")
	fs.StringVar(&c.RedisPasswordFile, "redis-password-file", Env("LOOM_REDIS_PASSWORD_FILE", ""), "file (0600) holding the Redis password (LOOM_REDIS_PASSWORD_FILE; or LOOM_REDIS_PASSWORD)")
	fs.BoolVar(&c.RedisTLS, "redis-tls", EnvBool("LOOM_REDIS_TLS", false), "TLS to Redis (LOOM_REDIS_TLS; on as well when a file below is set)")
	fs.StringVar(&c.RedisTLSCA, "redis-tls-ca", Env("LOOM_REDIS_TLS_CA", ""), "PEM file of Redis' CA (LOOM_REDIS_TLS_CA)")
	fs.StringVar(&c.RedisTLSCert, "redis-tls-cert", Env("LOOM_REDIS_TLS_CERT", ""), "client certificate for Redis, PEM (LOOM_REDIS_TLS_CERT)")
	fs.StringVar(&c.RedisTLSKey, "redis-tls-key", Env("LOOM_REDIS_TLS_KEY", ""), "its key, PEM (LOOM_REDIS_TLS_KEY)")
	fs.Float64Var(&c.BusNodeRate, "bus-node-rate", EnvFloat("LOOM_BUS_NODE_RATE", 0),
		"records a second each node may sign on the topics the service reads; past it (and -bus-node-burst) they are dropped unhandled (LOOM_BUS_NODE_RATE; 0: the default, 200)")
	fs.IntVar(&c.BusNodeBurst, "bus-node-burst", int(EnvInt("LOOM_BUS_NODE_BURST", 0)),
		"records each node may sign at once above -bus-node-rate (LOOM_BUS_NODE_BURST; 0: the default, 4000)")
	fs.DurationVar(&c.BusSessionTimeout, "bus-session-timeout", EnvDuration("LOOM_BUS_SESSION_TIMEOUT", 0),
		"how long a killed instance's consumer-group partitions wait before another member takes them; the brokers must allow it (LOOM_BUS_SESSION_TIMEOUT; 0: the default, 10s)")
	fs.BoolVar(&c.InsecureBus, "insecure-bus", EnvBool("LOOM_INSECURE_BUS", false),
		"DEVELOPMENT ONLY: do not sign or verify the bus's records (LOOM_INSECURE_BUS)")
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

// EnvBool parses a boolean environment variable; def when unset or
// unparsable (which CheckEnv reports).
func EnvBool(key string, def bool) bool {
	return EnvParse(key, def, strconv.ParseBool, "true or false")
}

// EnvDuration parses a duration environment variable; def when unset or
// unparsable (which CheckEnv reports).
func EnvDuration(key string, def time.Duration) time.Duration {
	return EnvParse(key, def, time.ParseDuration, "a duration such as 500ms, 30s or 5m")
}

// EnvInt parses an integer environment variable; def when unset or
// unparsable (which CheckEnv reports).
func EnvInt(key string, def int64) int64 {
	return EnvParse(key, def, func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }, "an integer")
}

// EnvFloat parses a number environment variable; def when unset or
// unparsable (which CheckEnv reports).
func EnvFloat(key string, def float64) float64 {
	return EnvParse(key, def, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }, "a number")
}

// envChecks holds, for every variable EnvParse has read, what a bad
// value is refused with; CheckEnv reads the variables again.
var (
	envMu     sync.Mutex
	envChecks = map[string]func(string) string{}
)

// EnvParse parses environment variable key with parse; def when unset or
// unparsable. CheckEnv reports an unparsable value as "must be <want>".
func EnvParse[T any](key string, def T, parse func(string) (T, error), want string) T {
	envMu.Lock()
	envChecks[key] = func(v string) string {
		if _, err := parse(v); err != nil {
			return fmt.Sprintf("must be %s, got %q", want, v)
		}
		return ""
	}
	envMu.Unlock()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	if x, err := parse(v); err == nil {
		return x
	}
	return def
}

// CheckEnv returns an InvalidError naming every variable read by EnvBool,
// EnvDuration, EnvInt or EnvFloat whose value (as the environment holds it
// now) does not parse, or nil. Those parsers fall back to their default, so
// that flags can be registered; a service calls CheckEnv before it starts,
// so that a mistyped LOOM_* value stops it instead of being ignored.
func CheckEnv() error {
	envMu.Lock()
	checks := maps.Clone(envChecks)
	envMu.Unlock()
	var v errs.Validator
	for _, k := range slices.Sorted(maps.Keys(checks)) {
		if val := os.Getenv(k); val != "" {
			if why := checks[k](val); why != "" {
				v.Add(k, "%s", why)
			}
		}
	}
	return v.Err()
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
