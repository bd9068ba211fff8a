// Package slurmconf renders a cluster's Slurm configuration — slurm.conf,
// gres.conf and topology.conf — in Slurm 22.05 syntax, from the cluster's
// spec and its node records. Rendering is pure and deterministic: the same
// cluster and nodes give the same bytes, whatever order the nodes come in.
//
// Compute nodes with identical hardware and features share one NodeName line
// with a hostlist expression (a3u-[0001-0016]); login nodes are not Slurm
// compute nodes. Hardware comes from the machine catalog (libs/clusterspec).
package slurmconf

import (
	"cmp"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/resname"
	"github.com/loom-ml/loom/libs/slurmspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Defaults of RenderOptions.
const (
	DefaultStateDir     = "/var/spool/slurm"
	DefaultConfDir      = "/etc/slurm"
	DefaultGPUDeviceDir = "/dev"
	DefaultSlurmUser    = "slurm"
	DefaultPort         = 6817
	DefaultSlurmdPort   = 6818
	DefaultBlockSize    = 16
	// TopSwitch is the switch over every block in topology.conf.
	TopSwitch = "spine"
)

// RenderOptions adapts the files to where Slurm runs. The zero value gives a
// conventional installation (daemons as user slurm, state under
// /var/spool/slurm, GPUs at /dev/nvidia*).
type RenderOptions struct {
	// ControlHost is SlurmctldHost; default the cluster's login node
	// (status.login_node, else the first login node given), else "localhost".
	ControlHost string
	// ControlAddr, when set, is the controller's address: SlurmctldHost=host(addr).
	ControlAddr string
	// Port is SlurmctldPort (default 6817); SlurmdPort is slurmd's (default 6818).
	Port, SlurmdPort int
	// StateDir holds every state, spool, pid and log path (default /var/spool/slurm).
	StateDir string
	// ConfDir is where slurm.conf and the prolog.d and epilog.d script
	// directories are (default /etc/slurm); see Scripts.
	ConfDir string
	// GPUDeviceDir holds the GPU device files nvidia0… (default /dev); a
	// test points it at symlinks to /dev/null.
	GPUDeviceDir string
	// NodeHostname and NodeAddr, when set, are given to every node: how
	// several simulated nodes run on one machine without DNS.
	NodeHostname, NodeAddr string
	// SlurmUser runs slurmctld (default slurm).
	SlurmUser string
	// MungeSocket, when set, is munged's socket (AuthInfo=socket=…).
	MungeSocket string
	// BlockSize is how many nodes of a pool share a block in topology.conf
	// when their records name none (default 16).
	BlockSize int
}

func (o RenderOptions) withDefaults(c *loomv1.Cluster, login []string) RenderOptions {
	if o.ControlHost == "" {
		o.ControlHost = c.GetStatus().GetLoginNode()
	}
	if o.ControlHost == "" && len(login) > 0 {
		o.ControlHost = login[0]
	}
	if o.ControlHost == "" {
		o.ControlHost = "localhost"
	}
	if o.Port <= 0 {
		o.Port = DefaultPort
	}
	if o.SlurmdPort <= 0 {
		o.SlurmdPort = DefaultSlurmdPort
	}
	o.StateDir = cmp.Or(o.StateDir, DefaultStateDir)
	o.ConfDir = cmp.Or(o.ConfDir, DefaultConfDir)
	o.GPUDeviceDir = cmp.Or(o.GPUDeviceDir, DefaultGPUDeviceDir)
	o.SlurmUser = cmp.Or(o.SlurmUser, DefaultSlurmUser)
	if o.BlockSize <= 0 {
		o.BlockSize = DefaultBlockSize
	}
	return o
}

// Dirs returns the directories under StateDir that Slurm's daemons need
// before they start (they do not create them).
func (o RenderOptions) Dirs() []string {
	s := cmp.Or(o.StateDir, DefaultStateDir)
	return []string{path.Join(s, "ctld"), path.Join(s, "d"), path.Join(s, "run"), path.Join(s, "log")}
}

// Script is a prolog or epilog file to write beside slurm.conf.
type Script struct {
	// Path is relative to ConfDir, e.g. "prolog.d/01.sh".
	Path    string
	Content string
}

// Scripts returns the cluster's prolog and epilog scripts as files to write
// under ConfDir (mode 0755): slurm.conf runs every file of prolog.d and
// epilog.d (Prolog=<ConfDir>/prolog.d/*). A script without "#!" gets
// "#!/bin/bash", because slurmd executes it directly.
func Scripts(c *loomv1.Cluster) []Script {
	var out []Script
	add := func(dir string, scripts []string) {
		for i, s := range scripts {
			if !strings.HasPrefix(s, "#!") {
				s = "#!/bin/bash\n" + s
			}
			if !strings.HasSuffix(s, "\n") {
				s += "\n"
			}
			out = append(out, Script{Path: fmt.Sprintf("%s/%02d.sh", dir, i+1), Content: s})
		}
	}
	add("prolog.d", c.GetOrchestrator().GetSlurm().GetPrologScripts())
	add("epilog.d", c.GetOrchestrator().GetSlurm().GetEpilogScripts())
	return out
}

// Render renders the cluster's Slurm files with the default options.
func Render(c *loomv1.Cluster, nodes []*loomv1.Node) (*loomv1.SlurmConfig, error) {
	return RenderWith(c, nodes, RenderOptions{})
}

// slurmName is what this package writes unquoted into Slurm's files: node,
// partition, feature, block and host names: [A-Za-z0-9][A-Za-z0-9_.-]*.
// (By hand rather than a regexp: it runs for every node of every render.)
var slurmName = nameMatcher{}

type nameMatcher struct{}

func (nameMatcher) MatchString(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '_' || c == '.' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// maxTime is Slurm's time format for MaxTime.
var maxTime = regexp.MustCompile(`^(UNLIMITED|INFINITE|[0-9]+|[0-9]+:[0-9]{1,2}(:[0-9]{1,2})?|[0-9]+-[0-9]+(:[0-9]{1,2}(:[0-9]{1,2})?)?)$`)

// pathLike is a path this package writes into slurm.conf.
var pathLike = regexp.MustCompile(`^/[^\s#=]*$`)

// hw is what makes nodes share a NodeName line.
type hw struct {
	cpus, memMiB int
	gpus         int
	gresType     string
	features     string // comma-joined
}

type node struct {
	host string
	// hostPrefix and hostNum split host for sorting (hostNum -1: none).
	hostPrefix string
	hostNum    int64
	pool       string
	set        string // node set id; "" when no node set covers the node
	block      string
	hw         hw
}

// RenderWith renders the cluster's Slurm files. nodes are the cluster's node
// records: those with role "login" are not compute nodes; every other one is
// declared. A node's hardware comes from its machine type (the pool's when
// the record has none) in the catalog; its features from the node set that
// covers it (the set over its pool whose id prefixes its hostname).
// Anything Slurm would misread — a name with spaces, an unknown machine
// type, a bad MaxTime — is an error naming it.
func RenderWith(c *loomv1.Cluster, nodes []*loomv1.Node, opts RenderOptions) (*loomv1.SlurmConfig, error) {
	if c == nil {
		return nil, fmt.Errorf("slurmconf: no cluster")
	}
	clusterID := c.GetName() // a bare id (a spec not yet named)
	if cn, err := resname.SplitCluster(c.GetName()); err == nil {
		clusterID = cn.ID
	}
	if !slurmName.MatchString(clusterID) {
		return nil, fmt.Errorf("slurmconf: cluster name %q is not a valid Slurm ClusterName", c.GetName())
	}
	slurm := c.GetOrchestrator().GetSlurm()
	pools := map[string]*loomv1.NodePool{}
	for _, p := range c.GetCompute().GetNodePools() {
		pools[p.GetId()] = p
	}
	setsByPool := map[string][]*loomv1.SlurmNodeSet{}
	for i, s := range slurm.GetNodeSets() {
		if !slurmName.MatchString(s.GetId()) {
			return nil, fmt.Errorf("slurmconf: orchestrator.slurm.node_sets[%d].id %q is not a valid Slurm name", i, s.GetId())
		}
		for j, f := range s.GetFeatures() {
			if !slurmName.MatchString(f) {
				return nil, fmt.Errorf("slurmconf: orchestrator.slurm.node_sets[%d].features[%d] %q is not a valid Slurm feature", i, j, f)
			}
		}
		setsByPool[s.GetNodePoolId()] = append(setsByPool[s.GetNodePoolId()], s)
	}

	var compute []node
	var login []string
	machines := map[string]clusterspec.MachineType{}
	seen := map[string]bool{}
	for _, n := range nodes {
		host := n.GetHostname()
		if !slurmName.MatchString(host) {
			return nil, fmt.Errorf("slurmconf: node %q: hostname %q is not a valid Slurm node name", n.GetName(), host)
		}
		if seen[host] {
			return nil, fmt.Errorf("slurmconf: node hostname %q appears twice", host)
		}
		seen[host] = true
		if n.GetRole() == clusterspec.RoleLogin {
			login = append(login, host)
			continue
		}
		nd, err := describe(n, pools, setsByPool, machines)
		if err != nil {
			return nil, err
		}
		compute = append(compute, nd)
	}
	sortNatural(login)
	slices.SortFunc(compute, func(a, b node) int {
		return cmp.Or(cmp.Compare(a.hostPrefix, b.hostPrefix), cmp.Compare(a.hostNum, b.hostNum), cmp.Compare(a.host, b.host))
	})
	opts = opts.withDefaults(c, login)
	for _, kv := range [][2]string{{"ControlHost", opts.ControlHost}, {"NodeHostname", opts.NodeHostname}} {
		if kv[1] != "" && !slurmName.MatchString(kv[1]) {
			return nil, fmt.Errorf("slurmconf: %s %q is not a valid host name", kv[0], kv[1])
		}
	}
	for _, kv := range [][2]string{{"ControlAddr", opts.ControlAddr}, {"NodeAddr", opts.NodeAddr}, {"SlurmUser", opts.SlurmUser}} {
		if kv[1] != "" && !slurmName.MatchString(kv[1]) && !strings.Contains(kv[1], ":") {
			return nil, fmt.Errorf("slurmconf: %s %q is not a valid address or name", kv[0], kv[1])
		}
	}
	for _, kv := range [][2]string{{"StateDir", opts.StateDir}, {"ConfDir", opts.ConfDir}, {"GPUDeviceDir", opts.GPUDeviceDir}, {"MungeSocket", opts.MungeSocket}} {
		if kv[1] != "" && !pathLike.MatchString(kv[1]) {
			return nil, fmt.Errorf("slurmconf: %s %q is not an absolute path without spaces", kv[0], kv[1])
		}
	}

	conf, err := slurmConf(c, clusterID, compute, opts)
	if err != nil {
		return nil, err
	}
	return &loomv1.SlurmConfig{
		SlurmConf:    conf,
		GresConf:     gresConf(c, compute, opts),
		TopologyConf: topologyConf(c, compute, opts),
	}, nil
}

// describe resolves a compute node's node set, block and hardware.
// machines caches catalog lookups across the nodes of one render.
func describe(n *loomv1.Node, pools map[string]*loomv1.NodePool, setsByPool map[string][]*loomv1.SlurmNodeSet,
	machines map[string]clusterspec.MachineType) (node, error) {
	nd := node{host: n.GetHostname(), pool: n.GetNodePool(), block: n.GetBlock()}
	nd.hostPrefix, nd.hostNum = splitNum(nd.host)
	if nd.block != "" && !slurmName.MatchString(nd.block) {
		return node{}, fmt.Errorf("slurmconf: node %s: block %q is not a valid Slurm switch name", nd.host, nd.block)
	}
	var set *loomv1.SlurmNodeSet
	for _, s := range setsByPool[nd.pool] {
		if strings.HasPrefix(nd.host, s.GetId()+"-") && (set == nil || len(s.GetId()) > len(set.GetId())) {
			set = s
		}
	}
	if set == nil && len(setsByPool[nd.pool]) == 1 {
		set = setsByPool[nd.pool][0]
	}
	var features []string
	if set != nil {
		nd.set = set.GetId()
		for _, f := range set.GetFeatures() {
			if !slices.Contains(features, f) {
				features = append(features, f)
			}
		}
	}
	nd.hw.features = strings.Join(features, ",")

	machine := n.GetMachineType()
	if machine == "" {
		machine = pools[nd.pool].GetMachineType()
	}
	m, ok := machines[machine]
	if !ok {
		m, ok = clusterspec.Machine(machine)
		machines[machine] = m
	}
	if !ok || m.Name == "" {
		return node{}, fmt.Errorf("slurmconf: node %s: unknown machine type %q", nd.host, machine)
	}
	nd.hw.cpus = int(m.VCPUs)
	nd.hw.memMiB = int(m.SchedulableMemoryMiB())
	nd.hw.gpus = int(n.GetGpus())
	if nd.hw.gpus == 0 {
		nd.hw.gpus = int(m.AcceleratorCount)
	}
	if nd.hw.gpus > 0 {
		nd.hw.gresType = m.GresType
		if nd.hw.gresType == "" {
			nd.hw.gresType = gresTypeOf(cmp.Or(n.GetAcceleratorType(), m.AcceleratorType))
		}
	}
	return nd, nil
}

// gresTypeOf makes a GRES type out of an accelerator type name for a
// machine type the catalog gives none: "nvidia-tesla-a100" → "a100".
func gresTypeOf(accel string) string {
	t := strings.TrimPrefix(strings.TrimPrefix(strings.ToLower(accel), "nvidia-"), "tesla-")
	t = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, t)
	return cmp.Or(t, "gpu")
}

func (h hw) gres() string {
	if h.gpus == 0 {
		return ""
	}
	return fmt.Sprintf("gpu:%s:%d", h.gresType, h.gpus)
}

// group is the nodes of one NodeName (or gres.conf) line.
type group struct {
	hw    hw
	hosts []string
}

// groupByHW groups sorted nodes by hardware, ordered by each group's first
// node.
func groupByHW(nodes []node) []group {
	var groups []group
	idx := map[hw]int{}
	for _, n := range nodes {
		i, ok := idx[n.hw]
		if !ok {
			i = len(groups)
			idx[n.hw] = i
			groups = append(groups, group{hw: n.hw})
		}
		groups[i].hosts = append(groups[i].hosts, n.host)
	}
	return groups
}

func slurmConf(c *loomv1.Cluster, clusterID string, nodes []node, o RenderOptions) (string, error) {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# slurm.conf for %s, rendered by Loom; do not edit: Loom rewrites it on every change.", c.GetName())
	w("ClusterName=%s", clusterID)
	if o.ControlAddr != "" {
		w("SlurmctldHost=%s(%s)", o.ControlHost, o.ControlAddr)
	} else {
		w("SlurmctldHost=%s", o.ControlHost)
	}
	w("SlurmctldPort=%d", o.Port)
	w("SlurmdPort=%d", o.SlurmdPort)
	w("SlurmUser=%s", o.SlurmUser)
	w("AuthType=auth/munge")
	if o.MungeSocket != "" {
		w("AuthInfo=socket=%s", o.MungeSocket)
	}
	w("")
	w("# State, spool, pid and log files.")
	w("StateSaveLocation=%s", path.Join(o.StateDir, "ctld"))
	w("SlurmdSpoolDir=%s", path.Join(o.StateDir, "d", "%n"))
	w("SlurmctldPidFile=%s", path.Join(o.StateDir, "run", "slurmctld.pid"))
	w("SlurmdPidFile=%s", path.Join(o.StateDir, "run", "slurmd-%n.pid"))
	w("SlurmctldLogFile=%s", path.Join(o.StateDir, "log", "slurmctld.log"))
	w("SlurmdLogFile=%s", path.Join(o.StateDir, "log", "slurmd-%n.log"))
	w("")
	w("# Plugins: no cgroups needed on the nodes.")
	w("ProctrackType=proctrack/linuxproc")
	w("TaskPlugin=task/none")
	w("SelectType=select/cons_tres")
	w("SelectTypeParameters=CR_Core")
	w("GresTypes=gpu")
	w("TopologyPlugin=topology/tree")
	w("SchedulerType=sched/backfill")
	w("SchedulerParameters=batch_sched_delay=0")
	w("MpiDefault=none")
	w("MailProg=/bin/true")
	w("ReturnToService=2")
	w("MaxJobCount=100000")
	w("MaxArraySize=" + strconv.Itoa(slurmspec.DefaultMaxArraySize)) // what the gateway and scheduler enforce by default; a LOOM_MAX_ARRAY_SIZE set otherwise is not rendered here
	w("SlurmctldTimeout=120")
	w("SlurmdTimeout=300")
	w("InactiveLimit=0")
	w("KillWait=30")
	w("MinJobAge=300")
	w("Waittime=0")
	slurm := c.GetOrchestrator().GetSlurm()
	if len(slurm.GetPrologScripts()) > 0 {
		w("Prolog=%s", path.Join(o.ConfDir, "prolog.d", "*"))
	}
	if len(slurm.GetEpilogScripts()) > 0 {
		w("Epilog=%s", path.Join(o.ConfDir, "epilog.d", "*"))
	}

	w("")
	w("# Compute nodes, grouped by identical hardware.")
	for _, g := range groupByHW(nodes) {
		line := "NodeName=" + compress(g.hosts)
		if o.NodeHostname != "" {
			line += " NodeHostname=" + o.NodeHostname
		}
		if o.NodeAddr != "" {
			line += " NodeAddr=" + o.NodeAddr
		}
		line += fmt.Sprintf(" CPUs=%d RealMemory=%d", g.hw.cpus, g.hw.memMiB)
		if gres := g.hw.gres(); gres != "" {
			line += " Gres=" + gres
		}
		if g.hw.features != "" {
			line += " Features=" + g.hw.features
		}
		w("%s State=UNKNOWN", line)
	}

	w("")
	w("# Partitions.")
	bySet := map[string][]string{}
	for _, n := range nodes {
		if n.set != "" {
			bySet[n.set] = append(bySet[n.set], n.host)
		}
	}
	for i, p := range slurm.GetPartitions() {
		if !slurmName.MatchString(p.GetId()) {
			return "", fmt.Errorf("slurmconf: orchestrator.slurm.partitions[%d].id %q is not a valid Slurm partition name", i, p.GetId())
		}
		mt := cmp.Or(strings.ToUpper(p.GetMaxTime()), "UNLIMITED")
		if !maxTime.MatchString(mt) {
			return "", fmt.Errorf("slurmconf: orchestrator.slurm.partitions[%d].max_time %q is not a Slurm time", i, p.GetMaxTime())
		}
		var hosts []string
		for _, s := range p.GetNodeSetIds() {
			hosts = append(hosts, bySet[s]...)
		}
		line := "PartitionName=" + p.GetId()
		if len(hosts) > 0 {
			line += " Nodes=" + compress(hosts)
		}
		st := cmp.Or(p.GetState(), slurmspec.PartitionUp)
		if slurmspec.CheckPartitionState(st) != nil {
			return "", fmt.Errorf("slurmconf: orchestrator.slurm.partitions[%d].state %q is not a Slurm partition state", i, p.GetState())
		}
		w("%s MaxTime=%s Default=%s PriorityTier=%d State=%s", line, mt, yesNo(p.GetDefault()), p.GetPriorityTier(), st)
	}
	return b.String(), nil
}

func yesNo(b bool) string {
	if b {
		return "YES"
	}
	return "NO"
}

func gresConf(c *loomv1.Cluster, nodes []node, o RenderOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# gres.conf for %s, rendered by Loom; do not edit.\n", c.GetName())
	b.WriteString("AutoDetect=off\n")
	for _, g := range groupByHW(nodes) {
		if g.hw.gpus == 0 {
			continue
		}
		devs := make([]string, g.hw.gpus)
		for i := range devs {
			devs[i] = "nvidia" + strconv.Itoa(i)
		}
		fmt.Fprintf(&b, "NodeName=%s Name=gpu Type=%s File=%s\n",
			compress(g.hosts), g.hw.gresType, path.Join(o.GPUDeviceDir, compress(devs)))
	}
	return b.String()
}

// topologyConf puts each block under a switch and every block under
// TopSwitch. Nodes whose records name no block share blocks of BlockSize
// consecutive nodes of their pool, named "<pool>-block-NN".
func topologyConf(c *loomv1.Cluster, nodes []node, o RenderOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# topology.conf for %s, rendered by Loom; do not edit.\n", c.GetName())
	blocks := map[string][]string{}
	type chunk struct {
		n    int
		name string
	}
	unplaced := map[string]*chunk{}
	for _, n := range nodes {
		blk := n.block
		if blk == "" {
			c := unplaced[n.pool]
			if c == nil {
				c = &chunk{}
				unplaced[n.pool] = c
			}
			if c.n%o.BlockSize == 0 {
				c.name = fmt.Sprintf("%s-block-%02d", n.pool, c.n/o.BlockSize+1)
			}
			c.n++
			blk = c.name
		}
		blocks[blk] = append(blocks[blk], n.host)
	}
	names := make([]string, 0, len(blocks))
	for k := range blocks {
		names = append(names, k)
	}
	sortNatural(names)
	for _, k := range names {
		fmt.Fprintf(&b, "SwitchName=%s Nodes=%s\n", k, compress(blocks[k]))
	}
	if len(names) > 0 {
		fmt.Fprintf(&b, "SwitchName=%s Switches=%s\n", TopSwitch, compress(names))
	}
	return b.String()
}

// splitNum splits a name into the text before its trailing number and the
// number's value (-1 when there is none).
func splitNum(s string) (string, int64) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	if i == len(s) || len(s)-i > 18 {
		return s, -1
	}
	v, _ := strconv.ParseInt(s[i:], 10, 64)
	return s[:i], v
}

// compareNatural orders gpu-9 before gpu-10.
func compareNatural(a, b string) int {
	pa, na := splitNum(a)
	pb, nb := splitNum(b)
	return cmp.Or(cmp.Compare(pa, pb), cmp.Compare(na, nb), cmp.Compare(a, b))
}

func sortNatural(s []string) { slices.SortFunc(s, compareNatural) }
