// Package ui serves reviewledger's browser UI: the manual queue for
// moderators and the SLO dashboard for operators and auditors (docs/contracts.md §2,
// GET /). It is one embedded page with its script, style sheet and icon; no
// build step and no external resources, so it works on machines without
// internet access.
//
// The page talks only to the public HTTP API of the server that serves it,
// with the bearer token the user pastes at sign-in. The handler itself needs
// no authentication: it serves static files and nothing else.
//
// Mount Handler for GET and HEAD on "/" and on every path under Prefix, with
// the request path left intact:
//
//	h := echo.WrapHandler(ui.Handler())
//	e.GET("/", h)
//	e.HEAD("/", h)
//	e.GET(ui.Prefix+"*", h)
//	e.HEAD(ui.Prefix+"*", h)
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

// Prefix is the path under which the page's assets are served.
const Prefix = "/ui/"

// ContentSecurityPolicy is sent with every response of Handler. The page has
// no inline script, style or handler attribute, and loads nothing from other
// origins.
const ContentSecurityPolicy = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"

//go:embed static
var static embed.FS

const indexFile = "index.html"

// asset is one embedded file, ready to serve.
type asset struct {
	name        string
	body        []byte
	contentType string
	etag        string
}

type handler struct {
	assets map[string]asset // by name relative to static/
}

// assets is loaded once, when the first handler is made (not at package
// initialisation: every command of the binary imports this package, and
// only serve shows the page): the files are fixed at compile time, so
// failing to read them is a build defect, reported by a panic.
var assets = sync.OnceValue(func() map[string]asset { return mustLoad(static) })

// Handler returns the handler serving the page at "/" and its assets under
// Prefix. Other paths answer 404, other methods 405. Every response carries
// ContentSecurityPolicy and related security headers; files carry a strong
// ETag and are revalidated on each load (Cache-Control: no-cache), so a new
// release is picked up at once.
func Handler() http.Handler { return &handler{assets: assets()} }

func mustLoad(fsys embed.FS) map[string]asset {
	m, err := load(fsys)
	if err != nil {
		panic(fmt.Sprintf("ui: load embedded assets: %v", err))
	}
	return m
}

func load(fsys embed.FS) (map[string]asset, error) {
	root, err := fs.Sub(fsys, "static")
	if err != nil {
		return nil, err
	}
	m := make(map[string]asset)
	err = fs.WalkDir(root, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(root, name)
		if err != nil {
			return err
		}
		ctype := mime.TypeByExtension(path.Ext(name))
		if ctype == "" {
			ctype = http.DetectContentType(body)
		}
		sum := sha256.Sum256(body)
		m[name] = asset{
			name:        name,
			body:        body,
			contentType: ctype,
			etag:        `"` + base64.RawURLEncoding.EncodeToString(sum[:18]) + `"`,
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if _, ok := m[indexFile]; !ok {
		return nil, fmt.Errorf("%s missing", indexFile)
	}
	return m, nil
}

// lookup maps a request path to an asset: "/" to the page, Prefix+name to
// an asset. Directories and unknown names are not found.
func (h *handler) lookup(p string) (asset, bool) {
	if p == "/" {
		return h.assets[indexFile], true
	}
	name, ok := strings.CutPrefix(p, Prefix)
	if !ok || name == "" || name == indexFile {
		return asset{}, false
	}
	a, ok := h.assets[name]
	return a, ok
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w.Header())
	a, ok := h.lookup(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", a.etag)
	http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.body))
}

func setSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}
