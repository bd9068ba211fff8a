// Package slurm starts and stops a real Slurm on this machine — Debian's
// slurm-wlm 22.05: munged, slurmctld and one slurmd per virtual node —
// under one directory, for side-by-side benchmarks against Loom and for
// tests of code that talks to Slurm. It follows
// ../shared/design/SLURM.md: no systemd, cgroups or DNS; every daemon under
// its plain name with a pidfile; SLURM_CONF for clients; no SLURM_JWT.
//
// Install the packages first (never the emulator packages):
//
//	apt-get install -y --no-install-recommends munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins
//
// and, for Options.REST (slurmrestd with JWT authentication, which
// libs/slurmrest's tests talk to), slurmrestd slurm-wlm-jwt-plugin.
//
// Use:
//
//	c, err := slurm.Start(ctx, slurm.Options{Dir: dir, Nodes: 4, CPUsPerNode: 16, GPUsPerNode: 8})
//	if err != nil { … }
//	defer c.Stop()
//	id, err := c.Sbatch(ctx, "--wrap", "hostname")   // runs in c.Work
//	out, err := c.Squeue(ctx)                         // squeue's own output
//	done, err := c.Completed()                        // finished jobs (jobcomp file)
//	cmd := c.Command(ctx, "scontrol", "show", "node") // any client, with c.Env()
//
// Layout under Dir: slurm.conf, gres.conf, munge/ (key, socket), state/,
// spool/<node>/, log/ (one log per daemon), run/ (pidfiles), dev/ (fake GPU
// files, symlinks to /dev/null), jobcomp.txt (one line per finished job) and
// work/ (jobs' working directory). Nodes are node1…nodeN, all on localhost
// (NodeHostname=localhost, NodeAddr=127.0.0.1, one slurmd port each); in a
// job, $SLURMD_NODENAME tells them apart.
//
// For people: scripts/slurm-local.sh start|stop|status DIR writes the same
// configuration and runs the same daemons from a shell (REST=1 for
// slurmrestd).
package slurm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configures Start. Zero fields take the documented defaults.
type Options struct {
	// Dir is the base directory for config, state, logs, pidfiles and the
	// munge key (created if missing). Required.
	Dir string
	// Nodes is the number of virtual nodes, one slurmd each (default 1,
	// at most MaxNodes).
	Nodes int
	// CPUsPerNode is the CPUs each node advertises (default 16; more than
	// the machine has is fine: SlurmdParameters=config_overrides).
	CPUsPerNode int
	// GPUsPerNode is the fake GPUs (gres gpu) each node advertises
	// (default 0). Jobs get CUDA_VISIBLE_DEVICES as on real GPUs.
	GPUsPerNode int
	// RealMemoryMB, when set, is each node's RealMemory (needed for --mem).
	RealMemoryMB int
	// ControllerPort is slurmctld's port; 0 picks a free one.
	ControllerPort int
	// NodePortBase, when set, gives node i the slurmd port NodePortBase+i
	// (scripts/slurm-local.sh uses 17001); 0 picks a free port per node.
	NodePortBase int
	// ClusterName (default "loombench") and Partition, the default
	// partition holding every node (default "debug").
	ClusterName, Partition string
	// MorePartitions are more partitions, each holding every node, after
	// Partition (scripts/slurm-local.sh's MORE_PARTITIONS); each name once,
	// and not Partition's.
	MorePartitions []Partition
	// NodeFormat names node i: a printf format of i+1 with one %d or %0Nd
	// and otherwise lower-case letters, digits, '-' or '_' (default
	// "node%d": node1, node2, …; scripts/slurm-local.sh's NODE_FORMAT).
	NodeFormat string
	// SchedulerParameters (default "batch_sched_delay=0": Slurm's default
	// waits 3 s between batch scheduling passes).
	SchedulerParameters string
	// ExtraConfig lines are added to slurm.conf before the node lines.
	ExtraConfig []string
	// REST also starts slurmrestd (openapi/v0.0.36–v0.0.38) on 127.0.0.1,
	// with JWT authentication (AuthAltTypes=auth/jwt and a fresh key);
	// Cluster.RESTURL and Cluster.Token are then set up. Needs the packages
	// RESTInstalled names.
	REST bool
	// RESTPort is slurmrestd's port with REST (0 picks a free one;
	// scripts/slurm-local.sh uses 6820).
	RESTPort int
	// StartTimeout bounds how long Start waits for every node to be idle
	// (default 60s; ctx's deadline applies too).
	StartTimeout time.Duration
}

