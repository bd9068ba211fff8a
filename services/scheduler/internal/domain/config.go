package domain

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/slurmspec"

	"github.com/loom-ml/loom/services/scheduler/internal/domain/place"
)

// Config is what the domain is told at start. Zero fields take the
// documented defaults (see Defaults).
type Config struct {
	// Policy orders the queue and decides where jobs fit (DefaultPolicy
	// when zero).
	Policy Policy
	// MasterAddr is every run's MASTER_ADDR; "" means the hostname of the
	// run's first node (Slurm's usual choice).
	MasterAddr string
	// Weights are the multifactor priority's weights.
	Weights Weights
	// MaxAge is the age at which a job's age factor reaches 1 (Slurm's
	// PriorityMaxAge; default 7 days).
	MaxAge time.Duration
	// HalfLife is the fair-share usage decay half-life (Slurm's
	// PriorityDecayHalfLife; default 7 days).
	HalfLife time.Duration
	// QOS is the QOS table (default DefaultQOS()); DefaultQOS names the QOS
	// of jobs that name none (default "normal").
	QOS        []QOS
	DefaultQOS string
	// PreemptGrace is how long a preempted job has, after its --signal,
	// before it is stopped and requeued (default 30 s).
	PreemptGrace time.Duration
	// RequeueStopWait bounds how long a requeued job waits for its previous
	// run's processes to be reported gone before its next run may start
	// (default 60 s, Slurm's UnkillableStepTimeout). As Slurm keeps a
	// requeued job COMPLETING until its old run has ended, the next run never
	// overlaps the old one (which may still be writing its checkpoint) while
	// the old nodes' agents answer; a node that fails is abandoned at once.
	RequeueStopWait time.Duration
	// MaxPreemptPerPass bounds how many pending jobs look for victims in
	// one pass (default 64), so a queue of preemptors cannot make a pass slow.
	MaxPreemptPerPass int
	// MaxArraySize is Slurm's MaxArraySize: an array's task ids must be
	// below it (default slurmspec.DefaultMaxArraySize, 1001: ids 0..1000).
	// A submission past it is refused as invalid; the gateway checks the
	// same setting first.
	MaxArraySize int
	// FenceTimeout bounds how long a run holds a failed node (health's
	// UNHEALTHY, or DOWN) whose step may still be running there: until the
	// step reports its end, the node is repaired (REBOOTING, REIMAGING,
	// REPLACING) or removed, or this passes (default 5 m). The job's next
	// attempt waits for it: two attempts of a job never run at once.
	FenceTimeout time.Duration
	// MaxInfraRestarts bounds the requeues of a job for the
	// infrastructure's sake (node failures, hangs, health actions), which do
	// not use its max_retries: past it the job ends NODE_FAIL (default 20).
	MaxInfraRestarts int32
	// CheckpointGrace is how long a checkpoint-aware drain waits, after the
	// job's --signal, for a new checkpoint before requeueing (default 2 m).
	CheckpointGrace time.Duration
	// FailureCheckpointWait turns on checkpoint on failure: when a node
	// of a multi-node run fails, the run's steps on the other nodes (which
	// still hold the training state) are sent the job's --signal (default
	// USR1) before they are stopped, and stopped at their first checkpoint
	// written since, once none of them runs, or after this long for a job
	// without --signal (one that
	// may not handle the signal: a short wait), after CheckpointGrace for a
	// job with one. The job is requeued at once either way; its next
	// attempt waits for the old one's steps to end. 0 (the zero Config) is
	// off; the scheduler's -failure-checkpoint-wait defaults to
	// DefaultFailureCheckpointWait.
	FailureCheckpointWait time.Duration
	// HangTimeout ends a run that reports no progress for that long as hung
	// (a job's hang_timeout_seconds overrides it); 0 (the default) is off.
	HangTimeout time.Duration
	// MaxStepRequestBytes bounds the requests of the job steps that wait
	// for resources, all runs together (they are kept in the store until
	// the steps start; default DefaultMaxStepRequestBytes): each run has its
	// own bound too (MaxPendingStepBytes).
	MaxStepRequestBytes int64
}

