package command

import (
	"context"
	"errors"
	"flag"
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