// Cluster is a running Slurm. Stop it when done.
type Cluster struct {
	Layout
	// Options are the options it runs with, defaults filled in.
	Options Options
	// Nodes are the node names, node1…nodeN.
	Nodes []string
	// ControllerPort is slurmctld's port.
	ControllerPort int
	// NodePorts[i] is Nodes[i]'s slurmd port.
	NodePorts []int
	// RESTURL is slurmrestd's address, "http://127.0.0.1:PORT" (no path),
	// with Options.REST; "" without.
	RESTURL string

	procs         []*daemon
	tempSocketDir string // munged's socket directory when not under Dir
	restConfDir   string // slurmrestd's copy of slurm.conf when nobody can read Dir
	stopOnce      sync.Once
	stopErr       error
}

// daemon is one started daemon process.
type daemon struct {
	name    string // process name, for /proc/<pid>/comm checks
	pidfile string
	log     string // its stdout/stderr
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has been waited for
	err     error         // cmd.Wait's result, valid once done is closed
}

// Binaries are the programs Start needs.
var Binaries = []string{"munged", "mungekey", "slurmctld", "slurmd", "sinfo", "squeue", "sbatch", "scontrol", "scancel"}

// Installed reports whether real Slurm can run here: every program in
// Binaries is found (on PATH or in /usr/sbin, /usr/bin, /sbin) and this
// process is root (slurmd launches jobs as their users). The error says what
// is missing and how to install it.
func Installed() error {
	var missing []string
	for _, b := range Binaries {
		if _, err := lookBin(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("real Slurm is not installed (%s not found); install it with "+
			"apt-get install -y --no-install-recommends munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins",
			strings.Join(missing, ", "))
	}
	if os.Geteuid() != 0 {
		return errors.New("real Slurm needs root here (SlurmUser=root; slurmd starts jobs as their users)")
	}
	return nil
}

// RESTInstalled reports whether Options.REST can work here: Installed, plus
// slurmrestd and the JWT plugin. The error names the packages to install.
func RESTInstalled() error {
	if err := Installed(); err != nil {
		return err
	}
	_, errBin := lookBin("slurmrestd")
	plugins, _ := filepath.Glob("/usr/lib/*/slurm-wlm/auth_jwt.so")
	if errBin != nil || len(plugins) == 0 {
		return errors.New("slurmrestd or the JWT plugin (auth_jwt.so) is not installed; install them with " +
			"apt-get install -y --no-install-recommends slurmrestd slurm-wlm-jwt-plugin")
	}
	return nil
}

// Version returns the installed Slurm's version as slurmctld prints it
// ("slurm-wlm 22.05.8").
func Version() (string, error) {
	bin, err := lookBin("slurmctld")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(bin, "-V").Output()
	if err != nil {
		return "", fmt.Errorf("slurmctld -V: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// lookBin finds a program by its plain name. Daemons must run under their
// plain names (slurmctld, slurmd), not the -wlm names the alternatives
// point at.
func lookBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found on PATH or in /usr/sbin", name)
}

// Start writes the configuration under opts.Dir, starts munged, slurmctld
// and one slurmd per node, and returns once sinfo shows every node idle. It
// starts from a clean state (slurmctld -c: no jobs, job ids from 1; the
// jobcomp file is emptied). On failure everything it started is stopped and
// the error carries the end of the failing daemon's log.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	installed := Installed
	if o.REST {
		installed = RESTInstalled
	}
	if err := installed(); err != nil {
		return nil, fmt.Errorf("slurm: %w", err)
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("slurm: Options.Dir: %w", err)
	}
	o.Dir = dir
	c := &Cluster{Layout: NewLayout(dir), Options: o}
	for i := 0; i < o.Nodes; i++ {
		c.Nodes = append(c.Nodes, o.nodeName(i))
	}
	if err := c.start(ctx); err != nil {
		if serr := c.Stop(); serr != nil {
			err = fmt.Errorf("%w (while stopping: %v)", err, serr)
		}
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	o := c.Options
	if live := c.livePids(); len(live) > 0 {
		return fmt.Errorf("slurm: daemons from an earlier start still run under %s (%s); stop them first "+
			"(scripts/slurm-local.sh stop %s)", c.Dir, strings.Join(live, ", "), c.Dir)
	}
	for _, d := range []string{c.Dir, filepath.Dir(c.MungeKey), c.State, c.Spool, c.Log, c.Run, c.DevDir, c.Work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("slurm: %w", err)
		}
		// munged's socket directory must be enterable by others (t.TempDir is 0700).
		if err := os.Chmod(d, 0o755); err != nil {
			return fmt.Errorf("slurm: %w", err)
		}
	}
	if err := c.placeMungeSocket(); err != nil {
		return err
	}
	for i := 0; i < o.GPUsPerNode; i++ {
		p := filepath.Join(c.DevDir, fmt.Sprintf("nvidia%d", i))
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("slurm: fake GPU: %w", err)
		}
		if err := os.Symlink("/dev/null", p); err != nil {
			return fmt.Errorf("slurm: fake GPU: %w", err)
		}
	}
	if err := os.Remove(c.JobComp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("slurm: jobcomp file: %w", err)
	}

	ports, err := pickPorts(o.ControllerPort, o.NodePortBase, o.Nodes, o.REST, o.RESTPort)
	if err != nil {
		return fmt.Errorf("slurm: %w", err)
	}
	c.ControllerPort, c.NodePorts = ports[0], ports[1:1+o.Nodes]
	conf, gres := Render(o, c.Layout, c.ControllerPort, c.NodePorts)
	if err := os.WriteFile(c.Conf, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("slurm: %w", err)
	}
	if err := os.WriteFile(c.Gres, []byte(gres), 0o644); err != nil {
		return fmt.Errorf("slurm: %w", err)
	}

	if _, err := os.Stat(c.MungeKey); errors.Is(err, os.ErrNotExist) {
		if out, err := c.Command(ctx, "mungekey", "-c", "-k", c.MungeKey).CombinedOutput(); err != nil {
			return fmt.Errorf("slurm: mungekey: %w: %s", err, bytes.TrimSpace(out))
		}
	}
	if err := os.Chmod(c.MungeKey, 0o600); err != nil {
		return fmt.Errorf("slurm: munge key: %w", err)
	}
	if o.REST {
		if err := writeJWTKey(c.JWTKey); err != nil {
			return err
		}
	}

	timeout := o.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	_ = os.Remove(c.MungeSocket)
	if err := c.spawn("munged", c.MungePid, nil, "munged", "-F", "--socket="+c.MungeSocket, "--key-file="+c.MungeKey,
		"--pid-file="+c.MungePid, "--seed-file="+filepath.Join(filepath.Dir(c.MungeKey), "munged.seed"),
		"--log-file="+filepath.Join(c.Log, "munged.log")); err != nil {
		return err
	}
	if err := c.waitFor(wctx, "munged's socket", func() (bool, error) {
		_, err := os.Stat(c.MungeSocket)
		return err == nil, nil
	}); err != nil {
		return err
	}
	// -c: start clean (no saved jobs); -D: stay in the foreground, as our child.
	if err := c.spawn("slurmctld", c.SlurmctldPid(), nil, "slurmctld", "-D", "-c"); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := os.MkdirAll(filepath.Join(c.Spool, n), 0o755); err != nil {
			return fmt.Errorf("slurm: %w", err)
		}
		if err := c.spawn("slurmd", c.SlurmdPid(n), nil, "slurmd", "-D", "-N", n); err != nil {
			return err
		}
	}
	if err := c.waitFor(wctx, fmt.Sprintf("%d nodes idle in sinfo", len(c.Nodes)), func() (bool, error) {
		out, err := c.Output(wctx, "sinfo", "-h", "-N", "-o", "%N %t")
		if err != nil {
			return false, nil // slurmctld may not answer yet
		}
		// A node is listed once per partition it is in (ExtraConfig may add
		// partitions): count names.
		idle := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[1] == "idle" {
				idle[f[0]] = true
			}
		}
		return len(idle) == len(c.Nodes), nil
	}); err != nil {
		return err
	}
	if o.REST {
		return c.startREST(wctx, ports[len(ports)-1])
	}
	return nil
}