// Weights are the multifactor priority's weights: each factor (between 0
// and 1) is multiplied by its weight and the products are summed.
type Weights struct {
	Age, FairShare, JobSize, Partition, QOS int64
}

// Default weights: fair share dominates, then QOS, then age, partition tier
// and size. A job's priority is at most their sum.
const (
	DefaultWeightAge       = 1000
	DefaultWeightFairShare = 10000
	DefaultWeightJobSize   = 1000
	DefaultWeightPartition = 1000
	DefaultWeightQOS       = 2000
)

// Defaults of the other settings.
const (
	DefaultMaxAge            = 7 * 24 * time.Hour
	DefaultHalfLife          = 7 * 24 * time.Hour
	DefaultPreemptGrace      = 30 * time.Second
	DefaultRequeueStopWait   = 60 * time.Second
	DefaultQOSName           = "normal"
	DefaultMaxPreemptPerPass = 64
	DefaultFenceTimeout      = 5 * time.Minute
	DefaultMaxInfraRestarts  = 20
	DefaultCheckpointGrace   = 2 * time.Minute
	// DefaultMaxStepRequestBytes is the default MaxStepRequestBytes.
	DefaultMaxStepRequestBytes = 256 << 20
	// DefaultFailureCheckpointWait is the scheduler's default
	// FailureCheckpointWait.
	DefaultFailureCheckpointWait = 30 * time.Second
)

// QOS is one quality of service: a priority, whom it may preempt and a
// per-user GPU cap.
type QOS struct {
	Name string
	// Priority is the QOS's priority; its factor is Priority over the
	// table's highest.
	Priority int64
	// Preempt names the QOS whose running jobs this one's pending jobs may
	// preempt (mode REQUEUE).
	Preempt []string
	// MaxGPUsPerUser caps the GPUs one user's running jobs of this QOS hold
	// (Slurm's MaxTRESPerUser=gres/gpu); 0 means no cap.
	MaxGPUsPerUser int32
}

// DefaultQOS is the default QOS table: low (priority 0), normal (50) and
// high (100), where high may preempt low; no per-user caps.
func DefaultQOS() []QOS {
	return []QOS{
		{Name: "low", Priority: 0},
		{Name: "normal", Priority: 50},
		{Name: "high", Priority: 100, Preempt: []string{"low"}},
	}
}

