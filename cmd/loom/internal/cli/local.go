package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/loom-ml/loom/cmd/loom/internal/agentcmd"
	"github.com/loom-ml/loom/cmd/loom/internal/creds"
	"github.com/loom-ml/loom/cmd/loom/internal/trainer"
	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/config"
	"github.com/loom-ml/loom/libs/proc"
	"github.com/loom-ml/loom/libs/service"
)

// defaultDataDir is LOOM_DATA_DIR, else ~/.loom.
func defaultDataDir() string { return dataDirFrom(os.Getenv) }

func (a *app) upCommand() *cobra.Command {
	var dataDir, logLevel, provider, capacity, authdSocket, metricsSD, exportEndpoints, exportRoot, projectBuckets string
	var stopAgents bool
	var portBase int
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run Loom on this machine in the foreground, until Ctrl-C",
		Long: `Run the embedded Loom: a Kafka-protocol broker (127.0.0.1:7092), Redis
(127.0.0.1:7379), a Google Pub/Sub fake (127.0.0.1:7085, and its publish call
over REST for gcloud on 127.0.0.1:7086; in memory only, so it starts empty) and
the bridge, gateway, provisioner, scheduler, health, registry and
training services on their default ports (gateway 127.0.0.1:7070, REST and
web console 127.0.0.1:7080, the services' /metrics 127.0.0.1:9170-9176).
--port-base moves them all: each port is the base (default 7000) plus its
offset, so "loom up --port-base 8000 --data-dir ~/loom2" runs a second Loom
beside the first, with its gateway on 127.0.0.1:8070. Commands without
--gateway talk to the running "loom up" of LOOM_DATA_DIR (default ~/.loom),
so "LOOM_DATA_DIR=~/loom2 loom clusters list" asks the second.
Clusters use the local provider: each node is a "loom agent" process (or,
with --provider sim, simulated nodes without processes, for scale).
--capacity sets the on-demand, spot and flex-start capacity per zone and
machine type (default: generous everywhere); reservations come on top
("loom reservations create"). Data (and so clusters, jobs and models)
survives restarts in --data-dir.

The node agents outlive Loom, as slurmd outlives its controller: on Ctrl-C
their jobs go on, the next "loom up" with the same --data-dir takes them
back, and "loom down" ends them (each also ends itself, and its jobs, once
Loom has been gone for LOOM_AGENT_ORPHAN_AFTER, 10m). --stop-agents ends
them when Loom stops instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			errOut := cmd.ErrOrStderr()
			log := slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
			base, err := a.upPortBase(cmd.Flags().Changed("port-base"), portBase)
			if err != nil {
				return err
			}
			addrs, err := a.upAddrs(base)
			if err != nil {
				return usagef("--port-base: %v", err)
			}
			abs, err := filepath.Abs(dataDir)
			if err != nil {
				return fmt.Errorf("data dir: %w", err)
			}
			// The pidfile tells `loom down` (and another `loom up`) that
			// this one runs with the data dir.
			release, err := holdDataDir(abs)
			if err != nil {
				return err
			}
			defer release()
			if err := agentsFollow(abs, addrs); err != nil {
				return err
			}
			// A port another program holds stops it here, before anything
			// starts, naming the port and what would have listened there.
			if err := stack.CheckFree(addrs); err != nil {
				return upPortError(addrs, base, abs, err)
			}
			// The node agents register their /metrics ports here for
			// Prometheus' file-based discovery (docs/observability.md).
			var agentEnv []string
			sdDir := underDataDir(metricsSD, abs, "metrics-sd")
			if sdDir != "" {
				agentEnv = append(agentEnv, "LOOM_METRICS_SD_DIR="+sdDir)
			}
			// On one's own machine a model exported to a local directory
			// is the common case; the registry still confines such
			// exports to one directory (docs/registry.md "Export").
			expDir := underDataDir(exportRoot, abs, "exports")
			if expDir != "" {
				if expDir, err = filepath.Abs(expDir); err != nil {
					return fmt.Errorf("--export-root: %w", err)
				}
				if err := exportRootDir(expDir); err != nil {
					return fmt.Errorf("--export-root: %w", err)
				}
			}
			registryArgs := []string{"-export-root=" + expDir}
			if exportEndpoints != "" {
				registryArgs = append(registryArgs, "-export-endpoints="+exportEndpoints)
			}
			if projectBuckets != "" {
				registryArgs = append(registryArgs, "-project-buckets="+projectBuckets)
			}
			st, err := stack.Start(ctx, stack.Options{
				RegistryArgs: registryArgs,
				AgentEnv:     agentEnv,
				DataDir:      abs,
				Addrs:        addrs,
				LogLevel:     logLevel,
				Log:          log,
				Provider:     provider,
				Capacity:     capacity,
				// What runs the jobs outlives the control plane unless
				// asked otherwise; what is left is said on the way out.
				KeepAgents: !stopAgents,
			})
			if err != nil {
				return upPortError(addrs, base, abs, err)
			}
			// Where this one listens, for the CLI's default gateway and
			// the next `loom up` on this data dir.
			rec := upRecord{PortBase: base, Gateway: st.GatewayAddr, REST: st.RESTAddr, Broker: st.BrokerAddr}
			if addrs.Gateway == "" {
				rec.PortBase = 0 // ports picked free (tests), not derived from base
			}
			if err := writeUpRecord(abs, rec); err != nil {
				log.Warn("this loom up's addresses were not recorded in its data dir: loom commands need --gateway "+st.GatewayAddr, "err", err)
			}
			if err := a.saveAdminKey(st, cmd.OutOrStdout()); err != nil {
				log.Warn("the administrator key was not saved for the CLI", "err", err, "key file", st.Keys.Admin)
			}
			if stop, err := a.startUpAuthd(ctx, st, authdSocket, log); err != nil {
				log.Warn("the login daemon did not start: the Slurm commands of `loom clusters login` shells use your `loom auth login` instead", "err", err)
			} else if stop != nil {
				defer stop()
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Loom is up: gateway %s (gRPC), REST and web console http://%s/, data in %s\n",
				st.GatewayAddr, st.RESTAddr, st.DataDir)
			if flag := dataDirFlag(st.DataDir); flag != "" {
				// Commands find the default data dir's `loom up` alone.
				fmt.Fprintf(cmd.OutOrStdout(), "loom commands reach this Loom with LOOM_DATA_DIR=%s (or --gateway %s)\n", st.DataDir, st.GatewayAddr)
			}
			printIngress(cmd.OutOrStdout(), st)
			if expDir != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "`loom models export` writes local copies under %s, in a directory per project (file://%s/PROJECT/NAME; a user other than root under PROJECT/USER/)\n", expDir, expDir)
				if closed := untraversable(expDir); closed != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "  (only root can: %s is closed to other users; give --export-root a directory they can reach)\n", closed)
				}
			}
			if sdDir != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "Prometheus finds the node agents' /metrics through file_sd_configs files: [%s]\n", filepath.Join(sdDir, "agent-*.json"))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Try `loom demo`, or `%s`. Press Ctrl-C to stop.\n", demoCreateHint())
			var failed error
			select {
			case <-ctx.Done():
			case <-st.Done():
				failed = st.Err()
			}
			// A second Ctrl-C stops at once.
			signal.Reset(os.Interrupt, syscall.SIGTERM)
			fmt.Fprintln(cmd.OutOrStdout(), "Stopping Loom...")
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			closeErr := st.Close(cctx)
			if failed != nil {
				return fmt.Errorf("a Loom service stopped: %w", errors.Join(failed, closeErr))
			}
			if closeErr != nil {
				return fmt.Errorf("stop Loom: %w", closeErr)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "Loom stopped.")
			if !stopAgents {
				left, err := stack.Agents(st.DataDir)
				if err != nil {
					return fmt.Errorf("count the node agents left running: %w", err)
				}
				if n := len(left); n > 0 {
					them := plural(n, "it", "them")
					fmt.Fprintf(cmd.OutOrStdout(), "%d %s running (%s jobs go on); `loom down%s` ends %s, `loom up%s%s` takes %s back, and without Loom %s after LOOM_AGENT_ORPHAN_AFTER (default 10m).\n",
						n, plural(n, "node agent keeps", "node agents keep"), plural(n, "its", "their"), dataDirFlag(st.DataDir), them,
						dataDirFlag(st.DataDir), portBaseFlag(base), them, plural(n, "it ends itself", "they end themselves"))
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&stopAgents, "stop-agents", false, "end the node agents (and their jobs) when Loom stops, instead of leaving them running for the next \"loom up\"")
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "where Loom keeps its data (LOOM_DATA_DIR)")
	cmd.Flags().IntVar(&portBase, "port-base", stack.DefaultPortBase,
		"every port of this Loom is this base plus its offset: gateway gRPC +70, REST and web console +80, the services' /metrics +2170..+2176, broker +92, Redis +379 (docs/CONTRACTS.md); another base runs a second Loom beside the first (LOOM_UP_PORT_BASE)")
	cmd.Flags().StringVar(&provider, "provider", config.Env("LOOM_PROVIDER", "local"), "compute provider: local (an agent process per node) or sim (simulated nodes) (LOOM_PROVIDER)")
	cmd.Flags().StringVar(&capacity, "capacity", "", "capacity ZONE/MACHINE_TYPE/TYPE=COUNT,... with * wildcards, TYPE ON_DEMAND, SPOT or FLEX_START (default LOOM_CAPACITY, else generous)")
	cmd.Flags().StringVar(&authdSocket, "authd-socket", config.Env("LOOM_AUTHD_SOCKET", ""), "the login daemon's Unix socket (LOOM_AUTHD_SOCKET; default <data dir>/authd.sock; \"off\": none)")
	cmd.Flags().StringVar(&metricsSD, "metrics-sd", config.Env("LOOM_METRICS_SD_DIR", ""),
		"directory where node agents register their /metrics addresses for Prometheus' file_sd_configs (LOOM_METRICS_SD_DIR; default <data dir>/metrics-sd; \"off\": none)")
	cmd.Flags().StringVar(&projectBuckets, "project-buckets", config.Env("LOOM_REGISTRY_PROJECT_BUCKETS", ""),
		"bucket URL prefixes, comma-separated, each holding {project} (s3://models/{project}/), that a project's bucket artifact_uri and export destinations must lie under when the registry opens them with its own credentials; * alone allows any (the registry's -project-buckets; LOOM_REGISTRY_PROJECT_BUCKETS; default none: such buckets refused)")
	cmd.Flags().StringVar(&exportEndpoints, "export-endpoints", config.Env("LOOM_REGISTRY_EXPORT_ENDPOINTS", ""),
		"S3-compatible endpoints, comma-separated scheme://host:port[;profile=NAME], that \"loom models export\" may name in an s3:// destination's ?endpoint= (signed with that AWS profile, else unsigned; the registry's -export-endpoints; LOOM_REGISTRY_EXPORT_ENDPOINTS; default none)")
	cmd.Flags().StringVar(&exportRoot, "export-root", config.Env("LOOM_REGISTRY_EXPORT_ROOT", ""),
		"directory under which \"loom models export\" may write file:// copies (the registry's -export-root; LOOM_REGISTRY_EXPORT_ROOT; default <data dir>/exports; \"off\": none)")
	cmd.Flags().StringVar(&logLevel, "log-level", config.Env("LOOM_LOG_LEVEL", "info"), "services' log level: debug, info, warn, error (LOOM_LOG_LEVEL)")
	return cmd
}

// saveAdminKey hands the administrator key the gateway made at this start
// to the CLI of the user running `loom up` (the credentials file, for this
// gateway), so that loom commands on this machine just work, and says so:
// once, since the key is new only at the first start on a data directory.
func (a *app) saveAdminKey(st *stack.Stack, out io.Writer) error {
	if !st.NewAdminKey {
		return nil
	}
	key, err := st.AdminKey()
	if err != nil {
		return err
	}
	store, err := a.credStore()
	if err != nil {
		return err
	}
	if err := store.Put(st.GatewayAddr, &creds.Entry{APIKey: key, Principal: auth.UserName(st.Admin), User: st.Admin}); err != nil {
		return err
	}
	fmt.Fprintf(out, "Created an administrator API key for %s (cluster admin) and saved it in %s for the gateway %s:\n"+
		"loom commands on this machine use it. The key is also in %s; `loom auth keys create` makes keys for others.\n",
		st.Admin, store.Path(), st.GatewayAddr, st.Keys.Admin)
	return nil
}

// underDataDir reads a directory flag of `loom up`: "" is its default,
// name under the data directory; "off" is none (""); anything else is
// itself.
func underDataDir(flag, dataDir, name string) string {
	switch flag {
	case "off":
		return ""
	case "":
		return filepath.Join(dataDir, name)
	}
	return flag
}

// startUpAuthd runs `loom up`'s login daemon on socket (default <data
// dir>/authd.sock; "off": none) and returns what stops it; nil when there
// is none to run (off, or a gateway that wrote no login key).
func (a *app) startUpAuthd(ctx context.Context, st *stack.Stack, socket string, log *slog.Logger) (func(), error) {
	if socket = underDataDir(socket, st.DataDir, authdSocketFile); socket == "" {
		return nil, nil
	}
	if _, err := st.LoginKey(); errors.Is(err, fs.ErrNotExist) {
		log.Info("no login key from the gateway: no login daemon", "file", st.Keys.Login)
		return nil, nil
	}
	stop, err := runAuthd(ctx, socket, st.GatewayAddr, st.LoginKey, log)
	if err != nil {
		return nil, err
	}
	log.Info("login daemon started", "socket", socket)
	return stop, nil
}

// dataDirFlag is " --data-dir DIR" when dir is not the default data
// directory, so that a command printed for the user to run next names the
// same one; "" otherwise.
func dataDirFlag(dir string) string {
	if abs, err := filepath.Abs(defaultDataDir()); err == nil && abs == dir {
		return ""
	}
	return " --data-dir " + dir
}

func (a *app) downCommand() *cobra.Command {
	var dataDir string
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "down",
		Short: "End the node agents (and their jobs) that a stopped `loom up` left running",
		Long: `End the node agents that "loom up" with the same --data-dir started and
left running when it stopped, with the jobs they run: each gets SIGTERM,
stops its jobs (SIGTERM, SIGKILL after its kill grace) and exits; one still
running after --grace is killed. Agents are found by the pidfiles in their
node directories and checked to be the processes those name, so no other
process is ever signalled. Stop "loom up" first: while it runs (its pidfile
in the data directory names a live process) "loom down" refuses, since
"loom up" would start them again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if grace <= 0 {
				return usagef("--grace must be more than 0, e.g. --grace 15s")
			}
			abs, err := filepath.Abs(dataDir)
			if err != nil {
				return fmt.Errorf("data dir: %w", err)
			}
			if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
				return fmt.Errorf("%s is not a Loom data directory (not a directory); give the one `loom up` used with --data-dir", abs)
			}
			// A running `loom up` would start the agents again, and has
			// jobs it runs through them: it stops first.
			if pid, ok := runningUp(abs); ok {
				return fmt.Errorf("`loom up` (pid %d) is still running with data dir %s: stop it first with Ctrl-C in its terminal, then run `loom down%s` again", pid, abs, dataDirFlag(abs))
			}
			stopped, err := stack.StopAgents(cmd.Context(), abs, grace, nil)
			// An agent killed after --grace could not remove its file_sd
			// registration; Prometheus must not keep scraping it.
			for _, dir := range []string{filepath.Join(abs, "metrics-sd"), config.Env("LOOM_METRICS_SD_DIR", "")} {
				if dir != "" && dir != "off" {
					service.SweepFileSD(dir)
				}
			}
			for _, ag := range stopped {
				fmt.Fprintf(cmd.OutOrStdout(), "stopped node agent %s (pid %d)\n", ag.Node, ag.PID)
			}
			if err != nil {
				return fmt.Errorf("stop node agents: %w", err)
			}
			if len(stopped) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "No node agents of %s are running.\n", abs)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d %s stopped.\n", len(stopped), plural(len(stopped), "node agent", "node agents"))
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "the data directory of the \"loom up\" that started them (LOOM_DATA_DIR)")
	cmd.Flags().DurationVar(&grace, "grace", 15*time.Second, "how long an agent gets to stop its jobs and exit before it is killed")
	return cmd
}

