// Command clusterbench measures Loom's control plane bringing up and tearing
// down large training clusters on the simulated cloud (the provisioner's
// "sim" provider: no processes, a known provisioning latency per node).
//
// It starts Loom's one embedded stack (cmd/loom/stack: a Kafka-protocol
// broker, Redis and the five central services in this process) with the
// provisioner on the sim provider, creates a cluster through the gateway's
// public API (or straight on the bus with -via bus, the commands signed as
// the gateway it then stands in for), waits for the create
// operation to finish, deletes the cluster, and then reads the cluster's
// events back from the bus. It reports:
//
//   - time to RUNNING, and the control-plane overhead: time to RUNNING minus
//     the largest provisioning latency the simulated cloud drew for a node
//     (no control plane could be faster than its slowest node);
//   - where the overhead goes: until the first and the last node launch, and
//     from the last simulated agent registering until RUNNING;
//   - events per second: cluster and node events the provisioner emitted for
//     the cluster, over the time to RUNNING;
//   - the same for the delete.
//
// Results go to stdout and, with -report, into the clusterbench section of
// a Markdown report.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/loom-ml/loom/bench/internal/report"
)

// options are the benchmark's settings.
type options struct {
	nodes    int
	pools    int
	latency  time.Duration
	sigma    float64
	hb       time.Duration
	via      string
	timeout  time.Duration
	report   string
	logLevel string
	cpuprof  string
}

func main() {
	var o options
	flag.IntVar(&o.nodes, "nodes", 1000, "nodes per cluster")
	flag.IntVar(&o.pools, "pools", 8, "node pools of the second, mixed cluster (the first has one pool)")
	flag.DurationVar(&o.latency, "latency", 2*time.Second, "median simulated provisioning latency per node")
	flag.Float64Var(&o.sigma, "sigma", 0.1, "log-space spread of the provisioning latency (lognormal sigma)")
	flag.DurationVar(&o.hb, "heartbeat", 5*time.Second, "heartbeat interval of the simulated agents")
	flag.StringVar(&o.via, "via", "gateway", "where requests go: gateway (the public gRPC API) or bus (commands published directly)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up on an operation after this long")
	flag.StringVar(&o.report, "report", "", "Markdown file to write the results into (the section between the clusterbench markers is replaced)")
	flag.StringVar(&o.logLevel, "log-level", "warn", "log level of the services")
	flag.StringVar(&o.cpuprof, "cpuprofile", "", "write a CPU profile of the timed runs (the in-process services included) to this file")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "clusterbench:", err)
		os.Exit(1)
	}
}

// logf reports progress on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "clusterbench: "+format+"\n", args...)
}

// writeSection replaces the clusterbench section of the report, or appends it.
func writeSection(path, section string) error {
	return report.WriteSection(path, "clusterbench", section)
}

