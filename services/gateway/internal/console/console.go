// Package console is Loom's web console: a single-page application of plain
// HTML, CSS and JavaScript modules embedded in the gateway binary and served
// on its REST port at "/", so that `loom up` and `make demo` need no Node
// and no extra step. The pages call the same REST API as everyone else, with
// the same credential (Authorization: Bearer), from the browser.
//
// Every console response carries a strict Content-Security-Policy (CSP): only
// this origin's scripts, styles and API, no inline script or style, no
// frames, no plugins. The pages render what the API returns as text (never
// as HTML), so a job named "<script>" is shown, not run.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// CSP is the Content-Security-Policy of every console response. connect-src
// 'self' lets the pages call the REST API on the same origin; nothing else
// may be loaded from anywhere.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Prefix is where the console's assets live (scripts, styles, vendored
// libraries); the page itself is "/".
const Prefix = "/ui/"

// Files is the console's file tree (index.html, app/, vendor/), for tests
// and for listing what is embedded.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	return sub
}

// IsConsolePath reports whether the console serves path: "/", "/index.html"
// and everything under Prefix. Every other path is the API's.
func IsConsolePath(p string) bool {
	return p == "/" || p == "/index.html" || strings.HasPrefix(p, Prefix)
}

// Mount returns a handler that serves the console on its paths
// (IsConsolePath) and passes every other request to api unchanged.
func Mount(api http.Handler) http.Handler {
	ui := Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsConsolePath(r.URL.Path) {
			ui.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// Handler serves the console's files: "/" and "/index.html" are the page,
// Prefix+NAME the file NAME. Only GET and HEAD are answered (405 otherwise);
// a file that is not embedded is 404. Every answer carries CSP and headers
// that keep the page out of frames and stop content sniffing.
func Handler() http.Handler {
	files := http.FileServerFS(Files())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := "index.html"
		if strings.HasPrefix(r.URL.Path, Prefix) {
			name = strings.TrimPrefix(path.Clean(r.URL.Path), Prefix)
		}
		// Only files: no directory listings, nothing outside the tree
		// (fs.Stat refuses ".." and rooted names).
		if fi, err := fs.Stat(Files(), name); err != nil || fi.IsDir() {
			http.NotFound(w, r)
			return
		}
		// The page is small and changes with the binary: browsers
		// revalidate rather than keep a stale copy after an upgrade.
		h.Set("Cache-Control", "no-cache")
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		if name == "index.html" {
			// FileServer redirects /index.html to ./; serve the file itself.
			serveIndex(w, r2)
			return
		}
		files.ServeHTTP(w, r2)
	})
}

// serveIndex writes index.html.
func serveIndex(w http.ResponseWriter, r *http.Request) {
	b, err := fs.ReadFile(Files(), "index.html")
	if err != nil {
		http.Error(w, "console: index.html is not embedded", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b)
}
