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
func Refusal(r *http.Request) string { return Names{}.Refusal(r) }

// Names are the host names a port admits in Host besides IP addresses and
// "localhost". A DNS-rebinding page is served from a name whose answers
// its author controls, which is the Host its requests carry; a name
// admitted here must be one that only this machine's own resolver
// answers, never the public DNS. The zero Names admits none (Refusal).
type Names struct {
	// OneLabel admits a name of one label, without a dot ("scheduler"):
	// /etc/hosts, a container network's DNS or a search domain resolve
	// those, and a page cannot be served from one without control of that
	// resolver.
	OneLabel bool
	// Exact admits these names, compared case-insensitively (this
	// machine's host name, the name a port is bound to); "" is ignored.
	Exact []string
}

// Refusal is the package's Refusal with the Host rule widened to n.
func (n Names) Refusal(r *http.Request) string {
	host := r.Host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	host = strings.Trim(host, "[]")
	if net.ParseIP(host) == nil && !strings.EqualFold(host, "localhost") && !n.admits(host) {
		return fmt.Sprintf("Host %q is not %s", termtext.Clean(r.Host, 100), n.said())
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

// admits reports whether n admits the name host.
func (n Names) admits(host string) bool {
	if host == "" {
		return false
	}
	if n.OneLabel && !strings.Contains(host, ".") {
		return true
	}
	for _, e := range n.Exact {
		if e != "" && strings.EqualFold(host, e) {
			return true
		}
	}
	return false
}

// said lists what n admits, for a refusal.
func (n Names) said() string {
	s := "an IP address"
	if n.OneLabel {
		s += ", a name of one label"
	}
	for _, e := range n.Exact {
		if e != "" {
			s += fmt.Sprintf(", %q", termtext.Clean(e, 100))
		}
	}
	return s + " or localhost"
}
