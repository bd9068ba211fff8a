package localsite

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRefusal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, method, host, origin, site, ctype, body string
		says                                          string // "" when served
	}{
		{"a client on loopback", "POST", "127.0.0.1:7080", "", "", "application/json", "{}", ""},
		{"localhost and a charset", "POST", "LocalHost:7080", "", "", "application/json; charset=utf-8", "{}", ""},
		{"IPv6 loopback, its own page", "POST", "[::1]:7080", "http://[::1]:7080", "same-origin", "application/json", "{}", ""},
		{"a typed URL", "GET", "127.0.0.1:7080", "", "none", "", "", ""},
		{"a GET of another site's page", "GET", "127.0.0.1:7080", "", "cross-site", "", "", `Sec-Fetch-Site "cross-site"`},
		{"a rebound name", "GET", "rebind.evil.example:7080", "", "", "", "", `Host "rebind.evil.example:7080" is not an IP address or localhost`},
		{"another site's origin", "POST", "127.0.0.1:7080", "https://evil.example", "", "application/json", "{}", `Origin "https://evil.example" is another site`},
		{"another port's origin", "POST", "127.0.0.1:7080", "http://127.0.0.1:3000", "", "application/json", "{}", "is another site"},
		{"a text/plain body", "POST", "127.0.0.1:7080", "", "", "text/plain", "{}", `must be sent as application/json, not "text/plain"`},
		{"a form", "PUT", "127.0.0.1:7080", "", "", "application/x-www-form-urlencoded", "a=b", "must be sent as application/json"},
		{"a body without a type", "POST", "127.0.0.1:7080", "", "", "", "{}", `not ""`},
	} {
		r := httptest.NewRequest(c.method, "/v1/x", strings.NewReader(c.body))
		r.Host = c.host
		for k, v := range map[string]string{"Origin": c.origin, "Sec-Fetch-Site": c.site, "Content-Type": c.ctype} {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		got := Refusal(r)
		if (c.says == "") != (got == "") || !strings.Contains(got, c.says) {
			t.Errorf("%s: Refusal = %q, want %q", c.name, got, c.says)
		}
	}
}

func TestNamesWidenOnlyTheHostRule(t *testing.T) {
	t.Parallel()
	n := Names{OneLabel: true, Exact: []string{"node01.cluster.example", ""}}
	for _, c := range []struct {
		host, site, says string // says: "" when served
	}{
		{"scheduler:9172", "", ""},
		{"NODE01.cluster.example:9176", "", ""},
		{"10.0.0.7:9176", "", ""},
		{"localhost:9176", "", ""},
		{"rebind.evil.example:9176", "", `Host "rebind.evil.example:9176" is not an IP address, a name of one label, "node01.cluster.example" or localhost`},
		{"node01.cluster.example.evil.example:9176", "", "is not an IP address"},
		{":9176", "", "is not an IP address"},
		{"scheduler:9172", "cross-site", `Sec-Fetch-Site "cross-site"`},
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		r.Host = c.host
		if c.site != "" {
			r.Header.Set("Sec-Fetch-Site", c.site)
		}
		got := n.Refusal(r)
		if (c.says == "") != (got == "") || !strings.Contains(got, c.says) {
			t.Errorf("Host %q: Refusal = %q, want %q", c.host, got, c.says)
		}
	}
	// The zero Names is Refusal: a one-label name is not admitted there.
	r := httptest.NewRequest("GET", "/v1/x", nil)
	r.Host = "scheduler:7080"
	if got := Refusal(r); !strings.Contains(got, `is not an IP address or localhost`) {
		t.Errorf("Refusal of a one-label name = %q, want the Host refused", got)
	}
}