// writeJWTKey writes a fresh 32-byte key that only root reads.
func writeJWTKey(path string) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("slurm: JWT key: %w", err)
	}
	if err := os.WriteFile(path, key, 0o600); err != nil {
		return fmt.Errorf("slurm: JWT key: %w", err)
	}
	return os.Chmod(path, 0o600) // an older file keeps its mode through WriteFile
}

// startREST runs slurmrestd as nobody (it refuses root) with SLURM_JWT=daemon
// in its own environment only (SLURM.md: in a daemon's or srun's environment
// it breaks them), and waits until it accepts connections.
func (c *Cluster) startREST(ctx context.Context, port int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf, err := c.restConf()
	if err != nil {
		return err
	}
	// The later SLURM_CONF wins over environ's.
	env := []string{"SLURM_JWT=daemon", "SLURM_CONF=" + conf}
	if err := c.spawn("slurmrestd", c.SlurmrestdPid(), env, "slurmrestd", "-u", "nobody",
		"-s", "openapi/v0.0.36,openapi/v0.0.37,openapi/v0.0.38", addr); err != nil {
		return err
	}
	// slurmrestd writes no pidfile of its own; Stop and livePids use this one.
	d := c.procs[len(c.procs)-1]
	if err := os.WriteFile(c.SlurmrestdPid(), []byte(strconv.Itoa(d.cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("slurm: %w", err)
	}
	if err := c.waitFor(ctx, "slurmrestd on "+addr, func() (bool, error) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	}); err != nil {
		return err
	}
	c.RESTURL = "http://" + addr
	return nil
}

// restConf returns a slurm.conf that slurmrestd, running as nobody, can
// read: Conf, or a copy in a fresh directory under the system's temporary
// directory when a directory above Conf shuts others out (t.TempDir's
// parent is 0700; slurmrestd would retry for 60 s, then exit).
func (c *Cluster) restConf() (string, error) {
	if everyoneCanEnter(c.Dir) {
		return c.Conf, nil
	}
	b, err := os.ReadFile(c.Conf)
	if err != nil {
		return "", fmt.Errorf("slurm: %w", err)
	}
	d, err := os.MkdirTemp("", "loom-slurmrestd-")
	if err != nil {
		return "", fmt.Errorf("slurm: slurmrestd's config directory: %w", err)
	}
	c.restConfDir = d
	if err := os.Chmod(d, 0o755); err != nil {
		return "", fmt.Errorf("slurm: slurmrestd's config directory: %w", err)
	}
	if !everyoneCanEnter(d) {
		return "", fmt.Errorf("slurm: slurmrestd runs as nobody and needs a slurm.conf it can read; neither %s nor %s is open to it",
			c.Dir, d)
	}
	p := filepath.Join(d, "slurm.conf")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return "", fmt.Errorf("slurm: %w", err)
	}
	return p, nil
}

