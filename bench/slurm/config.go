package slurm

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/loom-ml/loom/libs/slurmspec"
)

// Limits on Options, so that a typo does not start hundreds of daemons.
const (
	// MaxNodes is the most virtual nodes (one slurmd each) Start accepts.
	MaxNodes = 256
	// MaxCPUsPerNode is the most CPUs a virtual node may advertise.
	MaxCPUsPerNode = 4096
	// MaxGPUsPerNode is the most fake GPUs a virtual node may advertise.
	MaxGPUsPerNode = 64
)

// Default values that Options' zero fields take.
const (
	DefaultClusterName         = "loombench"
	DefaultPartition           = "debug"
	DefaultNodeFormat          = "node%d"
	DefaultCPUsPerNode         = 16
	DefaultSchedulerParameters = "batch_sched_delay=0"
)

// Layout is where a cluster's files live under its base directory. Every
// path is absolute.
type Layout struct {
	// Dir is the base directory.
	Dir string
	// Conf and Gres are slurm.conf and gres.conf.
	Conf, Gres string
	// MungeKey and MungeSocket are munged's key and socket (Start moves the
	// socket to a temporary directory when munged would refuse it under Dir);
	// MungePid is its pidfile.
	MungeKey, MungeSocket, MungePid string
	// State is slurmctld's StateSaveLocation; Spool the parent of the
	// per-node SlurmdSpoolDir (Spool/<node>).
	State, Spool string
	// Log holds every daemon's log; Run every daemon's pidfile.
	Log, Run string
	// DevDir holds the fake GPU device files (symlinks to /dev/null).
	DevDir string
	// JobComp is the jobcomp/filetxt file: one line per finished job.
	JobComp string
	// Work is the default working directory of jobs submitted through
	// Cluster.Sbatch (their slurm-<id>.out files land there).
	Work string
	// JWTKey is the key slurmctld checks REST users' tokens with
	// (Options.REST; AuthAltParameters=jwt_key=…).
	JWTKey string
}

// NewLayout returns the layout under dir, which must be absolute.
func NewLayout(dir string) Layout {
	return Layout{
		Dir:         dir,
		Conf:        filepath.Join(dir, "slurm.conf"),
		Gres:        filepath.Join(dir, "gres.conf"),
		MungeKey:    filepath.Join(dir, "munge", "munge.key"),
		MungeSocket: filepath.Join(dir, "munge", "munge.socket.2"),
		MungePid:    filepath.Join(dir, "run", "munged.pid"),
		State:       filepath.Join(dir, "state"),
		Spool:       filepath.Join(dir, "spool"),
		Log:         filepath.Join(dir, "log"),
		Run:         filepath.Join(dir, "run"),
		DevDir:      filepath.Join(dir, "dev"),
		JobComp:     filepath.Join(dir, "jobcomp.txt"),
		Work:        filepath.Join(dir, "work"),
		JWTKey:      filepath.Join(dir, "jwt_hs256.key"),
	}
}

// SlurmctldPid is slurmctld's pidfile.
func (l Layout) SlurmctldPid() string { return filepath.Join(l.Run, "slurmctld.pid") }

// SlurmrestdPid is slurmrestd's pidfile (Options.REST).
func (l Layout) SlurmrestdPid() string { return filepath.Join(l.Run, "slurmrestd.pid") }

// SlurmdPid is the pidfile of node's slurmd.
func (l Layout) SlurmdPid(node string) string { return filepath.Join(l.Run, "slurmd-"+node+".pid") }

// NodeName returns the name of virtual node i (0-based) under the default
// NodeFormat: node1, node2, ….
func NodeName(i int) string { return fmt.Sprintf(DefaultNodeFormat, i+1) }

// nodeName is virtual node i's name (0-based) under o.NodeFormat, which
// normalize has filled and checked.
func (o Options) nodeName(i int) string { return fmt.Sprintf(o.NodeFormat, i+1) }

// Partition is one of Options.MorePartitions.
type Partition struct {
	// Name is lower-case letters, digits, '-' or '_'.
	Name string
	// MaxTimeMinutes is its MaxTime (1..MaxPartitionMinutes); 0 is INFINITE.
	MaxTimeMinutes int
}

// MaxPartitionMinutes is the longest Partition.MaxTimeMinutes (the
// script's seven digits).
const MaxPartitionMinutes = 9999999

