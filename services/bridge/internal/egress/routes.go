package egress

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
)

// Bounds on the -egress configuration.
const (
	MaxRoutes        = 16   // entries in -egress
	MaxEntryLen      = 4096 // bytes of one entry
	MaxRouteProjects = 256  // projects in one entry's project= filter
	MaxRouteTypes    = 32   // prefixes in one entry's type= filter
)

// Route is one -egress entry: a destination and what it takes.
type Route struct {
	// Entry is the entry as configured.
	Entry string
	// Scheme is "kafka" or "pubsub".
	Scheme string
	// Target is the Kafka topic, or the Pub/Sub topic's full name
	// "projects/{p}/topics/{t}".
	Target string
	// Projects, when set, are the only projects whose events it takes.
	Projects []string
	// Types, when set, are prefixes of the CloudEvent types it takes
	// ("loom.public.v1.Job" takes JobStateChanged).
	Types []string
}

// Name is the sink's name, "kafka:{topic}" or "pubsub:{topic name}".
func (r Route) Name() string { return r.Scheme + ":" + r.Target }

// Takes reports whether an event of project and CloudEvent type typ goes to
// r. An event without a project goes only where no project filter is set.
func (r Route) Takes(project, typ string) bool {
	if len(r.Projects) > 0 && !slices.Contains(r.Projects, project) {
		return false
	}
	if len(r.Types) == 0 {
		return true
	}
	for _, p := range r.Types {
		if strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}

var (
	// kafkaTopic is Kafka's topic grammar.
	kafkaTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)
	// pubsubTopic is Google's: a project id (or a number, or a domain-scoped
	// "example.com:p") and a topic id of 3..255 that starts with a letter.
	pubsubTopic = regexp.MustCompile(`^projects/[a-z0-9][a-z0-9.:-]{0,62}/topics/[A-Za-z][A-Za-z0-9._~+%-]{2,254}$`)
	// typePrefix is a prefix of a CloudEvent type (a protobuf full name).
	typePrefix = regexp.MustCompile(`^[A-Za-z0-9._]{1,256}$`)
)

// ParseRoutes parses the -egress entries: "kafka:{topic}" or
// "pubsub:projects/{p}/topics/{t}", each optionally followed by
// "?project=a,b&type=prefix1,prefix2". A bad entry is an InvalidArgument
// naming the entry and what is wrong; nothing is half-applied.
func ParseRoutes(entries []string) ([]Route, error) {
	var v errs.Validator
	if len(entries) > MaxRoutes {
		v.Add("-egress", "%d entries, over the limit of %d", len(entries), MaxRoutes)
		return nil, v.Err()
	}
	out := make([]Route, 0, len(entries))
	seen := map[string]string{}
	for i, e := range entries {
		field := fmt.Sprintf("-egress[%d] %q", i, clip(e))
		r, err := parseRoute(e)
		if err != nil {
			v.Add(field, "%v", err)
			continue
		}
		if prev, dup := seen[r.Name()]; dup {
			v.Add(field, "sends to %s as %q does: give one entry per destination", r.Name(), clip(prev))
			continue
		}
		seen[r.Name()] = e
		out = append(out, r)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func parseRoute(e string) (Route, error) {
	if len(e) > MaxEntryLen {
		return Route{}, fmt.Errorf("%d bytes, over the limit of %d", len(e), MaxEntryLen)
	}
	dest, query, hasQuery := strings.Cut(e, "?")
	scheme, target, ok := strings.Cut(dest, ":")
	r := Route{Entry: e, Scheme: scheme, Target: target}
	switch {
	case !ok:
		return r, fmt.Errorf("want kafka:{topic} or pubsub:projects/{p}/topics/{t}")
	case scheme == "kafka":
		if !kafkaTopic.MatchString(target) {
			return r, fmt.Errorf("Kafka topic %q: want 1 to 249 of a-z A-Z 0-9 . _ -", clip(target))
		}
	case scheme == "pubsub":
		if !pubsubTopic.MatchString(target) {
			return r, fmt.Errorf("Pub/Sub topic %q: want projects/{project}/topics/{topic}, the topic id 3 to 255 characters starting with a letter", clip(target))
		}
	default:
		return r, fmt.Errorf("unknown destination %q: want kafka: or pubsub:", clip(scheme))
	}
	if !hasQuery {
		return r, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return r, fmt.Errorf("filter %q: %v", clip(query), err)
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return r, fmt.Errorf("filter %s given %d times: give it once, values separated by commas", k, len(vs))
		}
		list := strings.Split(vs[0], ",")
		switch k {
		case "project":
			if len(list) > MaxRouteProjects {
				return r, fmt.Errorf("project filter has %d projects, over the limit of %d", len(list), MaxRouteProjects)
			}
			for _, p := range list {
				if !resname.ValidID(p) {
					return r, fmt.Errorf("project filter: %q is not a project id (%s)", clip(p), resname.IDPattern)
				}
			}
			r.Projects = list
		case "type":
			if len(list) > MaxRouteTypes {
				return r, fmt.Errorf("type filter has %d prefixes, over the limit of %d", len(list), MaxRouteTypes)
			}
			for _, p := range list {
				if !typePrefix.MatchString(p) {
					return r, fmt.Errorf("type filter: %q is not a type prefix (letters, digits, . and _), e.g. loom.public.v1.JobStateChanged", clip(p))
				}
			}
			r.Types = list
		default:
			return r, fmt.Errorf("unknown filter %q: want project= or type=", clip(k))
		}
	}
	return r, nil
}