// Token returns a JWT for user (scontrol token username=USER), valid for
// lifespan (rounded up to seconds), for slurmrestd's X-SLURM-USER-TOKEN.
// The cluster must have been started with Options.REST.
func (c *Cluster) Token(ctx context.Context, user string, lifespan time.Duration) (string, error) {
	if c.RESTURL == "" {
		return "", errors.New("slurm: Token: the cluster was started without Options.REST (no JWT authentication)")
	}
	secs := int64((lifespan + time.Second - 1) / time.Second)
	if secs < 1 {
		return "", fmt.Errorf("slurm: Token: lifespan must be at least 1s, got %s", lifespan)
	}
	out, err := c.Output(ctx, "scontrol", "token", "username="+user, "lifespan="+strconv.FormatInt(secs, 10))
	if err != nil {
		return "", err
	}
	tok, ok := strings.CutPrefix(strings.TrimSpace(out), "SLURM_JWT=")
	if !ok || tok == "" || strings.ContainsAny(tok, " \n") {
		return "", fmt.Errorf("slurm: scontrol token: unexpected output %q", strings.TrimSpace(out))
	}
	return tok, nil
}

// placeMungeSocket moves munged's socket to a fresh directory under the
// system's temporary directory when munged would refuse it under Dir: munged
// wants every directory above its socket enterable by all (t.TempDir's parent
// is 0700), and a Unix socket path has at most 107 bytes.
func (c *Cluster) placeMungeSocket() error {
	if len(c.MungeSocket) < 100 && everyoneCanEnter(filepath.Dir(c.MungeSocket)) {
		return nil
	}
	d, err := os.MkdirTemp("", "loom-munge-")
	if err != nil {
		return fmt.Errorf("slurm: munge socket directory: %w", err)
	}
	c.tempSocketDir = d
	if err := os.Chmod(d, 0o755); err != nil {
		return fmt.Errorf("slurm: munge socket directory: %w", err)
	}
	if !everyoneCanEnter(d) {
		return fmt.Errorf("slurm: munged needs a socket directory that everyone can enter; neither %s nor %s is",
			filepath.Dir(c.MungeSocket), d)
	}
	c.MungeSocket = filepath.Join(d, "munge.socket.2")
	return nil
}

