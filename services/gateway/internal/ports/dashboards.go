package ports

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/dashboards"
	"github.com/loom-ml/loom/libs/errs"
)

// DashboardsPath is where the dashboards are served: GET DashboardsPath
// lists them, GET DashboardsPath/{service} returns one with its series.
const DashboardsPath = "/v1/dashboards"

// Authenticate authenticates the credential a context carries as incoming
// gRPC metadata: the authenticator's Context (authn.Authenticator.Context).
type Authenticate func(ctx context.Context) (context.Context, error)

// Dashboards serves the dashboards of libs/dashboards as the console reads
// them (docs/observability.md, "Dashboards and alerts"):
//
//	GET /v1/dashboards           {dashboards:[{service, title, panels:[{id, title, unit, kind}]}]}
//	GET /v1/dashboards/{service} {service, title, panels:[{id, title, unit, kind, series:[{legend, points:[[t, v]]}]}]}
//
// Callers authenticate as on the rest of the REST API (Authorization:
// Bearer <token or API key>); without a valid credential the answer is 401,
// and 503 when the credential cannot be checked (the store is unavailable).
// They hold no job, trial or user names, but they show the whole fleet's
// load: users with a role in some project and cluster administrators read
// them (as any Slurm user runs sinfo); a node, a workload, a service and a
// user of no project get 403. s evaluates the panels; nil (no targets)
// gives panels no series.
func Dashboards(s *dashboards.Scraper, authenticate Authenticate) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, codes.Unimplemented, r.Method+" "+r.URL.Path+": only GET is served")
			return
		}
		p, err := authenticated(r, authenticate)
		if err != nil {
			// The one mapping (errs.Code, then grpc-gateway's), as the rest
			// of the API answers: a credential refused is 401, a member
			// store that cannot be read 503, not a 401 that sends the
			// console back to sign-in.
			code := errs.Code(err)
			if code == codes.Unauthenticated {
				w.Header().Set("WWW-Authenticate", `Bearer realm="loom"`)
			}
			writeError(w, runtime.HTTPStatusFromCode(code), code, err.Error())
			return
		}
		if !p.ClusterAdmin && (p.Kind != auth.KindUser || len(p.Roles) == 0) {
			who := "a " + p.Kind.String() + " principal"
			if p.Kind == auth.KindUser {
				who = p.Name + ", a member of no project,"
			}
			writeError(w, http.StatusForbidden, codes.PermissionDenied,
				"the dashboards show the whole fleet: they are for members of a project and cluster administrators, and "+who+" is neither")
			return
		}
		rest := strings.TrimPrefix(r.URL.Path, DashboardsPath)
		switch {
		case rest == "" || rest == "/":
			writeJSON(w, struct {
				Dashboards []dashboards.Summary `json:"dashboards"`
			}{dashboards.Summaries()})
		case strings.Count(rest, "/") == 1:
			svc := rest[1:]
			d, ok := dashboards.Get(svc)
			if !ok {
				if len(svc) > 64 {
					svc = svc[:64] + "..." // the name is echoed, not all of it
				}
				writeError(w, http.StatusNotFound, codes.NotFound,
					fmt.Sprintf("no dashboard %q: GET %s lists them (%s, %s)", svc, DashboardsPath, dashboards.FleetService, strings.Join(dashboards.Services, ", ")))
				return
			}
			writeJSON(w, s.Dashboard(d))
		default:
			writeError(w, http.StatusNotFound, codes.NotFound, r.URL.Path+": no such path; GET "+DashboardsPath+"/{service}")
		}
	})
}

// authenticated checks r's credential as the gRPC API would (the REST API
// passes the Authorization header on as gRPC metadata) and returns its
// principal: a missing, malformed or bad credential is an Unauthenticated
// error.
func authenticated(r *http.Request, authenticate Authenticate) (*auth.Principal, error) {
	md := metadata.MD{}
	for _, v := range r.Header.Values("Authorization") {
		md.Append(auth.MetadataKey, v)
	}
	ctx, err := authenticate(metadata.NewIncomingContext(r.Context(), md))
	if err != nil {
		return nil, err
	}
	p, ok := auth.FromContext(ctx)
	if !ok {
		return nil, fmt.Errorf("%w: send Authorization: Bearer <token or API key> (`loom auth keys create` makes an API key)", errs.Unauthenticated)
	}
	return p, nil
}

// MountDashboards routes DashboardsPath and below to d, everything else
// to next.
func MountDashboards(next, d http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == DashboardsPath || strings.HasPrefix(r.URL.Path, DashboardsPath+"/") {
			d.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}
