package domain

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/loom-ml/loom/libs/clusterspec"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// UpdatablePaths are the cluster fields an UpdateCluster may change; an
// empty update mask means all of them. They are those of
// clusterspec.ApplyUpdate (docs/clusters.md, "What an update can change"),
// which the provisioner carries out: login nodes and prolog/epilog scripts
// included.
var UpdatablePaths = []string{
	"compute.node_pools",
	"orchestrator.slurm.login_nodes",
	"orchestrator.slurm.node_sets",
	"orchestrator.slurm.partitions",
	"orchestrator.slurm.prolog_scripts",
	"orchestrator.slurm.epilog_scripts",
	"labels",
	"display_name",
	"description",
}

// DefaultDrainGraceSeconds is how long a shrink waits for the jobs of drained
// nodes when the request sets no drain_grace_seconds.
const DefaultDrainGraceSeconds = 300

// MaxDrainGraceSeconds is the longest drain_grace_seconds: a week. A shrink
// holds its operation open that long at most; longer ones never finish in
// any useful time.
const MaxDrainGraceSeconds = 7 * 24 * 3600

// outputOnly are the top-level cluster fields a mask may name (a REST PATCH
// body read back from GET does) but an update never takes from the request.
// etag is the request's freshness check (AIP-154), never a change.
var outputOnly = map[string]bool{"name": true, "status": true, "create_time": true, "update_time": true, "etag": true}

// Update is an accepted UpdateCluster.
type Update struct {
	// Cluster is the whole new spec: the current one with the masked fields
	// of the request merged in, normalized, named, output-only fields cleared.
	Cluster *loomv1.Cluster
	// Current is the current spec in the same form, for comparisons.
	Current *loomv1.Cluster
	// Mask lists the UpdatablePaths the update sets, in that order.
	Mask []string
	// DrainGraceSeconds is the request's, or DefaultDrainGraceSeconds.
	DrainGraceSeconds int32
	// Changed is false when the new spec equals the current one.
	Changed bool
}

// CheckUpdateRequest checks what an UpdateCluster request must get right
// before the current cluster is read: cluster.name, the shape of every mask
// path, drain_grace_seconds. Every problem is reported at once.
func CheckUpdateRequest(req *loomv1.UpdateClusterRequest) error {
	var v errs.Validator
	switch name := req.GetCluster().GetName(); {
	case req.GetCluster() == nil:
		v.Add("cluster", "required")
	case name == "":
		v.Add("cluster.name", "required: the cluster to update")
	default:
		if _, err := resname.ParseCluster(name); err != nil {
			v.Add("cluster.name", "%v", err)
		}
	}
	checkRequestID(&v, req.GetRequestId())
	if req.GetCluster() != nil {
		checkClusterText(&v, req.GetCluster())
		checkText(&v, "cluster.etag", req.GetCluster().GetEtag(), MaxEtagBytes)
	}
	md := (&loomv1.Cluster{}).ProtoReflect().Descriptor()
	paths := req.GetUpdateMask().GetPaths()
	onlyOutput := len(paths) > 0
	for i, p := range paths {
		if err := resolvePath(md, p); err != nil {
			v.Add(fmt.Sprintf("update_mask.paths[%d]", i), "%v", err)
		}
		onlyOutput = onlyOutput && outputOnly[strings.SplitN(p, ".", 2)[0]]
	}
	// A mask of output-only fields alone would be an update of nothing,
	// answered as done: the caller surely meant something else.
	v.Check(!onlyOutput, "update_mask", "names only output-only fields (%s), which an update never changes; name what to change (updatable: %s)",
		strings.Join(paths, ", "), strings.Join(UpdatablePaths, ", "))
	v.Check(req.GetDrainGraceSeconds() >= 0 && req.GetDrainGraceSeconds() <= MaxDrainGraceSeconds, "drain_grace_seconds",
		"%d is not 0 (%d) to %d (a week)", req.GetDrainGraceSeconds(), DefaultDrainGraceSeconds, MaxDrainGraceSeconds)
	return v.Err()
}

