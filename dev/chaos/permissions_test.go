package main

import (
	"strings"
	"testing"
)

func TestPermissionViolations(t *testing.T) {
	tests := []struct {
		name      string
		log       string
		want      int
		wantFirst string
	}{
		{"none", "time=... level=INFO msg=\"connected to NATS\"\ntime=... level=WARN msg=\"nats async error\" err=\"nats: slow consumer, messages dropped\"\n", 0, ""},
		{"empty", "", 0, ""},
		{"async error", "a\n" +
			`time=2026-11-26T00:00:00Z level=ERROR msg="nats async error" subject=_INBOX.x err="nats: Permissions Violation for Publish to \"$JS.API.STREAM.INFO.X\""` + "\n" +
			"b\n", 1, `time=2026-11-26T00:00:00Z level=ERROR msg="nats async error" subject=_INBOX.x err="nats: Permissions Violation for Publish to \"$JS.API.STREAM.INFO.X\""`},
		{"lower case and several", "nats: permissions violation for subscription to \"a\"\nok\nPERMISSIONS VIOLATION x\n", 2, `nats: permissions violation for subscription to "a"`},
		{"no trailing newline", "x\nPermissions Violation for Publish to \"y\"", 1, `Permissions Violation for Publish to "y"`},
		{"not the phrase", "permission denied\nviolations: 0\n", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, first, err := permissionViolations(strings.NewReader(tt.log))
			if err != nil {
				t.Fatal(err)
			}
			if n != tt.want || first != tt.wantFirst {
				t.Fatalf("got %d, %q; want %d, %q", n, first, tt.want, tt.wantFirst)
			}
		})
	}
}

func TestPermissionViolationsLongLine(t *testing.T) {
	log := strings.Repeat("x", 200*1024) + " Permissions Violation\n"
	n, _, err := permissionViolations(strings.NewReader(log))
	if err != nil || n != 1 {
		t.Fatalf("got %d, %v; want 1", n, err)
	}
}
