package contract

import "testing"

func TestErrorKindsComplete(t *testing.T) {
	if len(ErrorKinds) != len(errorKindNames) {
		t.Fatalf("ErrorKinds has %d kinds, names table %d", len(ErrorKinds), len(errorKindNames))
	}
	seen := map[string]bool{}
	for i, k := range ErrorKinds {
		if int(k) != i {
			t.Fatalf("ErrorKinds[%d] = %d, want value order", i, k)
		}
		if k.String() == "" || k.ProtoName() == "" || seen[k.String()] || seen[k.ProtoName()] {
			t.Fatalf("kind %d: empty or duplicate name %q / %q", k, k, k.ProtoName())
		}
		seen[k.String()], seen[k.ProtoName()] = true, true
	}
	if got := ErrorKind(99).String(); got != "unknown" {
		t.Fatalf("out-of-range kind is %q, want unknown", got)
	}
}

func TestErrorKindRetryPolicy(t *testing.T) {
	want := map[ErrorKind]bool{ErrorKindThrottled: true, ErrorKindTransient: true}
	for _, k := range ErrorKinds {
		if got := k.Retryable(); got != want[k] {
			t.Errorf("%s.Retryable() = %v, want %v", k, got, want[k])
		}
	}
	if ErrorKind(-1).Retryable() {
		t.Error("an out-of-range kind must not be retried")
	}
}