// everyoneCanEnter reports whether dir and every directory above it have
// the execute bit for others.
func everyoneCanEnter(dir string) bool {
	for {
		st, err := os.Stat(dir)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// pickPorts returns slurmctld's port, one per node, then slurmrestd's when
// rest: the given ones, or free loopback ports (distinct) where they are 0.
func pickPorts(ctl, nodeBase, nodes int, rest bool, restPort int) ([]int, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	free := func() (int, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("pick a free port: %w", err)
		}
		held = append(held, l) // held until all are picked, so they differ
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	ports := make([]int, 0, nodes+1)
	p := ctl
	if p == 0 {
		var err error
		if p, err = free(); err != nil {
			return nil, err
		}
	}
	ports = append(ports, p)
	for i := 0; i < nodes; i++ {
		p := nodeBase + i
		if nodeBase == 0 {
			var err error
			if p, err = free(); err != nil {
				return nil, err
			}
		}
		ports = append(ports, p)
	}
	if rest {
		p := restPort
		if p == 0 {
			var err error
			if p, err = free(); err != nil {
				return nil, err
			}
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// spawn starts one daemon in the foreground as a child, its output in
// log/<name>[-node].out, with extraEnv added to its environment. It dies
// with this process (SIGTERM on exit; slurmrestd, which changes its user,
// loses that and is stopped by Stop only).
func (c *Cluster) spawn(name, pidfile string, extraEnv []string, args ...string) error {
	bin, err := lookBin(args[0])
	if err != nil {
		return fmt.Errorf("slurm: %w", err)
	}
	base := strings.TrimSuffix(filepath.Base(pidfile), ".pid")
	logPath := filepath.Join(c.Log, base+".out")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("slurm: %s log: %w", base, err)
	}
	defer f.Close()
	_ = os.Remove(pidfile)
	cmd := exec.Command(bin, args[1:]...)
	cmd.Args[0] = args[0] // the plain name
	cmd.Env = append(c.environ(), extraEnv...)
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = daemonAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("slurm: start %s: %w", base, err)
	}
	d := &daemon{name: name, pidfile: pidfile, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	c.procs = append(c.procs, d)
	return nil
}

// waitFor polls cond until it is true, a daemon exits (an error with the end
// of its log), or ctx ends.
func (c *Cluster) waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("slurm: waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		for _, d := range c.procs {
			select {
			case <-d.done:
				return fmt.Errorf("slurm: waiting for %s: %s exited (%v); its log ends:\n%s",
					what, filepath.Base(d.log), d.err, c.logTail(d))
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slurm: waiting for %s: %w; logs in %s", what, ctx.Err(), c.Log)
		case <-tick.C:
		}
	}
}

// logTail returns the last lines of a daemon's own log file, else of its
// captured output.
func (c *Cluster) logTail(d *daemon) string {
	base := strings.TrimSuffix(d.log, ".out")
	for _, p := range []string{base + ".log", d.log} {
		b, err := os.ReadFile(p)
		if err != nil || len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		return strings.Join(lines, "\n")
	}
	return "(empty)"
}

// Env returns the variables a Slurm client needs to talk to this cluster:
// SLURM_CONF=<Dir>/slurm.conf. (There is no /etc/slurm/slurm.conf: without
// it clients try DNS.) Never add SLURM_JWT to an environment that starts
// daemons or runs srun.
func (c *Cluster) Env() []string { return []string{"SLURM_CONF=" + c.Conf} }

// environ is this process's environment without SLURM_JWT, SLURM_CONF or a
// surrounding job's SLURM_JOB_* variables, plus Env().
func (c *Cluster) environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "SLURM_JWT" || k == "SLURM_CONF" || strings.HasPrefix(k, "SLURM_JOB") || k == "SLURMD_NODENAME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, c.Env()...)
}

// Command returns a command running Slurm client name (sbatch, squeue,
// sinfo, scontrol, scancel, srun, sacct, …) against this cluster: its
// environment has Env() and no SLURM_JWT, its working directory is Work.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	bin, err := lookBin(name)
	if err != nil {
		bin = name // exec reports it
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Args[0] = name
	cmd.Env = c.environ()
	cmd.Dir = c.Work
	return cmd
}

// Output runs a Slurm client and returns its standard output; a failure's
// error carries the command and its standard error.
func (c *Cluster) Output(ctx context.Context, name string, args ...string) (string, error) {
	cmd := c.Command(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err,
			strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// Sbatch submits a batch job (sbatch --parsable ARGS…, in Work unless ARGS
// has --chdir) and returns its job id.
func (c *Cluster) Sbatch(ctx context.Context, args ...string) (string, error) {
	out, err := c.Output(ctx, "sbatch", append([]string{"--parsable"}, args...)...)
	if err != nil {
		return "", err
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";") // "id" or "id;cluster"
	if _, err := strconv.Atoi(id); err != nil {
		return "", fmt.Errorf("sbatch: unexpected output %q", strings.TrimSpace(out))
	}
	return id, nil
}

// RestartController restarts slurmctld as an operator's restart does:
// SIGTERM, on which it saves its state (jobs, nodes, partitions) under
// State; waiting until it has exited (saving many jobs takes seconds; ctx
// bounds the wait, after which it is killed and the error says so); and
// starting it again without -c, so that it recovers that state instead of
// starting clean. It returns how long the stop took and the instant the new
// slurmctld was started, and does not wait for it to answer: callers time
// that (with squeue). The slurmds keep running. Not safe to call
// concurrently with the Cluster's other methods.
func (c *Cluster) RestartController(ctx context.Context) (stop time.Duration, started time.Time, err error) {
	i := slices.IndexFunc(c.procs, func(d *daemon) bool { return d.name == "slurmctld" })
	if i < 0 {
		return 0, time.Time{}, errors.New("slurm: RestartController: this cluster started no slurmctld")
	}
	d := c.procs[i]
	began := time.Now()
	select {
	case <-d.done:
		return 0, time.Time{}, fmt.Errorf("slurm: RestartController: slurmctld had already exited (%v); its log ends:\n%s",
			d.err, c.logTail(d))
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-ctx.Done():
		_ = d.cmd.Process.Kill()
		<-d.done
		return 0, time.Time{}, fmt.Errorf("slurm: RestartController: slurmctld did not save its state and exit: %w", ctx.Err())
	}
	stop = time.Since(began)
	started = time.Now()
	// No -c: recover the saved state. The new daemon takes the old one's
	// place, so that Stop still stops slurmctld between the slurmds and munged.
	if err := c.spawn("slurmctld", c.SlurmctldPid(), nil, "slurmctld", "-D"); err != nil {
		return stop, started, err
	}
	c.procs[i] = c.procs[len(c.procs)-1]
	c.procs = c.procs[:len(c.procs)-1]
	return stop, started, nil
}

// Squeue runs squeue ARGS… and returns its output as Slurm prints it.
func (c *Cluster) Squeue(ctx context.Context, args ...string) (string, error) {
	return c.Output(ctx, "squeue", args...)
}

// Sinfo runs sinfo ARGS… and returns its output as Slurm prints it.
func (c *Cluster) Sinfo(ctx context.Context, args ...string) (string, error) {
	return c.Output(ctx, "sinfo", args...)
}

// Completed returns the finished jobs from the jobcomp file (what `sacct -c`
// shows), oldest first; none yet is an empty list.
func (c *Cluster) Completed() ([]JobRecord, error) {
	f, err := os.Open(c.JobComp)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("slurm: %w", err)
	}
	defer f.Close()
	return ParseJobComp(f)
}

// Stop cancels the cluster's jobs, then stops every daemon it started — by
// the pid in its pidfile (checked to be that daemon), else the child it
// holds — with SIGTERM, and SIGKILL after 10 s. Files under Dir are kept.
// Calling it again returns the first result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	if c.ctlRunning() {
		c.cancelAll()
	}
	// Reverse start order: slurmds, then slurmctld, then munged.
	var errs []error
	for i := len(c.procs) - 1; i >= 0; i-- {
		if err := c.procs[i].stop(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range []string{c.tempSocketDir, c.restConfDir} {
		if d == "" {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("slurm: %w", err))
		}
	}
	return errors.Join(errs...)
}

// cancelAll cancels every user's jobs, not only ours (a job run as
// another user, as the backend's tests run them, would outlive its slurmd:
// slurmstepd and the job's processes stay), and waits up to 10 s for the
// queue to empty, as scripts/slurm-local.sh stop does.
func (c *Cluster) cancelAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := func() []string {
		out, err := c.Output(ctx, "squeue", "-h", "-o", "%A")
		if err != nil {
			return nil
		}
		return strings.Fields(out)
	}
	jobs := ids()
	if len(jobs) == 0 {
		return
	}
	_, _ = c.Output(ctx, "scancel", jobs...)
	for len(jobs) > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
		jobs = ids()
	}
}

