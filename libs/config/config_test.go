package config

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	env := map[string]string{
		"NODESMITH_NATS_URL":      "nats://env:4222",
		"NODESMITH_CONCURRENCY":   "7",
		"NODESMITH_SHUTDOWN_WAIT": "3s",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	url := fs.String("nats-url", "nats://default:4222", "")
	conc := fs.Int("concurrency", 1, "")
	wait := fs.Duration("shutdown-wait", time.Second, "")
	name := fs.String("name", "dflt", "")
	if err := Parse(fs, []string{"--concurrency=9"}, lookup); err != nil {
		t.Fatal(err)
	}
	if *url != "nats://env:4222" {
		t.Errorf("env should fill an unset flag: got %q", *url)
	}
	if *conc != 9 {
		t.Errorf("command line should win over env: got %d", *conc)
	}
	if *wait != 3*time.Second {
		t.Errorf("duration from env: got %v", *wait)
	}
	if *name != "dflt" {
		t.Errorf("default should stay without flag or env: got %q", *name)
	}
}

func TestParseInvalidEnvNamesVariable(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Int("concurrency", 1, "")
	err := Parse(fs, nil, func(k string) (string, bool) { return "many", k == "NODESMITH_CONCURRENCY" })
	if err == nil || !strings.Contains(err.Error(), "NODESMITH_CONCURRENCY") {
		t.Fatalf("want an error naming the variable, got %v", err)
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("grpc-listen.addr"); got != "NODESMITH_GRPC_LISTEN_ADDR" {
		t.Fatalf("got %s", got)
	}
}

func TestUnknownEnvNamesNodesmithVariablesThatSetNoFlag(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("nats-url", "", "")
	fs.Duration("shutdown-grace", 0, "")
	got := UnknownEnv(fs, []string{
		"NODESMITH_NATS_URL=nats://x",
		"NODESMITH_SHUTDOWN_GRACE=1s",
		"NODESMITH_NATS_ULR=typo",
		"NODESMITH_A=1",
		"NODESMITH_A=2",
		"PATH=/bin",
		"nodesmith_nats_url=lower case is not ours",
	})
	if want := []string{"NODESMITH_A", "NODESMITH_NATS_ULR"}; !slices.Equal(got, want) {
		t.Errorf("UnknownEnv = %v, want %v", got, want)
	}
	if got := UnknownEnv(fs, []string{"NODESMITH_NATS_URL=x"}); got != nil {
		t.Errorf("UnknownEnv = %v, want none", got)
	}
}

func TestUnknownEnvLeavesOutAcceptedVariables(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	AcceptEnv(fs, "NODESMITH_TOKENS")
	AcceptEnv(fs, "NODESMITH_ACCOUNT_*")
	got := UnknownEnv(fs, []string{"NODESMITH_TOKENS=a", "NODESMITH_ACCOUNT_MAIN_SECRET_ID=b", "NODESMITH_TOKEN=typo"})
	if want := []string{"NODESMITH_TOKEN"}; !slices.Equal(got, want) {
		t.Errorf("UnknownEnv = %v, want %v", got, want)
	}
	if got := UnknownEnv(flag.NewFlagSet("other", flag.ContinueOnError), []string{"NODESMITH_TOKENS=a"}); len(got) != 1 {
		t.Errorf("another flag set accepts nothing: UnknownEnv = %v", got)
	}
}
