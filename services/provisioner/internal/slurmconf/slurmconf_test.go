package slurmconf

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/loom-ml/loom/libs/clusterspec"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// pool is a shorthand for a node pool.
func pool(id, machine string, count int32, capType loomv1.CapacitySource_Type, reservation string) *loomv1.NodePool {
	return &loomv1.NodePool{Id: id, MachineType: machine, NodeCount: count,
		Capacity: &loomv1.CapacitySource{Type: capType, Reservation: reservation}}
}

// nodesFor makes the node records the provisioner would: compute nodes named
// by the node set over their pool (else the pool), login nodes
// {cluster}-login-NNN (clusterspec's naming). blocks, when set, names each
// compute node's block.
func nodesFor(c *loomv1.Cluster, blocks func(host string, i int) string) []*loomv1.Node {
	id := clusterspec.ClusterID(c)
	var out []*loomv1.Node
	for _, p := range c.GetCompute().GetNodePools() {
		for i := range int(p.GetNodeCount()) {
			host := clusterspec.Hostname(clusterspec.HostPrefix(c, p.GetId()), i+1)
			n := &loomv1.Node{Name: c.GetName() + "/nodes/" + host, Cluster: c.GetName(), NodePool: p.GetId(),
				Hostname: host, State: loomv1.Node_READY, MachineType: p.GetMachineType(),
				CapacityType: p.GetCapacity().GetType(), Role: "compute"}
			if blocks != nil {
				n.Block = blocks(host, i)
			}
			out = append(out, n)
		}
	}
	login := c.GetOrchestrator().GetSlurm().GetLoginNodes()
	for i := range int(login.GetCount()) {
		host := clusterspec.LoginHostname(id, i+1)
		out = append(out, &loomv1.Node{Name: c.GetName() + "/nodes/" + host, Cluster: c.GetName(), Hostname: host,
			MachineType: login.GetMachineType(), Role: "login", State: loomv1.Node_READY})
	}
	return out
}

// examples are the example clusters of examples/clusters, normalized as the
// provisioner stores them, by file name.
func examples(t *testing.T) map[string]*loomv1.Cluster {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "..", "examples", "clusters", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example clusters found (%v)", err)
	}
	out := map[string]*loomv1.Cluster{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := clusterspec.ParseJSON(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		clusterspec.Normalize(c)
		c.Name = "projects/default/clusters/" + clusterspec.ClusterID(c)
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = c
	}
	return out
}

// oneNode is one 8-GPU node, the smallest useful cluster.
func oneNode() *loomv1.Cluster {
	return &loomv1.Cluster{
		Name:    "projects/default/clusters/solo",
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{pool("gpu", "a3-highgpu-8g", 1, loomv1.CapacitySource_ON_DEMAND, "")}},
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
			NodeSets:   []*loomv1.SlurmNodeSet{{Id: "gpu", NodePoolId: "gpu"}},
			Partitions: []*loomv1.SlurmPartition{{Id: "gpu", NodeSetIds: []string{"gpu"}, Default: true}},
		}},
	}
}

// twoPartitions is 4 × a3-ultragpu-8g with a login node, two partitions
// over two node sets, and prolog/epilog scripts.
func twoPartitions() *loomv1.Cluster {
	return &loomv1.Cluster{
		Name: "projects/default/clusters/h200",
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
			pool("train", "a3-ultragpu-8g", 3, loomv1.CapacitySource_ON_DEMAND, ""),
			pool("debug", "a3-ultragpu-8g", 1, loomv1.CapacitySource_ON_DEMAND, ""),
		}},
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
			LoginNodes: &loomv1.LoginNodes{MachineType: "n2-standard-8", Count: 1},
			NodeSets: []*loomv1.SlurmNodeSet{
				{Id: "a3u", NodePoolId: "train", Features: []string{"h200", "ib"}},
				{Id: "a3u-dbg", NodePoolId: "debug", Features: []string{"h200"}},
			},
			Partitions: []*loomv1.SlurmPartition{
				{Id: "train", NodeSetIds: []string{"a3u"}, MaxTime: "7-00:00:00", Default: true, PriorityTier: 10},
				{Id: "debug", NodeSetIds: []string{"a3u-dbg", "a3u"}, MaxTime: "01:00:00", PriorityTier: 100},
			},
			PrologScripts: []string{"echo prolog >> /tmp/prolog.log"},
			EpilogScripts: []string{"#!/bin/sh\necho epilog\n"},
		}},
	}
}

