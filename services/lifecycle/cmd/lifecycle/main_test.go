package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("accounts:\n  dev: {region: r}\ninstanceTemplates:\n  t: {account: dev}\nnodeGroups:\n  - {id: w, maxSize: 3, instanceTemplate: t}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("nodeGroups:\n  - {id: w, maxSize: 3, instanceTemplate: t}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := realMain(context.Background(), []string{"--check-config", "--config-file", good}); err != nil {
		t.Errorf("valid file: %v", err)
	}
	err := realMain(context.Background(), []string{"--check-config", "--config-file", bad})
	if err == nil || !strings.Contains(err.Error(), "nodeGroups[0].instanceTemplate") {
		t.Errorf("invalid file: %v", err)
	}
	// Every flag also reads its environment variable.
	t.Setenv("NODESMITH_CONFIG_FILE", good)
	if err := realMain(context.Background(), []string{"--check-config"}); err != nil {
		t.Errorf("config file from the environment: %v", err)
	}
	if err := realMain(context.Background(), []string{"--no-such-flag"}); err == nil {
		t.Error("unknown flag accepted")
	}
}
