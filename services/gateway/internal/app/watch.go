package app

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	trainingv1 "github.com/loom-ml/loom/proto/loom/training/v1"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Bounds of WatchChanges.
const (
	// MaxWatchCollections is the most collections one WatchChanges names.
	MaxWatchCollections = 9
	// MaxWatchItems is the most resources one collection of a watch may
	// hold: a larger one is refused (ResourceExhausted), since the watch
	// keeps a fingerprint of each to tell what changed.
	MaxWatchItems = 5000
	// DefaultMaxChangeWatches is Options.MaxChangeWatches' default: the
	// WatchChanges streams one gateway holds open at once, whoever calls.
	DefaultMaxChangeWatches = 1024
	// DefaultChangeRefresh is Options.ChangeRefresh's default: a safety
	// net, as the change feeds bring each change within about a second.
	DefaultChangeRefresh = 30 * time.Second
	// DefaultWatchLocation is the training location watched when the
	// request names none: the CLI's default (LOOM_LOCATION).
	DefaultWatchLocation = "us-central1"
)

// WatchCollections are the collections WatchChanges serves, in the order
// the documentation lists them.
var WatchCollections = []string{"clusters", "nodes", "nodeHealth", "slurmNodes", "jobs", "customJobs", "hyperparameterTuningJobs", "trainingPipelines", "models"}

// changeWatches counts this gateway's open WatchChanges streams.
type changeWatches struct{ open atomic.Int64 }

// watchItem is one resource of a watched collection as its list shows it.
type watchItem struct {
	name string
	msg  proto.Message
	// set puts msg into the event's resource.
	set func(*loomv1.ChangeEvent)
}

// watchState is what a watch last told its client: per collection, each
// resource's name and the fingerprint of its encoding.
type watchState map[string]map[string]uint64

// fingerprint is a hash of m's deterministic encoding: two states of a
// resource with equal fingerprints are taken as equal.
func fingerprint(m proto.Message) uint64 {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}

// checkWatch validates a WatchChanges request, every problem at once, and
// returns its project, its collections (commas split, duplicates dropped)
// and its training location.
func checkWatch(req *loomv1.WatchChangesRequest) (resname.Project, []string, string, error) {
	var v errs.Validator
	project, err := resname.ParseProject(req.GetProject())
	if err != nil {
		v.Add("project", "%v", err)
	}
	var cols []string
	if n := len(req.GetCollections()); n > MaxWatchCollections {
		v.Add("collections", "%d elements, at most %d", n, MaxWatchCollections)
	} else {
		for _, el := range req.GetCollections() {
			for _, c := range strings.Split(el, ",") {
				c = strings.TrimSpace(c)
				switch {
				case c == "":
				case !slices.Contains(WatchCollections, c):
					v.Add("collections", "%q is not a collection the gateway watches (want some of %s)", clipText(c), strings.Join(WatchCollections, ", "))
				case !slices.Contains(cols, c):
					cols = append(cols, c)
				}
			}
		}
		v.Check(len(cols) <= MaxWatchCollections, "collections", "%d collections, at most %d", len(cols), MaxWatchCollections)
		v.Check(len(cols) > 0 || len(req.GetCollections()) > MaxWatchCollections, "collections", "name at least one of %s", strings.Join(WatchCollections, ", "))
	}
	loc := req.GetLocation()
	if loc == "" {
		loc = DefaultWatchLocation
	}
	v.Check(resname.ValidID(loc), "location", "%q is not a location id", clipText(loc))
	return project, cols, loc, v.Err()
}