func run(o options) error {
	if o.via != "gateway" && o.via != "bus" {
		return fmt.Errorf("-via must be gateway or bus, got %q", o.via)
	}
	if o.nodes < 1 || o.pools < 1 || o.pools > o.nodes {
		return fmt.Errorf("-nodes must be at least 1 and -pools between 1 and -nodes")
	}
	ctx := context.Background()
	start := time.Now()
	s, err := startEnv(ctx, o)
	if err != nil {
		return err
	}
	logf("stack up in %v", time.Since(start).Round(time.Millisecond))
	defer s.close()
	c, err := newClient(s, o.via)
	if err != nil {
		return err
	}
	defer c.close()

	// A one-node cluster first, unreported: consumer groups settle and
	// connections open before anything is timed.
	if _, err := measure(ctx, s, c, "warm-up", clusterSpec("bench-warmup", 1, 1), o); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}

	load0 := loadAvg()
	if o.cpuprof != "" {
		f, err := os.Create(o.cpuprof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var results []result
	for _, sc := range []struct {
		name  string
		pools int
	}{{"one pool", 1}, {fmt.Sprintf("%d pools", o.pools), o.pools}} {
		if sc.pools == 1 && len(results) > 0 {
			continue // -pools 1: one run is enough
		}
		id := fmt.Sprintf("bench-%dp", sc.pools)
		logf("%s: creating %d nodes", sc.name, o.nodes)
		r, err := measure(ctx, s, c, sc.name, clusterSpec(id, o.nodes, sc.pools), o)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		logf("%s: RUNNING after %v (overhead %v), deleted after %v", sc.name, r.toRunning.Round(time.Millisecond), r.overhead.Round(time.Millisecond), r.toDeleted.Round(time.Millisecond))
		results = append(results, r)
	}
	section := render(o, s, results, time.Since(start), load0, loadAvg())
	fmt.Print(section)
	if o.report == "" {
		return nil
	}
	return writeSection(o.report, section)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// render formats the results as the report's section.
func render(o options, s *env, rs []result, took time.Duration, load0, load1 string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("<!-- clusterbench:begin -->\n## Cluster lifecycle at scale: %d-node clusters on the simulated cloud\n\n", o.nodes)
	via := "through the gateway's public gRPC API (CreateCluster, then GetOperation until done)"
	if o.via == "bus" {
		via = "as commands published straight on loom.cluster.commands.v1 (no gateway)"
	}
	w("Measured %s UTC on %s; %s; 1-minute load average %s at the start, %s at the end (the machine is shared). ",
		time.Now().UTC().Format("2006-01-02 15:04"), machine(), runtime.Version(), load0, load1)
	w("kfake broker and %s on loopback and the five services of `cmd/loom/stack` in one process, the provisioner on provider `sim`; requests %s. ", s.RedisKind, via)
	w("A one-node cluster is created and deleted first, untimed. Simulated cloud: %s. The whole run took %s. Rerun: `go run ./bench/cmd/clusterbench -nodes %d -pools %d -latency %s -sigma %g -via %s -report bench/REPORT.md`.\n\n",
		s.simSettings, took.Round(time.Second), o.nodes, o.pools, o.latency, o.sigma, o.via)
	w("| create | nodes | time to RUNNING | slowest node's provisioning | **control-plane overhead** | launches dispatched (first → last) | last agent registered → RUNNING | client saw done | cluster+node events | **events/s** | telemetry in |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		w("| %s | %d | %s | %s | **%s** | %s → %s | %s | %s | %d | **%.0f** | %d |\n", r.name, r.nodes, secs(r.toRunning), secs(r.maxLatency),
			secs(r.overhead), secs(r.firstLaunch), secs(r.lastLaunch), secs(r.lastRegToReady), secs(r.clientRunning),
			r.createEvents, r.createRate(), r.createTelemetry)
	}
	w("\n| delete | nodes | time to gone | client saw done | cluster+node events | events/s |\n|---|---|---|---|---|---|\n")
	for _, r := range rs {
		w("| %s | %d | %s | %s | %d | %.0f |\n", r.name, r.nodes, secs(r.toDeleted), secs(r.clientDeleted), r.deleteEvents, r.deleteRate())
	}
	w("\nTime to RUNNING runs from the request to the provisioner's ClusterChanged that finished the create operation (its event time); \"client saw done\" is when the client's GetOperation poll (every 10 ms) first found it done. ")
	w("Control-plane overhead is that minus the longest provisioning latency the simulated cloud drew for any node: no control plane could be faster than its slowest node. ")
	w("\"Launches dispatched\" is when the provisioner asked the cloud for the first and the last node, counted from the request; \"last agent registered → RUNNING\" is the tail after the last simulated agent reported. ")
	w("Events/s counts the cluster and node events the provisioner emitted for the cluster (loom.cluster.events.v1, loom.node.events.v1) over the time to RUNNING (or to gone); \"telemetry in\" counts the agent registrations and heartbeats that came on loom.node.telemetry.v1 meanwhile (the provisioner decodes the registrations and passes the heartbeats over undecoded; health takes those). ")
	w("The mixed cluster cycles its pools through a3-highgpu-8g, a3-megagpu-8g, a3-ultragpu-8g and a4-highgpu-8g, alternating ON_DEMAND and SPOT, with a node set and a partition per pool.\n")
	w("<!-- clusterbench:end -->\n")
	return b.String()
}

// machine describes this computer: CPU model, CPUs, memory, kernel.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	desc := fmt.Sprintf("%s, %d CPUs available", model, runtime.NumCPU())
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			desc += fmt.Sprintf(", %d GiB RAM", (kb+512*1024)/(1024*1024))
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		desc += ", Linux " + strings.TrimSpace(string(b))
	}
	return desc
}

// loadAvg is the 1-minute load average, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
