package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/nodesmith/nodesmith/libs/messaging"
)

// The page's files are served without a token, with a strict CSP; the
// API behind them still requires one, also for unknown paths.
func TestStatusPageServing(t *testing.T) {
	gw := startGateway(t, nil)
	base := "http://" + gw.addrs.REST
	noRedirect := &http.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	tests := []struct {
		method, path string
		status       int
		contentType  string // prefix; empty: not checked
		location     string
		page         bool // a page response: security headers expected
	}{
		{"GET", "/", http.StatusFound, "", "/ui/", false},
		{"GET", "/ui", http.StatusMovedPermanently, "", "/ui/", false},
		{"GET", "/ui/", http.StatusOK, "text/html", "", true},
		{"HEAD", "/ui/", http.StatusOK, "text/html", "", true},
		{"GET", "/ui/app.js", http.StatusOK, "text/javascript", "", true},
		{"GET", "/ui/style.css", http.StatusOK, "text/css", "", true},
		{"GET", "/ui/favicon.svg", http.StatusOK, "image/svg+xml", "", true},
		{"GET", "/ui/index.html", http.StatusMovedPermanently, "", "./", true},
		{"GET", "/ui/nope.js", http.StatusNotFound, "", "", true},
		{"GET", "/ui/static/", http.StatusNotFound, "", "", true},
		{"POST", "/ui/", http.StatusMethodNotAllowed, "", "", true},
		{"POST", "/", http.StatusUnauthorized, "application/json", "", false},
		{"GET", "/favicon.ico", http.StatusUnauthorized, "application/json", "", false},
		{"GET", "/api/v1/status", http.StatusUnauthorized, "application/json", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, base+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			if ct := resp.Header.Get("Content-Type"); tt.contentType != "" && !strings.HasPrefix(ct, tt.contentType) {
				t.Errorf("Content-Type = %q, want %s", ct, tt.contentType)
			}
			if loc := resp.Header.Get("Location"); loc != tt.location {
				t.Errorf("Location = %q, want %q", loc, tt.location)
			}
			if !tt.page {
				return
			}
			csp := resp.Header.Get("Content-Security-Policy")
			for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
				if !strings.Contains(csp, want) {
					t.Errorf("CSP %q lacks %q", csp, want)
				}
			}
			if strings.Contains(csp, "unsafe-") {
				t.Errorf("CSP allows unsafe sources: %q", csp)
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
				t.Errorf("missing security headers: %v", resp.Header)
			}
		})
	}
}