// reservationSpot draws 16 nodes from a reservation and 8 from spot.
func reservationSpot() *loomv1.Cluster {
	return &loomv1.Cluster{
		Name: "projects/default/clusters/mixed",
		Compute: &loomv1.ComputeResources{NodePools: []*loomv1.NodePool{
			pool("resv", "a3-megagpu-8g", 16, loomv1.CapacitySource_RESERVATION, "h100-reservation"),
			pool("spot", "a3-highgpu-8g", 8, loomv1.CapacitySource_SPOT, ""),
			pool("cpu", "n2-standard-16", 2, loomv1.CapacitySource_ON_DEMAND, ""),
		}},
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{
			LoginNodes: &loomv1.LoginNodes{MachineType: "n2-standard-4", Count: 2},
			NodeSets: []*loomv1.SlurmNodeSet{
				{Id: "a3m", NodePoolId: "resv", Features: []string{"reserved"}},
				{Id: "spot", NodePoolId: "spot", Features: []string{"spot", "preemptible"}},
				{Id: "cpu", NodePoolId: "cpu"},
			},
			Partitions: []*loomv1.SlurmPartition{
				{Id: "reserved", NodeSetIds: []string{"a3m"}, Default: true, PriorityTier: 10},
				{Id: "spot", NodeSetIds: []string{"spot"}, MaxTime: "24:00:00", PriorityTier: 1},
				{Id: "cpu", NodeSetIds: []string{"cpu"}, MaxTime: "60"},
			},
		}},
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -run TestRenderGolden -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestRenderGolden(t *testing.T) {
	t.Parallel()
	blocksOf2 := func(_ string, i int) string { return fmt.Sprintf("block-%02d", i/2+1) }
	for _, tc := range []struct {
		name    string
		cluster *loomv1.Cluster
		blocks  func(string, int) string
	}{
		{"one-node", oneNode(), nil},
		{"two-partitions", twoPartitions(), blocksOf2},
		{"reservation-spot", reservationSpot(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Render(tc.cluster, nodesFor(tc.cluster, tc.blocks))
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".slurm.conf", got.GetSlurmConf())
			golden(t, tc.name+".gres.conf", got.GetGresConf())
			golden(t, tc.name+".topology.conf", got.GetTopologyConf())
		})
	}
}

// TestRenderExamples renders every example cluster: each must render, and
// match its golden files (go test -run TestRenderExamples -update after an
// example changes).
func TestRenderExamples(t *testing.T) {
	t.Parallel()
	for name, c := range examples(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := Render(c, nodesFor(c, nil))
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "examples/"+name+".slurm.conf", got.GetSlurmConf())
			golden(t, "examples/"+name+".gres.conf", got.GetGresConf())
			golden(t, "examples/"+name+".topology.conf", got.GetTopologyConf())
		})
	}
}