// WatchChanges sends the current state of each collection the request
// names (a CHANGED per resource, then SYNCED), then each change, until ctx
// ends or the gateway stops. Every state sent is what the collection's
// list RPC returns to the caller, read with the caller's context (so
// PrivateData hides others' jobs alike): a change feed only says which
// collections of the project to list again, and they are listed again
// Options.Poll after the first such word (a burst costs one list each).
// Job changes come from the job feed (the same feed and hub as WatchJob);
// the other collections' from the change feed (Options.ChangeFeed: the
// events of ChangeTopics) and from this gateway's own model edits. Every
// collection is also listed again each Options.ChangeRefresh, a safety
// net for what no feed brought. A job feed that dropped this watch
// because send was too slow gives a RESYNC: the client drops what it
// holds and lists again, and the watch goes on: the whole state again (a
// CHANGED per resource) and a SYNCED, then the changes after it. At most
// Options.MaxChangeWatches watches are open at once in this gateway
// (ResourceExhausted past it).
func (g *Gateway) WatchChanges(ctx context.Context, req *loomv1.WatchChangesRequest, send func(*loomv1.ChangeEvent) error) error {
	project, cols, loc, err := checkWatch(req)
	if err != nil {
		return err
	}
	if limit := g.opt.MaxChangeWatches; limit > 0 {
		if n := g.changes.open.Add(1); n > int64(limit) {
			g.changes.open.Add(-1)
			return fmt.Errorf("%d WatchChanges streams open in this gateway, the limit of %d (LOOM_GATEWAY_MAX_CHANGE_WATCHES); retry later: %w",
				n-1, limit, errs.ResourceExhausted)
		}
		defer g.changes.open.Add(-1)
	}
	// Subscribe, and have the feeds reading, before the first list: a
	// change in between would otherwise wait for the refresh.
	var readies []<-chan struct{}
	var s *sub
	if slices.Contains(cols, "jobs") {
		s = g.jobs.subscribe(project.String())
		defer func() { g.jobs.unsubscribe(s) }()
		if g.feed != nil {
			readies = append(readies, g.feed.acquire())
			defer g.feed.release()
		}
	}
	var pk *poke
	if want := colsOf(cols...) & fedCols; want != 0 {
		pk = g.pokes.subscribe(project.String(), want)
		defer g.pokes.unsubscribe(pk)
		if g.changeFeed != nil {
			readies = append(readies, g.changeFeed.acquire())
			defer g.changeFeed.release()
		}
	}
	if len(readies) > 0 {
		// Past feedReadyWait, the refresh covers what a late feed misses.
		late := time.NewTimer(feedReadyWait)
		defer late.Stop()
	wait:
		for _, ready := range readies {
			select {
			case <-ready:
			case <-late.C:
				break wait
			case <-ctx.Done():
				return ctx.Err()
			case <-g.stop:
				return ErrStopping
			}
		}
	}
	known := watchState{}
	for _, c := range cols {
		known[c] = map[string]uint64{}
	}
	if err := g.syncChanges(ctx, project, loc, cols, known, send, true); err != nil {
		return err
	}
	if err := send(&loomv1.ChangeEvent{Type: loomv1.ChangeEvent_SYNCED}); err != nil {
		return err
	}
	refresh := time.NewTicker(g.opt.ChangeRefresh)
	defer refresh.Stop()
	// soon lists the changed collections again shortly after the first
	// word of a change, so that a burst of changes costs one list.
	soon := time.NewTimer(time.Hour)
	soon.Stop()
	defer soon.Stop()
	var pending colSet
	mark := func(c colSet) {
		if c != 0 && pending == 0 {
			soon.Reset(g.opt.Poll)
		}
		pending |= c
	}
	var jobC <-chan *loomv1.Job
	if s != nil {
		jobC = s.C
	}
	var pokeC <-chan struct{}
	if pk != nil {
		pokeC = pk.C
	}
	for {
		select {
		case _, ok := <-jobC:
			if ok {
				mark(colBit("jobs"))
				continue
			}
			// The hub dropped this watch: it fell behind. Whatever it
			// missed, the client reads again.
			s = g.jobs.subscribe(project.String())
			jobC = s.C
			if err := send(&loomv1.ChangeEvent{Type: loomv1.ChangeEvent_RESYNC}); err != nil {
				return err
			}
			for _, c := range cols {
				known[c] = map[string]uint64{}
			}
			if err := g.syncChanges(ctx, project, loc, cols, known, send, true); err != nil {
				return err
			}
			if err := send(&loomv1.ChangeEvent{Type: loomv1.ChangeEvent_SYNCED}); err != nil {
				return err
			}
			continue
		case <-pokeC:
			mark(pk.take())
		case <-soon.C:
			var again []string
			for _, c := range cols {
				if pending&colBit(c) != 0 {
					again = append(again, c)
				}
			}
			pending = 0
			if err := g.syncChanges(ctx, project, loc, again, known, send, true); err != nil {
				return err
			}
		case <-refresh.C:
			if err := g.syncChanges(ctx, project, loc, cols, known, send, true); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-g.stop:
			return ErrStopping
		}
	}
}