// The status page renders the gateway's state in headless Chromium: groups
// with their bounds and counts per state, live instances, the failing one's
// error, and recent transitions. The token arrives in the URL fragment.
func TestStatusPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts headless Chromium; skipped with -short")
	}
	browser := findChromium(t)
	gw := startGateway(t, nil)
	until := seedOfferings(t, gw)
	page := "http://" + gw.addrs.REST + "/ui/"

	t.Run("with a token", func(t *testing.T) {
		before := statusRequests(t, gw)
		dom := chromiumDOM(t, browser, page+"#token="+readOnlyToken)
		// The page refreshes itself: within the virtual time budget it
		// reads the API more than once.
		n := statusRequests(t, gw) - before
		if n < 2 {
			t.Errorf("the page read /api/v1/status %v times, want repeated refreshes", n)
		}
		t.Logf("the page refreshed %v times", n)
		doc := parseDOM(t, dom)
		if st := attr(find(doc, "body", "", ""), "data-state"); st != "loaded" {
			t.Fatalf("page state = %q, want loaded; DOM:\n%s", st, dom)
		}
		if strings.Contains(dom, readOnlyToken) {
			t.Error("the token appears in the DOM")
		}
		if _, hidden := attrOK(find(doc, "section", "id", "orphans"), "hidden"); !hidden {
			t.Error("an orphans section is shown although lifecycle holds none back")
		}

		// Groups: bounds, target, template and counts per state.
		wantGroups := map[string][]string{
			//       min  max   target template                          PENDING CREATING CREATED JOINED RUNNING PENDING_DEL DELETING DELETED failed
			"web":  {"1", "10", "3", "std · S5.LARGE8 · ap-guangzhou-3", "0", "1", "0", "0", "2", "0", "0", "1", "0"},
			"gpu":  {"0", "4", "1", "gn7 · GN7.2XLARGE32 · ap-guangzhou-4", "0", "1", "0", "0", "0", "0", "0", "0", "1"},
			"bare": {"0", "2", "0", "", "0", "0", "0", "0", "0", "0", "0", "0", "0"},
		}
		for id, want := range wantGroups {
			row := find(doc, "tr", "data-group", id)
			if row == nil {
				t.Errorf("group %s not shown", id)
				continue
			}
			if got := cells(row); !slices.Equal(got, append([]string{id}, want...)) {
				t.Errorf("group %s row = %q, want %q", id, got, append([]string{id}, want...))
			}
		}

		// A group's offerings, under its row: in order, the marked one
		// unavailable until when (local time; the title has the
		// timestamp) and why. Groups without offerings have no such row.
		offerings := find(doc, "tr", "data-offerings-of", "spot")
		if offerings == nil {
			t.Fatalf("the spot group's offerings are not shown; DOM:\n%s", dom)
		}
		wantOfferings := [][]string{
			{"ap-guangzhou-3", "", "S5.LARGE8", "spot", "unavailable until " + until.Local().Format("15:04:05") + " (" + soldOut + ")"},
			{"ap-guangzhou-4", "subnet-4", "S5.LARGE8", "spot", "available"},
			{"ap-guangzhou-6", "", "S5.LARGE8", "on-demand", "available"},
		}
		rows := findAll(offerings, "tr", "data-offering", "")
		if len(rows) != len(wantOfferings) {
			t.Errorf("%d offering rows, want %d", len(rows), len(wantOfferings))
		}
		for i, row := range rows {
			if i < len(wantOfferings) && !slices.Equal(cells(row), wantOfferings[i]) {
				t.Errorf("offering row %d = %q, want %q", i, cells(row), wantOfferings[i])
			}
		}
		if len(rows) > 0 {
			if title := attr(findAll(rows[0], "td", "", "")[4], "title"); !strings.HasPrefix(title, until.Format(time.RFC3339)) || !strings.Contains(title, "sold out in ap-guangzhou-3") {
				t.Errorf("unavailable cell title = %q", title)
			}
		}
		if n := len(findAll(doc, "tr", "data-offerings-of", "")); n != 1 {
			t.Errorf("%d offerings rows, want the spot group's only", n)
		}

		// Live instances with state and age; the DELETED one is not listed.
		instances := find(doc, "table", "id", "instances")
		for id, state := range map[string]string{"i-web-1": "RUNNING", "i-web-2": "RUNNING", "i-web-3": "CREATING", "i-gpu-1": "CREATING"} {
			row := find(instances, "tr", "data-instance", id)
			if row == nil {
				t.Errorf("instance %s not listed", id)
				continue
			}
			if c := cells(row); len(c) != 11 || c[2] != state {
				t.Errorf("instance %s row = %q, want state %s", id, c, state)
			}
		}
		if c := cells(find(instances, "tr", "data-instance", "i-web-1")); len(c) == 11 && (c[3] != "2h ago" || c[5] != "10.0.0.11") {
			t.Errorf("i-web-1 age/node = %q, %q; want 2h ago, 10.0.0.11", c[3], c[5])
		}
		// Where each VM was created; nothing for one created before that
		// was recorded.
		for id, want := range map[string][]string{"i-web-1": {"ap-guangzhou-3", "S5.LARGE8", "on-demand"}, "i-web-2": {"", "", ""}} {
			if c := cells(find(instances, "tr", "data-instance", id)); len(c) != 11 || !slices.Equal(c[6:9], want) {
				t.Errorf("instance %s row = %q, want zone, type, capacity %q", id, c, want)
			}
		}
		if find(instances, "tr", "data-instance", "i-web-0") != nil {
			t.Error("a DELETED instance is listed among live instances")
		}

		// The failing instance's error.
		errRow := find(find(doc, "table", "id", "errors"), "tr", "data-instance", "i-gpu-1")
		if c := cells(errRow); len(c) != 6 || c[3] != "ResourceInsufficient.SpecifiedInstanceType" || c[4] != "sold out in ap-guangzhou-4" {
			t.Errorf("error row = %q", c)
		}

		// Recent transitions, newest first.
		var reasons []string
		for _, row := range findAll(find(doc, "table", "id", "transitions"), "tr", "data-instance", "") {
			c := cells(row)
			reasons = append(reasons, c[1]+": "+c[5])
		}
		want := []string{"i-gpu-1: dispatched in batch b-2", "i-web-1: node 10.0.0.11 is Ready", "i-web-1: dispatched in batch b-1"}
		if !slices.Equal(reasons, want) {
			t.Errorf("transitions = %q, want %q", reasons, want)
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		// NODESMITH_SCREENSHOT_DIR keeps the screenshot for a person to see.
		dir := os.Getenv("NODESMITH_SCREENSHOT_DIR")
		if dir == "" {
			dir = t.TempDir()
		}
		shot := filepath.Join(dir, "status.png")
		runChromium(t, browser, "--screenshot="+shot, "--window-size=1280,900", page+"#token="+readOnlyToken)
		b, err := os.ReadFile(shot)
		if err != nil {
			t.Fatalf("no screenshot: %v", err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("screenshot is not a PNG: %v", err)
		}
		if sz := img.Bounds().Size(); sz.X != 1280 || sz.Y != 900 {
			t.Errorf("screenshot is %v, want 1280x900", sz)
		}
		t.Logf("screenshot: %s (%d bytes)", shot, len(b))
	})

	t.Run("without a token", func(t *testing.T) {
		doc := parseDOM(t, chromiumDOM(t, browser, page))
		if st := attr(find(doc, "body", "", ""), "data-state"); st != "login" {
			t.Fatalf("page state = %q, want login", st)
		}
		if _, hidden := attrOK(find(doc, "section", "id", "login"), "hidden"); hidden {
			t.Error("the token form is hidden")
		}
		if _, hidden := attrOK(find(doc, "div", "id", "content"), "hidden"); !hidden {
			t.Error("content shown without a token")
		}
	})

	t.Run("with a wrong token", func(t *testing.T) {
		doc := parseDOM(t, chromiumDOM(t, browser, page+"#token=not-a-valid-token-at-all"))
		if st := attr(find(doc, "body", "", ""), "data-state"); st != "login" {
			t.Fatalf("page state = %q, want login", st)
		}
		if msg := text(find(doc, "p", "id", "login-error")); !strings.Contains(msg, "not accepted") {
			t.Errorf("login error = %q", msg)
		}
		if rows := findAll(doc, "tr", "data-group", ""); len(rows) != 0 {
			t.Errorf("%d group rows shown with a wrong token", len(rows))
		}
	})
}

// After a start from empty state lifecycle holds orphan VMs back and
// stores the hold beside the groups: GET /api/v1/status and the status
// page show the held VMs and the admin call that releases them.
func TestStatusShowsHeldOrphans(t *testing.T) {
	gw := startGateway(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := gw.env.JS.KeyValue(ctx, messaging.BucketGroups)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	b, _ := messaging.MarshalOrphanHold(messaging.OrphanHold{
		Since: since, Until: since.Add(24 * time.Hour), Held: map[string]int{"empty_start": 3},
		Waiting: []string{"ins-held1", "ins-held2", "ins-held3"}, UpdatedAt: time.Now(),
	})
	if _, err := kv.Put(ctx, messaging.KeyOrphanHold, b); err != nil {
		t.Fatal(err)
	}
	var st struct {
		Groups  []struct{ ID string } `json:"groups"`
		Orphans *struct {
			Holding   bool           `json:"holding"`
			HoldSince string         `json:"holdSince"`
			Held      map[string]int `json:"held"`
			Waiting   []string       `json:"waiting"`
			Release   string         `json:"release"`
		} `json:"orphans"`
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		req, _ := http.NewRequest("GET", "http://"+gw.addrs.REST+"/api/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+readOnlyToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatalf("status: %v: %s", err, body)
		}
		if st.Orphans != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the status never showed the orphan hold: %s", body)
		}
	}
	o := st.Orphans
	if !o.Holding || o.HoldSince != since.Format(time.RFC3339) || o.Held["empty_start"] != 3 ||
		!slices.Equal(o.Waiting, []string{"ins-held1", "ins-held2", "ins-held3"}) || o.Release != "POST /api/v1/reconciler/release-orphans" {
		t.Errorf("status orphans = %+v", *o)
	}
	for _, g := range st.Groups {
		if strings.HasPrefix(g.ID, "_") {
			t.Errorf("the reserved key is shown as group %q", g.ID)
		}
	}

	if testing.Short() {
		return
	}
	browser := findChromium(t)
	doc := parseDOM(t, chromiumDOM(t, browser, "http://"+gw.addrs.REST+"/ui/#token="+readOnlyToken))
	sec := find(doc, "section", "id", "orphans")
	if sec == nil {
		t.Fatal("no orphans section")
	}
	if _, hidden := attrOK(sec, "hidden"); hidden {
		t.Fatal("the held orphans are not shown")
	}
	var ids []string
	for _, li := range findAll(sec, "li", "", "") {
		ids = append(ids, text(li))
	}
	if !slices.Equal(ids, []string{"ins-held1", "ins-held2", "ins-held3"}) {
		t.Errorf("held VMs shown = %q", ids)
	}
	release := text(find(sec, "pre", "id", "orphans-release"))
	if !strings.Contains(release, "POST /api/v1/reconciler/release-orphans") ||
		!strings.Contains(release, "curl -X POST") || !strings.Contains(release, "http://"+gw.addrs.REST+"/api/v1/reconciler/release-orphans") {
		t.Errorf("release call shown = %q", release)
	}
	if summary := text(find(sec, "p", "id", "orphans-summary")); !strings.Contains(summary, "empty_start 3") {
		t.Errorf("summary = %q", summary)
	}
}

// statusRequests reads the gateway's count of successful GET /api/v1/status.
func statusRequests(t *testing.T, gw *gateway) float64 {
	t.Helper()
	resp, err := http.Get("http://" + gw.addrs.Health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	const series = `nodesmith_gateway_rest_requests_total{method="GET",route="/api/v1/status",status="200"} `
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

// findChromium returns the Chromium binary (Debian package chromium).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("headless Chromium not found: install the Debian package chromium (apt-get install chromium), or run with -short")
	return ""
}

// chromiumFlags are the flags every headless Chromium of these tests
// starts with: no sandbox or GPU, nothing in the background, a fresh
// profile.
func chromiumFlags(t *testing.T) []string {
	return []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(),
	}
}

// runChromium runs headless Chromium on args with a fresh profile and
// returns its standard output. Virtual time lets the page's script run its
// fetches and a few refresh rounds before the DOM is dumped or the
// screenshot taken, without the test sleeping.
func runChromium(t *testing.T, browser string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := append(chromiumFlags(t), "--virtual-time-budget=12000")
	cmd := exec.CommandContext(ctx, browser, append(base, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.Bytes())
	}
	return out
}

func chromiumDOM(t *testing.T, browser, url string) string {
	t.Helper()
	return string(runChromium(t, browser, "--dump-dom", url))
}

func parseDOM(t *testing.T, dom string) *html.Node {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		t.Fatalf("parsing the DOM: %v", err)
	}
	return doc
}

// findAll returns the elements named tag under n that have attribute key
// (with value val, when val is not empty).
func findAll(n *html.Node, tag, key, val string) []*html.Node {
	var out []*html.Node
	if n == nil {
		return nil
	}
	for d := range n.Descendants() {
		if d.Type != html.ElementNode || d.Data != tag {
			continue
		}
		if key == "" {
			out = append(out, d)
			continue
		}
		if v, ok := attrOK(d, key); ok && (val == "" || v == val) {
			out = append(out, d)
		}
	}
	return out
}

func find(n *html.Node, tag, key, val string) *html.Node {
	if all := findAll(n, tag, key, val); len(all) > 0 {
		return all[0]
	}
	return nil
}

func attrOK(n *html.Node, key string) (string, bool) {
	if n == nil {
		return "", false
	}
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func attr(n *html.Node, key string) string {
	v, _ := attrOK(n, key)
	return v
}

func text(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return strings.TrimSpace(b.String())
}

// cells returns the text of a row's cells.
func cells(row *html.Node) []string {
	var out []string
	for _, td := range findAll(row, "td", "", "") {
		out = append(out, text(td))
	}
	return out
}