// nodeFormat is what Options.NodeFormat may be: a name around one %d or
// %0Nd (scripts/slurm-local.sh checks the same).
var nodeFormat = regexp.MustCompile(`^[a-z0-9_-]*%(0[1-9])?d[a-z0-9_-]*$`)

// normalize fills defaults and checks every option, naming each bad one.
func (o Options) normalize() (Options, error) {
	if o.ClusterName == "" {
		o.ClusterName = DefaultClusterName
	}
	if o.Partition == "" {
		o.Partition = DefaultPartition
	}
	if o.NodeFormat == "" {
		o.NodeFormat = DefaultNodeFormat
	}
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	if o.CPUsPerNode == 0 {
		o.CPUsPerNode = DefaultCPUsPerNode
	}
	if o.SchedulerParameters == "" {
		o.SchedulerParameters = DefaultSchedulerParameters
	}
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if o.Dir == "" {
		bad("Options.Dir is required (the base directory for config, state, logs and pidfiles)")
	} else if strings.ContainsAny(o.Dir, " \t\n#=") {
		bad("Options.Dir %q must not contain spaces, '#' or '=' (slurm.conf cannot quote them)", o.Dir)
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		bad("Options.Nodes must be 1..%d, got %d", MaxNodes, o.Nodes)
	}
	if o.CPUsPerNode < 1 || o.CPUsPerNode > MaxCPUsPerNode {
		bad("Options.CPUsPerNode must be 1..%d, got %d", MaxCPUsPerNode, o.CPUsPerNode)
	}
	if o.GPUsPerNode < 0 || o.GPUsPerNode > MaxGPUsPerNode {
		bad("Options.GPUsPerNode must be 0..%d, got %d", MaxGPUsPerNode, o.GPUsPerNode)
	}
	if o.RealMemoryMB < 0 {
		bad("Options.RealMemoryMB must be >= 0, got %d", o.RealMemoryMB)
	}
	if o.ControllerPort < 0 || o.ControllerPort > 65535 {
		bad("Options.ControllerPort must be 0..65535, got %d", o.ControllerPort)
	}
	if o.RESTPort < 0 || o.RESTPort > 65535 {
		bad("Options.RESTPort must be 0..65535, got %d", o.RESTPort)
	}
	if o.RESTPort != 0 && !o.REST {
		bad("Options.RESTPort is set but Options.REST is not")
	}
	if o.NodePortBase < 0 || o.NodePortBase+o.Nodes-1 > 65535 {
		bad("Options.NodePortBase must be 0..%d for %d nodes, got %d", 65536-max(o.Nodes, 1), o.Nodes, o.NodePortBase)
	}
	if !validName(o.ClusterName) {
		bad("Options.ClusterName %q must be lower-case letters, digits, '-' or '_'", o.ClusterName)
	}
	if !validName(o.Partition) {
		bad("Options.Partition %q must be lower-case letters, digits, '-' or '_'", o.Partition)
	}
	if !nodeFormat.MatchString(o.NodeFormat) {
		bad("Options.NodeFormat %q must be lower-case letters, digits, '-' or '_' around one %%d (or %%0Nd)", o.NodeFormat)
	}
	first := map[string]int{} // a partition's name: its first index
	for i, p := range o.MorePartitions {
		if !validName(p.Name) {
			bad("Options.MorePartitions[%d].Name %q must be lower-case letters, digits, '-' or '_'", i, p.Name)
		}
		if p.Name == o.Partition {
			bad("Options.MorePartitions[%d].Name %q repeats Options.Partition", i, p.Name)
		}
		// slurmctld keeps a partition's first line and ignores a repeat:
		// the second entry's MaxTime would be dropped without a word.
		if j, ok := first[p.Name]; ok {
			bad("Options.MorePartitions[%d].Name %q repeats Options.MorePartitions[%d]", i, p.Name, j)
		} else {
			first[p.Name] = i
		}
		if p.MaxTimeMinutes < 0 || p.MaxTimeMinutes > MaxPartitionMinutes {
			bad("Options.MorePartitions[%d].MaxTimeMinutes must be 0 (INFINITE) or 1..%d, got %d", i, MaxPartitionMinutes, p.MaxTimeMinutes)
		}
	}
	if strings.ContainsAny(o.SchedulerParameters, " \t\n#") {
		bad("Options.SchedulerParameters %q must be one comma-separated word", o.SchedulerParameters)
	}
	for i, l := range o.ExtraConfig {
		if strings.ContainsAny(l, "\n") || !strings.Contains(l, "=") {
			bad("Options.ExtraConfig[%d] %q must be one Key=Value line", i, l)
		}
	}
	if len(probs) > 0 {
		return o, errors.New("slurm: bad options: " + strings.Join(probs, "; "))
	}
	return o, nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Render returns slurm.conf and gres.conf for normalized options o under
// layout l, with slurmctld on ctlPort and node i's slurmd on nodePorts[i].
// It is pure: the same inputs give the same bytes (scripts/slurm-local.sh
// writes exactly this, which a test checks).
func Render(o Options, l Layout, ctlPort int, nodePorts []int) (slurmConf, gresConf string) {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Written by github.com/loom-ml/loom/bench/slurm (or scripts/slurm-local.sh). Edits are lost at the next start.")
	w("ClusterName=%s", o.ClusterName)
	w("SlurmctldHost=localhost")
	w("SlurmctldPort=%d", ctlPort)
	w("SlurmUser=root")
	w("SlurmdUser=root")
	w("AuthType=auth/munge")
	w("CredType=cred/munge")
	w("AuthInfo=socket=%s", l.MungeSocket)
	w("StateSaveLocation=%s", l.State)
	w("SlurmdSpoolDir=%s/%%n", l.Spool)
	w("SlurmctldPidFile=%s", l.SlurmctldPid())
	w("SlurmdPidFile=%s/slurmd-%%n.pid", l.Run)
	w("SlurmctldLogFile=%s/slurmctld.log", l.Log)
	w("SlurmdLogFile=%s/slurmd-%%n.log", l.Log)
	w("ProctrackType=proctrack/linuxproc")
	w("TaskPlugin=task/none")
	w("JobAcctGatherType=jobacct_gather/none")
	w("AccountingStorageType=accounting_storage/none")
	w("JobCompType=jobcomp/filetxt")
	w("JobCompLoc=%s", l.JobComp)
	w("SelectType=select/cons_tres")
	w("SelectTypeParameters=CR_Core")
	w("GresTypes=gpu")
	w("MailProg=/bin/true")
	w("MpiDefault=none")
	w("MaxJobCount=100000")
	// The reference Slurm gets the same array limit as Loom's default, so a
	// comparison never runs an array one side would refuse.
	w("MaxArraySize=%d", slurmspec.DefaultMaxArraySize)
	w("SchedulerParameters=%s", o.SchedulerParameters)
	// Virtual nodes advertise more CPUs than the machine has.
	w("SlurmdParameters=config_overrides")
	w("ReturnToService=2")
	if o.REST {
		// slurmrestd's users authenticate with a JWT that slurmctld checks with this key.
		w("AuthAltTypes=auth/jwt")
		w("AuthAltParameters=jwt_key=%s", l.JWTKey)
	}
	for _, line := range o.ExtraConfig {
		w("%s", line)
	}
	for i := 0; i < o.Nodes; i++ {
		line := fmt.Sprintf("NodeName=%s NodeHostname=localhost NodeAddr=127.0.0.1 Port=%d CPUs=%d",
			o.nodeName(i), nodePorts[i], o.CPUsPerNode)
		if o.RealMemoryMB > 0 {
			line += fmt.Sprintf(" RealMemory=%d", o.RealMemoryMB)
		}
		if o.GPUsPerNode > 0 {
			line += fmt.Sprintf(" Gres=gpu:%d", o.GPUsPerNode)
		}
		w("%s", line)
	}
	w("PartitionName=%s Nodes=ALL Default=YES MaxTime=INFINITE State=UP", o.Partition)
	for _, p := range o.MorePartitions {
		maxTime := "INFINITE"
		if p.MaxTimeMinutes > 0 {
			maxTime = fmt.Sprint(p.MaxTimeMinutes)
		}
		w("PartitionName=%s Nodes=ALL Default=NO MaxTime=%s State=UP", p.Name, maxTime)
	}

	var g strings.Builder
	g.WriteString("# Fake GPUs: each File is a symlink to /dev/null (a line without File= is dropped).\n")
	if o.GPUsPerNode > 0 {
		files := filepath.Join(l.DevDir, "nvidia0")
		if o.GPUsPerNode > 1 {
			files = fmt.Sprintf("%s/nvidia[0-%d]", l.DevDir, o.GPUsPerNode-1)
		}
		for i := 0; i < o.Nodes; i++ {
			fmt.Fprintf(&g, "NodeName=%s Name=gpu File=%s\n", o.nodeName(i), files)
		}
	}
	return b.String(), g.String()
}
