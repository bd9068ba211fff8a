package ports

import (
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/termtext"
)

// queryRoute is what one REST route (a method and path template of a
// google.api.http option) leaves to its query: the fields of its request
// message that neither the path nor the body sets.
type queryRoute struct {
	in   protoreflect.MessageDescriptor
	body string     // the body's field; "*" the whole request; "" none
	path [][]string // the path variables' field paths
}

// queryRoutes are the REST routes of services by "METHOD pattern", the
// pattern written as grpc-gateway's runtime.Pattern prints it (a bare
// {var} is {var=*}), read from the services' google.api.http options: a
// route added to a service is in it without anyone adding it.
func queryRoutes(services []grpc.ServiceDesc) (map[string]queryRoute, error) {
	out := map[string]queryRoute{}
	for _, sd := range services {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(sd.ServiceName))
		if err != nil {
			return nil, err
		}
		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			md := methods.Get(i)
			rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
			if rule == nil {
				continue
			}
			for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
				verb, tmpl := httpRule(r)
				if verb == "" {
					continue
				}
				rt := queryRoute{in: md.Input(), body: r.GetBody()}
				for _, v := range templateVar.FindAllStringSubmatch(tmpl, -1) {
					rt.path = append(rt.path, strings.Split(v[1], "."))
				}
				out[verb+" "+templateVar.ReplaceAllStringFunc(tmpl, func(v string) string {
					if m := templateVar.FindStringSubmatch(v); m[2] == "" {
						return "{" + m[1] + "=*}"
					}
					return v
				})] = rt
			}
		}
	}
	return out, nil
}

// templateVar is a variable of a path template: {field.path=segments} or {field.path}.
var templateVar = regexp.MustCompile(`\{([^}=]+)(?:=([^}]*))?\}`)

// httpRule is r's method and path template ("" for a custom one).
func httpRule(r *annotations.HttpRule) (verb, tmpl string) {
	switch p := r.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		return http.MethodGet, p.Get
	case *annotations.HttpRule_Post:
		return http.MethodPost, p.Post
	case *annotations.HttpRule_Patch:
		return http.MethodPatch, p.Patch
	case *annotations.HttpRule_Put:
		return http.MethodPut, p.Put
	case *annotations.HttpRule_Delete:
		return http.MethodDelete, p.Delete
	}
	return "", ""
}

// strictQuery is the muxes' middleware that holds a query to what a body
// is: a parameter that names no field of the route's request message (by
// its proto or JSON name, dotted into nested messages, "map[key]" for a
// map's entry), or names one the path or the body sets, is
// InvalidArgument naming it, as an unknown field of a JSON body is.
// grpc-gateway's own query parser drops such a parameter, so that a
// misspelt filter ("?state=RUNNING" for "states") silently listed
// everything; and where the path and body set every field (GetCluster,
// any body "*") it reads no query at all, so that nothing was refused.
// routes are queryRoutes' table; mux is set once the mux exists (its
// error handler writes the refusal, as it writes the RPC's errors).
type strictQuery struct {
	routes map[string]queryRoute
	mux    *runtime.ServeMux
}

func (q *strictQuery) middleware(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		if r.URL.RawQuery != "" {
			if err := q.check(r); err != nil {
				_, out := runtime.MarshalerForRequest(q.mux, r)
				runtime.HTTPError(r.Context(), q.mux, out, w, r, errs.ToStatus(err))
				return
			}
		}
		next(w, r, params)
	}
}

// check checks r's query parameters against its route.
func (q *strictQuery) check(r *http.Request) error {
	values, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return errs.Invalid("query", "%s", termtext.Clean(err.Error(), 200))
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first refused one named is always the same
	pat, _ := runtime.HTTPPattern(r.Context())
	rt, ok := q.routes[r.Method+" "+pat.String()]
	for _, key := range keys {
		name := termtext.Clean(key, 100)
		switch {
		case !ok:
			// A route the table lacks takes no query rather than any.
			return errs.Invalid(name, "query parameter: %s %s takes none", r.Method, pat.String())
		case rt.body == "*":
			return errs.Invalid(name, "query parameter: %s takes every field in the request body, none in the query", rt.in.Name())
		}
		path, err := queryField(rt.in, key)
		if err != nil {
			return err
		}
		for _, p := range rt.path {
			if overlaps(path, p) {
				return errs.Invalid(name, "query parameter: the path sets %s on this route", strings.Join(p, "."))
			}
		}
		if rt.body != "" && overlaps(path, strings.Split(rt.body, ".")) {
			return errs.Invalid(name, "query parameter: the request body sets %s on this route", rt.body)
		}
	}
	return nil
}

// overlaps reports whether one field path is a prefix of the other: the
// same field, or a field in the other's message.
func overlaps(a, b []string) bool {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// mapKeyParam is a map entry's parameter, "field[key]".
var mapKeyParam = regexp.MustCompile(`^(.*)\[(.*)\]$`)

// queryField checks that the query parameter key names a field of md and
// returns the fields' proto names along its path.
func queryField(md protoreflect.MessageDescriptor, key string) ([]string, error) {
	path := key
	if m := mapKeyParam.FindStringSubmatch(key); m != nil {
		path = m[1]
	}
	names := strings.Split(path, ".")
	out := make([]string, 0, len(names))
	for i, n := range names {
		fields := md.Fields()
		fd := fields.ByTextName(n)
		if fd == nil {
			fd = fields.ByJSONName(n)
		}
		if fd == nil {
			known := make([]string, 0, fields.Len())
			for j := range fields.Len() {
				known = append(known, string(fields.Get(j).Name()))
			}
			return nil, errs.Invalid(termtext.Clean(key, 100), "query parameter: %s has no field %q (its fields: %s)",
				md.Name(), termtext.Clean(n, 100), strings.Join(known, ", "))
		}
		out = append(out, string(fd.Name()))
		if i == len(names)-1 {
			return out, nil
		}
		if fd.Message() == nil || fd.IsList() || fd.IsMap() {
			return nil, errs.Invalid(termtext.Clean(key, 100), "query parameter: %s.%s is not a message, so it has no field %q",
				md.Name(), fd.Name(), termtext.Clean(names[i+1], 100))
		}
		md = fd.Message()
	}
	return out, nil
}
