package domain

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom-ml/loom/libs/slurmspec"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// ReasonNodeDown is Slurm's name for FAIL_DOWN_NODE, the reason slurmctld
// gives the jobs it fails when its configuration loses their partition.
const ReasonNodeDown = "NodeDown"

// partitionGoneReason is the reason of a job failed because its partition
// (a pending job's list: all of them) is gone: Slurm's reason name, then
// why, in English ("partitions pb, pc were removed", not "partition pb,pc
// was").
func partitionGoneReason(part string) string {
	if slurmspec.IsPartitionList(part) {
		return fmt.Sprintf("%s: partitions %s were removed from the cluster", ReasonNodeDown, strings.ReplaceAll(part, ",", ", "))
	}
	return fmt.Sprintf("%s: partition %s was removed from the cluster", ReasonNodeDown, part)
}

// removedPartitions returns the partitions of old, a cluster's layout as
// stored, that parts (its new one) no longer has, by name. A cluster stored
// without partitions (not described yet, or its implicit one) removes none.
func removedPartitions(old *Cluster, parts []Partition) map[string]bool {
	if old == nil || len(old.Partitions) == 0 {
		return nil
	}
	now := map[string]bool{}
	for _, p := range (&Cluster{Partitions: parts}).EffectivePartitions() {
		now[p.Name] = true
	}
	var gone map[string]bool
	for _, p := range old.Partitions {
		if !now[p.Name] {
			if gone == nil {
				gone = map[string]bool{}
			}
			gone[p.Name] = true
		}
	}
	return gone
}

// failPartitionless does what slurmctld does to the jobs of a partition
// its configuration lost (read_config.c, _sync_jobs_to_conf): a job whose
// partition is gone (gone[its cluster] reports it) can never run, so a
// pending one ends NODE_FAIL at once (start and end now, exit code 1) and a
// running one ends NODE_FAIL, its steps told to stop, and is not requeued
// (Slurm requeues only a job that still has a partition). Its reason is
// Slurm's (NodeDown) and names the partition. Jobs of the partitions that
// remain, and jobs whose attempt has already ended (COMPLETING), are left
// alone.
func (t *txn) failPartitionless(gone map[string]func(j *Job) bool) {
	if len(gone) == 0 {
		return
	}
	clusters := make([]string, 0, len(gone))
	for c := range gone {
		clusters = append(clusters, c)
	}
	sort.Strings(clusters)
	for _, cluster := range clusters {
		pending := t.pendingJobs(cluster)
		sort.Slice(pending, func(a, b int) bool { return pending[a].Name() < pending[b].Name() })
		for _, j := range pending {
			if !gone[cluster](j) {
				continue
			}
			j = t.editJob(j.Name())
			t.end(j, loomv1.JobState_NODE_FAIL, 1, partitionGoneReason(j.Job.GetPartition()))
			j.Job.StartTime = timestamppb.New(t.now)
			t.emitJob(j)
			t.dirty[cluster] = true
		}
	}
	for _, r := range t.activeRuns() {
		f := gone[r.Cluster]
		if f == nil {
			continue
		}
		j := t.job(r.Job)
		if j == nil || !j.Running() || j.Attempt != r.Attempt || !f(j) {
			continue
		}
		j = t.editJob(j.Name())
		reason := partitionGoneReason(j.Job.GetPartition())
		t.stopSteps(r, "", reason, eventsv1.StopCause_STOP_CAUSE_NODE_FAILURE)
		t.finish(j, loomv1.JobState_NODE_FAIL, 1, reason)
		t.dirty[r.Cluster] = true
	}
}

// dropGonePartitions takes the partitions in gone out of the lists of
// cluster's jobs that name several (-p a,b) and keep one
// (failPartitionless ends those that keep none), as slurmctld does when a
// partition goes (a,b less b is a): a pending job's Job.partition, which
// squeue shows, and a running job's list (JobRecord.Partitions), which a
// requeue puts back. A list left with one name is that name.
func (t *txn) dropGonePartitions(cluster string, gone map[string]bool) {
	pending := t.pendingJobs(cluster)
	sort.Slice(pending, func(a, b int) bool { return pending[a].Name() < pending[b].Name() })
	for _, j := range pending {
		list := j.Job.GetPartition()
		if !slurmspec.IsPartitionList(list) || !anyGone(gone, list) || allGone(gone, list) {
			continue
		}
		j = t.editJob(j.Name())
		j.Job.Partition = withoutGone(list, gone)
		t.emitJob(j)
		t.dirty[cluster] = true
	}
	for _, r := range t.activeRuns() {
		if r.Cluster != cluster {
			continue
		}
		j := t.job(r.Job)
		if j == nil || j.Attempt != r.Attempt || j.Partitions == "" || !anyGone(gone, j.Partitions) {
			continue
		}
		j = t.editJob(j.Name())
		if j.Partitions = withoutGone(j.Partitions, gone); !slurmspec.IsPartitionList(j.Partitions) {
			j.Partitions = "" // its own partition alone
		}
	}
}
