package app

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/loom-ml/loom/libs/envelope"
	"github.com/loom-ml/loom/libs/topics"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// colSet is a set of WatchCollections, one bit per collection by its
// index there.
type colSet uint16

// colBit is the set holding col alone (empty for a name that is not a
// collection).
func colBit(col string) colSet {
	if i := slices.Index(WatchCollections, col); i >= 0 {
		return 1 << i
	}
	return 0
}

// colsOf is the set of cols.
func colsOf(cols ...string) colSet {
	var s colSet
	for _, c := range cols {
		s |= colBit(c)
	}
	return s
}

// ChangeTopics are the topics whose events bring WatchChanges' collections
// other than jobs (which come from loom.job.events.v1, as WatchJob's) to
// this process's watchers: the gateway's change feed tails each of them.
// The job events are among them for the Slurm nodes, whose state follows
// the jobs placed on them and an administrator's drain.
var ChangeTopics = []string{topics.ClusterEvents, topics.NodeEvents, topics.HealthEvents, topics.JobEvents, topics.TrainingEvents, topics.ModelEvents}

// changeCols maps each event type of ChangeTopics that changes what a
// collection's list shows to those collections. An event only makes the
// collections be listed again (with the watcher's own credentials), so a
// type named here that changed nothing costs a list, and one missing
// waits for the watch's refresh. Nodes, node health and Slurm nodes are
// listed per cluster, so a cluster's change lists them again too. The
// Slurm nodes (the scheduler's view: ListSlurmNodes) change with the
// provisioner's node (DOWN, DRAINING, gone), health's verdict (a health
// drain, a reboot), the jobs placed there (IDLE, MIXED, ALLOCATED) and an
// administrator's drain or resume (SlurmNodeChanged).
var changeCols = map[string]colSet{
	envelope.TypeOf(&eventsv1.ClusterChanged{}):         colsOf("clusters", "nodes", "nodeHealth", "slurmNodes"),
	envelope.TypeOf(&eventsv1.ClusterDeleted{}):         colsOf("clusters", "nodes", "nodeHealth", "slurmNodes"),
	envelope.TypeOf(&eventsv1.ClusterOperationFailed{}): colsOf("clusters"),
	envelope.TypeOf(&eventsv1.ReservationChanged{}):     colsOf("clusters"),
	envelope.TypeOf(&eventsv1.ReservationDeleted{}):     colsOf("clusters"),
	envelope.TypeOf(&eventsv1.NodeChanged{}):            colsOf("nodes", "nodeHealth", "slurmNodes"),
	envelope.TypeOf(&eventsv1.NodeRemoved{}):            colsOf("nodes", "nodeHealth", "slurmNodes"),
	envelope.TypeOf(&eventsv1.RemediationFinished{}):    colsOf("nodes", "nodeHealth", "slurmNodes"),
	envelope.TypeOf(&eventsv1.NodeHealthChanged{}):      colsOf("nodes", "nodeHealth", "slurmNodes"),
	envelope.TypeOf(&eventsv1.JobChanged{}):             colsOf("slurmNodes"),
	envelope.TypeOf(&eventsv1.SlurmNodeChanged{}):       colsOf("slurmNodes"),
	envelope.TypeOf(&eventsv1.CustomJobChanged{}):       colsOf("customJobs"),
	// A trial's state and measurements show in its tuning job.
	envelope.TypeOf(&eventsv1.HyperparameterTuningJobChanged{}): colsOf("hyperparameterTuningJobs"),
	envelope.TypeOf(&eventsv1.TrialChanged{}):                   colsOf("hyperparameterTuningJobs"),
	envelope.TypeOf(&eventsv1.TrainingPipelineChanged{}):        colsOf("trainingPipelines"),
	// A new version changes its model's latest_version and update_time,
	// which ListModels shows.
	envelope.TypeOf(&eventsv1.ModelVersionRegistered{}): colsOf("models"),
}

