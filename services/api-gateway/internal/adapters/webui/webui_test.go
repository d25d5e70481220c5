package webui

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// The page must work under its own CSP: no inline script, style or event
// handler, and nothing loaded from elsewhere. A violation would not fail
// loudly; the browser would just block it.
func TestPageCompliesWithItsCSP(t *testing.T) {
	b, err := static.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode {
			continue
		}
		if n.Data == "style" {
			t.Error("inline <style> element")
		}
		if n.Data == "script" && (n.FirstChild != nil) {
			t.Error("inline <script> content")
		}
		for _, a := range n.Attr {
			switch {
			case a.Key == "style":
				t.Errorf("<%s style=...>: inline styles are blocked", n.Data)
			case strings.HasPrefix(a.Key, "on"):
				t.Errorf("<%s %s=...>: inline handlers are blocked", n.Data, a.Key)
			case (a.Key == "src" || a.Key == "href") && (strings.Contains(a.Val, ":") || strings.HasPrefix(a.Val, "//")):
				t.Errorf("<%s %s=%q>: only same-origin relative resources are allowed", n.Data, a.Key, a.Val)
			}
		}
	}
}

// Data reaches the DOM only as text: the script never parses strings as
// HTML or code.
func TestScriptNeverInterpretsData(t *testing.T) {
	b, err := static.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	banned := regexp.MustCompile(`\b(innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval|Function\(|setAttribute\(\s*'style')`)
	if m := banned.FindAllString(string(b), -1); len(m) > 0 {
		t.Errorf("app.js uses %v", m)
	}
	// The token goes to sessionStorage only, never to localStorage or a cookie.
	if strings.Contains(string(b), "localStorage") || strings.Contains(string(b), "document.cookie") {
		t.Error("app.js persists beyond the tab (localStorage or cookies)")
	}
}

func TestHandler(t *testing.T) {
	h := Handler()
	files, err := fs.Glob(static, "static/*")
	if err != nil || len(files) < 4 {
		t.Fatalf("embedded files: %v, %v", files, err)
	}
	tests := []struct {
		method, path string
		status       int
	}{
		{"GET", "/ui/", 200},
		{"GET", "/ui/app.js", 200},
		{"HEAD", "/ui/style.css", 200},
		{"GET", "/ui/missing", 404},
		{"GET", "/ui/../webui.go", 404},
		{"DELETE", "/ui/", 405},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if rec.Code != tt.status {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, rec.Code, tt.status)
		}
		if rec.Header().Get("Content-Security-Policy") != ContentSecurityPolicy {
			t.Errorf("%s %s: no CSP", tt.method, tt.path)
		}
	}
	rec := httptest.NewRecorder()
	Redirect().ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusFound || rec.Header().Get("Location") != Prefix {
		t.Errorf("redirect = %d %q", rec.Code, rec.Header().Get("Location"))
	}
}

// Every request, writes included, goes through one fetch call that sends
// the token in the Authorization header, to a URL relative to the page
// (its own origin), with no cookies: nothing ambient a forged cross-site
// request could use, and the token never in a URL.
func TestRequestsCarryOnlyTheBearerHeader(t *testing.T) {
	b, err := static.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	if n := strings.Count(js, "fetch("); n != 1 {
		t.Errorf("app.js calls fetch %d times, want once (in call)", n)
	}
	for _, want := range []string{"credentials: 'omit'", "new URL('../api/v1/' + path, location.href)", "Authorization: 'Bearer ' + token()", "headers['If-Match']"} {
		if !strings.Contains(js, want) {
			t.Errorf("app.js lacks %q", want)
		}
	}
	if regexp.MustCompile(`[?&]token=|credentials: '(include|same-origin)'|XMLHttpRequest|\.sendBeacon`).MatchString(js) {
		t.Error("app.js sends the token in a URL, with cookies, or outside call")
	}
}
