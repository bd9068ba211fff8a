package console

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestServesPageAndAssetsWithCSP: the page and every asset come with the
// strict CSP and their content types; the API's paths pass through.
func TestServesPageAndAssetsWithCSP(t *testing.T) {
	t.Parallel()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "api:"+r.URL.Path) })
	srv := httptest.NewServer(Mount(api))
	t.Cleanup(srv.Close)
	for path, ctype := range map[string]string{
		"/":                             "text/html",
		"/index.html":                   "text/html",
		"/ui/app/main.js":               "text/javascript",
		"/ui/app.css":                   "text/css",
		"/ui/vendor/uplot/uPlot.esm.js": "text/javascript",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) || len(body) == 0 {
			t.Errorf("GET %s: %d %q (%d bytes), want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body), ctype)
		}
		if got := resp.Header.Get("Content-Security-Policy"); got != CSP {
			t.Errorf("GET %s: CSP %q, want %q", path, got, CSP)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", path)
		}
	}
	resp, err := http.Get(srv.URL + "/v1/projects/default/jobs")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "api:/v1/projects/default/jobs" || resp.Header.Get("Content-Security-Policy") != "" {
		t.Errorf("API path: %q (CSP %q), want it passed to the API untouched", body, resp.Header.Get("Content-Security-Policy"))
	}
}

// TestRefusesWhatIsNotAFile: directories, paths outside the tree, missing
// files and writes are refused.
func TestRefusesWhatIsNotAFile(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(Handler())
	t.Cleanup(srv.Close)
	for path, want := range map[string]int{
		"/ui/":                  404,
		"/ui/app":               404,
		"/ui/app/":              404,
		"/ui/vendor/":           404,
		"/ui/../console.go":     404,
		"/ui/%2e%2e/console.go": 404,
		"/ui/nothing.js":        404,
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Post(srv.URL+"/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Content-Security-Policy") != CSP {
		t.Errorf("POST /: %d, want 405 with the CSP", resp.StatusCode)
	}
}

// TestNoInlineScriptOrHTMLInjection keeps the console's own files to the
// rules the CSP enforces and the hostile-content rule: no inline script or
// style in the page, no innerHTML/outerHTML/insertAdjacentHTML/eval in
// our modules (data goes into the page as text only).
func TestNoInlineScriptOrHTMLInjection(t *testing.T) {
	t.Parallel()
	idx, err := fs.ReadFile(Files(), "index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range regexp.MustCompile(`(?is)<script[^>]*>`).FindAllString(string(idx), -1) {
		if !strings.Contains(tag, `src="/ui/`) {
			t.Errorf("index.html has an inline script: %s", tag)
		}
	}
	if regexp.MustCompile(`(?i)<style|\sstyle=|\son[a-z]+=`).MatchString(string(idx)) {
		t.Error("index.html has inline style or an inline event handler")
	}
	bad := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function`)
	mods, _ := fs.Glob(Files(), "app/*.js")
	if len(mods) < 5 {
		t.Fatalf("only %d modules embedded: %v", len(mods), mods)
	}
	for _, m := range mods {
		b, _ := fs.ReadFile(Files(), m)
		if loc := bad.FindIndex(b); loc != nil {
			t.Errorf("%s uses %s: render API data with dom.js's h() (text nodes) instead", m, b[loc[0]:loc[1]])
		}
	}
	for _, lib := range []string{"vendor/uplot/LICENSE", "vendor/README.md"} {
		if _, err := fs.Stat(Files(), lib); err != nil {
			t.Errorf("%s: %v (vendored libraries keep their licence and a README)", lib, err)
		}
	}
}
