package service_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/logging/logtest"
)

// A minimal Chrome DevTools Protocol client over --remote-debugging-pipe
// (requests on fd 3, answers and events on fd 4, each a JSON message ended
// by a NUL byte), for the status page tests that click, type and confirm
// like an operator. The dump-DOM runs in statuspage_test.go cannot
// interact; a CDP library (chromedp and its generated protocol package)
// would be a large dependency for the four commands used here:
// Target.createTarget, Target.attachToTarget, Runtime.enable and
// Runtime.evaluate.

// browserSession is one headless Chromium driven over the pipe.
type browserSession struct {
	t   *testing.T
	cmd *exec.Cmd
	out *os.File // to Chromium

	mu         sync.Mutex
	next       int
	pending    map[int]chan cdpMessage
	exceptions []string
	loaded     map[string]chan struct{} // per session: Page.loadEventFired
	readErr    error
	closed     chan struct{} // closed when the reader stops
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// startBrowser starts headless Chromium with a fresh profile; it is
// stopped when the test ends.
func startBrowser(t *testing.T, browser string) *browserSession {
	t.Helper()
	toChrome, out, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	in, fromChrome, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(browser, append(chromiumFlags(t),
		"--disable-renderer-backgrounding", "--disable-background-timer-throttling",
		"--remote-debugging-pipe", "about:blank")...)
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome} // fd 3 and fd 4
	stderr := &logtest.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	_ = toChrome.Close()
	_ = fromChrome.Close()
	b := &browserSession{t: t, cmd: cmd, out: out, pending: map[int]chan cdpMessage{}, loaded: map[string]chan struct{}{}, closed: make(chan struct{})}
	go b.read(in)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = b.send(ctx, "", "Browser.close", nil)
		cancel()
		_ = out.Close()
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = in.Close()
		if t.Failed() {
			var keep []string
			for _, line := range strings.Split(stderr.String(), "\n") {
				if !strings.Contains(line, "dbus") {
					keep = append(keep, line)
				}
			}
			t.Logf("chromium stderr (tail):\n%s", tail(strings.Join(keep, "\n"), 4000))
		}
	})
	return b
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (b *browserSession) read(in io.Reader) {
	defer close(b.closed)
	r := bufio.NewReaderSize(in, 1<<20)
	for {
		raw, err := r.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			b.readErr = err
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if err := json.Unmarshal(raw[:len(raw)-1], &m); err != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch, ok := b.pending[m.ID]; ok {
				delete(b.pending, m.ID)
				ch <- m
			}
		} else if m.Method == "Runtime.exceptionThrown" {
			b.exceptions = append(b.exceptions, string(m.Params))
		} else if ch, ok := b.loaded[m.SessionID]; ok && m.Method == "Page.loadEventFired" {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		b.mu.Unlock()
	}
}

