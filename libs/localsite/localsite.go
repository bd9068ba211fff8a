// Package localsite guards an HTTP port that acts without a credential for
// whoever reaches it on a developer's machine (a gateway with
// authentication off, the Pub/Sub fake's REST publish of `loom up`)
// against the developer's own browser, the one client there that runs
// other sites' code. A web page the developer visits may send a "simple"
// cross-site request (a POST of text/plain, which a JSON decoder reads all
// the same) without asking first, or rebind a name of its own to
// 127.0.0.1 and read the answers. Refusal names what gives such a request
// away.
package localsite

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/loom-ml/loom/libs/termtext"
)

// Refusal says why r must not be served by a port that takes requests
// only from its own machine's clients and pages, or "" when it may be:
//   - a Host that is neither an IP address nor "localhost" (a name an
//     attacker rebound to this machine);
//   - an Origin that is not this host, or a Sec-Fetch-Site other than
//     same-origin or none (another site's page);
//   - a body whose Content-Type is not application/json (a browser sends
//     that cross-site only after a CORS preflight, which such a port never
//     grants), on any method but GET and HEAD.
//
// The reason quotes what the request said, cleaned for a terminal.
func Refusal(r *http.Request) string {
	host := r.Host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	host = strings.Trim(host, "[]")
	if net.ParseIP(host) == nil && !strings.EqualFold(host, "localhost") {
		return fmt.Sprintf("Host %q is not an IP address or localhost", termtext.Clean(r.Host, 100))
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		return fmt.Sprintf("Origin %q is another site", termtext.Clean(o, 100))
	}
	// A browser says where a request comes from even where it sends no
	// Origin (a GET, a form's POST of nothing).
	if f := r.Header.Get("Sec-Fetch-Site"); f != "" && f != "same-origin" && f != "none" {
		return fmt.Sprintf("Sec-Fetch-Site %q: the request comes from another site", termtext.Clean(f, 100))
	}
	if r.ContentLength != 0 && r.Method != http.MethodGet && r.Method != http.MethodHead {
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
			return fmt.Sprintf("a request body must be sent as application/json, not %q", termtext.Clean(r.Header.Get("Content-Type"), 100))
		}
	}
	return ""
}
