package main

import (
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
	var out strings.Builder
	if err := checkConfig(good, &out); err != nil {
		t.Errorf("valid file: %v", err)
	}
	// The file's account uses the deprecated "region": valid, with a warning.
	if !strings.Contains(out.String(), "is valid") || !strings.Contains(out.String(), "warning: "+good+": accounts.dev.region: is deprecated: use regions (line 2)") {
		t.Errorf("valid file: printed %q", out.String())
	}
	err := checkConfig(bad, &out)
	if err == nil || !strings.Contains(err.Error(), "nodeGroups[0].instanceTemplate") {
		t.Errorf("invalid file: %v", err)
	}
	if err := checkConfig("", &out); err == nil {
		t.Error("no file: want an error")
	}
}