// send issues one command (on a page session if session is set) and
// returns its result.
func (b *browserSession) send(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan cdpMessage, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	if params == nil {
		p = []byte("{}")
	}
	msg, err := json.Marshal(cdpMessage{ID: id, Method: method, Params: p, SessionID: session})
	if err != nil {
		return nil, err
	}
	if _, err := b.out.Write(append(msg, 0)); err != nil {
		return nil, fmt.Errorf("%s: writing to chromium: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return nil, fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		return m.Result, nil
	case <-b.closed:
		b.mu.Lock()
		err := b.readErr
		b.mu.Unlock()
		return nil, fmt.Errorf("%s: chromium closed the pipe: %w", method, err)
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// browserPage is one tab.
type browserPage struct {
	b       *browserSession
	session string
}

// open opens url in a new tab (with its own sessionStorage).
func (b *browserSession) open(url string) *browserPage {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := b.send(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"})
	if err != nil {
		b.t.Fatal(err)
	}
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := json.Unmarshal(res, &target); err != nil {
		b.t.Fatal(err)
	}
	res, err = b.send(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	if err != nil {
		b.t.Fatal(err)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(res, &att); err != nil {
		b.t.Fatal(err)
	}
	p := &browserPage{b: b, session: att.SessionID}
	for _, m := range []string{"Runtime.enable", "Page.enable"} {
		if _, err := b.send(ctx, p.session, m, nil); err != nil {
			b.t.Fatal(err)
		}
	}
	// Evaluations wait for the page's load: one started in about:blank
	// would lose its context to the navigation.
	loaded := make(chan struct{}, 1)
	b.mu.Lock()
	b.loaded[p.session] = loaded
	b.mu.Unlock()
	if _, err := b.send(ctx, p.session, "Page.navigate", map[string]any{"url": url}); err != nil {
		b.t.Fatal(err)
	}
	select {
	case <-loaded:
	case <-ctx.Done():
		b.t.Fatalf("%s did not load", url)
	}
	return p
}

// eval evaluates a JavaScript expression in the page (awaiting a promise)
// and decodes its value into out (if not nil).
func (p *browserPage) eval(t *testing.T, expr string, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := p.b.send(ctx, p.session, "Runtime.evaluate", map[string]any{
		"expression": expr, "awaitPromise": true, "returnByValue": true,
	})
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatal(err)
	}
	if r.ExceptionDetails != nil {
		t.Fatalf("evaluating %s: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if out != nil {
		if err := json.Unmarshal(r.Result.Value, out); err != nil {
			t.Fatalf("evaluating %s: result %s: %v", expr, r.Result.Value, err)
		}
	}
}

// text returns the textContent of the first element matching selector
// ("" if none).
func (p *browserPage) text(t *testing.T, selector string) string {
	t.Helper()
	var s string
	p.eval(t, `(() => { const e = document.querySelector(`+strconv.Quote(selector)+`); return e ? e.textContent : ''; })()`, &s)
	return s
}

// count returns how many elements match selector.
func (p *browserPage) count(t *testing.T, selector string) int {
	t.Helper()
	var n int
	p.eval(t, `document.querySelectorAll(`+strconv.Quote(selector)+`).length`, &n)
	return n
}

// click clicks the first element matching selector.
func (p *browserPage) click(t *testing.T, selector string) {
	t.Helper()
	var ok bool
	// Found and clicked in one evaluation: the page redraws its tables
	// every few seconds, and a button found in one step could be replaced
	// (detached, its click lost) by the next.
	p.eval(t, `(() => { const e = document.querySelector(`+strconv.Quote(selector)+`); if (!e) return false; e.click(); return true; })()`, &ok)
	if !ok {
		t.Fatalf("nothing to click at %s", selector)
	}
}

// set sets the value of the input matching selector, as typing would.
func (p *browserPage) set(t *testing.T, selector, value string) {
	t.Helper()
	var ok bool
	p.eval(t, `(() => { const e = document.querySelector(`+strconv.Quote(selector)+`); if (!e) return false; e.value = `+strconv.Quote(value)+`; e.dispatchEvent(new Event('input', {bubbles: true})); return true; })()`, &ok)
	if !ok {
		t.Fatalf("no input at %s", selector)
	}
}

// waitFor waits until the JavaScript condition holds in the page (checked
// in the page every 25ms, up to 30s), failing with what.
func (p *browserPage) waitFor(t *testing.T, cond, what string) {
	t.Helper()
	var ok bool
	p.eval(t, `new Promise((resolve) => {
		const end = Date.now() + 30000;
		const tick = () => {
			let v = false;
			try { v = !!(`+cond+`); } catch (e) { v = false; }
			if (v) { resolve(true); } else if (Date.now() > end) { resolve(false); } else { setTimeout(tick, 25); }
		};
		tick();
	})`, &ok)
	if !ok {
		var state string
		p.eval(t, `document.body.dataset.state + ' / notice: ' + document.getElementById('notice').textContent + ' / error: ' + document.getElementById('error').textContent`, &state)
		t.Fatalf("waiting for %s: not within 30s (page: %s; exceptions: %v)", what, state, p.b.pageExceptions())
	}
}

// screenshot saves a PNG of the page to dir/name when dir is set
// (NODESMITH_SCREENSHOT_DIR: for a person to look at).
func (p *browserPage) screenshot(t *testing.T, dir, name string) {
	t.Helper()
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.b.send(ctx, p.session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}); err != nil {
		t.Fatal(err)
	}
	res, err := p.b.send(ctx, p.session, "Page.captureScreenshot", map[string]any{"format": "png"})
	if err != nil {
		t.Fatal(err)
	}
	var shot struct {
		Data []byte `json:"data"` // base64 in JSON
	}
	if err := json.Unmarshal(res, &shot); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, shot.Data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

func (b *browserSession) pageExceptions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.exceptions...)
}

// noExceptions fails the test if the page threw.
func (b *browserSession) noExceptions(t *testing.T) {
	t.Helper()
	if ex := b.pageExceptions(); len(ex) > 0 {
		t.Errorf("the page threw %d exceptions: %v", len(ex), ex)
	}
}