// Defaults returns cfg with every zero field set to its default: a zero
// Policy is DefaultPolicy, a policy without Checks gets DefaultChecks (and
// without Rankers DefaultRankers), and all-zero Weights are the default weights.
func (cfg Config) Defaults() Config {
	switch {
	case cfg.Policy.Name == "" && cfg.Policy.Less == nil && len(cfg.Policy.Checks) == 0:
		cfg.Policy = DefaultPolicy()
	case len(cfg.Policy.Checks) == 0:
		cfg.Policy.Checks = place.DefaultChecks()
	}
	if len(cfg.Policy.Rankers) == 0 {
		cfg.Policy.Rankers = place.DefaultRankers()
	}
	if cfg.Weights == (Weights{}) {
		cfg.Weights = Weights{Age: DefaultWeightAge, FairShare: DefaultWeightFairShare, JobSize: DefaultWeightJobSize,
			Partition: DefaultWeightPartition, QOS: DefaultWeightQOS}
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.HalfLife <= 0 {
		cfg.HalfLife = DefaultHalfLife
	}
	if len(cfg.QOS) == 0 {
		cfg.QOS = DefaultQOS()
	}
	if cfg.DefaultQOS == "" {
		cfg.DefaultQOS = DefaultQOSName
	}
	if cfg.PreemptGrace <= 0 {
		cfg.PreemptGrace = DefaultPreemptGrace
	}
	if cfg.RequeueStopWait <= 0 {
		cfg.RequeueStopWait = DefaultRequeueStopWait
	}
	if cfg.MaxPreemptPerPass <= 0 {
		cfg.MaxPreemptPerPass = DefaultMaxPreemptPerPass
	}
	if cfg.MaxArraySize <= 0 {
		cfg.MaxArraySize = slurmspec.DefaultMaxArraySize
	}
	if cfg.FenceTimeout <= 0 {
		cfg.FenceTimeout = DefaultFenceTimeout
	}
	if cfg.MaxInfraRestarts <= 0 {
		cfg.MaxInfraRestarts = DefaultMaxInfraRestarts
	}
	if cfg.CheckpointGrace <= 0 {
		cfg.CheckpointGrace = DefaultCheckpointGrace
	}
	if cfg.HangTimeout < 0 {
		cfg.HangTimeout = 0
	}
	if cfg.MaxStepRequestBytes <= 0 {
		cfg.MaxStepRequestBytes = DefaultMaxStepRequestBytes
	}
	if cfg.FailureCheckpointWait < 0 {
		cfg.FailureCheckpointWait = 0
	}
	return cfg
}

// qos returns the QOS named name ("" means the default), and whether it exists.
func (cfg *Config) qos(name string) (QOS, bool) {
	if name == "" {
		name = cfg.DefaultQOS
	}
	for _, q := range cfg.QOS {
		if q.Name == name {
			return q, true
		}
	}
	return QOS{Name: name}, false
}

// maxQOSPriority is the highest priority in the QOS table (at least 1).
func (cfg *Config) maxQOSPriority() int64 {
	m := int64(1)
	for _, q := range cfg.QOS {
		m = max(m, q.Priority)
	}
	return m
}

// ParseQOS parses a QOS table written as the -qos flag takes it: entries
// separated by commas, each "name:priority" followed by optional
// ":preempt=a|b" and ":maxgpus=N" (per user), e.g.
// "low:0,normal:50,high:100:preempt=low". It names the option in its errors.
func ParseQOS(option, s string) ([]QOS, error) {
	var v errs.Validator
	var out []QOS
	seen := map[string]bool{}
	for i, entry := range strings.Split(s, ",") {
		field := fmt.Sprintf("%s[%d]", option, i)
		parts := strings.Split(strings.TrimSpace(entry), ":")
		if len(parts) < 2 || parts[0] == "" {
			v.Add(field, "want name:priority[:preempt=a|b][:maxgpus=N], got %q", entry)
			continue
		}
		q := QOS{Name: parts[0]}
		if seen[q.Name] {
			v.Add(field, "QOS %q is listed twice", q.Name)
		}
		seen[q.Name] = true
		p, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil || p < 0 {
			v.Add(field, "priority %q is not a number ≥ 0", parts[1])
		}
		q.Priority = p
		for _, opt := range parts[2:] {
			k, val, _ := strings.Cut(opt, "=")
			switch k {
			case "preempt":
				for _, name := range strings.Split(val, "|") {
					if name != "" {
						q.Preempt = append(q.Preempt, name)
					}
				}
			case "maxgpus":
				n, err := strconv.ParseInt(val, 10, 32)
				if err != nil || n < 0 {
					v.Add(field, "maxgpus %q is not a number ≥ 0", val)
				}
				q.MaxGPUsPerUser = int32(n)
			default:
				v.Add(field, "unknown setting %q (want preempt= or maxgpus=)", opt)
			}
		}
		out = append(out, q)
	}
	for i, q := range out {
		for _, p := range q.Preempt {
			if !seen[p] {
				v.Add(fmt.Sprintf("%s[%d]", option, i), "preempt names QOS %q, which is not in the table", p)
			}
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// FormatQOS writes a QOS table as ParseQOS reads it.
func FormatQOS(qs []QOS) string {
	parts := make([]string, len(qs))
	for i, q := range qs {
		s := q.Name + ":" + strconv.FormatInt(q.Priority, 10)
		if len(q.Preempt) > 0 {
			s += ":preempt=" + strings.Join(q.Preempt, "|")
		}
		if q.MaxGPUsPerUser > 0 {
			s += ":maxgpus=" + strconv.Itoa(int(q.MaxGPUsPerUser))
		}
		parts[i] = s
	}
	return strings.Join(parts, ",")
}

// canPreemptQOS reports whether jobs of QOS a may preempt jobs of QOS b.
func (cfg *Config) canPreemptQOS(a, b string) bool {
	qa, _ := cfg.qos(a)
	if b == "" {
		b = cfg.DefaultQOS
	}
	return slices.Contains(qa.Preempt, b)
}