// MergeUpdate returns the update that req (checked by CheckUpdateRequest)
// makes to current, the cluster as its owner reports it. The mask (all
// UpdatablePaths when empty) says which fields the request sets; a path
// names a whole field (a list is replaced, not merged). Output-only paths are
// ignored. Paths outside UpdatablePaths are allowed as long as their value
// does not change (a REST PATCH of a body read from GET names them all); a
// change there is refused naming the field. The updatable paths named (or
// under a named parent: "compute" is "compute.node_pools") are merged by
// ApplySpecUpdate, whose refusals come under "cluster.". A cluster being
// created, updated or deleted cannot be updated (errs.FailedPrecondition),
// except by a change that moves no node while it is created or updated:
// that applies at once (clusterspec.MovesNoNode).
func MergeUpdate(req *loomv1.UpdateClusterRequest, current *loomv1.Cluster) (Update, error) {
	name := current.GetName()
	s := current.GetStatus().GetState()
	busy := func() error {
		return fmt.Errorf("cluster %s is %s; update it when its operation is done: %w", name, s, errs.FailedPrecondition)
	}
	switch s {
	case loomv1.Cluster_DELETING, loomv1.Cluster_DELETED:
		return Update{}, busy()
	}
	inFlight := s == loomv1.Cluster_CREATING || s == loomv1.Cluster_UPDATING
	old := NormalizeSpec(SpecOf(current))
	old.Name = name
	paths := req.GetUpdateMask().GetPaths()
	src := SpecOf(req.GetCluster())
	if len(paths) == 0 {
		paths = UpdatablePaths
		if src.GetOrchestrator().GetSlurm() == nil {
			// An absent orchestrator means "unchanged" (docs/clusters.md;
			// clusterspec.ApplyUpdate's empty mask), not "no partitions, no
			// login nodes": that would regenerate partition "all" in place
			// of the cluster's own partitions and end their jobs.
			paths = slices.DeleteFunc(slices.Clone(paths), func(p string) bool { return strings.HasPrefix(p, "orchestrator.") })
		}
		// No mask is every populated field (AIP-134): a fixed section the
		// request sets is compared too, so that one that differs is
		// refused by name (docs/clusters.md) rather than dropped while
		// the caller believes it applied.
		for _, f := range []string{"network", "storage"} {
			if fd := src.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(f)); fd != nil && src.ProtoReflect().Has(fd) {
				paths = append(slices.Clone(paths), f)
			}
		}
	}
	// trial takes every named path from the request, so that a change to a
	// field outside UpdatablePaths shows (and is refused by name).
	trial := proto.Clone(old).(*loomv1.Cluster)
	sets := map[string]bool{}
	for _, p := range paths {
		if outputOnly[strings.SplitN(p, ".", 2)[0]] {
			continue
		}
		copyPath(trial.ProtoReflect(), src.ProtoReflect(), strings.Split(p, "."))
		for _, u := range UpdatablePaths {
			if p == u || strings.HasPrefix(p, u+".") || strings.HasPrefix(u, p+".") {
				sets[u] = true
			}
		}
	}
	var frozen errs.Validator
	for _, p := range frozenChanges(old.ProtoReflect(), NormalizeSpec(trial).ProtoReflect(), "") {
		frozen.Add("cluster."+p, "cannot be changed by an update (updatable: %s)", strings.Join(UpdatablePaths, ", "))
	}
	var mask []string
	for _, u := range UpdatablePaths {
		if sets[u] {
			mask = append(mask, u)
		}
	}
	merged, specErr := old, error(nil)
	if len(mask) > 0 {
		merged, specErr = ApplySpecUpdate(old, src, mask)
	}
	if err := joinInvalid(frozen.Err(), PrefixFields(specErr, "cluster.")); err != nil {
		if inFlight {
			return Update{}, busy()
		}
		return Update{}, err
	}
	merged = SpecOf(merged)
	merged.Name = name
	if inFlight && !clusterspec.MovesNoNode(old, merged) {
		return Update{}, busy()
	}
	if err := checkClusterCommand(merged); err != nil {
		return Update{}, err
	}
	grace := req.GetDrainGraceSeconds()
	if grace == 0 {
		grace = DefaultDrainGraceSeconds
	}
	return Update{Cluster: merged, Current: old, Mask: mask, DrainGraceSeconds: grace, Changed: !proto.Equal(old, merged)}, nil
}

// resolvePath checks that path names a field of md: dot-separated proto
// field names, every one but the last a singular message.
func resolvePath(md protoreflect.MessageDescriptor, path string) error {
	segs := strings.Split(path, ".")
	for i, s := range segs {
		fd := md.Fields().ByName(protoreflect.Name(s))
		if fd == nil {
			return fmt.Errorf("%q: %s has no field %q", path, md.FullName(), s)
		}
		if i == len(segs)-1 {
			return nil
		}
		if fd.Message() == nil || fd.IsList() || fd.IsMap() {
			return fmt.Errorf("%q: %s is not a message, so it has no field %q", path, strings.Join(segs[:i+1], "."), segs[i+1])
		}
		md = fd.Message()
	}
	return nil
}

// copyPath sets the field at segs (resolvePath checked it) of dst to its
// value in src, clearing it when src does not have it.
func copyPath(dst, src protoreflect.Message, segs []string) {
	fd := dst.Descriptor().Fields().ByName(protoreflect.Name(segs[0]))
	if len(segs) == 1 {
		if src.Has(fd) {
			dst.Set(fd, src.Get(fd))
		} else {
			dst.Clear(fd)
		}
		return
	}
	if !src.Has(fd) && !dst.Has(fd) {
		// Nothing to set or clear below: do not create empty parents.
		return
	}
	copyPath(dst.Mutable(fd).Message(), src.Get(fd).Message(), segs[1:])
}

// frozenChanges returns the paths of the fields outside UpdatablePaths (and
// the output-only ones) whose values differ between a and b, down to the
// leaves of singular messages.
func frozenChanges(a, b protoreflect.Message, prefix string) []string {
	var out []string
	fields := a.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		path := string(fd.Name())
		if prefix != "" {
			path = prefix + "." + path
		}
		if (prefix == "" && outputOnly[path]) || isUpdatable(path) {
			continue
		}
		if fd.Message() != nil && !fd.IsList() && !fd.IsMap() {
			out = append(out, frozenChanges(a.Get(fd).Message(), b.Get(fd).Message(), path)...)
			continue
		}
		if !a.Get(fd).Equal(b.Get(fd)) {
			out = append(out, path)
		}
	}
	return out
}

func isUpdatable(path string) bool {
	for _, u := range UpdatablePaths {
		if path == u {
			return true
		}
	}
	return false
}