// syncChanges lists each collection of cols and, when tell, sends what
// differs from known (CHANGED, DELETED); known becomes what was listed. A
// list that fails for a passing reason (its owner unavailable) is skipped
// until the next round; any other failure ends the watch.
func (g *Gateway) syncChanges(ctx context.Context, project resname.Project, loc string, cols []string, known watchState, send func(*loomv1.ChangeEvent) error, tell bool) error {
	for _, c := range cols {
		items, err := g.listCollection(ctx, project, loc, c)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if passing(err) {
				g.opt.Log.WarnContext(ctx, "watch: list failed; trying again at the next refresh", "collection", c, "err", err)
				continue
			}
			return fmt.Errorf("watch %s: %w", c, err)
		}
		was := known[c]
		now := make(map[string]uint64, len(items))
		for _, it := range items {
			fp := fingerprint(it.msg)
			now[it.name] = fp
			if old, ok := was[it.name]; tell && (!ok || old != fp) {
				ev := &loomv1.ChangeEvent{Type: loomv1.ChangeEvent_CHANGED, Collection: c, Name: it.name}
				it.set(ev)
				if err := send(ev); err != nil {
					return err
				}
			}
		}
		if tell {
			// Sorted, so that a client sees deletions in a stable order.
			gone := make([]string, 0)
			for name := range was {
				if _, ok := now[name]; !ok {
					gone = append(gone, name)
				}
			}
			slices.Sort(gone)
			for _, name := range gone {
				if err := send(&loomv1.ChangeEvent{Type: loomv1.ChangeEvent_DELETED, Collection: c, Name: name}); err != nil {
					return err
				}
			}
		}
		known[c] = now
	}
	return nil
}

// passing reports whether err is an owner's passing failure (unavailable,
// timed out), worth another try rather than the end of a watch, or an
// owner this deployment does not run (unimplemented): its collection then
// stays empty, as its list fails, while the others are watched.
func passing(err error) bool {
	if errors.Is(err, errs.Unavailable) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unimplemented:
		return true
	}
	return false
}

// tooMany is the error of a collection past MaxWatchItems.
func tooMany(col string) error {
	return fmt.Errorf("collections: %s holds more than %d resources, too many to watch; list it in pages instead: %w",
		col, MaxWatchItems, errs.ResourceExhausted)
}

// listPages calls list with page tokens until the last page, collecting
// each page's items, at most MaxWatchItems in all.
func listPages[T proto.Message](col string, list func(token string) ([]T, string, error), item func(T) watchItem) ([]watchItem, error) {
	var out []watchItem
	tok := ""
	for {
		page, next, err := list(tok)
		if err != nil {
			return nil, err
		}
		for _, m := range page {
			out = append(out, item(m))
		}
		if len(out) > MaxWatchItems {
			return nil, tooMany(col)
		}
		if next == "" {
			return out, nil
		}
		tok = next
	}
}

