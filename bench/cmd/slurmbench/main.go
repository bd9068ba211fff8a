// Command slurmbench measures Loom against a real Slurm on this machine, in
// one run: jobs accepted per second (N trivial batch jobs submitted by
// concurrent clients) and trivial jobs completed per second end to end (from
// the first submission until every job has finished), and the ratios
// Loom/Slurm (target: at least 5× on both), in rounds (-rounds, default 3)
// that each measure Loom and then Slurm; the report's verdict is on the
// median of the rounds' ratios. Slurm is Debian's slurm-wlm,
// started by bench/slurm with several virtual nodes on localhost; Loom is the
// embedded deployment (broker, Redis, the five central services in this
// process, one agent process per node — this binary again). The results go
// to stdout and, with -report, into bench/REPORT.md between the slurmbench
// markers. Before the first round it measures what the job costs by itself
// on this machine (probeJobCost), and the report says what that leaves for
// either system's control plane.
//
//	go run ./bench/cmd/slurmbench -report bench/REPORT.md
//
// It needs root and the Slurm packages (see bench/slurm). -only loom runs
// Loom alone (no report); -cpuprofile and -agent-profile say where Loom's
// time goes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/loom-ml/loom/libs/auth"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loom-ml/loom/bench/slurm"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
	"github.com/loom-ml/loom/services/agent"
)