func (c *Cluster) ctlRunning() bool {
	for _, d := range c.procs {
		if d.name == "slurmctld" {
			select {
			case <-d.done:
				return false
			default:
				return true
			}
		}
	}
	return false
}

func (d *daemon) stop() error {
	select {
	case <-d.done:
		return nil
	default:
	}
	pid := d.cmd.Process.Pid
	if p, ok := readPid(d.pidfile); ok && p != pid && isProcess(p, d.name) {
		// A daemon that forked would be in its pidfile; ours stays in the
		// foreground, so this is only a safety net.
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		select {
		case <-d.done:
		case <-time.After(5 * time.Second):
			return fmt.Errorf("slurm: %s (pid %d) did not exit", d.name, pid)
		}
	}
	_ = os.Remove(d.pidfile)
	return nil
}

// livePids lists the daemons whose pidfiles under Dir name a live process
// of that daemon ("slurmctld pid 123").
func (c *Cluster) livePids() []string {
	var live []string
	entries, _ := os.ReadDir(c.Run)
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".pid")
		if name == e.Name() {
			continue
		}
		daemonName, _, _ := strings.Cut(name, "-") // slurmd-node1 → slurmd
		if p, ok := readPid(filepath.Join(c.Run, e.Name())); ok && isProcess(p, daemonName) {
			live = append(live, fmt.Sprintf("%s pid %d", name, p))
		}
	}
	return live
}

func readPid(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return p, err == nil && p > 1
}