// upPIDFile is where a running `loom up` records itself in its data
// directory: its pid and start time (proc.WritePIDFile), removed when it
// exits.
func upPIDFile(dataDir string) string { return filepath.Join(dataDir, "loom-up.pid") }

// runningUp returns the pid of the `loom up` that holds dataDir, and
// whether one does: its pidfile names a process that runs and started when
// the file says, so a stale file (a killed `loom up`, a pid since reused)
// holds nothing.
func runningUp(dataDir string) (int, bool) {
	pid, start, err := proc.ReadPIDFile(upPIDFile(dataDir))
	if err != nil {
		return 0, false
	}
	return pid, proc.Alive(pid, start)
}

// holdDataDir records this process as dataDir's `loom up` and returns what
// removes the record. It refuses while another live `loom up` holds it:
// two would share (and fight over) one store of clusters and agents.
func holdDataDir(dataDir string) (release func(), err error) {
	if pid, ok := runningUp(dataDir); ok {
		return nil, fmt.Errorf("another `loom up` (pid %d) is running with data dir %s; stop it first (Ctrl-C in its terminal)", pid, dataDir)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	path := upPIDFile(dataDir)
	start, _ := proc.StartTime(os.Getpid())
	if err := proc.WritePIDFile(path, os.Getpid(), start); err != nil {
		return nil, fmt.Errorf("record this loom up in %s: %w", dataDir, err)
	}
	return func() { _ = os.Remove(path) }, nil
}

func (a *app) agentCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "agent [agent flags]",
		Short: "Run a node agent (started by the local provider for each node)",
		Long: `Run Loom's node agent. The local provider starts one per node with its
settings in LOOM_* variables (LOOM_NODE, LOOM_HOSTNAME, LOOM_WORK_DIR, LOOM_GPUS,
LOOM_BROKERS, ...); flags override them. "loom agent -h" lists the flags.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return agentcmd.Run(cmd.Context(), args, cmd.ErrOrStderr())
		},
	}
}

// rankFromEnv is the process' rank in its job: LOOM_NODE_RANK, else
// SLURM_PROCID, else 0.
func rankFromEnv() (int, error) {
	for _, k := range []string{"LOOM_NODE_RANK", "SLURM_PROCID"} {
		if v := os.Getenv(k); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("%s=%q is not a rank", k, v)
			}
			return n, nil
		}
	}
	return 0, nil
}

func (a *app) trainCommand() *cobra.Command {
	cfg := trainer.Config{Hyperparameters: trainer.DefaultHyperparameters()}
	mlp := trainer.DefaultMLPHyperparameters()
	var model string
	var cmd *cobra.Command
	cmd = &cobra.Command{
		Use:   "train",
		Short: "Train a small model for real (the built-in trainer, for demos, tests and tuning)",
		Long: `Train one of two small models on data it generates, logging "epoch N loss X":
--model linear, a linear regression on a seeded synthetic dataset by
gradient descent (the demo's), or --model mlp, libs/toytrain's classifier
(a one-hidden-layer network trained by mini-batch SGD on noisy spirals)
whose validation loss depends on --learning_rate, --batch_size,
--weight_decay and --hidden_units (also spelt --learning-rate, ...; Vertex
passes --<parameter>=<value>). Without --model: mlp when one of those four
is given or $AIP_MODEL_DIR is set, else linear.

The model goes into model.json in --out (default $LOOM_MODEL_DIR, which Loom
sets for jobs submitted with --model, else $AIP_MODEL_DIR) at the end, with a
MANIFEST listing its files with their SHA-256 (sha256sum -c checks it);
checkpoints go every --checkpoint-every epochs into --checkpoint-dir
(default $LOOM_CHECKPOINT_DIR, else $AIP_CHECKPOINT_DIR, which Loom sets for
every job, else --out), the latest --keep-checkpoints kept. A run resumes
exactly from the latest valid checkpoint there: its model is byte for byte
the one an uninterrupted run writes. The mlp appends a hypertune line per
epoch (val_loss, accuracy) to $CLOUD_ML_HP_METRIC_FILE when set. SIGUSR1
writes a checkpoint at the next epoch; progress goes to $LOOM_PROGRESS_FILE
when set. In a multi-node job every rank trains; only rank 0
(LOOM_NODE_RANK / SLURM_PROCID) logs and writes.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			rank, err := rankFromEnv()
			if err != nil {
				return err
			}
			fl := cmd.Flags()
			changed := func(name string) bool {
				return fl.Changed(name) || fl.Changed(strings.ReplaceAll(name, "_", "-"))
			}
			if model, err = trainer.ChooseModel(model, changed, os.Getenv); err != nil {
				return usageError{err}
			}
			if model == trainer.ModelMLP {
				if changed("lr") && !changed("learning_rate") {
					mlp.LearningRate = cfg.LearningRate
				}
				mlp.Epochs, mlp.Seed = cfg.Epochs, cfg.Seed
				cfg.Hyperparameters = mlp
			} else if changed("learning_rate") {
				cfg.LearningRate = mlp.LearningRate
			}
			cfg.Rank = rank
			cfg.Log = c.OutOrStdout()
			if err := cfg.FromEnv(os.Getenv); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			_, err = trainer.RunProcess(c.Context(), cfg, os.Getenv)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&model, "model", "", "model to train: linear or mlp (default: mlp when an mlp flag is given or $AIP_MODEL_DIR is set, else linear)")
	fl.Float64Var(&cfg.LearningRate, "lr", cfg.LearningRate, "learning rate (linear; --learning_rate for both)")
	fl.Var(trainer.IntValue{P: &cfg.Epochs}, "epochs", "epochs to train in all (a resumed run continues to this)")
	fl.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the linear model's synthetic dataset, of the mlp's initial weights and batch order")
	fl.IntVar(&cfg.Samples, "samples", cfg.Samples, "samples in the dataset (linear)")
	fl.IntVar(&cfg.Features, "features", cfg.Features, "features per sample (linear)")
	// The mlp's flags, with Vertex's spelling (--parameter_id=value) and,
	// hidden, with dashes.
	for _, spelling := range []string{"_", "-"} {
		name := func(n string) string { return strings.ReplaceAll(n, "_", spelling) }
		fl.Float64Var(&mlp.LearningRate, name("learning_rate"), mlp.LearningRate, "learning rate (mlp; linear too with --model linear)")
		fl.Var(trainer.IntValue{P: &mlp.BatchSize}, name("batch_size"), "points per SGD step (mlp)")
		fl.Float64Var(&mlp.WeightDecay, name("weight_decay"), mlp.WeightDecay, "L2 penalty on the weights (mlp)")
		fl.Var(trainer.IntValue{P: &mlp.HiddenUnits}, name("hidden_units"), "units in the hidden layer (mlp)")
	}
	for _, n := range []string{"learning-rate", "batch-size", "weight-decay", "hidden-units"} {
		_ = fl.MarkHidden(n)
	}
	fl.IntVar(&cfg.CheckpointEvery, "checkpoint-every", 50, "write a checkpoint every this many epochs (0: none)")
	fl.IntVar(&cfg.KeepCheckpoints, "keep-checkpoints", 3, "keep only this many latest checkpoints (0: all)")
	fl.IntVar(&cfg.LogEvery, "log-every", 0, "log the loss every this many epochs (0: about ten lines)")
	fl.StringVar(&cfg.OutDir, "out", os.Getenv("LOOM_MODEL_DIR"), "output directory for the model, and the checkpoints unless --checkpoint-dir (default $LOOM_MODEL_DIR, else $AIP_MODEL_DIR)")
	fl.StringVar(&cfg.CheckpointDir, "checkpoint-dir", "", "checkpoint directory (default $LOOM_CHECKPOINT_DIR, else $AIP_CHECKPOINT_DIR, else --out)")
	fl.DurationVar(&cfg.StepTime, "step-time", 0, "make every epoch last at least this long, as a real model's step would (0: as fast as it computes)")
	// Often enough for the agent (it reports at most every 5s) and for hang
	// detection (minutes), rare enough to cost nothing.
	cfg.ProgressEvery = time.Second
	return cmd
}

// exportRootDir makes the export root the registry confines local exports
// to: 0755, since each caller's exports are written as that caller, under
// <root>/<project>/<user>, which they must be able to reach (a root of
// 0700, as loom up made before, refused every user but root). A root made
// 0700 by an older loom up is opened up; one of another mode is left as
// its operator set it.
func exportRootDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm() == 0o700 {
		return os.Chmod(dir, 0o755)
	}
	return nil
}

// untraversable is the first directory from / down to dir (included) that
// other users may not pass through (no o+x), "" when they may reach dir.
func untraversable(dir string) string {
	dir = filepath.Clean(dir)
	var chain []string
	for p := dir; ; p = filepath.Dir(p) {
		chain = append(chain, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		if fi, err := os.Stat(chain[i]); err != nil || fi.Mode().Perm()&0o001 == 0 {
			return chain[i]
		}
	}
	return ""
}
