package fakegw

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// Ingress, set as Gateway.Ingress, serves IngressService in memory, as the
// gateway forwards it from the bridge: Producers and Messages (newest
// first, as given) of the parent's project ("projects/-": all), paged with
// paging.Ordered; ListIngressMessages' filter is an AND of
// `field = "value"` terms over outcome, source, type and principal (a
// term the fake does not know is InvalidArgument naming filter, as the
// bridge answers). Requests are recorded with the Gateway's (Requests).
type Ingress struct {
	loomv1.UnimplementedIngressServiceServer

	Producers []*loomv1.IngressProducer
	Messages  []*loomv1.IngressMessage

	g *Gateway
}

// ingressProject is parent's project id ("-" for every project).
func ingressProject(parent string) (string, error) {
	project, ok := strings.CutPrefix(parent, "projects/")
	if !ok || project == "" || strings.Contains(project, "/") {
		return "", errs.ToStatus(errs.Invalid("parent", "want projects/{project} or projects/-, got %q", parent))
	}
	return project, nil
}

// ListIngressProducers pages the project's Producers.
func (in *Ingress) ListIngressProducers(_ context.Context, r *loomv1.ListIngressProducersRequest) (*loomv1.ListIngressProducersResponse, error) {
	defer in.g.lock(r)()
	project, err := ingressProject(r.GetParent())
	if err != nil {
		return nil, err
	}
	var ps []*loomv1.IngressProducer
	for _, p := range in.Producers {
		if project == "-" || p.GetProject() == project {
			ps = append(ps, p)
		}
	}
	page, next, err := paging.Ordered(r, ps)
	if err != nil {
		return nil, errs.ToStatus(fmt.Errorf("ingress producers: %w", err))
	}
	return &loomv1.ListIngressProducersResponse{Producers: page, NextPageToken: next}, nil
}

// ListIngressMessages pages the project's Messages that match the filter.
func (in *Ingress) ListIngressMessages(_ context.Context, r *loomv1.ListIngressMessagesRequest) (*loomv1.ListIngressMessagesResponse, error) {
	defer in.g.lock(r)()
	project, err := ingressProject(r.GetParent())
	if err != nil {
		return nil, err
	}
	want := map[string]string{}
	if f := strings.TrimSpace(r.GetFilter()); f != "" {
		for _, term := range strings.Split(f, " AND ") {
			k, v, ok := strings.Cut(term, "=")
			k = strings.TrimSpace(k)
			val, qerr := strconv.Unquote(strings.TrimSpace(v))
			switch k {
			case "outcome", "source", "type", "principal":
			default:
				ok = false
			}
			if !ok || qerr != nil {
				return nil, errs.ToStatus(errs.Invalid("filter", "%q is not field = \"value\" over outcome, source, type, principal", term))
			}
			want[k] = val
		}
	}
	var ms []*loomv1.IngressMessage
	for _, m := range in.Messages {
		got := map[string]string{"outcome": m.GetOutcome(), "source": m.GetSource(), "type": m.GetType(), "principal": m.GetPrincipal()}
		match := project == "-" || m.GetProject() == project
		for k, v := range want {
			match = match && got[k] == v
		}
		if match {
			ms = append(ms, m)
		}
	}
	page, next, err := paging.Ordered(r, ms)
	if err != nil {
		return nil, errs.ToStatus(fmt.Errorf("ingress messages: %w", err))
	}
	return &loomv1.ListIngressMessagesResponse{Messages: page, NextPageToken: next}, nil
}
