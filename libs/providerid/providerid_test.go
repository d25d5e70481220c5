package providerid

import "testing"

func TestRoundTripAndRejects(t *testing.T) {
	pid := Placeholder("workers", "workers-abc")
	if pid != "nodesmith:///workers/workers-abc" {
		t.Fatalf("Placeholder = %q", pid)
	}
	if g, id, ok := ParsePlaceholder(pid); !ok || g != "workers" || id != "workers-abc" {
		t.Fatalf("ParsePlaceholder = %q %q %v", g, id, ok)
	}
	for _, bad := range []string{"", "nodesmith:///", "nodesmith:///g", "nodesmith:///g/", "nodesmith:////id", "nodesmith:///g/a/b", "externalgrpc://tencentcloud/a/r/ins-1", "nodesmith://g/id"} {
		if _, _, ok := ParsePlaceholder(bad); ok {
			t.Errorf("ParsePlaceholder(%q) accepted", bad)
		}
	}
}

func BenchmarkParsePlaceholder(b *testing.B) {
	pid := Placeholder("workers", "workers-abc")
	b.ReportAllocs()
	for b.Loop() {
		ParsePlaceholder(pid)
	}
}