// fedCols are the collections the change feed brings.
var fedCols = func() colSet {
	var s colSet
	for _, c := range changeCols {
		s |= c
	}
	return s
}()

// nameProject is the project part ("projects/{project}") of a resource
// name, or "" when it has none.
func nameProject(name string) string {
	rest, ok := strings.CutPrefix(name, "projects/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	if id == "" {
		return ""
	}
	return "projects/" + id
}

// pokes tells the WatchChanges streams of a project that some of their
// collections may have changed. Unlike the job hub it carries no state,
// only which collections to list again, so a slow watcher never falls
// behind: its pokes merge into one set until it takes them.
type pokes struct {
	mu   sync.Mutex
	subs map[string]map[*poke]struct{} // by project, "projects/{p}"
}

// poke is one watcher's: C receives (without blocking the sender; one
// pending wake-up at most) when take has something to return.
type poke struct {
	project string
	want    colSet // the collections the watch holds
	C       chan struct{}

	mu      sync.Mutex
	pending colSet
}

func newPokes() *pokes { return &pokes{subs: map[string]map[*poke]struct{}{}} }

// subscribe starts telling the returned poke of changes of want in project.
func (p *pokes) subscribe(project string, want colSet) *poke {
	w := &poke{project: project, want: want, C: make(chan struct{}, 1)}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.subs[project] == nil {
		p.subs[project] = map[*poke]struct{}{}
	}
	p.subs[project][w] = struct{}{}
	return w
}

// unsubscribe stops telling w.
func (p *pokes) unsubscribe(w *poke) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.subs[w.project], w)
	if len(p.subs[w.project]) == 0 {
		delete(p.subs, w.project)
	}
}

// watched reports whether a watcher of project ("": of any project) holds
// one of cols.
func (p *pokes) watched(project string, cols colSet) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for proj, ws := range p.subs {
		if project != "" && proj != project {
			continue
		}
		for w := range ws {
			if w.want&cols != 0 {
				return true
			}
		}
	}
	return false
}

// notify tells every watcher of project ("": of every project) that cols
// may have changed.
func (p *pokes) notify(project string, cols colSet) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for proj, ws := range p.subs {
		if project != "" && proj != project {
			continue
		}
		for w := range ws {
			if c := w.want & cols; c != 0 {
				w.mu.Lock()
				w.pending |= c
				w.mu.Unlock()
				select {
				case w.C <- struct{}{}:
				default: // a wake-up is pending already
				}
			}
		}
	}
}

// take returns the collections told since the last take, and forgets them.
func (w *poke) take() colSet {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.pending
	w.pending = 0
	return c
}

// ChangeWatched reports whether a record of ChangeTopics with this
// CloudEvents type and subject would reach one of this process's
// WatchChanges streams, so that the change feed passes over the others
// without decoding them. A subject that names no project is decoded to be
// sure.
func (g *Gateway) ChangeWatched(typ, subject string) bool {
	cols, ok := changeCols[typ]
	return ok && g.pokes.watched(nameProject(subject), cols)
}

// HandleChangeEvent tells the WatchChanges streams of the event's project
// (its subject's or key's; of every project when neither names one) that
// the collections its type changes may have changed: they list them again
// shortly. An event that reaches here passed the feed's signature check.
func (g *Gateway) HandleChangeEvent(_ context.Context, ev envelope.Event) error {
	cols, ok := changeCols[ev.Type]
	if !ok {
		return nil
	}
	project := nameProject(ev.Subject)
	if project == "" {
		project = nameProject(ev.Key)
	}
	g.pokes.notify(project, cols)
	return nil
}

// changedModels tells this process's watchers of name's project that its
// models changed: the registry's synchronous edits (UpdateModel,
// MergeVersionAliases, deletes) emit no event, so the gateway that made
// one says so itself. Watchers through other gateway instances see it at
// their refresh.
func (g *Gateway) changedModels(name string) {
	if p := nameProject(name); p != "" {
		g.pokes.notify(p, colBit("models"))
	}
}
