package ingress

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// MaxFilterLen bounds ListIngressMessages' filter, in bytes.
const MaxFilterLen = 1024

// Server is loom.v1.IngressService over the App's records. It checks
// nobody's rights: the gateway in front of it decides who may ask
// (a project's members for their project, administrators for "projects/-").
type Server struct {
	loomv1.UnimplementedIngressServiceServer
	rec *records
}

// Server returns the App's IngressService.
func (a *App) Server() *Server { return &Server{rec: a.rec} }

// parentProject reads parent: "projects/{p}" or "projects/-" (returned as "-").
func parentProject(parent string) (string, error) {
	if parent == "projects/"+resname.Wildcard {
		return allProjects, nil
	}
	p, err := resname.ParseProject(parent)
	if err != nil {
		return "", errs.Invalid("parent", "%v (want projects/{project} or projects/-)", err)
	}
	return p.ID, nil
}

// ListIngressProducers lists a project's producers (every project's for
// "projects/-"), in order of project, source, principal.
func (s *Server) ListIngressProducers(ctx context.Context, req *loomv1.ListIngressProducersRequest) (*loomv1.ListIngressProducersResponse, error) {
	project, err := parentProject(req.GetParent())
	if err != nil {
		return nil, err
	}
	if _, _, err := paging.Parse(req); err != nil {
		return nil, err
	}
	ps, err := s.rec.producers(ctx, project)
	if err != nil {
		return nil, err
	}
	page, next, err := paging.List(req, ps, func(p *loomv1.IngressProducer) string {
		return p.GetProject() + "\x00" + p.GetSource() + "\x00" + p.GetPrincipal()
	})
	if err != nil {
		return nil, err
	}
	return &loomv1.ListIngressProducersResponse{Producers: page, NextPageToken: next}, nil
}

// ListIngressMessages lists a project's recent messages (every project's
// for "projects/-"), newest first, filtered.
func (s *Server) ListIngressMessages(ctx context.Context, req *loomv1.ListIngressMessagesRequest) (*loomv1.ListIngressMessagesResponse, error) {
	project, err := parentProject(req.GetParent())
	if err != nil {
		return nil, err
	}
	f, err := ParseFilter(req.GetFilter())
	if err != nil {
		return nil, err
	}
	if _, _, err := paging.Parse(req); err != nil {
		return nil, err
	}
	all, err := s.rec.recent(ctx, project)
	if err != nil {
		return nil, err
	}
	ms := all[:0]
	for _, m := range all {
		if f.Match(m) {
			ms = append(ms, m)
		}
	}
	// Newest first: the key is the decided time counted down, then the
	// message's source and id (unique), so that a token stays put while
	// newer messages arrive.
	page, next, err := paging.List(req, ms, func(m *loomv1.IngressMessage) string {
		return fmt.Sprintf("%020d", uint64(1<<63-1-m.GetDecidedTime().AsTime().UnixNano())) + "\x00" + m.GetSource() + "\x00" + m.GetId()
	})
	if err != nil {
		return nil, err
	}
	return &loomv1.ListIngressMessagesResponse{Messages: page, NextPageToken: next}, nil
}

// Filter is ListIngressMessages' filter: equalities of outcome, source,
// type and principal, all of which must hold.
type Filter map[string]string

// filterFields are the fields a filter may name (camelCase is the same).
var filterFields = map[string]bool{"outcome": true, "source": true, "type": true, "principal": true}

// ParseFilter reads an AIP-160 conjunction: `field = "value"` terms joined
// by AND (a value may be a bare word). Errors are InvalidArgument naming
// "filter", the term and what is accepted.
func ParseFilter(s string) (Filter, error) {
	f := Filter{}
	if len(s) > MaxFilterLen {
		return nil, errs.Invalid("filter", "%d bytes, more than the limit of %d", len(s), MaxFilterLen)
	}
	if strings.TrimSpace(s) == "" {
		return f, nil
	}
	rest := s
	for {
		term, tail, more := cutAnd(rest)
		name, value, ok := strings.Cut(term, "=")
		name = strings.TrimSpace(name)
		value = strings.TrimSpace(value)
		if !ok || !filterFields[name] {
			return nil, errs.Invalid("filter", "term %q: want outcome, source, type or principal = \"value\", joined by AND", clip(strings.TrimSpace(term)))
		}
		if strings.HasPrefix(value, `"`) {
			v, err := strconv.Unquote(value)
			if err != nil {
				return nil, errs.Invalid("filter", "term %q: the value is not a well-formed quoted string", clip(strings.TrimSpace(term)))
			}
			value = v
		} else if value == "" || strings.ContainsAny(value, " \t()\"") {
			return nil, errs.Invalid("filter", "term %q: quote the value (\"...\")", clip(strings.TrimSpace(term)))
		}
		if old, dup := f[name]; dup && old != value {
			return nil, errs.Invalid("filter", "%s is compared twice with different values: nothing would match", name)
		}
		if name == "outcome" {
			value = strings.ToUpper(value)
			switch value {
			case OutcomeAccepted, OutcomeRefused, OutcomeInvalid, OutcomeFailed:
			default:
				return nil, errs.Invalid("filter", "outcome %q: want ACCEPTED, REFUSED, INVALID or FAILED", clip(value))
			}
		}
		f[name] = value
		if !more {
			return f, nil
		}
		rest = tail
	}
}

// cutAnd splits s at its first " AND " outside quotes.
func cutAnd(s string) (term, rest string, found bool) {
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && inQuote:
			i++
		case s[i] == '"':
			inQuote = !inQuote
		case !inQuote && strings.HasPrefix(s[i:], " AND "):
			return s[:i], s[i+5:], true
		}
	}
	return s, "", false
}

// Match reports whether m passes every equality of f.
func (f Filter) Match(m *loomv1.IngressMessage) bool {
	for k, v := range f {
		var got string
		switch k {
		case "outcome":
			got = m.GetOutcome()
		case "source":
			got = m.GetSource()
		case "type":
			got = m.GetType()
		case "principal":
			got = m.GetPrincipal()
		}
		if got != v {
			return false
		}
	}
	return true
}