// listCollection lists every resource of one collection of project with
// the list RPC's own code (the caller's context, so the caller's view).
func (g *Gateway) listCollection(ctx context.Context, project resname.Project, loc, col string) ([]watchItem, error) {
	parent := project.String()
	tparent := parent + "/locations/" + loc
	const size = paging.MaxSize
	switch col {
	case "clusters":
		return listPages(col, func(tok string) ([]*loomv1.Cluster, string, error) {
			r, err := g.ListClusters(ctx, &loomv1.ListClustersRequest{Parent: parent, PageSize: size, PageToken: tok})
			return r.GetClusters(), r.GetNextPageToken(), err
		}, func(m *loomv1.Cluster) watchItem {
			return watchItem{m.GetName(), m, func(e *loomv1.ChangeEvent) { e.Resource = &loomv1.ChangeEvent_Cluster{Cluster: m} }}
		})
	case "jobs":
		return listPages(col, func(tok string) ([]*loomv1.Job, string, error) {
			r, err := g.ListJobs(ctx, &loomv1.ListJobsRequest{Parent: parent, PageSize: size, PageToken: tok})
			return r.GetJobs(), r.GetNextPageToken(), err
		}, func(m *loomv1.Job) watchItem {
			return watchItem{m.GetName(), m, func(e *loomv1.ChangeEvent) { e.Resource = &loomv1.ChangeEvent_Job{Job: m} }}
		})
	case "models":
		return listPages(col, func(tok string) ([]*loomv1.Model, string, error) {
			r, err := g.ListModels(ctx, &loomv1.ListModelsRequest{Parent: parent, PageSize: size, PageToken: tok})
			return r.GetModels(), r.GetNextPageToken(), err
		}, func(m *loomv1.Model) watchItem {
			return watchItem{m.GetName(), m, func(e *loomv1.ChangeEvent) { e.Resource = &loomv1.ChangeEvent_Model{Model: m} }}
		})
	case "customJobs":
		return listPages(col, func(tok string) ([]*trainingv1.CustomJob, string, error) {
			r, err := g.ListCustomJobs(ctx, &trainingv1.ListCustomJobsRequest{Parent: tparent, PageSize: size, PageToken: tok})
			return r.GetCustomJobs(), r.GetNextPageToken(), err
		}, func(m *trainingv1.CustomJob) watchItem {
			return watchItem{m.GetName(), m, func(e *loomv1.ChangeEvent) { e.Resource = &loomv1.ChangeEvent_CustomJob{CustomJob: m} }}
		})
	case "hyperparameterTuningJobs":
		return listPages(col, func(tok string) ([]*trainingv1.HyperparameterTuningJob, string, error) {
			r, err := g.ListHyperparameterTuningJobs(ctx, &trainingv1.ListHyperparameterTuningJobsRequest{Parent: tparent, PageSize: size, PageToken: tok})
			return r.GetHyperparameterTuningJobs(), r.GetNextPageToken(), err
		}, func(m *trainingv1.HyperparameterTuningJob) watchItem {
			return watchItem{m.GetName(), m, func(e *loomv1.ChangeEvent) {
				e.Resource = &loomv1.ChangeEvent_HyperparameterTuningJob{HyperparameterTuningJob: m}
			}}
		})
	case "trainingPipelines":
		return listPages(col, func(tok string) ([]*trainingv1.TrainingPipeline, string, error) {
			r, err := g.ListTrainingPipelines(ctx, &trainingv1.ListTrainingPipelinesRequest{Parent: tparent, PageSize: size, PageToken: tok})
			return r.GetTrainingPipelines(), r.GetNextPageToken(), err
		}, func(m *trainingv1.TrainingPipeline) watchItem {
			return watchItem{m.GetName(), m, func(e *loomv1.ChangeEvent) { e.Resource = &loomv1.ChangeEvent_TrainingPipeline{TrainingPipeline: m} }}
		})
	case "nodes", "nodeHealth", "slurmNodes":
		clusters, err := g.listCollection(ctx, project, loc, "clusters")
		if err != nil {
			return nil, err
		}
		var out []watchItem
		for _, c := range clusters {
			var items []watchItem
			if col == "nodes" {
				items, err = listPages(col, func(tok string) ([]*loomv1.Node, string, error) {
					r, err := g.ListNodes(ctx, &loomv1.ListNodesRequest{Parent: c.name, PageSize: size, PageToken: tok})
					return r.GetNodes(), r.GetNextPageToken(), err
				}, func(m *loomv1.Node) watchItem {
					return watchItem{c.name + "/nodes/" + m.GetHostname(), m, func(e *loomv1.ChangeEvent) { e.Resource = &loomv1.ChangeEvent_Node{Node: m} }}
				})
			} else if col == "slurmNodes" {
				items, err = listPages(col, func(tok string) ([]*loomv1.SlurmNode, string, error) {
					r, err := g.ListSlurmNodes(ctx, &loomv1.ListSlurmNodesRequest{Cluster: c.name, PageSize: size, PageToken: tok})
					return r.GetNodes(), r.GetNextPageToken(), err
				}, func(m *loomv1.SlurmNode) watchItem {
					return watchItem{c.name + "/nodes/" + m.GetHostname(), m, func(e *loomv1.ChangeEvent) { e.Resource = &loomv1.ChangeEvent_SlurmNode{SlurmNode: m} }}
				})
			} else {
				items, err = listPages(col, func(tok string) ([]*loomv1.NodeHealth, string, error) {
					r, err := g.ListNodeHealth(ctx, &loomv1.ListNodeHealthRequest{Cluster: c.name, PageSize: size, PageToken: tok})
					return r.GetNodes(), r.GetNextPageToken(), err
				}, func(m *loomv1.NodeHealth) watchItem {
					return watchItem{c.name + "/nodes/" + m.GetHostname(), m, func(e *loomv1.ChangeEvent) { e.Resource = &loomv1.ChangeEvent_NodeHealth{NodeHealth: m} }}
				})
			}
			if isNotFound(err) {
				continue // the cluster went away since it was listed
			}
			if err != nil {
				return nil, err
			}
			if out = append(out, items...); len(out) > MaxWatchItems {
				return nil, tooMany(col)
			}
		}
		return out, nil
	}
	return nil, errs.Invalid("collections", "%q is not a collection the gateway watches", col)
}