func TestRenderContent(t *testing.T) {
	t.Parallel()
	c := reservationSpot()
	got, err := Render(c, nodesFor(c, nil))
	if err != nil {
		t.Fatal(err)
	}
	conf := got.GetSlurmConf()
	for _, want := range []string{
		"ClusterName=mixed\n",
		"SlurmctldHost=mixed-login-001\n", // the first login node controls
		// a3-megagpu-8g: 208 vCPUs, 1872 GiB less 5%, 8 × H100.
		"NodeName=a3m-[0001-0016] CPUs=208 RealMemory=1821081 Gres=gpu:h100:8 Features=reserved State=UNKNOWN\n",
		"NodeName=spot-[0001-0008] CPUs=208 RealMemory=1821081 Gres=gpu:h100:8 Features=spot,preemptible State=UNKNOWN\n",
		"NodeName=cpu-[0001-0002] CPUs=16 RealMemory=62259 State=UNKNOWN\n",
		"PartitionName=reserved Nodes=a3m-[0001-0016] MaxTime=UNLIMITED Default=YES PriorityTier=10 State=UP\n",
		"PartitionName=spot Nodes=spot-[0001-0008] MaxTime=24:00:00 Default=NO PriorityTier=1 State=UP\n",
		"ProctrackType=proctrack/linuxproc\n", "TaskPlugin=task/none\n", "SelectType=select/cons_tres\n",
		"SelectTypeParameters=CR_Core\n", "GresTypes=gpu\n", "MailProg=/bin/true\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("slurm.conf lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "login") && strings.Contains(conf, "NodeName=mixed-login") {
		t.Errorf("a login node is a compute node:\n%s", conf)
	}
	if strings.Contains(conf, "Prolog=") || strings.Contains(conf, "Epilog=") {
		t.Errorf("Prolog/Epilog without scripts:\n%s", conf)
	}
	for _, want := range []string{
		"NodeName=a3m-[0001-0016] Name=gpu Type=h100 File=/dev/nvidia[0-7]\n",
		"NodeName=spot-[0001-0008] Name=gpu Type=h100 File=/dev/nvidia[0-7]\n",
	} {
		if !strings.Contains(got.GetGresConf(), want) {
			t.Errorf("gres.conf lacks %q:\n%s", want, got.GetGresConf())
		}
	}
	if strings.Contains(got.GetGresConf(), "cpu-") {
		t.Errorf("gres.conf lists CPU nodes:\n%s", got.GetGresConf())
	}
	for _, want := range []string{
		"SwitchName=resv-block-01 Nodes=a3m-[0001-0016]\n",
		"SwitchName=spot-block-01 Nodes=spot-[0001-0008]\n",
		"SwitchName=spine Switches=cpu-block-01,resv-block-01,spot-block-01\n",
	} {
		if !strings.Contains(got.GetTopologyConf(), want) {
			t.Errorf("topology.conf lacks %q:\n%s", want, got.GetTopologyConf())
		}
	}

	// Prolog and epilog run every script of their directory.
	c = twoPartitions()
	got, err = RenderWith(c, nodesFor(c, nil), RenderOptions{ConfDir: "/opt/slurm/etc", BlockSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Prolog=/opt/slurm/etc/prolog.d/*\n", "Epilog=/opt/slurm/etc/epilog.d/*\n",
		"PartitionName=debug Nodes=a3u-[0001-0003],a3u-dbg-0001 MaxTime=01:00:00 Default=NO PriorityTier=100 State=UP\n"} {
		if !strings.Contains(got.GetSlurmConf(), want) {
			t.Errorf("slurm.conf lacks %q:\n%s", want, got.GetSlurmConf())
		}
	}
	// Blocks of BlockSize per pool when the records name none.
	for _, want := range []string{"SwitchName=train-block-01 Nodes=a3u-[0001-0002]\n", "SwitchName=train-block-02 Nodes=a3u-0003\n"} {
		if !strings.Contains(got.GetTopologyConf(), want) {
			t.Errorf("topology.conf lacks %q:\n%s", want, got.GetTopologyConf())
		}
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	t.Parallel()
	c := reservationSpot()
	nodes := nodesFor(c, nil)
	want, err := Render(c, nodes)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		shuffled := slices.Clone(nodes)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		got, err := Render(c, shuffled)
		if err != nil {
			t.Fatal(err)
		}
		if got.GetSlurmConf() != want.GetSlurmConf() || got.GetGresConf() != want.GetGresConf() || got.GetTopologyConf() != want.GetTopologyConf() {
			t.Fatalf("node order changed the output")
		}
	}
}

func TestRenderGroupsByHardware(t *testing.T) {
	t.Parallel()
	c := oneNode()
	c.Compute.NodePools[0].NodeCount = 12
	nodes := nodesFor(c, nil)
	// gpu-0005 lost two GPUs' worth of record (e.g. a smaller shape): its own line.
	nodes[4].Gpus = 6
	// A gap in the numbering (a replaced node) stays one hostlist.
	nodes = slices.Delete(nodes, 7, 8)
	got, err := Render(c, nodes)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"NodeName=gpu-[0001-0004,0006-0007,0009-0012] CPUs=208 RealMemory=1821081 Gres=gpu:h100:8 State=UNKNOWN\n",
		"NodeName=gpu-0005 CPUs=208 RealMemory=1821081 Gres=gpu:h100:6 State=UNKNOWN\n",
		"PartitionName=gpu Nodes=gpu-[0001-0007,0009-0012] MaxTime=UNLIMITED Default=YES",
	} {
		if !strings.Contains(got.GetSlurmConf(), want) {
			t.Errorf("slurm.conf lacks %q:\n%s", want, got.GetSlurmConf())
		}
	}
	if want := "NodeName=gpu-0005 Name=gpu Type=h100 File=/dev/nvidia[0-5]\n"; !strings.Contains(got.GetGresConf(), want) {
		t.Errorf("gres.conf lacks %q:\n%s", want, got.GetGresConf())
	}
}

func TestRenderRejectsWhatSlurmWouldMisread(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(c *loomv1.Cluster, nodes []*loomv1.Node) []*loomv1.Node
		opts   RenderOptions
		want   string
	}{
		{"hostname with a space", func(c *loomv1.Cluster, n []*loomv1.Node) []*loomv1.Node {
			n[0].Hostname = "gpu 1"
			return n
		}, RenderOptions{}, `hostname "gpu 1"`},
		{"duplicate hostname", func(c *loomv1.Cluster, n []*loomv1.Node) []*loomv1.Node {
			return append(n, n[0])
		}, RenderOptions{}, "appears twice"},
		{"unknown machine type", func(c *loomv1.Cluster, n []*loomv1.Node) []*loomv1.Node {
			n[0].MachineType = "z9-hugegpu-64g"
			return n
		}, RenderOptions{}, `unknown machine type "z9-hugegpu-64g"`},
		{"bad max time", func(c *loomv1.Cluster, n []*loomv1.Node) []*loomv1.Node {
			c.Orchestrator.Slurm.Partitions[0].MaxTime = "1 day"
			return n
		}, RenderOptions{}, "partitions[0].max_time"},
		{"bad partition id", func(c *loomv1.Cluster, n []*loomv1.Node) []*loomv1.Node {
			c.Orchestrator.Slurm.Partitions[0].Id = "a=b"
			return n
		}, RenderOptions{}, "partitions[0].id"},
		{"bad feature", func(c *loomv1.Cluster, n []*loomv1.Node) []*loomv1.Node {
			c.Orchestrator.Slurm.NodeSets[0].Features = []string{"ok", "not ok"}
			return n
		}, RenderOptions{}, "node_sets[0].features[1]"},
		{"bad block", func(c *loomv1.Cluster, n []*loomv1.Node) []*loomv1.Node {
			n[0].Block = "rack 1"
			return n
		}, RenderOptions{}, `block "rack 1"`},
		{"relative state dir", func(c *loomv1.Cluster, n []*loomv1.Node) []*loomv1.Node { return n },
			RenderOptions{StateDir: "state"}, "StateDir"},
		{"control host with a newline", func(c *loomv1.Cluster, n []*loomv1.Node) []*loomv1.Node { return n },
			RenderOptions{ControlHost: "a\nNodeName=x"}, "ControlHost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := oneNode()
			nodes := tc.mutate(c, nodesFor(c, nil))
			_, err := RenderWith(c, nodes, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	if _, err := Render(nil, nil); err == nil {
		t.Error("nil cluster rendered")
	}
}

func TestScripts(t *testing.T) {
	t.Parallel()
	got := Scripts(twoPartitions())
	want := []Script{
		{Path: "prolog.d/01.sh", Content: "#!/bin/bash\necho prolog >> /tmp/prolog.log\n"},
		{Path: "epilog.d/01.sh", Content: "#!/bin/sh\necho epilog\n"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Scripts = %q, want %q", got, want)
	}
	if s := Scripts(oneNode()); len(s) != 0 {
		t.Errorf("scripts for a cluster without any: %q", s)
	}
}

// BenchmarkRender1000 renders a 1,000-node cluster of 8 pools: the
// provisioner renders on every node change.
func BenchmarkRender1000(b *testing.B) {
	c := &loomv1.Cluster{Name: "projects/default/clusters/big", Compute: &loomv1.ComputeResources{},
		Orchestrator: &loomv1.Orchestrator{Slurm: &loomv1.SlurmOrchestrator{}}}
	for i := range 8 {
		id := fmt.Sprintf("p%d", i+1)
		c.Compute.NodePools = append(c.Compute.NodePools, pool(id, "a3-highgpu-8g", 125, loomv1.CapacitySource_ON_DEMAND, ""))
		c.Orchestrator.Slurm.NodeSets = append(c.Orchestrator.Slurm.NodeSets, &loomv1.SlurmNodeSet{Id: "n" + id, NodePoolId: id})
		c.Orchestrator.Slurm.Partitions = append(c.Orchestrator.Slurm.Partitions, &loomv1.SlurmPartition{Id: id, NodeSetIds: []string{"n" + id}})
	}
	nodes := nodesFor(c, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Render(c, nodes); err != nil {
			b.Fatal(err)
		}
	}
}
