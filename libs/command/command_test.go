package command

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestRealMainParsesFlagsAndEnvAndHandsAHost(t *testing.T) {
	t.Setenv("NODESMITH_GREETING", "from-env")
	var greeting, other string
	register := func(fs *flag.FlagSet) {
		fs.StringVar(&greeting, "greeting", "default", "")
		fs.StringVar(&other, "other", "default", "")
	}
	var got Host
	err := realMain(context.Background(), "t", []string{"--other=flag", "--log-level=debug"}, register, func(_ context.Context, h Host) error {
		got = h
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if greeting != "from-env" || other != "flag" {
		t.Errorf("greeting=%q other=%q", greeting, other)
	}
	if got.Logger == nil || got.Registry == nil || got.Health == nil {
		t.Fatalf("incomplete host: %+v", got)
	}
	if mfs, err := got.Registry.Gather(); err != nil || len(mfs) == 0 {
		t.Errorf("registry should carry the Go and process collectors: %d families, %v", len(mfs), err)
	}
}

func TestRealMainReportsBadFlagsAndRunErrors(t *testing.T) {
	noFlags := func(*flag.FlagSet) {}
	if err := realMain(context.Background(), "t", []string{"--log-level=loud"}, noFlags, func(context.Context, Host) error { return nil }); err == nil {
		t.Error("want an error for a bad log level")
	}
	boom := errors.New("boom")
	if err := realMain(context.Background(), "t", nil, noFlags, func(context.Context, Host) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("run's error should come back, got %v", err)
	}
}

func TestWithDefaultsFillsOnlyWhatIsMissing(t *testing.T) {
	h := Host{}.WithDefaults()
	if h.Logger == nil || h.Registry == nil || h.Health == nil {
		t.Fatalf("incomplete: %+v", h)
	}
	given := Host{Registry: h.Registry}
	if got := given.WithDefaults(); got.Registry != h.Registry {
		t.Error("a given registry must be kept")
	}
}

// freeAddr returns a loopback address nothing listens on (it was free a
// moment ago).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// listening reports whether something accepts connections on addr.
func listening(addr string) bool {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func TestPprofAddrServesProfilesUntilTheServiceStops(t *testing.T) {
	addr := freeAddr(t)
	noFlags := func(*flag.FlagSet) {}
	var status int
	var body string
	err := realMain(context.Background(), "t", []string{"--pprof-addr=" + addr}, noFlags, func(context.Context, Host) error {
		// The listener is open before the service runs.
		resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		status, body = resp.StatusCode, string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusOK || !strings.Contains(body, "heap profile:") {
		t.Errorf("GET heap: %d %.200q", status, body)
	}
	// realMain waits for the server's shutdown before it returns.
	if listening(addr) {
		t.Error("the pprof server should be shut down with the service")
	}
}

func TestPprofAddrFromEnvAndOffByDefault(t *testing.T) {
	noFlags := func(*flag.FlagSet) {}
	addr := freeAddr(t)
	var up bool
	if err := realMain(context.Background(), "t", nil, noFlags, func(context.Context, Host) error {
		up = listening(addr)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if up {
		t.Error("without --pprof-addr nothing should listen")
	}
	t.Setenv("NODESMITH_PPROF_ADDR", addr)
	if err := realMain(context.Background(), "t", nil, noFlags, func(context.Context, Host) error {
		up = listening(addr)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !up {
		t.Error("NODESMITH_PPROF_ADDR should turn the pprof server on")
	}
}

func TestPprofAddrInUseFailsStartUp(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ran := false
	err = realMain(context.Background(), "t", []string{"--pprof-addr=" + l.Addr().String()}, func(*flag.FlagSet) {}, func(context.Context, Host) error {
		ran = true
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "pprof-addr") || ran {
		t.Errorf("err=%v ran=%v: a busy address should stop start-up", err, ran)
	}
}

// A NODESMITH_* variable that sets no flag (a misspelt name) is named in a
// warning at start; the known ones, and other variables, are not.
func TestRealMainWarnsOfUnknownNodesmithEnv(t *testing.T) {
	t.Setenv("NODESMITH_GREETING", "known")
	t.Setenv("NODESMITH_LOG_LEVEL", "info") // a flag command itself registers
	t.Setenv("NODESMITH_GRETING", "misspelt")
	t.Setenv("NODESMITH_OTHER_SERVICE_FLAG", "x")
	t.Setenv("NOT_NODESMITH_X", "y")
	var logs strings.Builder
	logOutput = &logs
	t.Cleanup(func() { logOutput = nil })
	register := func(fs *flag.FlagSet) { fs.String("greeting", "", "") }
	if err := realMain(context.Background(), "t", nil, register, func(context.Context, Host) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var warning struct {
		Level, Msg string
		Vars       []string
	}
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Level, Msg string
			Vars       []string
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Msg == UnknownEnvMessage {
			warning = rec
		}
	}
	if warning.Level != "WARN" || !slices.Equal(warning.Vars, []string{"NODESMITH_GRETING", "NODESMITH_OTHER_SERVICE_FLAG"}) {
		t.Errorf("want one WARN %q listing NODESMITH_GRETING and NODESMITH_OTHER_SERVICE_FLAG; logs:\n%s", UnknownEnvMessage, logs.String())
	}
}

func TestRealMainQuietWhenEveryNodesmithEnvIsAFlag(t *testing.T) {
	t.Setenv("NODESMITH_GREETING", "known")
	var logs strings.Builder
	logOutput = &logs
	t.Cleanup(func() { logOutput = nil })
	register := func(fs *flag.FlagSet) { fs.String("greeting", "", "") }
	if err := realMain(context.Background(), "t", nil, register, func(context.Context, Host) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), UnknownEnvMessage) {
		t.Errorf("unexpected warning: %s", logs.String())
	}
}