func main() {
	if os.Getenv(envAgent) == "1" {
		if err := runAgent(); err != nil {
			fmt.Fprintln(os.Stderr, "slurmbench agent:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	var f flags
	f.register(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "slurmbench: unexpected arguments %q (see -h)\n", flag.Args())
		os.Exit(2)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if err := run(f); err != nil {
		fmt.Fprintln(os.Stderr, "slurmbench:", err)
		os.Exit(1)
	}
}

type flags struct {
	n, conc, warmup          int
	nodes, cpus, gpus        int
	only, report, dir        string
	machineType              string
	cpuProfile, agentProfile string
	trace                    string
	jobNice                  string // LOOM_JOB_NICE per Loom run, comma-separated
	jobNices                 []int  // jobNice parsed by check
	rounds                   int
	phaseTimeout             time.Duration
	keep                     bool
}

func (f *flags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.n, "n", 2000, "jobs per system")
	fs.IntVar(&f.conc, "concurrency", 8, "concurrent submitters")
	fs.IntVar(&f.warmup, "warmup", 20, "warm-up jobs per system, not counted")
	fs.IntVar(&f.nodes, "nodes", 4, "nodes (Slurm: virtual nodes, one slurmd each; Loom: agents)")
	fs.IntVar(&f.cpus, "cpus", 16, "CPUs per Slurm node")
	fs.IntVar(&f.gpus, "gpus", 8, "GPUs per node (Slurm: fake gres; Loom: the node pool's accelerator count); jobs use none")
	fs.StringVar(&f.only, "only", "", "run one system only: slurm or loom (no report)")
	fs.StringVar(&f.report, "report", "", "Markdown file to write the results into (between the slurmbench markers)")
	fs.StringVar(&f.dir, "dir", "", "working directory (default: a temporary one, removed at the end)")
	fs.StringVar(&f.machineType, "loom-machine-type", "", "machine type of Loom's node pool (default a3-highgpu-8g with GPUs, n2-standard-16 without)")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (Loom's in-process services) during Loom's measured window")
	fs.StringVar(&f.trace, "trace", "", "write a Go execution trace of this process during Loom's measured window (go tool trace -pprof=net|sync|syscall)")
	fs.StringVar(&f.agentProfile, "agent-profile", "", "directory for a CPU profile and an execution trace per Loom agent process (agent-PID.pprof, agent-PID.trace)")
	fs.IntVar(&f.rounds, "rounds", 3, "rounds, each measuring Loom then Slurm; the report's verdict is on the median ratio")
	fs.StringVar(&f.jobNice, "job-nice", fmt.Sprintf("%d,0", agent.DefaultJobNice),
		"Loom's LOOM_JOB_NICE for each Loom run, comma-separated: the first is the headline, the others are measured after it for comparison")
	fs.DurationVar(&f.phaseTimeout, "phase-timeout", 150*time.Second, "limit for each system's measurement")
	fs.BoolVar(&f.keep, "keep", false, "keep the working directory (logs, Slurm's config, job outputs)")
}

// check validates the flags, naming each bad one.
func (f *flags) check() error {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if f.n < 1 || f.n > 100000 {
		bad("-n must be 1..100000, got %d", f.n)
	}
	if f.conc < 1 || f.conc > 256 {
		bad("-concurrency must be 1..256, got %d", f.conc)
	}
	if f.warmup < 0 || f.warmup > 10000 {
		bad("-warmup must be 0..10000, got %d", f.warmup)
	}
	if f.nodes < 1 || f.nodes > 64 {
		bad("-nodes must be 1..64, got %d", f.nodes)
	}
	if f.cpus < 1 || f.cpus > slurm.MaxCPUsPerNode {
		bad("-cpus must be 1..%d, got %d", slurm.MaxCPUsPerNode, f.cpus)
	}
	if f.gpus < 0 || f.gpus > 16 {
		bad("-gpus must be 0..16, got %d", f.gpus)
	}
	if f.only != "" && f.only != "slurm" && f.only != "loom" {
		bad("-only must be slurm or loom, got %q", f.only)
	}
	if f.only != "" && f.report != "" {
		bad("-report needs both systems: drop -only")
	}
	f.jobNices = nil
	if f.jobNice == "" {
		f.jobNice = strconv.Itoa(agent.DefaultJobNice)
	}
	for _, v := range strings.Split(f.jobNice, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n > 19 {
			bad("-job-nice must be a comma-separated list of numbers 0..19, got %q", f.jobNice)
			break
		}
		f.jobNices = append(f.jobNices, n)
	}
	if f.rounds < 1 || f.rounds > 20 {
		bad("-rounds must be 1..20, got %d", f.rounds)
	}
	if f.phaseTimeout <= 0 {
		bad("-phase-timeout must be positive, got %v", f.phaseTimeout)
	}
	if len(probs) > 0 {
		return errors.New(strings.Join(probs, "; "))
	}
	if f.machineType == "" {
		f.machineType = "n2-standard-16"
		if f.gpus > 0 {
			f.machineType = "a3-highgpu-8g"
		}
	}
	return nil
}

func run(f flags) error {
	if err := f.check(); err != nil {
		return err
	}
	dir := f.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "slurmbench-")
		if err != nil {
			return err
		}
		dir = d
		if !f.keep {
			defer os.RemoveAll(dir)
		}
	}
	ctx := context.Background()
	e := describe(f)
	// Before anything else runs: the probe counts this process's children.
	cost, err := probeJobCost(dir, 200)
	if err != nil {
		return err
	}
	e.Cost = cost
	fmt.Printf("the job alone: %s of CPU per run, an exec of /bin/true %s (%d runs each)\n",
		ms(cost.Script), ms(cost.Exec), cost.Runs)
	e.Load = loadAvg()
	var rounds []round
	for i := 0; i < f.rounds; i++ {
		if f.rounds > 1 {
			fmt.Printf("round %d of %d\n", i+1, f.rounds)
		}
		r, err := runRound(ctx, f, filepath.Join(dir, fmt.Sprintf("round-%d", i+1)), i == 0)
		if err != nil {
			return err
		}
		if f.only == "" {
			a, d := r.ratios()
			fmt.Printf("Loom/Slurm: accepted/s %.1f×, completed/s %.1f× (target ≥ %.0f× on both)\n", a, d, targetRatio)
		}
		rounds = append(rounds, r)
	}
	e.LoadEnd = loadAvg()
	if f.only == "" && len(rounds) > 1 {
		var accs, dones []float64
		for _, r := range rounds {
			a, d := r.ratios()
			accs, dones = append(accs, a), append(dones, d)
		}
		fmt.Printf("median of %d rounds: accepted/s %.1f×, completed/s %.1f×\n", len(rounds), median(accs), median(dones))
	}
	if f.report != "" {
		if err := writeReport(f.report, renderSection(e, rounds)); err != nil {
			return err
		}
		fmt.Println("report written to", f.report)
	}
	return nil
}

// runRound measures Loom (each -job-nice value) and then Slurm in dir.
// Profiles, when asked for, are of the first round's headline Loom run.
//
// Loom goes first: Slurm's daemons create and delete files for every job,
// and on ext4 that slows creating files nearby for minutes after, which
// would be billed to whoever runs next. Loom deletes nothing while it runs,
// so Slurm after it pays only for its own.
func runRound(ctx context.Context, f flags, dir string, first bool) (round, error) {
	var r round
	if f.only != "slurm" {
		r.CreateLoom = probeCreate(dir, "loom")
		for i, nice := range f.jobNices {
			fi := f
			if i > 0 || !first {
				fi.cpuProfile, fi.trace, fi.agentProfile = "", "", ""
			}
			res, err := runLoom(ctx, fi, fmt.Sprintf("%s/loom-%d", dir, i), nice)
			if err != nil {
				return r, fmt.Errorf("loom (LOOM_JOB_NICE=%d): %w", nice, err)
			}
			printResult(fmt.Sprintf("Loom (LOOM_JOB_NICE=%d)", nice), res)
			if i == 0 {
				r.L = res
			} else {
				r.Others = append(r.Others, res)
			}
		}
	}
	if f.only != "loom" {
		r.CreateSlurm = probeCreate(dir, "slurm")
		res, err := runSlurm(ctx, f, dir+"/slurm")
		if err != nil {
			return r, fmt.Errorf("slurm: %w", err)
		}
		printResult("Slurm", res)
		r.S = res
	}
	return r, nil
}

func printResult(name string, r result) {
	fmt.Printf("%s: %d jobs, %d submitters: accepted %.0f/s (%.2f s; p50 %s, p99 %s), completed %.0f/s (%.2f s)\n"+
		"       CPU: %s\n       jobs per node: %s\n",
		name, r.N, r.Concurrency, r.AcceptRate(), r.Accept.Seconds(), ms(r.SubmitP50), ms(r.SubmitP99),
		r.CompleteRate(), r.Complete.Seconds(), cpuLine(r.CPU), perNodeLine(r.PerNode))
	if len(r.Redis) > 0 {
		fmt.Printf("       redis (server side): %s\n", redisLine(r.Redis, 6))
	}
	if r.Topics != "" {
		fmt.Printf("       bus records per job: %s\n", r.Topics)
	}
}

func runSlurm(ctx context.Context, f flags, dir string) (result, error) {
	if err := slurm.Installed(); err != nil {
		return result{}, err
	}
	c, err := slurm.Start(ctx, slurm.Options{Dir: dir, Nodes: f.nodes, CPUsPerNode: f.cpus, GPUsPerNode: f.gpus})
	if err != nil {
		return result{}, err
	}
	defer c.Stop()
	t := &slurmTarget{c: c}
	if err := t.mark(); err != nil {
		return result{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, f.phaseTimeout)
	defer cancel()
	if f.warmup > 0 {
		if _, err := measure(pctx, t, f.warmup, f.conc, 20*time.Millisecond, nil); err != nil {
			return result{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	if err := t.mark(); err != nil {
		return result{}, err
	}
	names := map[string]string{"slurmctld": "slurmctld", "slurmd": "slurmd", "munged": "munged", "slurmstepd": "slurmstepd"}
	cpu := func() map[string]cpuSample {
		m := sampleProcs(func(_ int, comm string, _ int) string { return names[comm] })
		m["sbatch processes"] = m["clients"]
		delete(m, "clients")
		m["benchmark"] = m["self"]
		delete(m, "self")
		return m
	}
	r, err := measure(pctx, t, f.n, f.conc, 20*time.Millisecond, cpu)
	if err != nil {
		return r, err
	}
	r.PerNode = t.perNode
	return r, c.Stop()
}

func runLoom(ctx context.Context, f flags, dir string, jobNice int) (result, error) {
	if f.agentProfile != "" {
		if err := os.MkdirAll(f.agentProfile, 0o755); err != nil {
			return result{}, err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	st, err := startLoom(sctx, loomOptions{dir: dir, agentProfile: f.agentProfile, machineType: f.machineType, jobNice: jobNice})
	if err != nil {
		return result{}, fmt.Errorf("start: %w", err)
	}
	defer st.close()
	admin, err := st.AdminKey()
	if err != nil {
		return result{}, err
	}
	conn, err := grpc.NewClient(st.gatewayAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.Bearer(admin)))
	if err != nil {
		return result{}, err
	}
	defer conn.Close()
	cl, err := createCluster(sctx, conn, "bench", f.machineType, f.nodes, f.gpus)
	if err != nil {
		return result{}, err
	}
	t := &loomTarget{jobs: loomv1.NewJobServiceClient(conn), cluster: cl.GetName()}
	run := fmt.Sprintf("slurmbench-%d", time.Now().UnixNano())
	pctx, pcancel := context.WithTimeout(ctx, f.phaseTimeout)
	defer pcancel()
	if f.warmup > 0 {
		t.reset(run + "-warmup")
		if _, err := measure(pctx, t, f.warmup, f.conc, 50*time.Millisecond, nil); err != nil {
			return result{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	t.reset(run)
	self := os.Getpid()
	cpu := func() map[string]cpuSample {
		m := sampleProcs(func(_ int, comm string, ppid int) string {
			switch {
			case ppid != self:
				return ""
			case comm == "redis-server":
				return "redis-server"
			default:
				return "agents"
			}
		})
		// An agent's reaped children are its jobs: their time, apart.
		a := m["agents"]
		m["agents"] = cpuSample{Procs: a.Procs, Own: a.Own}
		m[loomJobsCPU] = cpuSample{Procs: 1, Own: a.Kids}
		m["services in-process + client"] = m["self"]
		delete(m, "self")
		delete(m, "clients")
		return m
	}
	// Server-side Redis time per command in the window (not with miniredis).
	statsOK := resetRedisStats(pctx, st.RedisAddr, st.RedisPassword) == nil
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return result{}, err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return result{}, err
		}
	}
	if f.trace != "" {
		tf, err := os.Create(f.trace)
		if err != nil {
			return result{}, err
		}
		defer tf.Close()
		if err := trace.Start(tf); err != nil {
			return result{}, err
		}
	}
	offBefore, offErr := topicOffsets(pctx, st.BrokerAddr)
	r, err := measure(pctx, t, f.n, f.conc, 100*time.Millisecond, cpu)
	if f.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if f.trace != "" {
		trace.Stop()
	}
	if err != nil {
		return r, err
	}
	r.PerNode = t.perNode
	r.JobNice = jobNice
	if offErr == nil {
		if after, err := topicOffsets(pctx, st.BrokerAddr); err == nil {
			r.Topics = topicLine(offBefore, after, f.n)
		}
	}
	if statsOK {
		if rs, err := redisStats(pctx, st.RedisAddr, st.RedisPassword); err == nil {
			r.Redis = rs
		}
	}
	if serr := st.err(); serr != nil {
		return r, serr
	}
	return r, nil
}

// probeCreate returns how long creating an empty file in a new directory
// under dir (named for the system measured next) takes, as the median of 200 creates, or "" when it cannot tell.
// Every job of either system creates at least its output file there, and on
// ext4 that cost swings with how many files were deleted nearby in the last
// minutes (inodes deleted recently are passed over one by one). The files
// stay until the run's directory is removed: deleting them would slow what
// comes next.
func probeCreate(dir, name string) string {
	d := filepath.Join(dir, "create-probe-"+name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return ""
	}
	ds := make([]time.Duration, 0, 200)
	for i := 0; i < 200; i++ {
		t0 := time.Now()
		f, err := os.OpenFile(filepath.Join(d, fmt.Sprintf("f-%d", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return ""
		}
		ds = append(ds, time.Since(t0))
		f.Close()
	}
	slices.Sort(ds)
	return fmt.Sprintf("%.0f µs", float64(ds[len(ds)/2])/float64(time.Microsecond))
}

// describe fills what the report says about the machine and the run.
func describe(f flags) env {
	e := env{Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), GoVersion: runtime.Version(),
		Nodes: f.nodes, CPUs: f.cpus, GPUs: f.gpus, Warmup: f.warmup, LoomMachineType: f.machineType}
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GiB RAM", float64(kb)/(1<<20))
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	e.Cores = runtime.NumCPU()
	e.Machine = fmt.Sprintf("%s, %d CPUs available%s%s", model, e.Cores, mem, kernel)
	e.SlurmVersion = "Slurm not found"
	if v, err := slurm.Version(); err == nil {
		e.SlurmVersion = v
	}
	cmd := "go run ./bench/cmd/slurmbench -report bench/REPORT.md"
	if f.n != 2000 || f.conc != 8 || f.nodes != 4 || f.cpus != 16 || f.gpus != 8 || f.rounds != 3 {
		cmd = fmt.Sprintf("go run ./bench/cmd/slurmbench -n %d -concurrency %d -nodes %d -cpus %d -gpus %d -rounds %d -report bench/REPORT.md",
			f.n, f.conc, f.nodes, f.cpus, f.gpus, f.rounds)
	}
	e.Command = cmd
	return e
}
