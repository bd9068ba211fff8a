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
